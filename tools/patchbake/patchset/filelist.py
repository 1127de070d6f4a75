"""FILES.txt: the reviewer-facing list of every path the canonical patch touches.

Format 2 (written by export)::

    # FILES.txt: every path the canonical patch touches. Generated; do not edit.
    # format: patchbake-files 2
    # generator: patchbake 0.1.0
    # upstream: vllm==0.25.1 sha256:<hex>
    # patch: <name>-v<version>.patch
    # patch-sha256: <hex>
    # totals: <files> files +<added> -<removed>
    # columns: path  status  +added  -removed  post-image-sha256 (- when deleted)
    vllm/a.py  M  +12  -3  <sha256 of the file after the patch>

Lines are sorted bytewise by path, columns are separated by two spaces, paths are
C-quoted the way git quotes them when they hold unusual bytes. The older convention, one
bare path per line (``#`` comments allowed), is still read; only path sets are compared
then. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..digest import is_hex
from ..errors import GuardError, shown
from .paths import cquote, cunquote, to_bytes, to_str

FORMAT_LINE = "patchbake-files 2"
SEP = "  "
_ROW = re.compile(r"^[AMD]$")


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    status: str | None = None
    added: int | None = None
    removed: int | None = None
    sha256: str | None = None  # post-image; None when deleted or in the legacy form


@dataclass(frozen=True, slots=True)
class FileList:
    entries: tuple[Entry, ...]
    header: dict[str, str]
    legacy: bool

    def by_path(self) -> dict[str, Entry]:
        return {e.path: e for e in self.entries}


def sort_key(path: str) -> bytes:
    return to_bytes(path)


def quote_path(path: str) -> str:
    raw = to_bytes(path)
    q = cquote(raw)
    # A path with leading/trailing blanks would not survive the column split: quote it.
    if q == raw and (raw != raw.strip() or "  " in path):
        q = b'"' + raw + b'"'
    return to_str(q)


def render(entries: Iterable[Entry], *, generator: str, upstream: str, patch_name: str,
           patch_sha256: str) -> bytes:
    rows = sorted(entries, key=lambda e: sort_key(e.path))
    added = sum(e.added or 0 for e in rows)
    removed = sum(e.removed or 0 for e in rows)
    lines = [
        "# FILES.txt: every path the canonical patch touches. Generated; do not edit.",
        f"# format: {FORMAT_LINE}",
        f"# generator: {generator}",
        f"# upstream: {upstream}",
        f"# patch: {patch_name}",
        f"# patch-sha256: {patch_sha256}",
        f"# totals: {len(rows)} files +{added} -{removed}",
        "# columns: path  status  +added  -removed  post-image-sha256 (- when deleted)",
    ]
    for e in rows:
        lines.append(SEP.join([quote_path(e.path), e.status or "M", f"+{e.added or 0}",
                               f"-{e.removed or 0}", e.sha256 or "-"]))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def _path_of(text: str, where: str) -> str:
    if text.startswith('"'):
        try:
            raw, rest = cunquote(to_bytes(text))
        except ValueError as exc:
            raise GuardError(f"{where}: bad quoted path: {exc}") from None
        if rest:
            raise GuardError(f"{where}: text after a quoted path")
        return to_str(raw)
    return text


def parse_filelist(  # noqa: C901 - one pass over FILES.txt: header, rows, order, duplicates
        data: bytes, name: str = "FILES.txt") -> FileList:
    """Read format 2 or the legacy path-per-line form; refuse unsorted or duplicate paths."""
    text = data.decode("utf-8", "surrogateescape")
    if "\r" in text:
        raise GuardError(f"{name}: lines end in CRLF (converted by an editor or a transfer)",
                         hint="re-run `patchbake patch export`")
    header: dict[str, str] = {}
    rows: list[Entry] = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{name}:{n}"
        if line.startswith("#"):
            key, sep, value = line[1:].strip().partition(": ")
            if sep:
                header[key] = value
            continue
        parts = line.rsplit(SEP, 4)
        if header.get("format") == FORMAT_LINE:
            if len(parts) != 5 or not _ROW.match(parts[1]) or not re.match(r"^\+\d+$", parts[2]) \
                    or not re.match(r"^-\d+$", parts[3]) \
                    or not (is_hex(parts[4]) or (parts[4] == "-" and parts[1] == "D")):
                raise GuardError(f"{where}: expected 'path  status  +added  -removed  sha256', "
                                 f"got {shown(line[:80])}", hint="re-run `patchbake patch export`")
            rows.append(Entry(_path_of(parts[0], where), parts[1], int(parts[2][1:]),
                              int(parts[3][1:]), None if parts[4] == "-" else parts[4]))
        else:
            rows.append(Entry(_path_of(line.strip(), where)))
    if header.get("format", FORMAT_LINE) != FORMAT_LINE:
        raise GuardError(f"{name}: unknown format {shown(header['format'])}",
                         hint="upgrade patchbake")
    legacy = "format" not in header
    keys = [sort_key(e.path) for e in rows]
    if len(set(keys)) != len(keys):
        dup = next(e.path for e, k in zip(rows, keys, strict=True) if keys.count(k) > 1)
        raise GuardError(f"{name}: path {dup} is listed twice")
    if not legacy and keys != sorted(keys):
        raise GuardError(f"{name}: paths are not sorted bytewise (hand-edited?)",
                         hint="re-run `patchbake patch export`")
    return FileList(tuple(rows), header, legacy)
