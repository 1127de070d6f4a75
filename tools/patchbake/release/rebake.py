"""The ``reproducible`` gate's second bake: the same definition, baked in a fresh store.

The fresh store starts with no bake cache and no image blobs. Its inputs are shared
read-only, each checked where it is used: the pristine upstream tree and the strictly
patched tree (content-addressed by the pin's tree digest and the patch's sha256; every
touched file is re-hashed when the cached tree is used), the base image's blobs (hard
links; the bake checks them against the base digest the definition pins), and the memos
of those inputs (the tree memo of their files' hashes, the base layers' ops). What the bake
itself makes is recomputed there: the overlay layer (tar writer), the config and the
manifest, which is what two bakes could disagree on. Nothing is written into the
repository (``bake_image(record=False)``) and the fresh store is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

from ..config import Lineage, Pipeline
from ..digest import Digest
from ..errors import ImageError
from ..images.bake import bake_image
from ..store import Store


@dataclass(frozen=True)
class Rebake:
    digest: Digest  # the manifest digest the second bake produced
    seconds: float


def _link_blob(warm: Store, fresh: Store, digest: Digest) -> None:
    src, dst = warm.blob_path(digest), fresh.blob_path(digest)
    if not dst.exists():
        os.link(src, dst)


def _seed(warm: Store, fresh: Store, base_digest: Digest) -> None:
    # the base image: manifest, config and layers, as the bake would find them pulled
    _link_blob(warm, fresh, base_digest)
    manifest = json.loads(warm.read_blob(base_digest))
    for desc in [manifest.get("config"), *manifest.get("layers", [])]:
        if isinstance(desc, dict):
            _link_blob(warm, fresh, Digest.parse(desc.get("digest"), f"base {base_digest}: "
                                                 "a descriptor's digest", ImageError))
    # the pinned source and the patched tree: fetch records, trees, patched-tree records
    for sub in ("sources", "trees", "patched"):
        if (fresh.root / sub).is_dir():
            os.rmdir(fresh.root / sub)
        (warm.root / sub).mkdir(exist_ok=True)
        os.symlink(warm.root / sub, fresh.root / sub)
    (fresh.root / "bakes").mkdir(exist_ok=True)
    # memos of what those shared inputs hash to: the tree memo (stat -> sha256 of the
    # shared trees' files) and the base layers' ops (by blob digest; the blobs are the
    # warm store's, hashed when it stored them); what the bake makes is not memoised
    for memo in ("tree-memo", "layer-ops"):
        (warm.root / "bakes" / memo).mkdir(parents=True, exist_ok=True)
        os.symlink(warm.root / "bakes" / memo, fresh.root / "bakes" / memo)
    # the recipes that name a locally built base (the stand-in's, the serving base's from
    # its lock): the base's blobs are linked above, and the bake checks them against the
    # digest the definition pins
    for pattern in ("standin-*.json", "servingbase-*.json"):
        for cached in (warm.root / "bakes").glob(pattern):
            shutil.copyfile(cached, fresh.root / "bakes" / cached.name)


def rebake(pipeline: Pipeline, definition: str, lineage: Lineage, warm: Store,
           base_digest: Digest, epoch: int) -> Rebake:
    """Bake ``definition`` again in a fresh store; return the manifest digest it gives."""


    t0 = time.monotonic()
    if not warm.has(base_digest):
        raise ImageError(f"the base {base_digest} is not in the store at {warm.root}",
                         hint="bake the image once (`patchbake bake`) so its base is pulled")
    root = warm.tmpdir("rebake")
    try:
        fresh = Store.open(root)
        _seed(warm, fresh, base_digest)
        got = bake_image(pipeline, definition, fresh, lineage=lineage.key, epoch=epoch,
                         record=False)
        return Rebake(got.digest, round(time.monotonic() - t0, 3))
    finally:
        warm.discard(root)
