"""Three-way merge of one hunk for ``port`` (``git merge-file --diff3``), and the check
that tells a conflict from a change upstream already made.

git merges identical changes on both sides cleanly, but when upstream took our change
AND changed a line beside it, the two changes overlap and git marks a conflict. Such a
block is recognised, strictly, as already upstream: every line ours removes from the base
is changed (not kept) by upstream too, and every line ours adds is among the lines
upstream wrote there, in the same order. Only if every conflict block of the hunk is of
that kind is the hunk "absorbed" (upstream's side kept); otherwise all markers stay.
"""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from ..errors import ProcessError
from ..patchset.diffparse import split_lines
from ..patchset.gitcmd import git

Labels = tuple[str, str, str]


def merge_file(ours: bytes, base: bytes, theirs: bytes, scratch: Path,
               labels: Labels) -> tuple[bytes, int]:
    """``git merge-file -p --diff3``: (result, number of conflicts)."""
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


def _is_subsequence(small: list[bytes], big: list[bytes]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def already_upstream(ours: list[bytes], base: list[bytes], theirs: list[bytes]) -> bool:
    """Does ``theirs`` hold ours' change of ``base`` (with more changes beside it)?"""
    ours_ops = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_opcodes()
    their_ops = difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_opcodes()
    kept_by_them = {i for tag, i1, i2, _j1, _j2 in their_ops if tag == "equal"
                    for i in range(i1, i2)}
    written_by_them = [theirs[j] for tag, _i1, _i2, j1, j2 in their_ops if tag != "equal"
                       for j in range(j1, j2)]
    removed = [i for tag, i1, i2, _j1, _j2 in ours_ops if tag in ("replace", "delete")
               for i in range(i1, i2)]
    added = [ours[j] for tag, _i1, _i2, j1, j2 in ours_ops if tag in ("replace", "insert")
             for j in range(j1, j2)]
    if not removed and not added:
        return False
    return not (set(removed) & kept_by_them) and _is_subsequence(added, written_by_them)


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
