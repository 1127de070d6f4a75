"""A bake trusts the store's base blobs once their layers are memoised: the store hashed
each blob before naming it by its digest, so a bake's cost does not grow with the base.
What still catches a blob changed on disk afterwards: `store fsck`, and `verify`, which
hashes every byte of the baked image."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from images_support import make_repo
from patchbake.digest import Digest
from patchbake.errors import IntegrityError
from patchbake.images.bake import bake_image
from patchbake.oci import scan
from patchbake.storecheck import bad_blobs
from patchbake.verify.baked import verify_image


def _flip_byte(path: Path) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_cold_bake_reads_no_base_byte_once_memoised(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    # a fresh read of a base layer (parse or hash) would fail from here on
    monkeypatch.setattr(scan, "read_entries", None)
    monkeypatch.setattr(scan, "LayerDigests", None)
    again = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1)
    assert not again.cached and again.layers[:-1] == first.layers[:-1]


def test_blob_changed_after_write_is_caught_by_fsck_and_verify(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    base_layer = Digest.parse(str(first.layers[0]))
    _flip_byte(repo.store.blob_path(base_layer))
    # the bake takes the blob as the store's writer checked it (same size, memoised ops)
    again = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1)
    assert not again.cached
    assert bad_blobs(repo.store) == [base_layer.hex]
    with pytest.raises(IntegrityError, match=f"blob {base_layer} hashes to"):
        verify_image(repo.pipeline, again.digest, repo.store, patched=repo.patched,
                     definition="offline")
    with pytest.raises(IntegrityError, match=f"blob {base_layer} hashes to"):
        verify_image(repo.pipeline, again.digest, repo.store, patched=repo.patched,
                     definition="offline", use_cache=False)


def test_truncated_base_blob_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    p = repo.store.blob_path(Digest.parse(str(first.layers[0])))
    os.chmod(p, 0o644)
    p.write_bytes(p.read_bytes()[:-512])
    with pytest.raises(IntegrityError, match="the manifest says .* store fsck"):
        bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1)


def test_without_memos_the_base_is_hashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    base_layer = Digest.parse(str(first.layers[0]))
    shutil.rmtree(repo.store.root / "bakes" / "layer-ops")
    _flip_byte(repo.store.blob_path(base_layer))
    with pytest.raises(IntegrityError, match=f"blob {base_layer} hashes to"):
        bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1)
