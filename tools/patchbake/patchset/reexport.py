"""Re-export: regenerate the canonical patch from an applied tree and compare bytes.

Only the touched files matter: with renames off, git writes each file's section from that
file's two versions alone, in path order. So the pre- and post-images of the touched
files go into a scratch repository as two commits (one ``git fast-import``), and one
``git diff-tree`` with the canonical flags must reproduce the committed patch byte for
byte. Standard library only.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .apply import Outcome
from .gitcmd import AUTHOR, canonical_diff, git, scratch_repo
from .paths import cquote, to_bytes


def _commit(ref: str, files: list[tuple[bytes, str, int]]) -> bytes:
    head = (f"commit {ref}\ncommitter {AUTHOR[0]} <{AUTHOR[1]}> 0 +0000\n"
            "data 0\n").encode()
    body = b"".join(b"M %s :%d %s\n" % (mode.encode(), mark, path)
                    for path, mode, mark in files)
    return head + body + b"\n"


def fast_import_stream(outcomes: Iterable[Outcome]) -> bytes:
    parts: list[bytes] = []
    pre: list[tuple[bytes, str, int]] = []
    post: list[tuple[bytes, str, int]] = []
    mark = 0
    for o in outcomes:
        path = cquote(to_bytes(o.path))
        for data, mode, side in ((o.pre, o.pre_mode, pre), (o.post, o.post_mode, post)):
            if data is None:
                continue
            mark += 1
            parts.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
            side.append((path, mode or "100644", mark))
    parts.append(_commit("refs/heads/pre", pre))
    parts.append(_commit("refs/heads/post", post))
    return b"".join(parts)


def reexport(outcomes: Iterable[Outcome], scratch_parent: Path | None = None) -> bytes:
    """The canonical patch that git writes for these pre/post images."""
    parent = Path(scratch_parent or tempfile.gettempdir())
    repo = scratch_repo(parent)
    try:
        # No compression and no deltas: the objects live for one diff (about 40% faster).
        git(["-c", "core.compression=0", "-c", "pack.compression=0", "fast-import",
             "--quiet", "--done", "--depth=0"], git_dir=repo,
            input=fast_import_stream(outcomes) + b"done\n")
        return canonical_diff(repo, "refs/heads/pre", "refs/heads/post")
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def first_difference(a: bytes, b: bytes) -> tuple[int, str, str]:
    """(1-based line, expected, found) of the first line where ``a`` and ``b`` differ."""
    la, lb = a.split(b"\n"), b.split(b"\n")
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else None
        y = lb[i] if i < len(lb) else None
        if x != y:
            def show(v: bytes | None) -> str:
                return "end of patch" if v is None else repr(v.decode("utf-8", "replace")[:72])
            return i + 1, show(x), show(y)
    return 0, "", ""
