"""docker-archive export and import (``docker save`` / ``docker load`` format).

Export writes one deterministic tar (patchbake-tar/1) that is BOTH a docker-archive
(``manifest.json`` naming config and layers by path) and an OCI image layout
(``oci-layout``, ``index.json``, ``blobs/sha256/...``): ``docker load`` reads the first,
and verify reads the second, so the manifest digest survives the round trip.

Import reads the archive as ``docker load`` does (:mod:`.archive_tar`: Go's tar rules,
cleaned names, regular files and directories only) and requires ``manifest.json``, the
description docker load reads. With ``index.json`` beside it, both must name the same
image, whose manifest is kept; a classic ``docker save`` archive (``<config-hex>.json`` +
``<id>/layer.tar``) carries no manifest, so one is made from its config and layers
(identity = the config digest, "Image ID"). Every description is read as Go reads it
(:mod:`.gojson`), and every blob is hashed before anything is stored: a tampered archive
stores nothing.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import ImageError, IntegrityError
from ..fsutil import atomic_writer, canonical_json
from ..store import Store
from . import gojson, layout
from .archive_tar import ArchiveTar
from .image import Image, StoreBlobs, image_from_bytes, load_image, parse_json, parse_manifest
from .image import config_diff_ids
from .media import (
    INDEX_TYPES,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_GZIP,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Descriptor,
)
from .tarwriter import file_entry, with_parents, write_layer

_READ = 1 << 20


def export_docker_archive(store: Store, manifest_digest: Digest, dest: Path,
                          repo_tags: list[str]) -> Path:
    """Write ``dest`` (docker-archive + OCI layout in one tar) atomically."""
    with atomic_writer(dest) as f:
        for chunk in docker_archive(store, manifest_digest, repo_tags):
            f.write(chunk)
    return dest


def docker_archive(store: Store, manifest_digest: Digest,
                   repo_tags: list[str]) -> Iterator[bytes]:
    """The bytes of a docker-archive + OCI layout of the image, in one tar (written to a
    file by ``export_docker_archive``, or streamed into ``docker load``)."""
    image = load_image(StoreBlobs(store), manifest_digest)
    missing = [d.digest for d in image.layers if not store.has(d.digest)]
    if missing:
        raise ImageError(f"cannot export {manifest_digest}: {len(missing)} layer(s) are not in "
                         f"the store (first {missing[0]})",
                         hint="pull the base with its layers (`patchbake pull`) first")
    blobs = [manifest_digest, image.config_desc.digest, *[d.digest for d in image.layers]]
    entries = [file_entry(f"blobs/sha256/{d.hex}",
                          source=store.blob_path(d)) for d in dict.fromkeys(blobs)]
    docker_manifest = [{
        "Config": f"blobs/sha256/{image.config_desc.hex}",
        "RepoTags": repo_tags,
        "Layers": [f"blobs/sha256/{d.hex}" for d in image.layers],
    }]
    ann = {layout.REF_NAME: repo_tags[0]} if repo_tags else {}
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        Descriptor(image.media_type, manifest_digest, len(image.manifest_bytes),
                   tuple(ann.items())).to_json()]}
    entries += [file_entry("manifest.json", data=canonical_json(docker_manifest)),
                file_entry("index.json", data=canonical_json(index)),
                file_entry("oci-layout", data=layout.LAYOUT_VERSION)]
    yield from write_layer(with_parents(entries), 0)


@dataclass(frozen=True)
class Imported:
    manifest_digest: Digest
    config_digest: Digest
    from_oci_index: bool  # False: a classic docker save archive (manifest made here)


def _hash_member(ar: ArchiveTar, name: str) -> tuple[Digest, Digest, int, bool]:
    """(digest, diff_id, size, gzipped) of an archive member, streamed."""
    member = ar.member(name)
    gz = member.head == b"\x1f\x8b"
    if not gz:  # the tar bytes are the blob: its digest was taken on the first pass
        return member.digest, member.digest, member.size, False
    raw, tar = hashlib.sha256(), hashlib.sha256()
    inflate = zlib.decompressobj(31)
    try:
        for chunk in ar.chunks(name):
            raw.update(chunk)
            tar.update(inflate.decompress(chunk))
        tar.update(inflate.flush())
    except zlib.error as exc:
        raise ImageError(f"archive member {name!r} is not a valid gzip stream ({exc}); "
                         "nothing was stored") from None
    if not inflate.eof:
        raise ImageError(f"archive member {name!r} is a truncated gzip stream; nothing was stored")
    if Digest.from_hex(raw.hexdigest()) != member.digest:
        raise IntegrityError(f"{ar.path} changed while it was read (member {name!r}); "
                             "nothing was stored")
    return member.digest, Digest.from_hex(tar.hexdigest()), member.size, True


def _store_member(store: Store, ar: ArchiveTar, name: str, digest: Digest) -> None:
    if not store.has(digest):
        store.put_stream(ar.chunks(name), expected=digest)


def import_docker_archive(store: Store, path: Path) -> Imported:
    """Import the image ``docker load`` would load from ``path``, or refuse the archive.

    The archive is read as docker load reads it (:mod:`.archive_tar`); it must carry
    ``manifest.json`` (without it docker load falls back to its legacy loader, which
    reads ``repositories`` and every top-level directory as an image, not what an
    ``index.json`` names), and every description in it is read as Go reads it
    (:mod:`.gojson`)."""
    ar = ArchiveTar.read(path)
    index = _index_descriptor(ar, path) if "index.json" in ar else None
    if "manifest.json" not in ar:
        raise ImageError(f"{path} has no manifest.json: docker load would read it with its "
                         "legacy loader (repositories, one image per top-level directory), "
                         "not as the image index.json names; refusing it",
                         hint="export it with `docker save` or `patchbake image export`")
    if index is not None:
        return _import_oci(store, ar, path, index)
    return _import_classic(store, ar, path)


def _index_descriptor(ar: ArchiveTar, path: Path) -> Descriptor:
    index = parse_json(ar.read_bytes("index.json"), f"{path}:index.json", gojson.MANIFEST)
    manifests = index.get("manifests") or []
    if not isinstance(manifests, list):
        raise ImageError(f"{path}: index.json's 'manifests' is not a list of descriptors")
    if len(manifests) != 1:
        raise ImageError(f"{path}: index.json lists {len(manifests)} manifests; expected one")
    desc = Descriptor.from_json(manifests[0], f"{path}:index.json")
    if desc.media_type in INDEX_TYPES:
        raise ImageError(f"{path}: index.json names a nested index ({desc.digest}), not one "
                         "image; docker load would choose a platform itself, verify does not")
    return desc


def _import_oci(store: Store, ar: ArchiveTar, path: Path, desc: Descriptor) -> Imported:
    mbytes = ar.read_bytes(f"blobs/sha256/{desc.hex}")
    if len(mbytes) != desc.size:
        raise IntegrityError(f"{path}: manifest {desc.digest} is {len(mbytes)} bytes; "
                             f"index.json says {desc.size}; nothing was stored")
    _, cdesc, _ = parse_manifest(mbytes, desc.digest)
    cbytes = ar.read_bytes(f"blobs/sha256/{cdesc.hex}")
    image = image_from_bytes(mbytes, desc.digest, cbytes)
    for i, layer in enumerate(image.layers):
        digest, diff_id, size, _ = _hash_member(ar, f"blobs/sha256/{layer.hex}")
        _check_layer(i, layer, digest, size, diff_id, image.diff_ids[i])
    _same_image(ar, path, image)
    for layer in image.layers:
        _store_member(store, ar, f"blobs/sha256/{layer.hex}", layer.digest)
    store.put_bytes(cbytes, expected=cdesc.digest)
    store.put_bytes(mbytes, expected=desc.digest)
    return Imported(desc.digest, cdesc.digest, True)


def _same_image(ar: ArchiveTar, path: Path, image: Image) -> None:
    """manifest.json (what `docker load` reads) must name the config and layers, in order,
    of the image index.json names (what OCI tools and verify read): compared by the bytes'
    digests, so two paths holding the same bytes agree and one path cannot mean two."""
    entry = _docker_entry(ar, path)
    where = f"{path}: manifest.json (read by docker load) and index.json (read by OCI tools)"
    cdigest = ar.member(entry["Config"]).digest
    if cdigest != image.config_desc.digest:
        raise ImageError(f"{where} name different configs ({cdigest} vs "
                         f"{image.config_desc.digest}); refusing an archive with two images")
    if len(entry["Layers"]) != len(image.layers):
        raise ImageError(f"{where} name {len(entry['Layers'])} vs {len(image.layers)} layers; "
                         "refusing an archive with two images")
    for i, (name, layer) in enumerate(zip(entry["Layers"], image.layers, strict=True)):
        digest = ar.member(name).digest
        if digest != layer.digest:
            raise ImageError(f"{where} name different layers at {i} ({name} is {digest}, "
                             f"index.json's is {layer.digest}); refusing an archive with two "
                             "images")


def _docker_entry(ar: ArchiveTar, path: Path) -> dict[str, Any]:
    entries = gojson.load(ar.read_bytes("manifest.json"), f"{path}: manifest.json",
                          gojson.ARCHIVE_MANIFEST)
    if not isinstance(entries, list) or len(entries) != 1:
        raise ImageError(f"{path}: manifest.json must describe exactly one image")
    entry = entries[0]
    if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str) \
            or not isinstance(entry.get("Layers"), list) \
            or not all(isinstance(x, str) for x in entry["Layers"]):
        raise ImageError(f"{path}: manifest.json's entry needs 'Config' (a path) and "
                         "'Layers' (a list of paths)")
    if entry.get("LayerSources"):
        raise ImageError(f"{path}: manifest.json names foreign layers (LayerSources) that "
                         "are not in the archive; they cannot be checked")
    return entry


def _check_layer(i: int, layer: Descriptor, digest: Digest, size: int, diff_id: Digest,
                 want_diff: Digest) -> None:
    if digest != layer.digest or size != layer.size:
        raise IntegrityError(f"layer {i}: archive blob {layer.digest} hashes to {digest} "
                             f"({size} bytes); nothing was stored")
    if diff_id != want_diff:
        raise IntegrityError(f"layer {i}: uncompressed tar hashes to {diff_id}; the config's "
                             f"diff_id is {want_diff}; nothing was stored")


def _import_classic(store: Store, ar: ArchiveTar, path: Path) -> Imported:
    entry = _docker_entry(ar, path)
    cbytes = ar.read_bytes(entry["Config"])
    cdigest = Digest.of(cbytes)
    stem = Path(entry["Config"]).name.removesuffix(".json")
    if len(stem) == 64 and stem != cdigest.hex:
        raise IntegrityError(f"{path}: config {entry['Config']} hashes to {cdigest}: its "
                             "bytes were changed; nothing was stored")

    config = parse_json(cbytes, f"{path}: config {entry['Config']}", gojson.CONFIG)
    diff_ids = config_diff_ids(config, f"{path}: config {entry['Config']}")
    if len(diff_ids) != len(entry["Layers"]):
        raise ImageError(f"{path}: config lists {len(diff_ids)} diff_ids for "
                         f"{len(entry['Layers'])} layers")
    layers = []
    for i, name in enumerate(entry["Layers"]):
        digest, diff_id, size, gz = _hash_member(ar, name)
        if diff_id != diff_ids[i]:
            raise IntegrityError(f"layer {i} ({name}): uncompressed tar hashes to {diff_id}; "
                                 f"the config's diff_id is {diff_ids[i]}; nothing was stored")
        layers.append(Descriptor(OCI_LAYER_GZIP if gz else OCI_LAYER_TAR, digest, size))
    for name, layer in zip(entry["Layers"], layers, strict=True):
        _store_member(store, ar, name, layer.digest)
    store.put_bytes(cbytes, expected=cdigest)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": str(cdigest), "size": len(cbytes)},
                "layers": [d.to_json() for d in layers]}
    mdigest, _, _ = layout.put_json(store, manifest)
    return Imported(mdigest, cdigest, False)


def open_archive_image(store: Store, path: Path) -> Image:
    """Import ``path`` into the store and return its image (verified)."""
    imp = import_docker_archive(store, path)
    return load_image(StoreBlobs(store), imp.manifest_digest)
