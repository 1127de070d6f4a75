"""Port one file section of a patch onto the new upstream file: a verdict per hunk.

Hunks that match exactly (see :mod:`hunkmatch`) are applied or dropped as they are; the
rest go, one at a time, through ``git merge-file --diff3`` with the OLD pristine file as
the base, "ours" the old pristine file with the already-placed hunks and this one, and
"theirs" the new file as built so far. Identical changes on both sides merge without a
conflict, so a hunk upstream took over with other context comes out as ``absorbed``
(the merge changed nothing), never as a conflict and never twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..patchset.apply import Base, apply_file
from ..patchset.diffparse import FilePatch, Hunk, split_lines
from .hunkmatch import (ABSORBED, CLEAN, CONFLICT, GONE, MERGED, MOVED, apply_at,
                        first_difference, match_hunk, non_overlapping, recorded_pos)
from .merge3 import merge_file as _merge
from .merge3 import resolve_absorbed

KEEP = object()  # the file in the new tree is left as upstream has it


@dataclass(frozen=True)
class HunkVerdict:
    path: str
    hunk: int  # 1-based within the file; 0 for a whole-file change (new, deleted, mode, binary)
    recorded_line: int  # where the hunk starts in the old pristine file
    verdict: str
    line: int | None  # 1-based line in the new file where it applies / was found
    offset: int | None
    note: str
    added: int = 0
    removed: int = 0
    candidates: tuple[tuple[str, float], ...] = ()

    def as_json(self) -> dict[str, object]:
        return {"file": self.path, "hunk": self.hunk, "recorded_line": self.recorded_line,
                "verdict": self.verdict, "line": self.line, "offset": self.offset,
                "note": self.note, "added": self.added, "removed": self.removed,
                "candidates": [{"path": p, "similarity": s} for p, s in self.candidates]}


BINARY = ("a side is binary (a NUL byte), which no three-way merge takes: resolve by "
          "hand")


@dataclass
class FileResult:
    path: str
    rows: list[HunkVerdict] = field(default_factory=list)
    post: bytes | None | object = KEEP  # new content, None = delete, KEEP = leave upstream's
    mode: str | None = None


def _row(fp: FilePatch, k: int, h: Hunk, verdict: str, pos: int | None, note: str,
         offset: int | None = None) -> HunkVerdict:
    return HunkVerdict(fp.path, k, h.old_start, verdict, None if pos is None else pos + 1,
                       offset, note, h.added, h.removed)


def _with_hunks(old_lines: list[bytes], hunks: list[tuple[int, Hunk]]) -> bytes:
    placed = sorted((recorded_pos(h), h) for _k, h in hunks)
    return b"".join(apply_at(old_lines, [(p, h) for p, h in placed]))


def port_modified(fp: FilePatch, old: bytes, new: bytes, scratch: Path,
                  labels: tuple[str, str, str]) -> FileResult:
    """A modified file present in both trees: exact matches first, then the merge."""
    res = FileResult(fp.path)
    new_lines = split_lines(new)
    old_lines = split_lines(old)
    placed: list[tuple[int, int, Hunk]] = []
    pending: list[tuple[int, Hunk, str]] = []
    rows: dict[int, HunkVerdict] = {}
    for k, h in enumerate(fp.hunks, 1):
        m = match_hunk(h, new_lines, len(old_lines))
        if m.verdict in (CLEAN, MOVED):
            assert m.pos is not None
            placed.append((m.pos, k, h))
            off = m.pos - recorded_pos(h) if m.verdict == MOVED else None
            rows[k] = _row(fp, k, h, m.verdict, m.pos, m.note, off)
        elif m.verdict == ABSORBED:
            rows[k] = _row(fp, k, h, ABSORBED, m.pos, m.note)
        else:
            pending.append((k, h, m.note))
    keep, clash = non_overlapping(placed)
    for pos, k, h in clash:
        pending.append((k, h, f"its pre-image at line {pos + 1} overlaps another hunk's"))
    pending.sort()
    current = apply_at(new_lines, [(p, h) for p, _k, h in keep])
    applied: list[tuple[int, Hunk]] = [(k, h) for _p, k, h in keep]
    for k, h, why in pending:
        ours = _with_hunks(old_lines, applied + [(k, h)])
        got = _merge(ours, old, b"".join(current), scratch, labels)
        if got is None:
            rows[k] = _row(fp, k, h, CONFLICT, None, f"{why}; {BINARY}")
            continue
        merged, conflicts = got
        merged_lines = split_lines(merged)
        resolved = resolve_absorbed(merged, labels) if conflicts else None
        if resolved is not None:  # upstream holds the change, with more beside it
            merged_lines, conflicts = resolved, 0
            why += "; upstream made this change together with others beside it"
        at = first_difference(current, merged_lines)
        if conflicts:
            rows[k] = _row(fp, k, h, CONFLICT, at, f"{why}; the three-way merge left "
                           f"{conflicts} conflict(s) marked in the file")
        elif at is None:
            rows[k] = _row(fp, k, h, ABSORBED, None, f"{why}; the three-way merge found the "
                           "change already upstream")
        else:
            rows[k] = _row(fp, k, h, MERGED, at, f"{why}; merged cleanly by the three-way "
                           "merge: review it")
            applied.append((k, h))
        current = merged_lines
    res.rows = [rows[k] for k in sorted(rows)]
    res.post = b"".join(current)
    return res


def port_file(fp: FilePatch, old: Base, new: Base, scratch: Path,
              labels: tuple[str, str, str]) -> FileResult:
    """Every hunk (or whole-file change) of ``fp``; ``old``/``new``: the file in each tree."""
    res = FileResult(fp.path)
    whole = HunkVerdict
    if fp.status == "A":
        post = apply_file(fp, None).post or b""
        if new is None:
            res.rows, res.post, res.mode = [whole(fp.path, 0, 0, CLEAN, 1, None, "new file",
                                                  fp.added)], post, fp.new_mode
        elif new[0] == post:
            res.rows = [whole(fp.path, 0, 0, ABSORBED, 1, None, "upstream added the same "
                              "file", fp.added)]
        else:
            got = _merge(post, b"", new[0], scratch, labels)
            note = "conflict marked" if got is not None else \
                f"{BINARY}; upstream's file is left in place"
            res.rows = [whole(fp.path, 0, 0, CONFLICT, 1, None, "upstream added another "
                              f"file at this path; {note}", fp.added)]
            if got is not None:
                res.post = got[0]
        return res
    if new is None:
        verdict = ABSORBED if fp.status == "D" else GONE
        note = "upstream deleted it too" if fp.status == "D" else \
            "upstream deleted or moved the file"
        rows = [whole(fp.path, k, h.old_start, verdict, None, None, note, h.added, h.removed)
                for k, h in enumerate(fp.hunks, 1)]
        res.rows = rows or [whole(fp.path, 0, 0, verdict, None, None, note)]
        return res
    assert old is not None
    if fp.status == "D" or fp.binary or not fp.hunks:
        return _whole_file(fp, old, new, res)
    res = port_modified(fp, old[0], new[0], scratch, labels)
    res.mode = _mode(fp, new[1], res)
    return res


def _mode(fp: FilePatch, new_mode: str, res: FileResult) -> str:
    if not fp.old_mode or not fp.new_mode or fp.old_mode == fp.new_mode:
        return new_mode
    if new_mode == fp.old_mode:
        res.rows.append(HunkVerdict(fp.path, 0, 0, CLEAN, None, None,
                                    f"mode {fp.old_mode} -> {fp.new_mode}"))
        return fp.new_mode
    verdict = ABSORBED if new_mode == fp.new_mode else CONFLICT
    res.rows.append(HunkVerdict(fp.path, 0, 0, verdict, None, None,
                                f"mode: the patch sets {fp.new_mode}, upstream has {new_mode}"))
    return new_mode


def _whole_file(fp: FilePatch, old: tuple[bytes, str], new: tuple[bytes, str],
                res: FileResult) -> FileResult:
    """Deletions, binary changes and mode-only changes: all or nothing."""
    what = "deleted file" if fp.status == "D" else "binary change" if fp.binary else "mode"
    if new[0] != old[0]:
        res.rows = [HunkVerdict(fp.path, 0, 0, CONFLICT, None, None,
                                f"{what}: upstream changed the file; resolve by hand "
                                "(upstream's file is left in place)")]
        return res
    if fp.status == "D":
        res.rows, res.post = [HunkVerdict(fp.path, 0, 0, CLEAN, None, None, what)], None
        return res
    out = apply_file(fp, old)
    res.post, res.mode = out.post, out.post_mode
    if fp.binary:
        res.rows = [HunkVerdict(fp.path, 0, 0, CLEAN, None, None, what)]
    res.mode = _mode(fp, new[1], res) if not fp.binary else res.mode
    return res
