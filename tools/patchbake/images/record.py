"""Image records in the repository: ``manifests/images/<definition>/<manifest-hex>.json``.

A record is pretty canonical JSON, written once: the same bake writes the same bytes (no
timestamps, no host names), and a record is never overwritten with different content.
``latest.json`` beside the records points at the definition's latest bake; it is the only
file here that moves, and it is only a pointer (the record it names is immutable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ImageError
from ..fsutil import atomic_write, pretty_json, write_once

RECORD_FORMAT = "patchbake-image-record/1"
LATEST = "latest.json"


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
        atomic_write(latest, pretty_json(pointer))
    return path


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
