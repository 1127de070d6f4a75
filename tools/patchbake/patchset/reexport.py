"""Re-export: regenerate the canonical patch from an applied tree and compare bytes.

Only the touched files matter: with renames off, git writes each file's section from that
file's two versions alone, in path order. So the pre- and post-images of the touched
files are written into a scratch repository, as two trees in one pack (see
:mod:`gitobjects`), and one ``git diff-tree`` of those trees with the canonical flags must
reproduce the committed patch byte for byte. Standard library only.

For a patch in canonical order the files are taken in batches (:class:`Reexport`): each
batch is packed into its own scratch repository as soon as it is applied, and its diff
runs in a git process of its own while the next batch is applied. The batches are
consecutive runs of paths in git's order, so their diffs, joined, are the one diff of all
the files: git's work is spread over the time the applier takes instead of following it.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from .apply import Outcome
from .gitcmd import DiffInFile, memory_tmp, scratch_repo
from .gitobjects import Pack, delta_of
from .paths import to_bytes

# Bytes of pre- and post-images per batch: at most a handful of git processes for the
# largest patches (each costs a few milliseconds to start), one for a small patch.
BATCH_BYTES = 6 << 20
# git processes at a time: the machine's cores are shared with the applier
_GIT_AT_ONCE = 2


class Reexport:
    """The canonical patch that git writes for outcomes given one by one (:meth:`add`).

    ``batches`` (the files come in canonical order, each path once) lets git start on a
    batch while the caller computes the next; otherwise every file goes into one diff,
    which :meth:`result` starts. Use as a context manager: leaving it waits for the git
    processes and removes the scratch repositories.
    """

    def __init__(self, *, batches: bool, scratch_parent: Path | None = None,
                 batch_bytes: int = BATCH_BYTES) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="patchbake-reexport.",
                                           dir=scratch_parent or memory_tmp())).absolute()
        self._batch_bytes = batch_bytes if batches else -1
        self._pending: list[Outcome] = []
        self._size = 0
        self._diffs: list[DiffInFile] = []
        self._slots = threading.BoundedSemaphore(_GIT_AT_ONCE)

    def __enter__(self) -> Reexport:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._size += len(outcome.pre or b"") + len(outcome.post or b"")
        if 0 <= self._batch_bytes <= self._size:
            self._flush()

    def start(self) -> None:
        """Start the diff of what is left (the caller has added every outcome)."""
        if self._pending or not self._diffs:
            self._flush()

    def result(self) -> bytes:
        """The diffs joined, once git has written them; a failed diff's error is raised."""
        self.start()
        for d in self._diffs:
            d.join()
        return b"".join(d.result() for d in self._diffs)

    def close(self) -> None:
        for d in self._diffs:
            d.join()
        shutil.rmtree(self._root, ignore_errors=True)

    def _flush(self) -> None:
        repo = scratch_repo(self._root)
        pack = Pack()
        pre: dict[bytes, tuple[str, str]] = {}
        post: dict[bytes, tuple[str, str]] = {}
        for o in self._pending:
            path = to_bytes(o.path)
            if o.pre is not None:
                pre[path] = (o.pre_mode or "100644", pack.add(b"blob", o.pre, o.pre_id))
            if o.post is None:
                continue
            if o.edits is not None and o.pre is not None and o.post_id is not None:
                # the post-image as a delta of the pre-image: git rebuilds it on reading
                oid = pack.add_delta(pre[path][1], delta_of(len(o.pre), o.edits, len(o.post)),
                                     o.post_id)
            else:
                oid = pack.add(b"blob", o.post, o.post_id)
            post[path] = (o.post_mode or "100644", oid)
        old, new = pack.add_tree(pre), pack.add_tree(post)
        pack.write(repo / "objects")
        self._diffs.append(DiffInFile(repo, old, new, repo / "reexport.patch",
                                      slots=self._slots))
        self._pending, self._size = [], 0


def reexport(outcomes: Iterable[Outcome], scratch_parent: Path | None = None) -> bytes:
    """The canonical patch that git writes for these pre/post images (one diff)."""
    with Reexport(batches=False, scratch_parent=scratch_parent) as rx:
        for o in outcomes:
            rx.add(o)
        return rx.result()


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
