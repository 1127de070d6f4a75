"""The ``reproducible`` gate's second bake: the same definition, baked in a fresh store.

The fresh store starts empty except for the pinned inputs, shared read-only: the pristine
upstream tree (its digest is the pin's, checked when it was fetched) and the base image's
blobs (hard links; the bake checks them against the base digest the definition pins).
Everything the bake itself produces is recomputed there with no cache: the strictly
patched tree, the overlay layer, the config and the manifest. Nothing is written into the
repository (``bake_image(record=False)``) and the fresh store is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..config import Lineage, Pipeline
from ..errors import ImageError
from ..store import Store


@dataclass(frozen=True)
class Rebake:
    digest: str  # the manifest digest the second bake produced
    seconds: float


def _link_blob(warm: Store, fresh: Store, digest: str) -> None:
    src, dst = warm.blob_path(digest), fresh.blob_path(digest)
    if not dst.exists():
        os.link(src, dst)


def _seed(warm: Store, fresh: Store, base_digest: str, pristine_root: Path) -> None:
    # the base image: manifest, config and layers, as the bake would find them pulled
    _link_blob(warm, fresh, base_digest)
    manifest = json.loads(warm.read_blob(base_digest))
    for desc in [manifest.get("config"), *manifest.get("layers", [])]:
        if isinstance(desc, dict) and isinstance(desc.get("digest"), str):
            _link_blob(warm, fresh, desc["digest"])
    # the pinned source: its fetch record and extracted tree (read-only by convention)
    os.rmdir(fresh.root / "sources")
    os.symlink(warm.root / "sources", fresh.root / "sources")
    os.symlink(pristine_root, fresh.root / "trees" / pristine_root.name)
    (fresh.root / "bakes").mkdir(exist_ok=True)
    for cached in (warm.root / "bakes").glob("standin-*.json"):  # the stand-in base's recipe
        shutil.copyfile(cached, fresh.root / "bakes" / cached.name)


def rebake(pipeline: Pipeline, definition: str, lineage: Lineage, warm: Store,
           base_digest: str, epoch: int) -> Rebake:
    """Bake ``definition`` again in a fresh store; return the manifest digest it gives."""
    import time

    from ..bake import bake_image
    from ..sources import fetch

    t0 = time.monotonic()
    fetched = fetch(lineage, warm, base=pipeline.root)
    if not warm.has(base_digest):
        raise ImageError(f"the base {base_digest} is not in the store at {warm.root}",
                         hint="bake the image once (`patchbake bake`) so its base is pulled")
    root = warm.tmpdir("rebake")
    try:
        fresh = Store.open(root)
        _seed(warm, fresh, base_digest, Path(fetched.root))
        got = bake_image(pipeline, definition, fresh, lineage=lineage.key, epoch=epoch,
                         record=False)
        return Rebake(got.digest, round(time.monotonic() - t0, 3))
    finally:
        shutil.rmtree(root, ignore_errors=True)
