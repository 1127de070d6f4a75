"""What one recorded bake was made of: the inputs an SBOM and a provenance statement name.

``gather`` reads them from the committed image record (what was baked: manifest digest,
base, patch and FILES.txt sha256, upstream pin, lock) and from the pipeline's lineage (the
paths of those files and the pinned sdist). Every identity comes from the record, which is
what the image was made of; the pipeline only names files. When the two disagree (the
lineage was moved on after the bake, or the lock was regenerated) the document would
describe another image, so it is refused (AttestationError), never written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Pipeline
from ..config.pipeline import Lineage
from ..digest import Digest, is_hex
from ..errors import AttestationError, ImageError, LockError
from ..fields import Fields
from ..images import definition as definitions
from ..images.record import ImageRecord
from ..sources import lockfile
from ..sources.lockfile import Lock


@dataclass(frozen=True, slots=True)
class LockInput:
    path: str  # repository-relative
    digest: Digest
    lock: Lock


@dataclass(frozen=True, slots=True)
class BakeFacts:
    """One bake's identity and inputs, typed (nothing here is read from the image)."""

    definition: str
    digest: Digest  # the image's manifest digest: the documents' subject
    config_digest: Digest
    version: str  # the image's version label (upstream + patch)
    lineage: str
    mode: str  # overlay | build
    package: str  # "vllm"
    upstream_version: str  # "0.25.1"
    sdist: str | None  # the pinned sdist's file name (None: a git upstream)
    sdist_sha256: str | None
    git_commit: str | None
    patch_name: str
    patch_path: str
    patch_sha256: str
    files_path: str
    files_sha256: str
    patched_tree: Digest | None
    base_name: str
    base_digest: Digest
    site_packages: str | None
    source_date_epoch: int
    lock: LockInput | None


def _rel(pipeline: Pipeline, path: Path) -> str:
    try:
        return path.resolve().relative_to(pipeline.root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _lineage(pipeline: Pipeline, rec: ImageRecord) -> Lineage:
    defn = definitions.load(pipeline, rec.definition) if rec.definition in pipeline.images \
        else None
    lin = pipeline.lineage_for(defn, None)
    pin = Fields(rec.doc.get("upstream"), f"image record of {rec.definition}",
                 AttestationError, ("pin",), others=True).text("pin")
    if pin != lin.upstream.pin:
        raise AttestationError(f"the image {rec.manifest_digest} was baked from {pin}; "
                               f"lineage {lin.key} now pins {lin.upstream.pin}: its SBOM and "
                               "provenance would name another upstream")
    return lin


def _lock(pipeline: Pipeline, rec: ImageRecord, lin: Lineage, base_source: str
          ) -> LockInput | None:
    """The lock the base was made from: the one the record names (checked against the
    lineage's file), or the lineage's for a definition whose base is built from it."""
    named = rec.doc.get("lock")
    if named is None and base_source != "lock":
        return None
    if lin.lock is None:
        raise AttestationError(f"the image {rec.manifest_digest} was baked from a lock, but "
                               f"lineage {lin.key} names none in pipeline.yaml")
    try:
        lock, digest = lockfile.load(lin.lock)
    except LockError as exc:
        raise AttestationError(f"the lineage's lock: {exc.message}") from None
    if named is not None:
        # the record names its lock by digest, alone or as {"sha256": ..., "path": ...}
        text = named.get("sha256") if isinstance(named, dict) else named
        want = Digest.from_hex(text) if is_hex(text) else Digest.parse(
            text, f"image record of {rec.definition}: its lock's sha256", AttestationError)
        if want != digest:
            raise AttestationError(f"the image {rec.manifest_digest} was baked from lock "
                                   f"{want}; {_rel(pipeline, lin.lock)} is now {digest}")
    return LockInput(_rel(pipeline, lin.lock), digest, lock)


def gather(pipeline: Pipeline, rec: ImageRecord) -> BakeFacts:
    """The facts of the bake ``rec`` records, or AttestationError naming what disagrees."""
    where = f"image record of {rec.definition} ({rec.manifest_digest})"
    f = Fields(rec.doc, where, AttestationError, ("base", "patch", "files_sha256"),
               others=True)
    base = f.member("base", ("name", "digest"), others=True)
    patch = f.member("patch", ("name", "sha256"), others=True)
    lin = _lineage(pipeline, rec)
    try:
        base_source = definitions.load(pipeline, rec.definition).base.source \
            if rec.definition in pipeline.images else ""
    except ImageError:
        base_source = ""
    labels = rec.doc.get("labels")
    version = labels.get("org.opencontainers.image.version") if isinstance(labels, dict) \
        else None
    up = lin.upstream
    tree = rec.doc.get("patched_tree_digest")
    return BakeFacts(
        rec.definition, rec.manifest_digest, rec.config_digest,
        str(version or up.version), lin.key,
        str(rec.doc.get("mode") or "overlay"), up.package, up.version,
        up.filename if up.kind != "git" else None, up.sha256 if up.kind != "git" else None,
        up.commit if up.kind == "git" else None, patch.text("name"), _rel(pipeline, lin.patch),
        patch.hex("sha256"), _rel(pipeline, lin.files), f.hex("files_sha256"),
        Digest.parse(tree, f"{where}: patched_tree_digest", AttestationError)
        if isinstance(tree, str) else None,
        base.text("name"), base.digest("digest"), rec.site_packages,
        int(rec.doc.get("source_date_epoch") or 0), _lock(pipeline, rec, lin, base_source))


__all__ = ["BakeFacts", "LockInput", "gather"]
