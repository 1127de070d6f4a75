"""What the overlay layer holds: the patch's touched ``vllm/`` files under site-packages,
whiteouts for files the patch deletes, ``/opt/patchbake/identity.json`` (the in-image
identity record), ``/opt/patchbake/tree.json`` (the full ``vllm/`` tree as baked, named by
sha256 in the identity record), ``/opt/patchbake/verify.py`` (the stdlib-only verifier)
and ``/opt/patchbake/entrypoint.sh`` (the opt-in start-up check).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from ..config import Lineage
from ..digest import Digest
from ..errors import ImageError, IntegrityError
from ..fsutil import canonical_json
from ..oci.tarwriter import Entry, file_entry, whiteout_entry
from ..config.images import Definition
from . import distrecord
from .tree import TREE_PATH, BaseTree, full_tree, manifest_bytes

IDENTITY_FORMAT = "patchbake-identity/2"
IDENTITY_PATH = "/opt/patchbake/identity.json"
VERIFIER_PATH = "/opt/patchbake/verify.py"
ENTRYPOINT_PATH = "/opt/patchbake/entrypoint.sh"
PACKAGE = "vllm/"
_NATIVE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hip")
_NATIVE_NAMES = ("CMakeLists.txt", "setup.py", "pyproject.toml", "build_rust.sh")
_NATIVE_DIRS = ("csrc/", "cmake/", "rust/")


class Patched(Protocol):
    """What bake needs from ``patchset.PatchedTree`` (tests pass a small stand-in)."""

    # read-only members, so frozen dataclasses (PatchedTree, the tests' stand-in) conform
    @property
    def root(self) -> Path: ...
    @property
    def files(self) -> dict[str, str]: ...
    @property
    def deleted(self) -> frozenset[str]: ...
    @property
    def patch_sha256(self) -> str: ...
    @property
    def files_sha256(self) -> str: ...
    @property
    def tree_digest(self) -> Digest: ...
    @property
    def pristine_digest(self) -> Digest: ...


def native_paths(paths: list[str]) -> list[str]:
    """Paths whose change needs a compiler: native sources and build configuration."""
    return sorted(p for p in paths if p.startswith(_NATIVE_DIRS)
                  or p.endswith(_NATIVE_SUFFIXES) or p.rsplit("/", 1)[-1] in _NATIVE_NAMES)


def decide_mode(defn: Definition, patched: Patched) -> tuple[str, list[str]]:
    """The mode FILES.txt calls for, and warnings when the definition says otherwise.

    A patch touching native sources cannot be overlaid (its compiled code would be stale):
    that is an error. A Python-only patch in a ``build`` definition is allowed, with a note.
    """
    touched = sorted({*patched.files, *patched.deleted})
    native = native_paths(touched)
    if native and defn.mode == "overlay":
        shown = ", ".join(native[:5]) + (f" (+{len(native) - 5} more)" if len(native) > 5 else "")
        raise ImageError(f"{defn.path.name}: mode is 'overlay' but FILES.txt touches native "
                         f"sources ({shown}); an overlay would ship stale compiled code",
                         hint="set `mode: build` in the definition (Docker engine backend)")
    warnings = []
    if not native and defn.mode == "build":
        warnings.append(f"{defn.path.name}: mode is 'build' but FILES.txt touches no native "
                        "source; 'overlay' would give a reproducible image")
    outside = [p for p in touched if not p.startswith(PACKAGE) and p not in native]
    if outside:
        warnings.append(f"{len(outside)} touched path(s) outside {PACKAGE} are not installed "
                        f"in the image and not baked (first: {outside[0]})")
    return ("build" if native else "overlay"), warnings


def _record_entry(base_tree: BaseTree, sp: str, baked: list[dict[str, Any]],
                  patched: Patched) -> Entry | None:
    """The base's vLLM RECORD with the baked files' new hashes and sizes and the deleted
    files' rows dropped (None for a base without a dist-info, the stand-in)."""
    data = base_tree.dist_info.get("RECORD")
    if base_tree.dist_name is None or data is None:
        return None
    cut = len(sp) + 2
    changed = {f["path"][cut:]: (f["sha256"], f["size"]) for f in baked}
    removed = {p for p in patched.deleted if p.startswith(PACKAGE)}
    return file_entry(f"{sp}/{base_tree.dist_name}/RECORD",
                      data=distrecord.rewritten(data, changed, removed))


def verifier_bytes() -> bytes:
    return resources.files("patchbake").joinpath("data/verify.py").read_bytes()


def entrypoint_bytes() -> bytes:
    return resources.files("patchbake").joinpath("data/entrypoint.sh").read_bytes()


@dataclass(frozen=True)
class Overlay:
    entries: list[Entry]
    identity: dict[str, Any]
    identity_bytes: bytes
    baked: list[dict[str, Any]]  # path, mode, size, sha256 (absolute paths in the image)
    deleted: list[str]
    tree_sha256: str  # of /opt/patchbake/tree.json, the full vllm/ tree as baked
    tree_files: int


def build_overlay(defn: Definition, patched: Patched, lineage: Lineage,
                  base_name: str, base_digest: Digest, base_tree: BaseTree) -> Overlay:
    """``base_digest`` is the base's manifest digest; the definition's pin (which may name
    an index or a config) is recorded beside it, so the image changes with its pin.
    ``base_tree`` is the base's installed ``vllm/`` tree (for the full tree manifest)."""
    sp = defn.sp_rel
    entries: list[Entry] = []
    baked: list[dict[str, Any]] = []
    for rel in sorted(p for p in patched.files if p.startswith(PACKAGE)):
        src = patched.root / rel
        data = src.read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != patched.files[rel]:
            raise IntegrityError(f"patched tree file {rel} hashes to {got}, the apply recorded "
                                 f"{patched.files[rel]}: the store's patched tree was modified")
        exe = bool(src.stat().st_mode & 0o111)
        entries.append(file_entry(f"{sp}/{rel}", data=data, executable=exe))
        baked.append({"path": f"/{sp}/{rel}", "mode": "0755" if exe else "0644",
                      "size": len(data), "sha256": got})
    deleted = [f"/{sp}/{p}" for p in sorted(patched.deleted) if p.startswith(PACKAGE)]
    entries += [whiteout_entry(d.lstrip("/")) for d in deleted]
    record = _record_entry(base_tree, sp, baked, patched)
    if record is not None:
        entries.append(record)
    verifier = verifier_bytes()
    tree = full_tree(base_tree, baked, deleted, defn.site_packages)
    tree_data = manifest_bytes(tree, defn.site_packages)
    up = lineage.upstream
    identity = {
        "format": IDENTITY_FORMAT,
        "definition": defn.name,
        "lineage": lineage.key,
        "upstream": {"package": up.package, "version": up.version, "pin": up.pin,
                     "tree_digest": str(patched.pristine_digest)},
        "patch": {"name": lineage.name, "sha256": patched.patch_sha256},
        "files_sha256": patched.files_sha256,
        "patched_tree_digest": str(patched.tree_digest),
        "site_packages": defn.site_packages,
        "base": {"name": base_name, "digest": str(defn.base.digest),
                 "manifest_digest": str(base_digest)},
        "files": baked,
        "deleted": deleted,
        "verifier": {"path": VERIFIER_PATH, "sha256": hashlib.sha256(verifier).hexdigest()},
        "tree": {"path": TREE_PATH, "sha256": hashlib.sha256(tree_data).hexdigest(),
                 "files": len(tree)},
        "startup_allow": [{"path": p, "sha256": h} for p, h in defn.startup_allow],
        "entrypoint": ENTRYPOINT_PATH,
    }
    if record is not None:  # a base with a vLLM dist-info: its RECORD names the patched hashes
        identity["record"] = {"path": f"/{record.path}",
                              "sha256": hashlib.sha256(record.data or b"").hexdigest()}
    identity_bytes = canonical_json(identity) + b"\n"
    entries.append(file_entry(IDENTITY_PATH.lstrip("/"), data=identity_bytes))
    entries.append(file_entry(TREE_PATH.lstrip("/"), data=tree_data))
    entries.append(file_entry(VERIFIER_PATH.lstrip("/"), data=verifier, executable=True))
    entries.append(file_entry(ENTRYPOINT_PATH.lstrip("/"), data=entrypoint_bytes(),
                              executable=True))
    return Overlay(entries, identity, identity_bytes, baked, deleted,
                   hashlib.sha256(tree_data).hexdigest(), len(tree))
