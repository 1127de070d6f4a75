"""verify's overlapped path: comparisons run while memoised layers are hashed, and count
only after every digest matched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from images_support import SP, make_repo
from patchbake.bake import bake_image
from patchbake.errors import IntegrityError
from patchbake.identity import verify_image
from patchbake.oci.image import StoreBlobs, load_image
from patchbake.oci.scan import View, scan_image


def _setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = make_repo(tmp_path)
    digest = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest
    assert verify_image(repo.pipeline, digest, repo.store, patched=repo.patched).ok  # memo
    return repo, digest, repo.store.root / "bakes" / "layer-ops"


def test_meanwhile_sees_the_final_view_on_both_paths(tmp_path: Path) -> None:
    repo, digest, cache = _setup(tmp_path)
    img = load_image(StoreBlobs(repo.store), digest)
    seen: list[dict[str, str]] = []

    def look(view: View) -> None:
        seen.append({k: v.sha256 for k, v in view.files.items()})

    tracked = (f"{SP}/vllm", "opt/patchbake/")
    warm = scan_image(img, StoreBlobs(repo.store), tracked, cache_dir=cache, meanwhile=look)
    cold = scan_image(img, StoreBlobs(repo.store), tracked, meanwhile=look)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0]
    assert [x.digest for x in warm.layers] == [x.digest for x in cold.layers]


def test_a_bad_digest_wins_over_what_meanwhile_raised(tmp_path: Path) -> None:
    repo, digest, cache = _setup(tmp_path)
    img = load_image(StoreBlobs(repo.store), digest)

    def boom(view: View) -> None:
        raise RuntimeError("comparison failed")

    tracked = (f"{SP}/vllm", "opt/patchbake/")
    with pytest.raises(RuntimeError, match="comparison failed"):
        scan_image(img, StoreBlobs(repo.store), tracked, cache_dir=cache, meanwhile=boom)
    layer = repo.store.blob_path(json.loads(repo.store.read_blob(digest))["layers"][1]["digest"])
    os.chmod(layer, 0o644)
    data = bytearray(layer.read_bytes())
    data[3000] ^= 1
    layer.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="layer 1: blob"):
        scan_image(img, StoreBlobs(repo.store), tracked, cache_dir=cache, meanwhile=boom)


def test_unloadable_memo_falls_back_to_parsing(tmp_path: Path) -> None:
    repo, digest, cache = _setup(tmp_path)
    for f in cache.iterdir():
        f.write_text("{}")  # present but not a memo of this layer
    res = verify_image(repo.pipeline, digest, repo.store, patched=repo.patched)
    assert res.ok and (res.matched, res.total) == (4, 4) and len(res.layers) == 3
