"""Rename candidates for a file that upstream deleted or moved: by content similarity.

Only files that the new tree has and the old one did not are candidates (a file that
existed in both was not the destination of a move). A cheap line-set overlap filters the
candidates before :class:`difflib.SequenceMatcher` scores the survivors.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

MIN_RATIO = 0.5
TOP = 3


def list_files(root: Path) -> set[str]:
    out: set[str] = set()
    for dirpath, _dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for f in files:
            out.add(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/"))
    return out


def _read_lines(p: Path) -> list[bytes] | None:
    try:
        return p.read_bytes().splitlines()
    except OSError:
        return None


def rename_candidates(path: str, old_data: bytes, new_root: Path,
                      new_only: set[str]) -> list[tuple[str, float]]:
    """Up to three (path, similarity 0..1) in ``new_root``, best first, at least 0.5."""
    a = old_data.splitlines()
    a_set = {ln.strip() for ln in a if ln.strip()}
    ext = os.path.splitext(path)[1]
    scored: list[tuple[float, str]] = []
    for cand in sorted(new_only):
        if os.path.splitext(cand)[1] != ext:
            continue
        b = _read_lines(new_root / cand)
        if b is None:
            continue
        b_set = {ln.strip() for ln in b if ln.strip()}
        union = len(a_set | b_set) or 1
        if len(a_set & b_set) / union < 0.3 and a_set:
            continue
        ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        if ratio >= MIN_RATIO:
            # the same file name is the stronger hint when two score alike
            same_name = os.path.basename(cand) == os.path.basename(path)
            scored.append((ratio + (1e-6 if same_name else 0.0), cand))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [(c, round(min(r, 1.0), 3)) for r, c in scored[:TOP]]
