"""Image digests as people see them: a unique prefix of a digest the store holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.errors import ImageError
from patchbake.images.refs import ImageRef, known_digests, store_manifest
from patchbake.store import Store

MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": "sha256:" + "0" * 64, "size": 2},
                       "layers": []}).encode()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "store")


def test_a_prefix_of_a_stored_manifest_names_it(store: Store) -> None:
    d = store.put_bytes(MANIFEST)
    assert store_manifest(store, f"sha256:{d.hex[:12]}") == d
    assert ImageRef.parse(f"x@{d.hex[:20]}", known_digests(store, None)) == ImageRef("x", d)
    assert ImageRef.parse(f"sha256:{d.hex}") == ImageRef(None, d)  # full: no listing


def test_a_prefix_the_store_does_not_hold_or_holds_twice_is_refused(store: Store) -> None:
    d = store.put_bytes(MANIFEST)
    with pytest.raises(ImageError, match="no image digest starts with 000000000000") as info:
        store_manifest(store, "sha256:000000000000")
    assert info.value.hint is not None and "patchbake image ls" in info.value.hint
    twin = Digest.from_hex(d.hex[:12] + ("0" if d.hex[12] != "0" else "1") + d.hex[13:])
    store.blob_path(twin).write_bytes(b"")  # a name is all a candidate needs
    with pytest.raises(ImageError, match=f"image digest {d.hex[:12]} is ambiguous: 2 start"):
        store_manifest(store, f"sha256:{d.hex[:12]}")
    with pytest.raises(ImageError, match="is not sha256:<64 lowercase hex digits>"):
        ImageRef.parse("x@sha256:abc")
