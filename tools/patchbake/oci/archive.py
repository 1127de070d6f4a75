"""docker-archive export and import (``docker save`` / ``docker load`` format).

Export writes one deterministic tar (patchbake-tar/1) that is BOTH a docker-archive
(``manifest.json`` naming config and layers by path) and an OCI image layout
(``oci-layout``, ``index.json``, ``blobs/sha256/...``): ``docker load`` reads the first,
and verify reads the second, so the manifest digest survives the round trip.

Import accepts either form: an archive with ``index.json`` keeps its manifest; a classic
``docker save`` archive (``<config-hex>.json`` + ``<id>/layer.tar``) carries no manifest,
so one is made from its config and layers (identity = the config digest, "Image ID").
Every blob is hashed before anything is stored: a tampered archive stores nothing.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..digest import Digest
from ..errors import ImageError, IntegrityError
from ..fsutil import atomic_writer, canonical_json
from ..store import Store
from . import layout
from .image import Image, StoreBlobs, image_from_bytes, load_image, parse_json
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


def export_docker_archive(store: Store, manifest_digest: str, dest: Path,
                          repo_tags: list[str]) -> Path:
    """Write ``dest`` (docker-archive + OCI layout in one tar) atomically."""
    image = load_image(StoreBlobs(store), manifest_digest)
    missing = [d.digest for d in image.layers if not store.has(d.digest)]
    if missing:
        raise ImageError(f"cannot export {manifest_digest}: {len(missing)} layer(s) are not in "
                         f"the store (first {missing[0]})",
                         hint="pull the base with its layers (`patchbake pull`) first")
    blobs = [manifest_digest, image.config_desc.digest, *[d.digest for d in image.layers]]
    entries = [file_entry(f"blobs/sha256/{d.removeprefix('sha256:')}",
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
    with atomic_writer(dest) as f:
        for chunk in write_layer(with_parents(entries), 0):
            f.write(chunk)
    return dest


@dataclass(frozen=True)
class Imported:
    manifest_digest: str
    config_digest: str
    from_oci_index: bool  # False: a classic docker save archive (manifest made here)


def _hash_member(tf: tarfile.TarFile, name: str) -> tuple[str, str, int, bool]:
    """(digest, diff_id, size, gzipped) of an archive member, streamed."""
    member = _member(tf, name)
    f = tf.extractfile(member)
    assert f is not None
    raw, tar = hashlib.sha256(), hashlib.sha256()
    first = f.read(_READ)
    gz = first[:2] == b"\x1f\x8b"
    inflate = zlib.decompressobj(31) if gz else None
    size = 0
    chunk = first
    try:
        while chunk:
            size += len(chunk)
            raw.update(chunk)
            tar.update(inflate.decompress(chunk) if inflate else chunk)
            chunk = f.read(_READ)
        if inflate:
            tar.update(inflate.flush())
    except zlib.error as exc:
        raise ImageError(f"archive member {name!r} is not a valid gzip stream ({exc}); "
                         "nothing was stored") from None
    if inflate and not inflate.eof:
        raise ImageError(f"archive member {name!r} is a truncated gzip stream; nothing was stored")
    return Digest.from_hex(raw.hexdigest()), Digest.from_hex(tar.hexdigest()), size, gz


def _member(tf: tarfile.TarFile, name: str) -> tarfile.TarInfo:
    clean = _norm(name)
    found = [m for m in tf.getmembers() if _norm(m.name) == clean]
    if not found:
        raise ImageError(f"archive has no member {name!r}")
    m = found[-1]
    if not m.isreg():
        raise ImageError(f"archive member {name!r} is not a regular file")
    return m


def _read(tf: tarfile.TarFile, name: str) -> bytes:
    f = tf.extractfile(_member(tf, name))
    assert f is not None
    return f.read()


def _store_member(store: Store, tf: tarfile.TarFile, name: str, digest: str) -> None:
    if store.has(digest):
        return
    f: IO[bytes] | None = tf.extractfile(_member(tf, name))
    assert f is not None
    store.put_stream(iter(lambda: f.read(_READ), b""), expected=digest)


def import_docker_archive(store: Store, path: Path) -> Imported:
    try:
        tf = tarfile.open(path, "r:")  # noqa: SIM115 - closed by the `with` just below
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"{path} is not a readable docker-archive tar: {exc}") from None
    with tf:
        try:
            _check_members(tf, path)
            _check_headers(tf, path)
            names = {_norm(n) for n in tf.getnames()}
            if "index.json" in names:
                return _import_oci(store, tf, path, "manifest.json" in names)
            return _import_classic(store, tf, path)
        except (tarfile.TarError, EOFError) as exc:
            raise ImageError(f"{path} is truncated or corrupt: {exc}; nothing was stored") from None


def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _check_members(tf: tarfile.TarFile, path: Path) -> None:
    """Refuse unsafe entries, and a name that appears twice: `docker load` extracts the
    archive (the later copy wins), other readers take the first; which bytes were meant
    cannot be told, so neither is trusted."""
    from ..errors import UnsafeArchiveError

    seen: set[str] = set()
    for m in tf.getmembers():
        parts = m.name.split("/")
        if m.name.startswith("/") or ".." in parts or not (m.isreg() or m.isdir() or
                                                           m.issym()):
            raise UnsafeArchiveError(f"{path}: unsafe archive entry {m.name!r}")
        name = _norm(m.name)
        if name in seen and not m.isdir():
            raise ImageError(f"{path}: archive entry {name!r} appears twice; which copy is the "
                             "image cannot be told, nothing was stored")
        seen.add(name)


# PAX records that do not touch a member's name; anything else (path, linkpath, sparse
# maps, charset tricks) is read differently by Python's tarfile and Go's archive/tar.
_NAMELESS_PAX = frozenset({"size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})


def _check_headers(tf: tarfile.TarFile, path: Path) -> None:
    """Refuse archive members whose name two tar readers could read differently.

    `docker load` reads the archive with Go's archive/tar, this import with Python's
    tarfile. They disagree on bytes 345-500 of a header with GNU magic (a ustar ``prefix``
    to Python, GNU atime/ctime to Go), and on which of a PAX path and a GNU long name wins;
    an archive that uses any of these for a name cannot be read the way the engine reads
    it, so it is refused rather than interpreted."""
    if tf.pax_headers:
        raise ImageError(f"{path}: the archive carries global PAX headers; how they name its "
                         "members differs between tar readers, refusing it")
    fileobj = tf.fileobj
    assert fileobj is not None
    for m in tf.getmembers():
        header_at = m.offset_data - 512  # the member's own header, after any extension
        extended = header_at != m.offset
        if extended and (not m.pax_headers or set(m.pax_headers) - _NAMELESS_PAX):
            raise ImageError(f"{path}: member {m.name!r} is named by a PAX or GNU long-name "
                             "header; tar readers disagree on such names, refusing the archive")
        fileobj.seek(header_at)
        block = fileobj.read(512)
        if block[345:500].strip(b"\0"):
            raise ImageError(f"{path}: member {m.name!r} has bytes in the ustar prefix / GNU "
                             "time fields; tar readers disagree on its name, refusing the "
                             "archive")


def _import_oci(store: Store, tf: tarfile.TarFile, path: Path, with_docker: bool) -> Imported:
    index = parse_json(_read(tf, "index.json"), f"{path}:index.json")
    manifests = index.get("manifests") or []
    if not isinstance(manifests, list):
        raise ImageError(f"{path}: index.json's 'manifests' is not a list of descriptors")
    if len(manifests) != 1:
        raise ImageError(f"{path}: index.json lists {len(manifests)} manifests; expected one")
    desc = Descriptor.from_json(manifests[0], f"{path}:index.json")
    if desc.media_type in INDEX_TYPES:
        raise ImageError(f"{path}: index.json names a nested index ({desc.digest}), not one "
                         "image; docker load would choose a platform itself, verify does not")
    mbytes = _read(tf, f"blobs/sha256/{desc.hex}")
    if len(mbytes) != desc.size:
        raise IntegrityError(f"{path}: manifest {desc.digest} is {len(mbytes)} bytes; "
                             f"index.json says {desc.size}; nothing was stored")
    cdesc = Descriptor.from_json(parse_json(mbytes, "manifest").get("config"), "manifest")
    cbytes = _read(tf, f"blobs/sha256/{cdesc.hex}")
    image = image_from_bytes(mbytes, desc.digest, cbytes)
    for i, layer in enumerate(image.layers):
        digest, diff_id, size, _ = _hash_member(tf, f"blobs/sha256/{layer.hex}")
        _check_layer(i, layer, digest, size, diff_id, image.diff_ids[i])
    if with_docker:
        _same_image(tf, path, image)
    for layer in image.layers:
        _store_member(store, tf, f"blobs/sha256/{layer.hex}", layer.digest)
    store.put_bytes(cbytes, expected=cdesc.digest)
    store.put_bytes(mbytes, expected=desc.digest)
    return Imported(desc.digest, cdesc.digest, True)


def _same_image(tf: tarfile.TarFile, path: Path, image: Image) -> None:
    """manifest.json (what `docker load` reads) must name the config and layers, in order,
    of the image index.json names (what OCI tools and verify read): compared by the bytes'
    digests, so two paths holding the same bytes agree and one path cannot mean two."""
    entry = _docker_entry(tf, path)
    where = f"{path}: manifest.json (read by docker load) and index.json (read by OCI tools)"
    cdigest = Digest.of(_read(tf, entry["Config"]))
    if cdigest != image.config_desc.digest:
        raise ImageError(f"{where} name different configs ({cdigest} vs "
                         f"{image.config_desc.digest}); refusing an archive with two images")
    if len(entry["Layers"]) != len(image.layers):
        raise ImageError(f"{where} name {len(entry['Layers'])} vs {len(image.layers)} layers; "
                         "refusing an archive with two images")
    for i, (name, layer) in enumerate(zip(entry["Layers"], image.layers, strict=True)):
        own = _norm(name) == f"blobs/sha256/{layer.hex}"
        digest = layer.digest if own else _hash_member(tf, name)[0]
        if digest != layer.digest:
            raise ImageError(f"{where} name different layers at {i} ({name} is {digest}, "
                             f"index.json's is {layer.digest}); refusing an archive with two "
                             "images")


def _docker_entry(tf: tarfile.TarFile, path: Path) -> dict[str, Any]:
    try:
        entries = json.loads(_read(tf, "manifest.json"))
    except ValueError as exc:
        raise ImageError(f"{path}: manifest.json is not JSON: {exc}") from None
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


def _check_layer(i: int, layer: Descriptor, digest: str, size: int, diff_id: str,
                 want_diff: str) -> None:
    if digest != layer.digest or size != layer.size:
        raise IntegrityError(f"layer {i}: archive blob {layer.digest} hashes to {digest} "
                             f"({size} bytes); nothing was stored")
    if diff_id != want_diff:
        raise IntegrityError(f"layer {i}: uncompressed tar hashes to {diff_id}; the config's "
                             f"diff_id is {want_diff}; nothing was stored")


def _import_classic(store: Store, tf: tarfile.TarFile, path: Path) -> Imported:
    entry = _docker_entry(tf, path)
    cbytes = _read(tf, entry["Config"])
    cdigest = Digest.of(cbytes)
    stem = Path(entry["Config"]).name.removesuffix(".json")
    if len(stem) == 64 and stem != cdigest.hex:
        raise IntegrityError(f"{path}: config {entry['Config']} hashes to {cdigest}: its "
                             "bytes were changed; nothing was stored")
    from .image import config_diff_ids

    config = parse_json(cbytes, "config")
    diff_ids = config_diff_ids(config, f"{path}: config {entry['Config']}")
    if len(diff_ids) != len(entry["Layers"]):
        raise ImageError(f"{path}: config lists {len(diff_ids)} diff_ids for "
                         f"{len(entry['Layers'])} layers")
    layers = []
    for i, name in enumerate(entry["Layers"]):
        digest, diff_id, size, gz = _hash_member(tf, name)
        if diff_id != diff_ids[i]:
            raise IntegrityError(f"layer {i} ({name}): uncompressed tar hashes to {diff_id}; "
                                 f"the config's diff_id is {diff_ids[i]}; nothing was stored")
        layers.append(Descriptor(OCI_LAYER_GZIP if gz else OCI_LAYER_TAR, digest, size))
    for name, layer in zip(entry["Layers"], layers, strict=True):
        _store_member(store, tf, name, layer.digest)
    store.put_bytes(cbytes, expected=cdigest)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": cdigest, "size": len(cbytes)},
                "layers": [d.to_json() for d in layers]}
    mdigest, _, _ = layout.put_json(store, manifest)
    return Imported(mdigest, cdigest, False)


def open_archive_image(store: Store, path: Path) -> Image:
    """Import ``path`` into the store and return its image (verified)."""
    imp = import_docker_archive(store, path)
    return load_image(StoreBlobs(store), imp.manifest_digest)
