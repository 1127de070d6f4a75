"""Reading and writing the touched files of a tree safely. Standard library only.

Only the files a patch touches are read or written (the rest of a 100 MB tree is copied
once, never parsed). Every parent directory is checked with ``lstat``: a path that goes
through a symbolic link is refused, so a patch cannot write outside its tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import ApplyError
from .apply import Base, Outcome
from .paths import to_bytes


def _refuse(msg: str) -> ApplyError:
    return ApplyError(msg, reason="path", hint="a patch may only touch regular files inside the tree")


def git_mode(st_mode: int) -> str:
    return "100755" if st_mode & 0o111 else "100644"


class TreeReader:
    """Reads files under ``root`` by repository path, refusing symlinks on the way."""

    def __init__(self, root: Path) -> None:
        self.root = os.fsencode(root)
        self._dirs: dict[bytes, bool] = {}

    def _dir_ok(self, rel: bytes) -> bool:
        """True when ``rel`` is a real directory, False when it does not exist."""
        if not rel:
            return True
        if rel in self._dirs:
            return self._dirs[rel]
        parent = rel.rpartition(b"/")[0]
        ok = self._dir_ok(parent)
        if ok:
            try:
                st = os.lstat(os.path.join(self.root, rel))
            except FileNotFoundError:
                ok = False
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise _refuse(f"{os.fsdecode(rel)} is a symbolic link: the patch may "
                                  "not write through it")
                if not stat.S_ISDIR(st.st_mode):
                    raise _refuse(f"{os.fsdecode(rel)} is not a directory")
        self._dirs[rel] = ok
        return ok

    def __call__(self, path: str) -> Base:
        rel = to_bytes(path)
        if not self._dir_ok(rel.rpartition(b"/")[0]):
            return None
        full = os.path.join(self.root, rel)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(f"{path} is a symbolic link: strict apply only patches regular files")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(f"{path} is not a regular file")
        with open(full, "rb") as f:
            return f.read(), git_mode(st.st_mode)


def copy_tree(src: Path, dst: Path, *, link: bool = False) -> None:
    """Copy a tree of regular files and directories; modes normalised the way git sees them.

    Symbolic links are copied as links (the pristine trees the sources stage extracts hold
    none that escape); devices and fifos are refused.

    ``link`` hard-links each regular file whose mode is already normalised instead of
    copying it (one ``link(2)`` instead of reading and writing the bytes: a 6,000-file
    tree in a fraction of a second instead of seconds). Only for trees that both live in
    the store and are read-only by convention: a write through one name would change
    the other. :func:`write_outcomes` replaces a file by unlinking it first, so applying
    a patch never writes through a link. Where linking fails (another file system, a
    link-count limit), the file is copied.
    """
    os.makedirs(dst, exist_ok=True)
    stack = [(os.fsencode(src), os.fsencode(dst))]
    while stack:
        s, d = stack.pop()
        with os.scandir(s) as it:
            for e in it:
                target = os.path.join(d, e.name)
                if e.is_symlink():
                    os.symlink(os.readlink(e.path), target)
                elif e.is_dir():
                    os.mkdir(target, 0o755)
                    stack.append((e.path, target))
                elif e.is_file():
                    mode = e.stat(follow_symlinks=False).st_mode
                    want = 0o755 if mode & 0o111 else 0o644
                    if link and stat.S_IMODE(mode) == want:
                        try:
                            os.link(e.path, target, follow_symlinks=False)
                            continue
                        except OSError:
                            pass
                    shutil.copyfile(e.path, target)
                    os.chmod(target, want)
                else:
                    raise _refuse(f"{os.fsdecode(e.path)} is not a regular file or directory")


def write_outcomes(root: Path, outcomes: Iterable[Outcome]) -> None:
    """Write post-images under ``root`` (deleting, creating parents, removing dirs left empty)."""
    reader = TreeReader(root)
    base = os.fsencode(root)
    for o in outcomes:
        reader(o.path)  # refuses symlinks on the way before anything is written
        full = os.path.join(base, to_bytes(o.path))
        if o.post is None:
            os.unlink(full)
            parent = os.path.dirname(full)
            while parent != base and not os.listdir(parent):
                os.rmdir(parent)
                parent = os.path.dirname(parent)
            continue
        os.makedirs(os.path.dirname(full), 0o755, exist_ok=True)
        if os.path.lexists(full):
            os.unlink(full)
        with open(full, "wb") as f:
            f.write(o.post)
        os.chmod(full, 0o755 if o.post_mode == "100755" else 0o644)


def hash_touched(root: Path, paths: Iterable[str]) -> dict[str, str | None]:
    """sha256 of each path as it is now on disk (None when absent), read back from disk."""
    reader = TreeReader(root)
    out: dict[str, str | None] = {}
    for p in paths:
        got = reader(p)
        out[p] = None if got is None else hashlib.sha256(got[0]).hexdigest()
    return out
