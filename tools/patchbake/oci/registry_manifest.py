"""What the registry client needs to know about manifests: media types, the descriptors a
manifest references, and platform selection in a multi-arch index.

Manifest bytes are never re-serialised here: a manifest's identity is the sha256 of the
exact bytes, so they are parsed only to find what they point to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import RegistryError
from . import gojson


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
IMAGE_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_ACCEPT = f"{OCI_MANIFEST}, {OCI_INDEX}, {DOCKER_MANIFEST}, {DOCKER_LIST}"
MAX_MANIFEST_BYTES = 4 << 20  # the distribution registry's own limit for manifests


@dataclass(frozen=True, slots=True)
class Descriptor:
    """What a manifest says about one blob or child manifest it references."""

    media_type: str
    digest: Digest
    size: int
    platform: tuple[str, str, str] | None = None  # (os, architecture, variant) in indexes
    urls: bool = False  # foreign/non-distributable layer: lives elsewhere, never pushed


@dataclass(frozen=True, slots=True)
class Manifest:
    """A parsed manifest or index. ``blobs`` (config, then layers) for images,
    ``manifests`` for indexes."""

    media_type: str
    blobs: tuple[Descriptor, ...]
    manifests: tuple[Descriptor, ...]

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def _descriptor(d: Any, where: str) -> Descriptor:
    if not isinstance(d, dict):
        raise RegistryError(f"{where}: descriptor is not an object")
    size, mt = d.get("size"), d.get("mediaType", "")
    digest = Digest.parse(d.get("digest"), f"{where}: descriptor digest", RegistryError)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RegistryError(f"{where}: descriptor {digest} has no valid size")
    plat = d.get("platform")
    platform = None
    if isinstance(plat, dict):
        platform = (str(plat.get("os", "")), str(plat.get("architecture", "")),
                    str(plat.get("variant", "")))
    return Descriptor(str(mt), digest, size, platform, bool(d.get("urls")))


def parse_manifest(data: bytes, content_type: str | None = None) -> Manifest:
    """Parse manifest bytes; the ``mediaType`` field wins over the HTTP Content-Type."""
    doc = gojson.load(data, "manifest", gojson.MANIFEST, error=RegistryError)
    if not isinstance(doc, dict):
        raise RegistryError("manifest is not a JSON object")
    mt = doc.get("mediaType") or (content_type or "").split(";")[0].strip()
    if not mt:
        # An OCI manifest may omit mediaType; its shape says which it is.
        mt = OCI_INDEX if "manifests" in doc else OCI_MANIFEST
    if mt in INDEX_TYPES:
        items = doc.get("manifests")
        if not isinstance(items, list):
            raise RegistryError("index has no 'manifests' list")
        children = tuple(_descriptor(m, "index") for m in items)
        return Manifest(mt, (), children)
    if mt not in IMAGE_TYPES:
        raise RegistryError(f"unsupported manifest media type '{mt}'",
                            hint="OCI or Docker schema 2 manifests and indexes are supported")
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise RegistryError("manifest has no 'layers' list")
    config = _descriptor(doc.get("config"), "manifest config")
    return Manifest(mt, (config, *(_descriptor(x, "manifest layer") for x in layers)), ())


def parse_platform(text: str) -> tuple[str, str, str]:
    """``os/arch[/variant]`` -> tuple; ``linux/amd64`` is the default everywhere."""
    parts = text.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise RegistryError(f"platform '{text}' is not os/arch[/variant]",
                            hint="e.g. linux/amd64 or linux/arm64/v8")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def select_platform(index: Manifest, platform: str) -> Descriptor:
    """The child manifest for ``platform``; a variant given must match, one omitted
    matches any (the first in index order, which is how engines choose)."""
    want_os, want_arch, want_variant = parse_platform(platform)
    offered = []
    for child in index.manifests:
        if child.platform is None:
            continue
        os_, arch, variant = child.platform
        offered.append("/".join(p for p in child.platform if p))
        if os_ == want_os and arch == want_arch and (not want_variant or variant == want_variant):
            if child.media_type and child.media_type not in IMAGE_TYPES:
                raise RegistryError(f"index entry for {platform} is a {child.media_type}")
            return child
    raise RegistryError(
        f"the index offers no {platform} image (it offers: {', '.join(offered) or 'none'})",
        hint="choose one with --platform",
    )
