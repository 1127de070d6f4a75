"""Parse a canonical git patch into file sections and hunks. Standard library only.

The canonical patch is the output of ``git diff-tree -p`` with the flags pinned in
:mod:`patchbake.patchset.gitcmd`; this parser accepts exactly that shape and refuses the
rest with a line number, because anything else was edited by hand or mangled in transit:
no preamble, no renames or copies (export uses ``--no-renames``), no binary change
without data, no empty line inside a hunk, hunk bodies that match their header counts.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter

from ..errors import PatchError
from .gitbinary import b85_line
from .paths import cunquote, to_bytes, validate_path

HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$", re.DOTALL)
INDEX_RE = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]{6}))?$")
MODE_RE = re.compile(rb"^(100644|100755|120000|160000)$")
NULL_ID = "0" * 40


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` hunk. ``old``/``new`` are the pre/post lines with their line endings."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    line_no: int
    old: tuple[bytes, ...]
    new: tuple[bytes, ...]
    added_lines: tuple[bytes, ...]
    added: int
    removed: int


@dataclass(frozen=True, slots=True)
class BinaryPart:
    """One direction of a ``GIT binary patch``: ``literal`` or ``delta`` with inflated data."""

    method: str
    size: int
    data: bytes


@dataclass(frozen=True, slots=True)
class FilePatch:
    """One ``diff --git`` section. ``path`` is the new path, or the old one for deletions."""

    path: str
    status: str  # A, M or D
    old_mode: str | None
    new_mode: str | None
    old_id: str | None
    new_id: str | None
    line_no: int
    raw: bytes
    hunks: tuple[Hunk, ...] = ()
    binary: tuple[BinaryPart, BinaryPart] | None = None

    @property
    def added(self) -> int:
        return sum(h.added for h in self.hunks)

    @property
    def removed(self) -> int:
        return sum(h.removed for h in self.hunks)


@dataclass(frozen=True, slots=True)
class Patch:
    files: tuple[FilePatch, ...]
    data: bytes

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    def by_path(self) -> dict[str, FilePatch]:
        return {f.path: f for f in self.files}


def split_lines(data: bytes) -> list[bytes]:
    """Split on ``\\n`` only (git's notion of a line); a ``\\r`` stays part of its line."""
    if b"\r" not in data:
        # bytes.splitlines breaks at \n, \r and \r\n only: without a \r it is this
        # split, done in C (the guard and the applier split every touched file).
        return data.splitlines(keepends=True)
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class _Reader:
    def __init__(self, data: bytes, name: str) -> None:
        self.lines = split_lines(data)
        self.i = 0
        self.name = name
        # The first byte of every line, as one bytes object: a hunk's extent, its line
        # counts and its sides are then found by C-level searches over it (see
        # :func:`_hunk_body`) instead of a Python step per patch line.
        self.tags = bytes(map(_FIRST, self.lines))

    def peek(self) -> bytes | None:
        return self.lines[self.i] if self.i < len(self.lines) else None

    def take(self) -> bytes:
        line = self.lines[self.i]
        self.i += 1
        return line

    def fail(self, msg: str, line_no: int | None = None) -> PatchError:
        n = self.i if line_no is None else line_no
        return PatchError(f"{self.name}:{n}: {msg}",
                          hint="the patch is generated: re-run `patchbake patch export` "
                               "instead of editing it")


def _strip_eol(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\n") else line


def _parse_git_line(r: _Reader, line: bytes) -> str:
    body = _strip_eol(line)[len(b"diff --git "):]
    if body.startswith(b'"'):
        try:
            a, rest = cunquote(body)
            b, tail = cunquote(rest.lstrip(b" "))
        except ValueError as exc:
            raise r.fail(f"bad quoted path in 'diff --git' line: {exc}") from None
        if tail:
            raise r.fail("trailing text after the paths of a 'diff --git' line")
    else:
        # Unquoted and not a rename: "a/P b/P", so the split point is the middle.
        half = (len(body) - 1) // 2
        a, b = body[:half], body[half + 1:]
        if body[half:half + 1] != b" ":
            raise r.fail("cannot split the paths of a 'diff --git' line")
    if not (a.startswith(b"a/") and b.startswith(b"b/")):
        raise r.fail("paths must carry the a/ and b/ prefixes (export pins them)")
    if a[2:] != b[2:]:
        raise r.fail("a rename or copy is not canonical: export uses --no-renames")
    return validate_path(a[2:], where=f"{r.name}:{r.i}")


def _header_path(r: _Reader, line: bytes, marker: bytes, prefix: bytes) -> bytes | None:
    raw = _strip_eol(line)[len(marker):]
    if raw.endswith(b"\t"):  # git adds a tab after a path holding a space
        raw = raw[:-1]
    if raw == b"/dev/null":
        return None
    if raw.startswith(b'"'):
        try:
            raw, tail = cunquote(raw)
        except ValueError as exc:
            raise r.fail(f"bad quoted path: {exc}") from None
        if tail:
            raise r.fail("trailing text after a quoted path")
    if not raw.startswith(prefix):
        raise r.fail(f"path must start with {prefix.decode()}")
    return raw[len(prefix):]


_FIRST = itemgetter(0)
_DROP_TAG = itemgetter(slice(1, None))
_NOT_BODY = re.compile(rb"[^ +-]")
# bytes.translate tables mapping a line's tag to 1 where the line belongs to a side
_OLD_SIDE = bytes(int(c in b" -") for c in range(256))
_NEW_SIDE = bytes(int(c in b" +") for c in range(256))
_ADDED = bytes(int(c == 43) for c in range(256))


def _hunk_body(r: _Reader, old_count: int,
               new_count: int) -> tuple[tuple[bytes, ...], tuple[bytes, ...],
                                        tuple[bytes, ...]] | None:
    """The sides of the hunk body at ``r.i`` when it is plainly well formed, else None.

    Plainly well formed: the run of ' ', '-' and '+' lines starting there holds exactly
    the header's counts and is not followed by a '\\' marker line. :func:`_hunk_lines`
    would then consume exactly that run, without an error (every line fits in what is
    still needed, and nothing is needed after it), and build the same sides, so this
    only does the same work with C-level operations. Anything else (markers, a count
    that disagrees, a stray line) is left to :func:`_hunk_lines`, which says what is
    wrong.
    """
    tags = r.tags
    i = r.i
    m = _NOT_BODY.search(tags, i)
    j = m.start() if m else len(tags)
    if j < len(tags) and tags[j] == 92:  # a '\\' marker: its rules are _hunk_lines'
        return None
    added = tags.count(b"+", i, j)
    removed = tags.count(b"-", i, j)
    context = j - i - added - removed
    if context + removed != old_count or context + added != new_count:
        return None
    body = tags[i:j]
    lines = list(map(_DROP_TAG, r.lines[i:j]))
    r.i = j
    return (tuple(compress(lines, body.translate(_OLD_SIDE))),
            tuple(compress(lines, body.translate(_NEW_SIDE))),
            tuple(compress(lines, body.translate(_ADDED))))


def _parse_hunk(r: _Reader, header: bytes) -> Hunk:
    line_no = r.i
    m = HUNK_RE.match(_strip_eol(header))
    if not m:
        raise r.fail("malformed hunk header")
    os_, oc, ns, nc = m.group(1), m.group(2), m.group(3), m.group(4)
    old_start, new_start = int(os_), int(ns)
    old_count = 1 if oc is None else int(oc)
    new_count = 1 if nc is None else int(nc)
    sides = _hunk_body(r, old_count, new_count) if _FAST else None
    old, new, added_lines = sides if sides is not None else \
        _hunk_lines(r, line_no, old_count, new_count)
    added = len(added_lines)
    return Hunk(old_start, old_count, new_start, new_count, line_no, old, new,
                added_lines, added, old_count - (new_count - added))


# False runs every hunk through _hunk_lines (the equivalence tests compare both paths)
_FAST = True


def _hunk_lines(  # noqa: C901 - the hunk body line by line, each branch one line kind
        r: _Reader, line_no: int, old_count: int,
        new_count: int) -> tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[bytes, ...]]:
    """Walk the hunk body line by line: the reference rules, with every refusal."""
    old: list[bytes] = []
    new: list[bytes] = []
    added_lines: list[bytes] = []
    need_old, need_new = old_count, new_count
    last: bytes = b""
    # The body is walked with a local index (the reader's ``i`` is set back before any
    # error and at the end): this loop runs once per patch line and dominates parsing.
    lines = r.lines
    n = len(lines)
    i = r.i
    while need_old > 0 or need_new > 0 or (i < n and lines[i].startswith(b"\\")):
        if i >= n:
            r.i = i
            raise r.fail(f"hunk at line {line_no} ends early: {need_old} old and {need_new} "
                         "new lines missing (the patch is truncated or a count was changed)")
        line = lines[i]
        tag = line[:1]
        if tag == b" ":
            if need_old == 0 or need_new == 0:
                r.i = i
                raise _too_many(r, line_no)
            text = line[1:]
            old.append(text)
            new.append(text)
            need_old -= 1
            need_new -= 1
        elif tag == b"-":
            if need_old == 0:
                r.i = i
                raise _too_many(r, line_no)
            old.append(line[1:])
            need_old -= 1
        elif tag == b"+":
            if need_new == 0:
                r.i = i
                raise _too_many(r, line_no)
            text = line[1:]
            new.append(text)
            added_lines.append(text)
            need_new -= 1
        elif tag == b"\\":
            i += 1
            if not last:
                r.i = i
                raise r.fail("'\\ No newline at end of file' without a preceding line")
            # The marker belongs to the line before it: strip that line's newline.
            for side in ((old,) if last == b"-" else (new,) if last == b"+" else (old, new)):
                if side and side[-1].endswith(b"\n"):
                    side[-1] = side[-1][:-1]
            if last == b"+" and added_lines:
                added_lines[-1] = added_lines[-1].rstrip(b"\n")
            last = b""
            continue
        else:
            r.i = i
            if tag == b"\n":
                raise r.fail(f"empty line inside the hunk at line {line_no} (a context line "
                             "lost its leading space: mangled by an editor or mail?)", r.i + 1)
            raise r.fail(f"hunk at line {line_no} ends early: {need_old} old and {need_new} "
                         "new lines missing (a hunk line was dropped or a count was changed)",
                         r.i + 1)
        i += 1
        last = tag
    r.i = i
    return tuple(old), tuple(new), tuple(added_lines)


def _too_many(r: _Reader, line_no: int) -> PatchError:
    return r.fail(f"hunk at line {line_no} has more lines than its header counts "
                  "(a count was changed)", r.i + 1)


def _parse_binary_part(r: _Reader) -> BinaryPart:
    line = r.peek()
    m = re.match(rb"^(literal|delta) (\d+)\n$", line or b"")
    if not m:
        raise r.fail("expected 'literal N' or 'delta N' in a binary patch", r.i + 1)
    r.take()
    chunks: list[bytes] = []
    while True:
        line = r.peek()
        if line is None:
            raise r.fail("binary patch ends early (truncated?)")
        r.take()
        if line == b"\n":
            break
        try:
            chunks.append(b85_line(_strip_eol(line)))
        except ValueError as exc:
            raise r.fail(f"bad base85 line in binary patch: {exc}") from None
    try:
        data = zlib.decompress(b"".join(chunks))
    except zlib.error as exc:
        raise r.fail(f"binary patch data does not inflate: {exc}") from None
    method, size = m.group(1).decode(), int(m.group(2))
    if method == "literal" and len(data) != size:
        raise r.fail(f"binary literal holds {len(data)} bytes, header says {size}")
    return BinaryPart(method, size, data)


def _parse_header(r: _Reader, path: str) -> tuple[str, str | None, str | None, str | None,
                                                 str | None]:
    """A section's extended header lines: its status, old and new modes, old and new ids."""
    status = "M"
    old_mode: str | None = None
    new_mode: str | None = None
    old_id: str | None = None
    new_id: str | None = None
    while (line := r.peek()) is not None and not line.startswith((b"diff --git ", b"@@",
                                                                 b"--- ", b"GIT binary")):
        text = _strip_eol(r.take())
        key, _, value = text.partition(b" mode ")
        if key in (b"old", b"new", b"deleted file", b"new file") and MODE_RE.match(value):
            mode = value.decode()
            if key in (b"old", b"deleted file"):
                old_mode = mode
            if key in (b"new", b"new file"):
                new_mode = mode
            status = {b"deleted file": "D", b"new file": "A"}.get(key, status)
        elif (m := INDEX_RE.match(text)) is not None:
            old_id, new_id = m.group(1).decode(), m.group(2).decode()
            if len(old_id) != 40 or len(new_id) != 40:
                raise r.fail("abbreviated index line: export uses --full-index")
            if m.group(3):
                old_mode = new_mode = m.group(3).decode()
        elif text.startswith((b"rename ", b"copy ", b"similarity ", b"dissimilarity ")):
            raise r.fail("a rename or copy is not canonical: export uses --no-renames")
        elif text.startswith(b"Binary files "):
            raise r.fail(f"binary change to {path} without data: export uses --binary")
        else:
            raise r.fail(f"unexpected header line {text[:60]!r} in the section of {path}")
    return status, old_mode, new_mode, old_id, new_id


def _parse_section(r: _Reader) -> FilePatch:  # noqa: C901 - one git file section, part by part
    start = r.i
    path = _parse_git_line(r, r.take())
    status, old_mode, new_mode, old_id, new_id = _parse_header(r, path)
    hunks: list[Hunk] = []
    binary = None
    line = r.peek()
    if line is not None and line.startswith(b"--- "):
        old = _header_path(r, r.take(), b"--- ", b"a/")
        nxt = r.peek()
        if nxt is None or not nxt.startswith(b"+++ "):
            raise r.fail("'---' line without a following '+++' line", r.i + 1)
        new = _header_path(r, r.take(), b"+++ ", b"b/")
        named = [p for p in (old, new) if p is not None]
        same = to_bytes(path)  # the 'diff --git' path, validated: no need to again
        if not named or any(p != same and validate_path(p, where=f"{r.name}:{r.i}") != path
                            for p in named):
            raise r.fail(f"'---'/'+++' paths disagree with the 'diff --git' line of {path}")
        if (old is None) != (status == "A") or (new is None) != (status == "D"):
            raise r.fail(f"/dev/null side disagrees with the file status of {path}")
        if r.peek() is None or not r.peek().startswith(b"@@"):  # type: ignore[union-attr]
            raise r.fail(f"no hunk after the header of {path}", r.i + 1)
        while (line := r.peek()) is not None and line.startswith(b"@@"):
            hunks.append(_parse_hunk(r, r.take()))
        if line is not None and line[:1] in (b" ", b"+", b"-", b"\\"):
            raise r.fail(f"the last hunk of {path} has more lines than its header counts "
                         "(a count was changed or lines were added by hand)", r.i + 1)
    elif line is not None and line.startswith(b"GIT binary patch"):
        r.take()
        binary = (_parse_binary_part(r), _parse_binary_part(r))
    if line is not None and line.startswith(b"@@") and not hunks:
        raise r.fail(f"hunk without '---'/'+++' header lines in the section of {path}")
    if old_id is None and (hunks or binary):
        raise r.fail(f"content change to {path} without an index line")
    if status == "M" and old_mode is None:
        raise r.fail(f"section of {path} names no file mode")
    return FilePatch(path, status, old_mode, new_mode, old_id, new_id, start + 1,
                     b"".join(r.lines[start:r.i]), tuple(hunks), binary)


def parse_patch(data: bytes, name: str = "patch") -> Patch:
    """Parse ``data``; raise :class:`PatchError` with ``name:line`` on anything not canonical.

    An empty patch is valid (no files). Line endings must be LF: a patch whose lines end in
    CRLF was converted by an editor or a transfer and is refused as a whole.
    """
    if not data:
        return Patch((), data)
    r = _Reader(data, name)
    first = r.lines[0]
    if first.endswith(b"\r\n") and first.startswith(b"diff --git "):
        raise PatchError(f"{name}:1: lines end in CRLF: the patch was converted by an editor "
                         "or a transfer (git writes LF)",
                         hint="restore it with `git checkout` or re-run `patchbake patch export`")
    if not data.endswith(b"\n"):
        raise PatchError(f"{name}:{len(r.lines)}: the patch lacks a final newline "
                         "(truncated?)", hint="re-run `patchbake patch export`")
    files: list[FilePatch] = []
    while r.peek() is not None:
        if not r.peek().startswith(b"diff --git "):  # type: ignore[union-attr]
            raise r.fail("expected a 'diff --git' line (text outside a file section)",
                         r.i + 1)
        files.append(_parse_section(r))
    return Patch(tuple(files), data)
