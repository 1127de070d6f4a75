"""Re-export: regenerate the canonical patch from an applied tree and compare bytes.

Only the touched files matter: with renames off, git writes each file's section from that
file's two versions alone, in path order. So the pre- and post-images of the touched
files are written into a scratch repository, as trees in packs (see :mod:`gitobjects`),
and ``git diff-tree`` of those trees with the canonical flags must reproduce the
committed patch byte for byte. Standard library only.

One ``git diff-tree --stdin`` process does every diff. It starts with the first outcome,
so its start-up overlaps the caller's work on the next ones. Each batch of files is packed
into the scratch repository as soon as it is applied (a pack of its own, which git finds
when it looks the trees up) and its two tree ids are written to git's standard input:
git diffs one batch while the next is applied. The batches are consecutive runs of paths
in git's order (a patch in canonical order), so their diffs, one after the other, are the
one diff of all the files. git writes each pair of ids before its diff, on the same
standard output (a file): :func:`strip_echoes` takes them out, and a pair git skipped
fails the re-export. (Not ``--output``: before git 2.36.1, ``diff-tree --stdin`` closed
that file after the first pair.)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO

from ..errors import ProcessError
from ..gitrun import git_start
from ..proc import Running
from ..scratch import Scratch
from .apply import Outcome
from .gitcmd import DIFF_FLAGS, scratch_repo
from .gitobjects import Pack, delta_of
from .paths import to_bytes

# Bytes of pre- and post-images per batch: a handful of batches for the largest patches
# (each is a pack of its own and a lookup miss for git), one for a small patch.
BATCH_BYTES = 6 << 20
# Batches a patch is cut into (:meth:`Reexport.expect`).
BATCHES = 8


class Reexport:
    """The canonical patch that git writes for outcomes given one by one (:meth:`add`).

    git is started with the first outcome (or by :meth:`result` when there is none).
    ``batches`` (the files come in canonical order, each path once) lets git diff a
    batch while the caller computes the next; otherwise every file goes into one diff,
    which :meth:`result` starts. Use as a context manager: leaving it stops git if it
    still runs and removes the scratch repository.
    """

    def __init__(self, *, batches: bool, scratch_parent: Path | None = None,
                 batch_bytes: int = BATCH_BYTES) -> None:
        self._scratch = Scratch("patchbake-reexport.", scratch_parent)
        self._root = self._scratch.path
        self.batches = batches
        self._batch_bytes = batch_bytes
        self._batch_files = 0  # see expect()
        self._pending: list[Outcome] = []
        self._size = 0
        self._pairs: list[bytes] = []  # the tree pairs written to git, as git echoes them
        self._git: Running | None = None
        self._out: IO[bytes] | None = None
        self._err: IO[bytes] | None = None
        self._failed: Exception | None = None  # git could not be started: result() raises it

    def _start_git(self) -> Running | None:
        if self._git is None and self._failed is None:
            try:
                self._repo = scratch_repo(self._root)
                # files, not pipes: git never waits for a reader
                self._out = open(self._root / "reexport.out", "w+b")  # noqa: SIM115 - see close()
                self._err = open(self._root / "git.err", "w+b")  # noqa: SIM115 - see close()
                self._git = git_start(["diff-tree", "--stdin", *DIFF_FLAGS], git_dir=self._repo,
                                      stdout=self._out, stderr=self._err)
            except Exception as exc:  # noqa: BLE001 - raised by result(), as git's own failure
                self._failed = exc
        return self._git

    def __enter__(self) -> Reexport:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def expect(self, files: int, batches: int = BATCHES) -> None:
        """The caller will add ``files`` outcomes: cut them into about ``batches``
        batches (or more, where a batch would exceed the byte cap), so the diff of the
        last batch, which git runs after the caller is done, is a small part of it."""
        self._batch_files = -(-files // batches)

    def add(self, outcome: Outcome) -> None:
        self._start_git()  # on the first outcome, while the caller works on the next
        self._pending.append(outcome)
        self._size += len(outcome.pre or b"") + len(outcome.post or b"")
        if self.batches and (self._size >= self._batch_bytes
                             or len(self._pending) == self._batch_files):
            self._flush()

    def start(self) -> None:
        """Send what is left (the caller has added every outcome)."""
        if self._pending or not self._pairs:
            self._flush()

    def result(self) -> bytes:
        """The diffs joined, once git has written them; git's error if it failed."""
        self.start()
        if self._failed is not None:
            raise self._failed
        assert self._git is not None and self._out is not None and self._err is not None
        rc = self._git.finish()
        if rc != 0:
            self._err.seek(0)
            tail = self._err.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            raise ProcessError(f"git diff-tree exited {rc}: " + " | ".join(tail))
        self._out.seek(0)
        return strip_echoes(self._out.read(), self._pairs)

    def close(self) -> None:
        if self._git is not None:
            self._git.stop()
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self._scratch.remove()

    def _flush(self) -> None:
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
        git = self._start_git()
        if git is not None:
            pack.write(self._repo / "objects")
            pair = f"{old} {new}\n".encode()
            git.send(pair)  # if git is gone, result() says why
            self._pairs.append(pair)
        self._pending, self._size = [], 0


def strip_echoes(data: bytes, pairs: list[bytes]) -> bytes:
    """git's output for the tree ``pairs`` written to ``diff-tree --stdin``, without the
    line "<old> <new>" git writes before each pair's diff. Each echo must be there, in
    order: git skips a pair it cannot read (and still exits 0), so a missing echo is a
    failed re-export, never a shorter patch. An echo cannot be mistaken for a line of a
    diff: no line of a diff starts with a hexadecimal id followed by a space (hunk lines
    start with ' ', '+', '-' or '\\', headers with a word, binary data has no space).
    """
    out: list[bytes] = []
    pos = 0
    for k, pair in enumerate(pairs):
        if not data.startswith(pair, pos):
            raise ProcessError(f"git diff-tree skipped the re-export's batch {k + 1} of "
                               f"{len(pairs)} (trees {pair.decode('ascii', 'replace').strip()})")
        start = pos + len(pair)
        if k + 1 == len(pairs):
            end = len(data)
        elif data.startswith(pairs[k + 1], start):
            end = start
        else:
            at = data.find(b"\n" + pairs[k + 1], start)
            end = len(data) if at < 0 else at + 1  # a missing echo fails on the next turn
        out.append(data[start:end])
        pos = end
    return b"".join(out)


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
