"""Re-export: regenerate the canonical patch from an applied tree and compare bytes.

Only the touched files matter: with renames off, git writes each file's section from that
file's two versions alone, in path order. So the pre- and post-images of the touched
files are written into a scratch repository, as two trees in one pack (see
:mod:`gitobjects`), and one ``git diff-tree`` of those trees with the canonical flags must
reproduce the committed patch byte for byte. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from .apply import Outcome
from .gitcmd import canonical_diff, scratch_repo
from .gitobjects import Pack
from .paths import to_bytes


def _scratch_parent() -> Path:
    # The scratch objects live for one diff: a memory file system when there is one.
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


class Beside:
    """Work to run in a thread while git writes the diff (see :func:`beside_git`)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work
        self.ran = False


_BESIDE: ContextVar[Beside | None] = ContextVar("patchbake_beside_git", default=None)


@contextmanager
def beside_git(work: Callable[[], None]) -> Iterator[Beside]:
    """Run ``work`` in a thread during the ``git diff-tree`` of a :func:`reexport` called
    in this block: git's time is spent outside Python, so pure-Python checks fit there
    without slowing the pack writing before it. ``work`` must not raise. When no diff
    ran (``ran`` stays False), the caller runs ``work`` itself.
    """
    beside = Beside(work)
    token = _BESIDE.set(beside)
    try:
        yield beside
    finally:
        _BESIDE.reset(token)


def _diff_beside(repo: Path, old: str, new: str) -> bytes:
    beside = _BESIDE.get()
    if beside is None or beside.ran:
        return canonical_diff(repo, old, new)
    beside.ran = True
    worker = threading.Thread(target=beside.work, name="beside-git", daemon=True)
    worker.start()
    try:
        return canonical_diff(repo, old, new)
    finally:
        worker.join()


def reexport(outcomes: Iterable[Outcome], scratch_parent: Path | None = None) -> bytes:
    """The canonical patch that git writes for these pre/post images."""
    repo = scratch_repo(scratch_parent or _scratch_parent())
    try:
        pack = Pack()
        pre: dict[bytes, tuple[str, str]] = {}
        post: dict[bytes, tuple[str, str]] = {}
        for o in outcomes:
            path = to_bytes(o.path)
            if o.pre is not None:
                pre[path] = (o.pre_mode or "100644", pack.add(b"blob", o.pre, o.pre_id))
            if o.post is not None:
                post[path] = (o.post_mode or "100644", pack.add(b"blob", o.post, o.post_id))
        old, new = pack.add_tree(pre), pack.add_tree(post)
        pack.write(repo / "objects")
        return _diff_beside(repo, old, new)
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
