"""Image records in the repository: ``manifests/images/<definition>/<manifest-hex>.json``.

A record is pretty canonical JSON, written once: the same bake writes the same bytes (no
timestamps, no host names), and a record is never overwritten with different content.
``latest.json`` beside the records points at the definition's latest bake; it is the only
file here that moves, and it is only a pointer (the record it names is immutable).

``superseded.json`` beside them is the index of records that a later bake replaced: when
``latest.json`` moves from one digest to another, the one it left is listed with
``superseded_by`` (the record itself stays, unchanged, so evidence about that digest
keeps verifying; tools that mean "the current image" read ``latest.json``). A digest
that becomes latest again leaves the index.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Pipeline
from ..digest import Digest, is_hex
from ..errors import ImageError, PatchbakeError, shown
from ..fields import Fields
from ..fsutil import atomic_write, pretty_json, read_input, read_optional, write_once

RECORD_FORMAT = "patchbake-image-record/1"
LATEST = "latest.json"
SUPERSEDED = "superseded.json"
SUPERSEDED_FORMAT = "patchbake-superseded/1"


@dataclass(frozen=True)
class ImageRecord:
    """One bake's record: the typed fields every reader uses, and the whole document as
    written (``doc``). Loaded by ``ImageRecord.load`` and written by ``dump`` only."""

    definition: str
    manifest_digest: Digest
    config_digest: Digest
    patch_sha256: str
    site_packages: str | None
    doc: Mapping[str, Any]

    @classmethod
    def from_json(cls, doc: object, where: str) -> ImageRecord:
        """The edge: a parsed document checked once (format version, digests, patch)."""
        # a record carries the whole bake's account; only what its readers type is checked
        f = Fields(doc, where, ImageError, ("format", "definition", "manifest_digest",
                                            "config_digest", "patch"), others=True)
        f.one_of("format", (RECORD_FORMAT,))
        return cls(f.text("definition"), f.digest("manifest_digest"), f.digest("config_digest"),
                   f.member("patch", ("sha256",), others=True).hex("sha256"),
                   f.opt_text("site_packages"), dict(f.doc))

    @classmethod
    def load(cls, path: Path) -> ImageRecord:
        data = read_input(path, "image record", ImageError)
        try:
            doc = json.loads(data)
        except ValueError as exc:  # a committed record that does not parse is reported
            raise ImageError(f"image record {path} is not valid JSON: {exc}") from None
        return cls.from_json(doc, f"image record {path}")

    def dump(self) -> bytes:
        """The record's bytes (pretty canonical JSON): what ``write_record`` writes once."""
        return pretty_json(dict(self.doc))


def records_dir(repo_root: Path, definition: str) -> Path:
    return repo_root / "manifests" / "images" / definition


def record_path(repo_root: Path, definition: str, manifest_digest: Digest) -> Path:
    return records_dir(repo_root, definition) / f"{manifest_digest.hex}.json"


def write_record(repo_root: Path, record: dict[str, Any]) -> Path:
    """Write the record (once) and move ``latest.json`` to it. Returns the record path."""
    rec = ImageRecord.from_json(record, f"the new record of {shown(record.get('definition'))}")
    path = record_path(repo_root, rec.definition, rec.manifest_digest)
    data = rec.dump()
    try:
        write_once(path, data)
    except FileExistsError:
        raise ImageError(f"{path.relative_to(repo_root)} already records this digest with "
                         "different content; records are never overwritten",
                         hint="inspect the difference; if the bake inputs changed, the "
                              "digest would have changed too") from None
    pointer = {"format": RECORD_FORMAT, "definition": record["definition"],
               "digest": str(rec.manifest_digest),
               "record": path.relative_to(repo_root).as_posix()}
    latest = records_dir(repo_root, record["definition"]) / LATEST
    if read_optional(latest, "the latest-bake pointer", ImageError) != pretty_json(pointer):
        previous = _pointer_digest(latest)
        _update_superseded(repo_root, record["definition"], previous, rec.manifest_digest)
        atomic_write(latest, pretty_json(pointer))
    return path


def _pointer_digest(latest: Path) -> Digest | None:
    raw = read_optional(latest, "the latest-bake pointer", ImageError)
    if raw is None:
        return None
    try:
        return Digest.parse(json.loads(raw)["digest"])
    except (ValueError, KeyError, TypeError, PatchbakeError):
        return None


def superseded(repo_root: Path, definition: str) -> dict[str, dict[str, Any]]:
    """Superseded records of ``definition``: digest -> {digest, superseded_by, record}."""
    p = records_dir(repo_root, definition) / SUPERSEDED
    data = read_optional(p, "superseded index", ImageError)
    if data is None:
        return {}
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ImageError(f"{p.relative_to(repo_root)} is unreadable: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SUPERSEDED_FORMAT \
            or not isinstance(doc.get("records"), list):
        raise ImageError(f"{p.relative_to(repo_root)} is not a {SUPERSEDED_FORMAT} index")
    return {str(r["digest"]): dict(r) for r in doc["records"]}


def _update_superseded(repo_root: Path, definition: str, previous: Digest | None,
                       current_digest: Digest) -> None:
    known = superseded(repo_root, definition)  # keyed by the digests' text, as written
    current = str(current_digest)
    changed = known.pop(current, None) is not None
    if previous and previous != current_digest and \
            record_path(repo_root, definition, previous).is_file():
        known[str(previous)] = {
            "digest": str(previous), "superseded_by": current,
            "record": record_path(repo_root, definition, previous)
            .relative_to(repo_root).as_posix()}
        for r in known.values():  # a chain points at the newest bake
            if r["superseded_by"] == str(previous):
                r["superseded_by"] = current
        changed = True
    if changed:
        doc = {"format": SUPERSEDED_FORMAT, "definition": definition,
               "records": [known[k] for k in sorted(known)]}
        atomic_write(records_dir(repo_root, definition) / SUPERSEDED, pretty_json(doc))


def latest(repo_root: Path, definition: str) -> ImageRecord:
    """The definition's latest bake record (raises when nothing was baked)."""
    p = records_dir(repo_root, definition) / LATEST
    data = read_optional(p, "latest pointer", ImageError)
    if data is None:
        raise ImageError(f"no recorded bake of '{definition}' (no {p.relative_to(repo_root)})",
                         hint=f"run `patchbake bake {definition}`")
    try:
        pointer = json.loads(data)
        target = repo_root / pointer["record"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ImageError(f"{p.relative_to(repo_root)} is unreadable: {exc}") from None
    rec = ImageRecord.load(target)
    if str(rec.manifest_digest) != pointer.get("digest"):
        raise ImageError(f"{p.relative_to(repo_root)} points at {pointer.get('digest')} but "
                         f"its record holds {rec.manifest_digest}")
    return rec


def find(repo_root: Path, manifest_digest: Digest) -> ImageRecord | None:
    """The committed record of a manifest digest, whichever definition baked it."""
    for p in sorted((repo_root / "manifests" / "images").glob(f"*/{manifest_digest.hex}.json")):
        return ImageRecord.load(p)
    return None


def recorded_digests(repo_root: Path) -> set[Digest]:
    """Every manifest digest a committed record is named by (records are ``<hex>.json``)."""
    return {Digest.from_hex(p.stem) for p in (repo_root / "manifests" / "images").glob("*/*.json")
            if is_hex(p.stem)}


def find_for_image(repo_root: Path, definitions: Iterable[str], manifest_digest: Digest,
                   config_digest: Digest) -> ImageRecord | None:
    """The record of one of ``definitions`` naming this manifest digest (or, for an
    engine's re-export that keeps the config but not the manifest, this config digest).
    Files that are not records of the current format are passed over."""
    for name in sorted(definitions):
        exact = record_path(repo_root, name, manifest_digest)
        files = [exact] if exact.is_file() else sorted(records_dir(repo_root, name)
                                                        .glob("*.json"))
        for f in files:
            if f.name in (LATEST, SUPERSEDED):
                continue
            try:
                rec = ImageRecord.load(f)
            except ImageError:
                continue
            if rec.definition == name and (rec.manifest_digest == manifest_digest
                                           or rec.config_digest == config_digest):
                return rec
    return None


def latest_digest(pipeline: Pipeline, name: str) -> Digest | None:
    """Manifest digest of definition ``name``'s latest recorded bake (None: not a
    definition of ``pipeline``)."""
    if name not in pipeline.images:
        return None
    return latest(pipeline.root, name).manifest_digest
