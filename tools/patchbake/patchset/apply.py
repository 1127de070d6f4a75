"""Strict application of a parsed patch to file contents. Standard library only.

Zero fuzz, zero offset: every hunk must match, with all its context, at exactly the line
its header records, and the result must hash to the blob id on the patch's ``index`` line.
A file that already holds the patch's post-image is reported, never skipped: on the
pristine upstream that means the patch was exported backwards ("reversed"); on any other
tree it means it was applied before ("already applied").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..digest import differing
from ..errors import ApplyError
from .diffparse import NULL_ID, FilePatch, Hunk, Patch, split_lines
from .gitbinary import apply_delta, blob_id

Base = tuple[bytes, str] | None  # (content, git mode) or None when the file is absent
Reader = Callable[[str], Base]
# How a post-image is made from its pre-image: in order, byte ranges (start, end) of the
# pre-image to copy and bytes to insert (the hunks' new sides).
Edits = tuple[tuple[int, int] | bytes, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the patch does to one path: pre and post content (None = absent) and modes."""

    path: str
    status: str
    pre: bytes | None
    pre_mode: str | None
    post: bytes | None
    post_mode: str | None
    # git blob ids of pre and post where the apply computed them (the re-export reuses
    # them instead of hashing the contents again); None where it did not
    pre_id: str | None = None
    post_id: str | None = None
    # the post-image as edits of the pre-image, where the applier found them (the
    # re-export writes the post-image as a git delta of the pre-image from them)
    edits: Edits | None = None


class _AlreadyThere(Exception):
    """The file already holds the patch's post-image."""


def _err(reason: str, msg: str, hint: str | None = None) -> ApplyError:
    return ApplyError(msg, reason=reason, hint=hint)


def _show(line: bytes) -> str:
    return repr(line.rstrip(b"\n").decode("utf-8", "replace")[:72])


def _find_offset(lines: list[bytes], want: tuple[bytes, ...], pos: int) -> int | None:
    if not want:
        return None
    best: int | None = None
    for i in range(len(lines) - len(want) + 1):
        if lines[i] == want[0] and tuple(lines[i:i + len(want)]) == want \
                and (best is None or abs(i - pos) < abs(best - pos)):
            best = i
    return None if best is None else best - pos


def _hunk_mismatch(path: str, k: int, h: Hunk, lines: list[bytes], pos: int,
                   new_pos: int) -> ApplyError:
    where = f"hunk {k} of {path} (patch line {h.line_no})"
    if h.new and tuple(lines[new_pos:new_pos + len(h.new)]) == h.new and h.old != h.new:
        return _err("already-applied", f"{where} is already applied: its '+' side is "
                    f"present at line {new_pos + 1}",
                    "apply to the pristine upstream tree, not to a patched one")
    for j, want in enumerate(h.old):
        got = lines[pos + j] if pos + j < len(lines) else b""
        if got != want:
            found = "end of file" if pos + j >= len(lines) else _show(got)
            msg = f"{where} does not match at line {pos + j + 1}: expected {_show(want)}, found {found}"
            off = _find_offset(lines, h.old, pos)
            if off is not None:
                msg += f"; it would match at offset {off:+d}, and strict apply takes no offset"
            return _err("context", msg, "regenerate the patch against the pinned upstream "
                        "(`patchbake patch workspace`, then `patchbake patch export`)")
    return _err("context", f"{where} does not match at line {pos + 1}")


def _edits(hunks: Sequence[Hunk], data: bytes) -> Edits | None:
    """What :func:`apply_hunks` makes of ``data``, as edits found by byte searches, or
    None to let it decide.

    Each hunk's pre-image (its lines joined) is searched for with ``bytes.find`` from the
    end of the previous hunk, and newlines are counted (``bytes.count``) to know which
    line an occurrence starts: the file is neither split into lines nor joined again.
    An occurrence that starts line ``pos`` holds exactly the hunk's old lines there
    (each but the last ends in its only newline; a last one without a newline must end
    the file), which is :func:`apply_hunks`' test; the first occurrence at or past that
    line is the one at it if there is one. Whatever is not plainly a match (no
    occurrence at the line, a count that disagrees with the lines, overlapping or
    misplaced hunks) returns None, so every refusal and its message stay
    :func:`apply_hunks`' own.
    """
    edits: list[tuple[int, int] | bytes] = []
    off = line = emitted = 0  # byte offset and line number of the cursor; lines out
    for h in hunks:
        pos = h.old_start - 1 if h.old_count else h.old_start
        want_new = h.new_start - 1 if h.new_count else h.new_start
        if len(h.old) != h.old_count:
            return None
        old = b"".join(h.old)
        open_end = bool(h.old) and not h.old[-1].endswith(b"\n")
        if old.count(b"\n") != len(h.old) - open_end or (open_end and not h.old[-1]):
            return None  # not a block of whole lines (a line without its newline, not last)
        at = off if not old and pos == line else _find_at_line(data, old, off, line, pos)
        if at is None or (open_end and at + len(old) != len(data)):
            return None
        edits.append((off, at))
        emitted += pos - line
        if emitted != want_new:
            return None
        edits.append(b"".join(h.new))
        emitted += len(h.new)
        off, line = at + len(old), pos + h.old_count
    edits.append((off, len(data)))
    return tuple(edits)


def edited(data: bytes, edits: Edits) -> bytes:
    """The bytes that ``edits`` make of ``data``."""
    return b"".join(data[e[0]:e[1]] if isinstance(e, tuple) else e for e in edits)


def _find_at_line(data: bytes, block: bytes, off: int, line: int, pos: int) -> int | None:
    """The offset where ``block`` starts line ``pos`` of ``data``, searching from ``off``
    (the start of line ``line``); None when it does not start there."""
    if not block:
        return None
    at = data.find(block, off)
    seen = line
    while at >= 0:
        seen += data.count(b"\n", off, at)  # the line ``at`` is on
        if seen >= pos:
            break
        off, at = at, data.find(block, at + 1)
    if at < 0 or seen != pos or (at and data[at - 1] != 10):
        return None  # the first occurrence on or past line pos does not start it
    return at


# False leaves every apply to the line-list walk (the equivalence tests compare both)
_FAST = True


def apply_hunks(path: str, hunks: Sequence[Hunk], data: bytes) -> bytes:
    if _FAST and (edits := _edits(hunks, data)) is not None:
        return edited(data, edits)
    return _apply_lines(path, hunks, data)


def _apply_lines(path: str, hunks: Sequence[Hunk], data: bytes) -> bytes:
    """The reference: the file as a list of lines, each hunk compared line by line."""
    lines = split_lines(data)
    out: list[bytes] = []
    cursor = 0
    for k, h in enumerate(hunks, 1):
        pos = h.old_start - 1 if h.old_count else h.old_start
        want_new = h.new_start - 1 if h.new_count else h.new_start
        if pos < cursor:
            raise _err("context", f"hunk {k} of {path} (patch line {h.line_no}) overlaps "
                       "or precedes the hunk before it")
        if tuple(lines[pos:pos + h.old_count]) != h.old:
            raise _hunk_mismatch(path, k, h, lines, pos, want_new)
        out.extend(lines[cursor:pos])
        if len(out) != want_new:
            raise _err("context", f"hunk {k} of {path} (patch line {h.line_no}) records new "
                       f"line {h.new_start}, but it lands at line {len(out) + 1} (a count or "
                       "start line was changed)")
        out.extend(h.new)
        cursor = pos + h.old_count
    out.extend(lines[cursor:])
    return b"".join(out)


def _binary(fp: FilePatch, data: bytes) -> bytes:
    assert fp.binary is not None
    fwd, rev = fp.binary
    try:
        post = fwd.data if fwd.method == "literal" else apply_delta(data, fwd.data)
        back = rev.data if rev.method == "literal" else apply_delta(post, rev.data)
    except ValueError as exc:
        raise _err("context", f"binary patch of {fp.path} does not apply: {exc}") from None
    if back != data:
        raise _err("context", f"binary patch of {fp.path} does not reverse to the file in "
                   "the tree")
    return post


def apply_file(fp: FilePatch, base: Base) -> Outcome:  # noqa: C901 - git apply's per-file cases
    if {fp.old_mode, fp.new_mode} & {"120000", "160000"}:
        raise _err("path", f"{fp.path}: symbolic links and submodules are not patched "
                   "(strict apply writes regular files only)")
    data, mode = base if base is not None else (None, None)
    post_ids = {fp.new_id} if fp.new_id and fp.new_id != NULL_ID else set()
    if fp.status == "A":
        if data is not None:
            if post_ids and blob_id(data) in post_ids:
                raise _AlreadyThere
            raise _err("context", f"{fp.path} is a new file in the patch but already "
                       "exists in the tree")
        post = apply_hunks(fp.path, fp.hunks, b"") if not fp.binary else _binary(fp, b"")
        return _checked(fp, Outcome(fp.path, "A", None, None, post, fp.new_mode))
    if data is None:
        if fp.status == "D":
            raise _AlreadyThere
        raise _err("context", f"{fp.path} is not in the tree (the patch modifies it)")
    have = blob_id(data)
    if fp.old_id and have != fp.old_id:
        if post_ids and have in post_ids and fp.status == "M":
            raise _AlreadyThere
        # Say which hunk fails when one does; otherwise the mismatch is outside the hunks.
        if fp.hunks:
            apply_hunks(fp.path, fp.hunks, data)
        raise _err("context", f"{fp.path} is not the file the patch was made against "
                   f"(blob {have[:12]}, patch expects {fp.old_id[:12]})",
                   "apply to the pinned upstream tree")
    if fp.old_mode and mode != fp.old_mode:
        if mode == fp.new_mode and not fp.hunks and not fp.binary:
            raise _AlreadyThere
        raise _err("context", f"{fp.path} has mode {mode}, the patch expects {fp.old_mode}")
    if fp.status == "D":
        return Outcome(fp.path, "D", data, mode, None, None, have)
    edits = _edits(fp.hunks, data) if _FAST and not fp.binary else None
    if edits is not None:
        post = edited(data, edits)
    elif fp.binary:
        post = _binary(fp, data)
    else:
        post = _apply_lines(fp.path, fp.hunks, data)
    return _checked(fp, Outcome(fp.path, "M", data, mode, post, fp.new_mode or mode, have,
                                edits=edits))


def _checked(fp: FilePatch, out: Outcome) -> Outcome:
    if fp.new_id and fp.new_id != NULL_ID and out.post is not None:
        got = blob_id(out.post)
        if got != fp.new_id:
            shown_got, shown_want = differing(got, fp.new_id)
            raise _err("hash", f"applying the hunks of {fp.path} gives blob "
                       f"{shown_got}, but the patch's index line records "
                       f"{shown_want} (a hunk or line was dropped or edited)",
                       "re-run `patchbake patch export`")
        return Outcome(out.path, out.status, out.pre, out.pre_mode, out.post, out.post_mode,
                       out.pre_id, got, out.edits)
    return out


def apply_patch(patch: Patch, read: Reader, *, pristine: bool) -> dict[str, Outcome]:
    """Apply every file section to what ``read`` returns; raise on the first refusal.

    ``pristine`` says the tree is the pinned upstream: a post-image found there means the
    patch is reversed rather than applied before.
    """
    outcomes: dict[str, Outcome] = {}
    there: list[str] = []
    for fp in patch.files:
        try:
            outcomes[fp.path] = apply_file(fp, read(fp.path))
        except _AlreadyThere:
            there.append(fp.path)
    if there:
        names = ", ".join(there[:3]) + (f" and {len(there) - 3} more" if len(there) > 3 else "")
        whole = len(there) == len(patch.files)
        if pristine:
            raise _err("reversed", f"the patch is reversed: the pinned upstream already holds "
                       f"its post-image for {names}, so it undoes rather than adds the change",
                       "export from the patched tree against the pristine one, not backwards")
        scope = "already applied" if whole else f"partly applied ({names})"
        raise _err("already-applied", f"the patch is {scope} to this tree" +
                   ("" if not whole else f" ({names})"),
                   "apply to a fresh copy of the pristine upstream")
    return outcomes
