"""Staging entries a writer holds with a lock, so that nobody else removes them while it
lives. Standard library only (fsutil and the bare guard's imports build on it).

A staging entry (a ``tmp/blob.*`` file, a ``tmp/<what>.*`` directory, a half-written
``.<name>.*.tmp`` record beside its target) is held by its writer with ``flock`` on the
entry itself, from the moment it has its name until it is renamed into place or removed.
A sweeper (every command opening the store, ``store gc``) removes an entry only after it
took that lock itself, and removes it while holding it. That is why it is safe where a
process id is not: a lock is one kernel object for every process on the host, whatever
PID namespace (container) each runs in, and it dies with its holder however that dies.

The writer's own race (its entry exists a moment before it is locked) is closed by a
check after locking: the path must still name the inode it locked, or the entry was
reclaimed in that moment and the writer makes another.

Across hosts (a store on NFS shared by two machines) this holds only where the file
system shares ``flock`` locks between hosts (NFSv4, Linux >= 2.6.12 maps ``flock`` to
byte-range locks the server sees); with ``local_lock=flock`` or ``nolock`` each host
sees only its own writers, and a sweeper on one host can remove another host's live
staging. docs/RELIABILITY.md says so.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

# what an entry that cannot be locked (not ours to open, a link) must not have changed
# for before it is litter
STALE_AGE_S = 24 * 3600
_HELD: dict[str, int] = {}  # directory path -> the fd that holds its lock


def _same(path: str, fd: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return st.st_ino == os.fstat(fd).st_ino and st.st_dev == os.fstat(fd).st_dev


def new_file(where: str | os.PathLike[str], prefix: str, suffix: str = "") -> tuple[int, str]:
    """``mkstemp`` whose file this process holds: (fd open for writing, path). The lock
    goes with the fd: closing it lets go (rename or unlink the file first)."""
    while True:
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=where)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same(path, fd):
                return fd, path
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # reclaimed between its making and our lock: make another


def new_dir(where: str | os.PathLike[str], prefix: str) -> Path:
    """``mkdtemp`` whose directory this process holds until :func:`release` (or its end)."""
    _forget_gone()
    while True:
        path = tempfile.mkdtemp(prefix=prefix, dir=where)
        fd = -1
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same(path, fd):
                _HELD[str(Path(path))] = fd
                return Path(path)
        except BaseException:  # an interrupt too: the empty directory is not left behind
            if fd >= 0:
                os.close(fd)
            shutil.rmtree(path, ignore_errors=True)
            raise
        os.close(fd)


def release(path: str | os.PathLike[str]) -> None:
    """Let go of a directory from :func:`new_dir` (after it was renamed or removed)."""
    fd = _HELD.pop(str(Path(path)), None)
    if fd is not None:
        os.close(fd)


def discard(path: str | os.PathLike[str]) -> None:
    """Remove a directory from :func:`new_dir` and let go of it. An interrupt (SIGTERM,
    Ctrl-C: KeyboardInterrupt) that lands during the removal does not leave it half
    removed: the removal is finished first, then the interrupt goes on (the SIGTERM
    handler raises once, so the second pass is not cut short)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except KeyboardInterrupt:
        shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        release(path)


def _forget_gone() -> None:
    """Close the locks of held directories that are no longer at their path (published
    by a rename or removed): bounded fds for a long-lived process."""
    for path, fd in list(_HELD.items()):
        if not _same(path, fd):
            release(path)


def _open_unfollowed(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT,):
            raise FileNotFoundError(str(path)) from exc
        return None  # a link, or not ours to read: judged by age


def _stale(path: Path, now: float) -> bool:
    try:
        return now - path.lstat().st_mtime > STALE_AGE_S
    except FileNotFoundError:
        return False


def remove_entry(path: Path) -> None:
    """Remove a file, link or directory tree; one already gone is no error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _unheld(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def is_litter(path: Path, now: float | None = None) -> bool:
    """Is ``path`` a staging entry nobody holds (its writer is gone)?"""
    try:
        fd = _open_unfollowed(path)
    except FileNotFoundError:
        return False
    if fd is None:
        return _stale(path, now or time.time())
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) and not stat.S_ISDIR(os.fstat(fd).st_mode):
            return _stale(path, now or time.time())
        return _unheld(fd)
    finally:
        os.close(fd)


def reclaim(path: Path, now: float | None = None) -> bool:
    """Remove ``path`` if nobody holds it, holding its lock while removing it (a writer
    that locks it meanwhile sees it gone and makes another). True if removed."""
    try:
        fd = _open_unfollowed(path)
    except FileNotFoundError:
        return False
    if fd is None:
        if not _stale(path, now or time.time()):
            return False
        remove_entry(path)
        return True
    try:
        mode = os.fstat(fd).st_mode
        unheld = _unheld(fd) if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else \
            _stale(path, now or time.time())
        if unheld and _same(os.fspath(path), fd):
            remove_entry(path)
            return True
        return False
    finally:
        os.close(fd)
