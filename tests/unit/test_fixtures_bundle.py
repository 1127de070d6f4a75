"""`fixtures bundle`: a fresh store holding only the named images, every blob re-hashed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from images_support import make_repo
from patchbake.images.bake import bake_image
from patchbake.digest import Digest
from patchbake.errors import IntegrityError, StoreError
from patchbake.suites.bundle import bundle
from patchbake.suites.image import SuiteImage
from patchbake.verify.baked import materialise
from patchbake.store import Store

PIPELINE = None


def _baked(tmp_path: Path) -> tuple[Store, SuiteImage, list[Digest]]:
    repo = make_repo(tmp_path)
    global PIPELINE
    PIPELINE = repo.pipeline
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    manifest = json.loads(repo.store.read_blob(res.digest))
    config = Digest.parse(manifest["config"]["digest"])
    blobs = [res.digest, config, *[Digest.parse(x["digest"]) for x in manifest["layers"]]]
    return repo.store, SuiteImage("offline", res.digest, config), blobs


def test_bundle_holds_exactly_the_image_and_materialises(tmp_path: Path) -> None:
    store, ref, blobs = _baked(tmp_path)
    made = bundle(store, [ref], tmp_path / "bundle")
    assert made["images"] == [f"offline@{ref.digest}"] and made["bytes"] > 0
    dest = Store.open(tmp_path / "bundle")
    assert all(dest.has(d) for d in blobs)
    # the host runner's use of it: where vllm is comes from the definition, not the image
    tree = materialise(dest, ref.digest, tmp_path / "tree", pipeline=PIPELINE)
    assert (tree / "vllm" / "new_module.py").read_bytes() == b"X = 1\n"


def test_bundle_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    store, ref, _ = _baked(tmp_path)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(StoreError, match="is not empty") as info:
        bundle(store, [ref], tmp_path / "used")
    assert info.value.exit_code == 13


def test_bundle_of_a_damaged_blob_fails_and_copies_nothing_damaged(tmp_path: Path) -> None:
    store, ref, blobs = _baked(tmp_path)
    layer = store.blob_path(blobs[-1])
    os.chmod(layer, 0o644)
    data = bytearray(layer.read_bytes())
    data[700] ^= 1
    layer.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        bundle(store, [ref], tmp_path / "bundle")
    assert not Store.open(tmp_path / "bundle").has(blobs[-1])
