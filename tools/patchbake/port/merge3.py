"""Three-way merge of one hunk for ``port`` (``git merge-file --diff3``), and the check
that tells a conflict from a change upstream already made.

git merges identical changes on both sides cleanly, but when upstream took our change
AND changed a line beside it, the two changes overlap and git marks a conflict. Such a
block is recognised, strictly, as already upstream only when our change still takes
effect in upstream's side: for each change ours makes to the base, the lines it writes
stand in upstream's side as one contiguous block, in the same context (the base lines
around the change next to it, past blank lines only; a side whose base line upstream
rewrote may differ, not both), and no line it removes is kept by upstream. Our lines
with upstream's ``return`` between them, reordered, moved into another function or
commented out are not that: a porter that is unsure says conflict. Only if every
conflict block of the hunk passes is the hunk "absorbed" (upstream's side kept);
otherwise all markers stay, both sides shown.
"""

from __future__ import annotations

import difflib
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import ProcessError
from ..patchset.diffparse import split_lines
from ..patchset.gitcmd import git

Labels = tuple[str, str, str]


def is_binary(data: bytes) -> bool:
    """git's own test (a NUL byte among the first 8,000): content git merge-file refuses."""
    return b"\0" in data[:8000]


def merge_file(ours: bytes, base: bytes, theirs: bytes, scratch: Path,
               labels: Labels) -> tuple[bytes, int] | None:
    """``git merge-file -p --diff3``: (result, number of conflicts); None when a side is
    binary, which no three-way merge takes (a conflict for the caller, not a failure)."""
    if any(map(is_binary, (ours, base, theirs))):
        return None
    with tempfile.TemporaryDirectory(prefix="patchbake-merge.", dir=scratch) as d:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(d) / name
            p.write_bytes(data)
            paths.append(str(p))
        r = git(["merge-file", "-p", "--diff3", "-L", labels[0], "-L", labels[1],
                 "-L", labels[2], *paths], cwd=Path(d), check=False)
    if r.returncode < 0 or r.returncode > 127:
        raise ProcessError(f"git merge-file failed: {r.stderr.decode('utf-8', 'replace')[-200:]}")
    return r.stdout, r.returncode


def _reaches(seq: Iterable[bytes], neighbour: bytes | None) -> bool:
    """Walking ``seq`` away from a block, is ``neighbour`` the first line past blank ones
    (None: the edge of the conflict block, the merge's common context)?"""
    for line in seq:
        if line == neighbour:
            return True
        if line.strip():
            return False
    return neighbour is None


def _in_context(theirs: list[bytes], t: int, n: int, base: list[bytes], i1: int, i2: int,
                kept: set[int]) -> bool:
    """Is the block ``theirs[t:t+n]`` where ours put it: next to the base lines around
    the change (``base[i1-1]`` before, ``base[i2]`` after), past blank lines only? A side
    whose base line upstream rewrote is let pass, but at least one side must hold."""
    sides = ((reversed(theirs[:t]), i1 - 1), (theirs[t + n:], i2))
    held = [_reaches(seq, base[i] if 0 <= i < len(base) else None) for seq, i in sides]
    rewritten = [0 <= i < len(base) and i not in kept for _seq, i in sides]
    return any(held) and all(h or r for h, r in zip(held, rewritten, strict=True))


def _holds(theirs: list[bytes], written: list[bytes], base: list[bytes], i1: int, i2: int,
           kept: set[int]) -> bool:
    """Does ``theirs`` hold the lines one change of ours wrote (replacing ``base[i1:i2]``)
    as one contiguous block in the same context?"""
    n = len(written)
    return any(theirs[t:t + n] == written and _in_context(theirs, t, n, base, i1, i2, kept)
               for t in range(len(theirs) - n + 1))


def already_upstream(ours: list[bytes], base: list[bytes], theirs: list[bytes]) -> bool:
    """Does ``theirs`` hold ours' change of ``base`` (with more changes beside it)?

    Each change ours makes must stand in ``theirs`` as a contiguous block in the same
    context (see the module's docstring); lines merely present somewhere are not enough."""
    ours_ops = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_opcodes()
    their_ops = difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_opcodes()
    kept = {i for tag, i1, i2, _j1, _j2 in their_ops if tag == "equal" for i in range(i1, i2)}
    changes = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ours_ops if tag != "equal"]
    return bool(changes) and all(
        not any(i in kept for i in range(i1, i2))
        and _holds(theirs, ours[j1:j2], base, i1, i2, kept)
        for i1, i2, j1, j2 in changes)


def resolve_absorbed(merged: bytes, labels: Labels) -> list[bytes] | None:
    """``merged`` with every conflict block replaced by upstream's side, if every block
    is a change upstream already holds; None when any block is a real conflict."""
    marks = (f"<<<<<<< {labels[0]}\n".encode(), f"||||||| {labels[1]}\n".encode(),
             b"=======\n", f">>>>>>> {labels[2]}\n".encode())
    out: list[bytes] = []
    block: list[list[bytes]] | None = None
    for line in split_lines(merged):
        if block is None:
            if line == marks[0]:
                block = [[]]
            else:
                out.append(line)
            continue
        if line in marks[1:] and len(block) < 4:
            block.append([])
            if line == marks[3]:
                ours, base, theirs = block[0], block[1], block[2]
                if not already_upstream(ours, base, theirs):
                    return None
                out.extend(theirs)
                block = None
            continue
        block[-1].append(line)
    return None if block is not None else out
