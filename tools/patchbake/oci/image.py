"""An image as data: manifest + config + layer descriptors, every byte digest-checked.

Blob sources (the store, an OCI layout directory, a docker-archive) all answer
``open(digest)``; :func:`load_image` reads the manifest and config through one and refuses
any JSON whose bytes do not hash to the digest that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ..digest import Digest
from ..errors import ImageError, IntegrityError, shown
from ..store import Store
from . import gojson
from .media import INDEX_TYPES, MANIFEST_TYPES, Descriptor


class Blobs(Protocol):
    def open(self, digest: Digest) -> BinaryIO: ...

    def has(self, digest: Digest) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class StoreBlobs:
    store: Store

    def open(self, digest: Digest) -> BinaryIO:
        return self.store.open_blob(digest)

    def has(self, digest: Digest) -> bool:
        return self.store.has(digest)

    def describe(self) -> str:
        return f"store {self.store.root}"


@dataclass(frozen=True)
class DirBlobs:
    """``<dir>/blobs/sha256/<hex>``: an OCI image layout directory."""

    root: Path

    def _path(self, digest: Digest) -> Path:
        return self.root / "blobs" / digest.algorithm / digest.hex

    def open(self, digest: Digest) -> BinaryIO:
        p = self._path(digest)
        if not p.is_file():
            raise ImageError(f"blob {digest} is missing from the OCI layout {self.root}")
        return open(p, "rb")

    def has(self, digest: Digest) -> bool:
        return self._path(digest).is_file()

    def describe(self) -> str:
        return f"OCI layout {self.root}"


def read_checked(blobs: Blobs, digest: Digest, size: int | None, what: str) -> bytes:
    with blobs.open(digest) as f:
        data = f.read()
    got = Digest.of(data)
    if got != digest:
        raise IntegrityError(f"{what} {digest} in {blobs.describe()} hashes to {got}: "
                             "its bytes were changed")
    if size is not None and len(data) != size:
        raise IntegrityError(f"{what} {digest} is {len(data)} bytes; the manifest says {size}")
    return data


def parse_json(data: bytes, what: str, shape: gojson.Shape) -> dict[str, Any]:
    """A manifest, index or config (``shape``: ``gojson.MANIFEST``/``CONFIG``) read as the
    engines' Go code reads it, or refused (see :mod:`.gojson`)."""
    doc = gojson.load(data, what, shape)
    if not isinstance(doc, dict):
        raise ImageError(f"{what} is not a JSON object")
    return doc


@dataclass(frozen=True)
class Image:
    manifest_digest: Digest
    manifest_bytes: bytes
    manifest: dict[str, Any]
    config_desc: Descriptor
    config_bytes: bytes
    config: dict[str, Any]
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[Digest, ...]  # the config's rootfs.diff_ids, one a layer

    @property
    def media_type(self) -> str:
        return str(self.manifest.get("mediaType") or "application/vnd.oci.image.manifest.v1+json")

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.config.get("config") or {}).get("Labels") or {})


def parse_manifest(data: bytes, digest: Digest) -> tuple[dict[str, Any], Descriptor,
                                                       tuple[Descriptor, ...]]:
    doc = parse_json(data, f"manifest {digest}", gojson.MANIFEST)
    mt = doc.get("mediaType")
    if mt in INDEX_TYPES or "manifests" in doc:
        raise ImageError(f"{digest} is an image index, not a manifest",
                         hint="name the platform manifest digest (linux/amd64) instead")
    if doc.get("schemaVersion") != 2 or (mt is not None and mt not in MANIFEST_TYPES):
        raise ImageError(f"manifest {digest} has schemaVersion {shown(doc.get('schemaVersion'))} "
                         f"and mediaType {shown(mt)}; only OCI and Docker v2 schema 2 are supported")
    config = Descriptor.from_json(doc.get("config"), f"manifest {digest} config")
    raw_layers = doc.get("layers")
    if not isinstance(raw_layers, list):
        raise ImageError(f"manifest {digest} has no layers list")
    layers = tuple(Descriptor.from_json(x, f"manifest {digest} layers[{i}]")
                   for i, x in enumerate(raw_layers))
    return doc, config, layers


def config_diff_ids(config: dict[str, Any], where: str) -> tuple[Digest, ...]:
    """The config's ``rootfs.diff_ids``, checked for shape (``rootfs`` and ``config``
    objects, every diff_id a ``sha256:`` string) so that no reader trips over them."""
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict):
        raise ImageError(f"{where}: 'rootfs' is {type(rootfs).__name__}, not an object")
    inner = config.get("config")
    if inner is not None and not isinstance(inner, dict):
        raise ImageError(f"{where}: 'config' is {type(inner).__name__}, not an object")
    if isinstance(inner, dict) and not isinstance(inner.get("Labels") or {}, dict):
        raise ImageError(f"{where}: 'config.Labels' is not an object")
    diff_ids = rootfs.get("diff_ids")
    if not isinstance(diff_ids, list):
        raise ImageError(f"{where}: 'rootfs.diff_ids' is not a list")
    return tuple(Digest.parse(d, f"{where}: rootfs.diff_ids[{i}]", ImageError)
                 for i, d in enumerate(diff_ids))


def image_from_bytes(manifest_bytes: bytes, manifest_digest: Digest, config_bytes: bytes
                     ) -> Image:
    got = Digest.of(manifest_bytes)
    if got != manifest_digest:
        raise IntegrityError(f"manifest {manifest_digest} hashes to {got}: its bytes were changed")
    doc, cdesc, layers = parse_manifest(manifest_bytes, manifest_digest)
    got_cfg = Digest.of(config_bytes)
    if got_cfg != cdesc.digest or len(config_bytes) != cdesc.size:
        raise IntegrityError(f"config of {manifest_digest} hashes to {got_cfg} "
                             f"({len(config_bytes)} bytes); the manifest names {cdesc.digest} "
                             f"({cdesc.size} bytes)")
    config = parse_json(config_bytes, f"config {cdesc.digest}", gojson.CONFIG)
    diff_ids = config_diff_ids(config, f"config {cdesc.digest}")
    if len(diff_ids) != len(layers):
        raise ImageError(f"config {cdesc.digest} lists {len(diff_ids)} diff_ids for "
                         f"{len(layers)} layers")
    return Image(manifest_digest, manifest_bytes, doc, cdesc, config_bytes, config, layers,
                 diff_ids)


def load_image(blobs: Blobs, manifest_digest: Digest) -> Image:
    mbytes = read_checked(blobs, manifest_digest, None, "manifest")
    _, cdesc, _ = parse_manifest(mbytes, manifest_digest)
    cbytes = read_checked(blobs, cdesc.digest, cdesc.size, "config")
    return image_from_bytes(mbytes, manifest_digest, cbytes)
