"""OCI / Docker media types and small descriptor helpers shared by the oci package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import ImageError, shown


OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"

INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
GZIP_LAYERS = (OCI_LAYER_GZIP, DOCKER_LAYER_GZIP,
               "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
               "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip")
TAR_LAYERS = (OCI_LAYER_TAR, DOCKER_LAYER_TAR,
              "application/vnd.oci.image.layer.nondistributable.v1.tar")


def layer_type_for(manifest_type: str) -> str:
    """Media type of our (uncompressed) overlay layer inside a manifest of this type."""
    return DOCKER_LAYER_TAR if manifest_type == DOCKER_MANIFEST else OCI_LAYER_TAR


def compression_of(media_type: str) -> str:
    """'none' or 'gzip'; any other compression is refused (we could not check diff_ids)."""
    if media_type in TAR_LAYERS:
        return "none"
    if media_type in GZIP_LAYERS:
        return "gzip"
    raise ImageError(f"layer media type {media_type} is not supported (uncompressed and gzip "
                     "layers only; zstd layers cannot be checked here)")


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI descriptor: media type, digest, size, annotations."""

    media_type: str
    digest: Digest
    size: int
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def hex(self) -> str:
        return self.digest.hex

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mediaType": self.media_type, "digest": str(self.digest),
                             "size": self.size}
        if self.annotations:
            d["annotations"] = dict(self.annotations)
        return d

    @classmethod
    def from_json(cls, d: Any, where: str) -> Descriptor:
        if not isinstance(d, dict):
            raise ImageError(f"{where}: descriptor is not an object")
        size, mt = d.get("size"), d.get("mediaType", "")
        digest = Digest.parse(d.get("digest"), f"{where}: descriptor digest", ImageError)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ImageError(f"{where}: descriptor size {shown(size)} is not a byte count")
        ann = d.get("annotations") or {}
        if not isinstance(ann, dict):
            raise ImageError(f"{where}: annotations must be an object")
        return cls(str(mt), digest, size, tuple(sorted((str(k), str(v)) for k, v in ann.items())))
