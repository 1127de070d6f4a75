"""An installed distribution's RECORD (the binary distribution format's list of installed
files): read, rewritten for the files a bake replaces, and checked against an image.

RECORD is CSV: ``path,sha256=<urlsafe base64, no padding>,size`` per file, paths relative to
site-packages; RECORD's own row and bytecode rows carry no hash. A bake that overlays
patched files rewrites the rows of exactly those files (new hash and size) and drops the
rows of files the patch deletes, keeping every other byte of the file, so the installed
distribution stays self-consistent (``pip`` and ``importlib.metadata`` see the patched
hashes) and verify can check every row against the image.
"""

from __future__ import annotations

import base64
import csv
import io
import posixpath
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    sha256: str | None  # hex, or None where RECORD gives no hash
    size: int | None


def record_hash(sha256_hex: str) -> str:
    """The ``sha256=...`` form RECORD writes for a hex digest."""
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).rstrip(b"=").decode()


def _hex(field: str) -> str | None:
    if not field.startswith("sha256="):
        return None
    raw = field[len("sha256="):]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
    except ValueError:
        return "invalid:" + raw


def rows(data: bytes) -> list[Row]:
    out = []
    for fields in csv.reader(io.StringIO(data.decode("utf-8"), newline="")):
        if not fields:
            continue
        path = fields[0]
        digest = _hex(fields[1]) if len(fields) > 1 else None
        size = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else None
        out.append(Row(path, digest, size))
    return out


def rewritten(data: bytes, changed: dict[str, tuple[str, int]], removed: set[str]) -> bytes:
    """``data`` with the rows of ``changed`` (path -> (sha256 hex, size)) given their new hash
    and size, the rows of ``removed`` dropped, and rows for changed paths RECORD did not list
    added at the end; every other line is kept byte for byte."""
    text = data.decode("utf-8")
    ending = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    out, seen = [], set()
    for line in lines:
        fields = next(csv.reader([line]), [])
        path = fields[0] if fields else None
        if path in removed:
            continue
        if path is not None and path in changed:
            sha, size = changed[path]
            out.append(_csv_line([path, record_hash(sha), str(size)], ending))
            seen.add(path)
            continue
        out.append(line)
    for path in sorted(set(changed) - seen):
        sha, size = changed[path]
        out.append(_csv_line([path, record_hash(sha), str(size)], ending))
    return "".join(out).encode("utf-8")


def _csv_line(fields: list[str], ending: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=ending).writerow(fields)
    return buf.getvalue()


def problems(record: list[Row], installed: dict[str, str], sp: str, record_path: str,
             package: str) -> list[str]:
    """Every RECORD row with a hash must name an installed file with that hash, and every
    installed file under ``package`` (``vllm/``) must have a row: the distribution says what
    it installed, and the image holds exactly that. RECORD's paths are relative to the
    site-packages directory ``sp`` (``../../../bin/vllm`` is a console script); ``installed``
    maps image paths (relative to the root) to the sha256 hex of the files the image holds."""
    bad = []
    listed = set()
    for row in record:
        path = posixpath.normpath(posixpath.join(sp, row.path))
        listed.add(path)
        if row.path == record_path or row.sha256 is None:
            continue
        got = installed.get(path)
        if got is None:
            bad.append(f"{row.path} is in RECORD but not installed")
        elif got != row.sha256:
            bad.append(f"{row.path} differs from its RECORD hash")
    prefix = f"{sp}/{package}"
    bad += [f"{p[len(sp) + 1:]} is installed but not in RECORD" for p in sorted(installed)
            if p.startswith(prefix) and p not in listed and "/__pycache__/" not in f"/{p}"]
    return bad
