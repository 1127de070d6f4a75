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
from pathlib import Path
from typing import Any

from ..errors import ImageError
from ..fsutil import atomic_write, pretty_json, write_once

RECORD_FORMAT = "patchbake-image-record/1"
LATEST = "latest.json"
SUPERSEDED = "superseded.json"
SUPERSEDED_FORMAT = "patchbake-superseded/1"


def records_dir(repo_root: Path, definition: str) -> Path:
    return repo_root / "manifests" / "images" / definition


def record_path(repo_root: Path, definition: str, manifest_digest: str) -> Path:
    return records_dir(repo_root, definition) / f"{manifest_digest.removeprefix('sha256:')}.json"


def write_record(repo_root: Path, record: dict[str, Any]) -> Path:
    """Write the record (once) and move ``latest.json`` to it. Returns the record path."""
    path = record_path(repo_root, record["definition"], record["manifest_digest"])
    data = pretty_json(record)
    try:
        write_once(path, data)
    except FileExistsError:
        raise ImageError(f"{path.relative_to(repo_root)} already records this digest with "
                         "different content; records are never overwritten",
                         hint="inspect the difference; if the bake inputs changed, the "
                              "digest would have changed too") from None
    pointer = {"format": RECORD_FORMAT, "definition": record["definition"],
               "digest": record["manifest_digest"],
               "record": path.relative_to(repo_root).as_posix()}
    latest = records_dir(repo_root, record["definition"]) / LATEST
    if not latest.exists() or latest.read_bytes() != pretty_json(pointer):
        previous = _pointer_digest(latest)
        _update_superseded(repo_root, record["definition"], previous,
                           str(record["manifest_digest"]))
        atomic_write(latest, pretty_json(pointer))
    return path


def _pointer_digest(latest: Path) -> str | None:
    try:
        return str(json.loads(latest.read_bytes())["digest"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def superseded(repo_root: Path, definition: str) -> dict[str, dict[str, Any]]:
    """Superseded records of ``definition``: digest -> {digest, superseded_by, record}."""
    p = records_dir(repo_root, definition) / SUPERSEDED
    try:
        doc = json.loads(p.read_bytes())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ImageError(f"{p.relative_to(repo_root)} is unreadable: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SUPERSEDED_FORMAT \
            or not isinstance(doc.get("records"), list):
        raise ImageError(f"{p.relative_to(repo_root)} is not a {SUPERSEDED_FORMAT} index")
    return {str(r["digest"]): dict(r) for r in doc["records"]}


def _update_superseded(repo_root: Path, definition: str, previous: str | None,
                       current: str) -> None:
    known = superseded(repo_root, definition)
    changed = known.pop(current, None) is not None
    if previous and previous != current and \
            record_path(repo_root, definition, previous).is_file():
        known[previous] = {
            "digest": previous, "superseded_by": current,
            "record": record_path(repo_root, definition, previous)
            .relative_to(repo_root).as_posix()}
        for r in known.values():  # a chain points at the newest bake
            if r["superseded_by"] == previous:
                r["superseded_by"] = current
        changed = True
    if changed:
        doc = {"format": SUPERSEDED_FORMAT, "definition": definition,
               "records": [known[k] for k in sorted(known)]}
        atomic_write(records_dir(repo_root, definition) / SUPERSEDED, pretty_json(doc))


def latest(repo_root: Path, definition: str) -> dict[str, Any]:
    """The definition's latest bake record (raises when nothing was baked)."""
    p = records_dir(repo_root, definition) / LATEST
    try:
        pointer = json.loads(p.read_bytes())
        rec = json.loads((repo_root / pointer["record"]).read_bytes())
    except FileNotFoundError:
        raise ImageError(f"no recorded bake of '{definition}' (no {p.relative_to(repo_root)})",
                         hint=f"run `patchbake bake {definition}`") from None
    except (ValueError, KeyError) as exc:
        raise ImageError(f"{p.relative_to(repo_root)} is unreadable: {exc}") from None
    if rec.get("manifest_digest") != pointer.get("digest"):
        raise ImageError(f"{p.relative_to(repo_root)} points at {pointer.get('digest')} but "
                         f"its record holds {rec.get('manifest_digest')}")
    return dict(rec)
