"""The image's SBOM: a CycloneDX 1.6 JSON document built from one bake's facts.

What it lists (bakefacts.BakeFacts, never the image's own labels):

- ``metadata.component``: the image (type container), its manifest digest as the SHA-256
  hash and in its ``pkg:oci`` purl;
- with a lock: every wheel (``pkg:pypi``, version, the wheel's sha256) and every Debian
  package (``pkg:deb/debian``, version, architecture, the .deb's sha256);
- without one (the stand-in, whose base is the sdist's files): the base image and vLLM's
  tree from the sdist, nothing else -- the stand-in has no Python and no OS packages;
- vLLM as modified: its version is the image's (upstream + patch), its pedigree names the
  unmodified upstream as ancestors (the sdist with its sha256; with a lock also the wheel)
  and the patch (``unofficial``, its path and sha256 as properties, FILES.txt likewise).

The document is a function of the bake: no timestamp, a serial number derived from the
manifest digest, so the same bake gives the same bytes (and the same signature).
``check`` is patchbake's reader: the members a release verification relies on, refused
with an AttestationError; the full schema check is the CycloneDX project's own validator,
which the tests run.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..digest import Digest
from ..errors import AttestationError
from .bakefacts import BakeFacts

SPEC_VERSION = "1.6"
PREDICATE_TYPE = "https://cyclonedx.org/bom"  # the in-toto predicate type of a CycloneDX BOM
PROPERTY = "dev.patchbake"  # prefix of our property names
_PYPI_NAME = re.compile(r"[-_.]+")


def _q(text: str) -> str:
    return quote(text, safe=".-_~")


def pypi_purl(name: str, version: str) -> str:
    return f"pkg:pypi/{_PYPI_NAME.sub('-', name).lower()}@{_q(version)}"


def deb_purl(name: str, version: str, arch: str, suite: str) -> str:
    return f"pkg:deb/debian/{_q(name)}@{_q(version)}?arch={_q(arch)}&distro={_q(suite)}"


def oci_purl(name: str, digest: Digest) -> str:
    repo = name.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return f"pkg:oci/{_q(repo)}@{_q(str(digest))}"


def _sha256(hex_: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": hex_}]


def _props(**kv: str | None) -> list[dict[str, str]]:
    return [{"name": f"{PROPERTY}:{k.replace('_', '-')}", "value": v}
            for k, v in kv.items() if v is not None]


def _wheels(b: BakeFacts) -> list[dict[str, Any]]:
    if b.lock is None:
        return []
    return [{"type": "library", "bom-ref": f"pypi:{w.name}", "name": w.name,
             "version": w.version, "purl": pypi_purl(w.name, w.version),
             "hashes": _sha256(w.sha256.hex), "properties": _props(file=w.filename)}
            for w in sorted(b.lock.lock.wheels, key=lambda w: w.name) if w.name != b.package]


def _debs(b: BakeFacts) -> list[dict[str, Any]]:
    if b.lock is None:
        return []
    os_ = b.lock.lock.os
    return [{"type": "library", "bom-ref": f"deb:{p.name}:{p.architecture}", "name": p.name,
             "version": p.version, "purl": deb_purl(p.name, p.version, p.architecture,
                                                    f"{os_.distribution}-{os_.suite}"),
             "hashes": _sha256(p.sha256.hex), "properties": _props(file=p.filename)}
            for p in sorted(os_.packages, key=lambda p: (p.name, p.architecture))]


def _ancestors(b: BakeFacts) -> list[dict[str, Any]]:
    purl = pypi_purl(b.package, b.upstream_version)
    out = [{"type": "library", "bom-ref": f"upstream:{b.package}:sdist", "name": b.package,
            "version": b.upstream_version, "purl": purl,
            **({"hashes": _sha256(b.sdist_sha256)} if b.sdist_sha256 else {}),
            "properties": _props(file=b.sdist, git_commit=b.git_commit)}]
    if b.lock is not None:
        w = b.lock.lock.wheel(b.package)
        out.append({"type": "library", "bom-ref": f"upstream:{b.package}:wheel",
                    "name": b.package, "version": w.version, "purl": purl,
                    "hashes": _sha256(w.sha256.hex), "properties": _props(file=w.filename)})
    return out


def _patched(b: BakeFacts) -> dict[str, Any]:
    """vLLM as it is in the image: the upstream release with the lineage's patch."""
    return {
        "type": "library", "bom-ref": f"patched:{b.package}", "name": b.package,
        "version": b.version, "purl": pypi_purl(b.package, b.upstream_version),
        "description": f"{b.package} {b.upstream_version} modified by patch {b.patch_name}",
        "pedigree": {
            "ancestors": _ancestors(b),
            "patches": [{"type": "unofficial", "diff": {"url": b.patch_path}}],
            "notes": (f"patch {b.patch_path} sha256:{b.patch_sha256}; touched files listed in "
                      f"{b.files_path} sha256:{b.files_sha256}"),
        },
        "properties": _props(patch_name=b.patch_name, patch_sha256=b.patch_sha256,
                             patch_path=b.patch_path, files_sha256=b.files_sha256,
                             files_path=b.files_path,
                             patched_tree_digest=None if b.patched_tree is None
                             else str(b.patched_tree),
                             site_packages=b.site_packages),
    }


def build(b: BakeFacts) -> dict[str, Any]:
    """The CycloneDX document of the bake ``b``."""
    base = {"type": "container", "bom-ref": "base-image", "name": b.base_name,
            "version": str(b.base_digest), "purl": oci_purl(b.base_name, b.base_digest),
            "hashes": _sha256(b.base_digest.hex)}
    components = [base, _patched(b), *_wheels(b), *_debs(b)]
    image_ref = f"image:{b.definition}"
    return {
        "bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "version": 1,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'oci:{b.digest}')}",
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "patchbake",
                                      "version": __version__}]},
            "component": {"type": "container", "bom-ref": image_ref, "name": b.definition,
                          "version": b.version, "purl": oci_purl(b.definition, b.digest),
                          "hashes": _sha256(b.digest.hex),
                          "properties": _props(manifest_digest=str(b.digest),
                                               config_digest=str(b.config_digest),
                                               lineage=b.lineage,
                                               lock_sha256=None if b.lock is None
                                               else b.lock.digest.hex)},
        },
        "components": components,
        "dependencies": [{"ref": image_ref, "dependsOn": [c["bom-ref"] for c in components]}],
    }


def _bad(where: str, what: str) -> AttestationError:
    return AttestationError(f"{where}: not a patchbake CycloneDX SBOM: {what}")


def check(doc: Mapping[str, Any], digest: Digest, where: str) -> int:
    """The members a release relies on: CycloneDX 1.5/1.6 JSON, its image is ``digest``,
    every component named, versioned and hashed where it says so. Returns the number of
    components."""
    if doc.get("bomFormat") != "CycloneDX" or doc.get("specVersion") not in ("1.5", "1.6"):
        raise _bad(where, "bomFormat must be CycloneDX, specVersion 1.5 or 1.6")
    meta = doc.get("metadata")
    comp = meta.get("component") if isinstance(meta, dict) else None
    if not isinstance(comp, dict) or comp.get("type") != "container":
        raise _bad(where, "metadata.component must be the image (type container)")
    if _sha256(digest.hex)[0] not in (comp.get("hashes") or []):
        raise AttestationError(f"{where}: the SBOM describes another image, not {digest}")
    components = doc.get("components")
    if not isinstance(components, list) or not components:
        raise _bad(where, "it lists no component")
    for i, c in enumerate(components):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) \
                or not isinstance(c.get("version"), str):
            raise _bad(where, f"components[{i}] needs a name and a version")
        for h in c.get("hashes") or []:
            if not isinstance(h, dict) or h.get("alg") != "SHA-256" \
                    or not re.fullmatch(r"[0-9a-f]{64}", str(h.get("content"))):
                raise _bad(where, f"components[{i}] ({c['name']}) has a hash that is not "
                                  "a SHA-256 hex digest")
    return len(components)


__all__ = ["PREDICATE_TYPE", "SPEC_VERSION", "build", "check", "deb_purl", "oci_purl",
           "pypi_purl"]
