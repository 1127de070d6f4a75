"""Exact hunk matching for ``port``: where a hunk's pre- or post-image sits in a new file.

No fuzz and no whitespace folding: a hunk's pre-image (its context and '-' lines) or its
post-image (context and '+' lines) is found only as the same bytes, line for line. What
is found decides the first verdict; anything else goes to the three-way merge (see
:mod:`patchbake.patchset.port`), which is told why:

- ``clean``    the pre-image sits at the hunk's recorded line;
- ``moved``    the pre-image sits at exactly one other line (reported with the offset);
- ``absorbed`` the pre-image is nowhere, the post-image at exactly one line: upstream
  already made the change;
- otherwise (nothing found, or found at several places, which is ambiguous and must not
  be resolved by picking one) the hunk is left to the merge.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..patchset.diffparse import Hunk

CLEAN, MOVED, ABSORBED, MERGED, CONFLICT, GONE = (
    "clean", "moved", "absorbed", "merged", "conflict", "target-gone")
VERDICTS = (CLEAN, MOVED, ABSORBED, MERGED, CONFLICT, GONE)


@dataclass(frozen=True)
class Match:
    """The exact-match verdict of one hunk, or ``verdict=None``: leave it to the merge."""

    verdict: str | None
    pos: int | None  # 0-based line in the new file (pre-image, or post-image if absorbed)
    note: str


def find_all(lines: list[bytes], block: tuple[bytes, ...]) -> list[int]:
    """Every 0-based index where ``block`` occurs in ``lines`` as consecutive lines."""
    if not block:
        return []
    n, first, hits = len(block), block[0], []
    for i in range(len(lines) - n + 1):
        if lines[i] == first and tuple(lines[i:i + n]) == block:
            hits.append(i)
    return hits


def recorded_pos(h: Hunk) -> int:
    """0-based line where the hunk's pre-image starts in the file it was made against."""
    return h.old_start - 1 if h.old_count else h.old_start


def _lines(hits: list[int]) -> str:
    shown = ", ".join(str(i + 1) for i in hits[:4])
    return shown + (f" and {len(hits) - 4} more" if len(hits) > 4 else "")


def _anchored(hits: list[int], size: int, lines: int, start: bool, end: bool) -> list[int]:
    """Keep the hits that respect the hunk's anchors, as ``git apply`` does: a hunk that
    began at the first line must match there, one without trailing context (it reached
    the end of the old file) must end at the end of the new one."""
    return [p for p in hits if (not start or p == 0) and (not end or p + size == lines)]


def match_hunk(h: Hunk, lines: list[bytes], old_len: int) -> Match:
    """``old_len``: lines in the file the hunk was made against (for the end anchor)."""
    rec = recorded_pos(h)
    if not h.old:  # the file was empty: the pre-image is "an empty file"
        return Match(CLEAN, 0, "") if not lines else Match(None, None, "the file is no "
                                                                 "longer empty")
    start, end = rec == 0, rec + len(h.old) == old_len
    pre = _anchored(find_all(lines, h.old), len(h.old), len(lines), start, end)
    if rec in pre:
        others = [p for p in pre if p != rec]
        note = f"pre-image also at line {_lines(others)}" if others else ""
        return Match(CLEAN, rec, note)
    post = _anchored(find_all(lines, h.new), len(h.new), len(lines), start, end) \
        if h.new != h.old else []
    if not pre and len(post) == 1:
        return Match(ABSORBED, post[0], f"upstream holds the post-image at line {post[0] + 1}")
    if len(pre) == 1 and not post:
        return Match(MOVED, pre[0], f"pre-image at line {pre[0] + 1}, offset "
                                    f"{pre[0] - rec:+d} from the recorded line {rec + 1}")
    if len(pre) > 1:
        return Match(None, None, f"ambiguous: the pre-image is at lines {_lines(pre)}, not at "
                                 f"the recorded line {rec + 1}; left to the three-way merge")
    if len(post) > 1:
        return Match(None, None, f"ambiguous: the post-image is at lines {_lines(post)}; "
                                 "left to the three-way merge")
    if pre and post:
        return Match(None, None, f"both the pre-image (line {pre[0] + 1}) and the post-image "
                                 f"(line {post[0] + 1}) are present; left to the three-way "
                                 "merge")
    where = " at the start of" if start else " at the end of" if end else " in"
    return Match(None, None, f"the pre-image is not{where} the new file (its context "
                             "changed)")


def apply_at(lines: list[bytes], placed: list[tuple[int, Hunk]]) -> list[bytes]:
    """Replace each hunk's pre-image at its placed position by its post-image.

    ``placed`` is sorted and non-overlapping (the caller checks)."""
    out: list[bytes] = []
    cursor = 0
    for pos, h in placed:
        out.extend(lines[cursor:pos])
        out.extend(h.new)
        cursor = pos + len(h.old)
    out.extend(lines[cursor:])
    return out


def non_overlapping(placed: list[tuple[int, int, Hunk]]) -> tuple[list[tuple[int, int, Hunk]],
                                                                  list[tuple[int, int, Hunk]]]:
    """Split (pos, hunk number, hunk) into those that can be applied together, in order,
    and those whose pre-image overlaps an earlier one's (left to the merge)."""
    keep: list[tuple[int, int, Hunk]] = []
    clash: list[tuple[int, int, Hunk]] = []
    end = 0
    for pos, k, h in sorted(placed, key=lambda t: (t[0], t[1])):
        if pos < end:
            clash.append((pos, k, h))
            continue
        keep.append((pos, k, h))
        end = pos + len(h.old)
    return keep, clash


def first_difference(a: list[bytes], b: list[bytes]) -> int | None:
    """0-based index of the first line where ``a`` and ``b`` differ (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # a prefix: lengths differ
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
