"""Scratch directories outside the store that a killed process cannot leave behind for
good. Standard library only (the bare guard imports it).

A :class:`Scratch` is held by its process with a lock on its ``.held`` file. A process
killed before it could clean up (SIGKILL, an out-of-memory kill) leaves its directory
behind: on ``/dev/shm`` that is memory kept until reboot. Making a new one with the same
prefix first removes those whose lock nobody holds:

- ``.held`` is made under another name, locked, and only then renamed into place, so a
  ``.held`` nobody holds is one whose owner is gone (never one being made);
- an unheld directory is removed only when it has not changed for :data:`DEAD_AGE_S`
  (on a file system whose locks are not shared between hosts, such as NFS mounted with
  local locks, that keeps a running owner's directory), and one without ``.held`` (its
  owner died between making it and holding it) after :data:`ORPHAN_AGE_S`;
- only this user's directories are looked at, ``.held`` is opened without following a
  link or waiting (a FIFO planted there cannot hang the sweep) and must be a regular
  file, and the removal does not follow symbolic links (``shutil.rmtree``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

DEAD_AGE_S = 600.0  # unheld and unchanged this long: its owner is gone
ORPHAN_AGE_S = 3600.0  # no ``.held`` at all and unchanged this long: left behind
_HELD = ".held"


def memory_tmp() -> Path:
    """Where short-lived scratch files go: a memory file system when there is one."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


class Scratch:
    """A directory ``<parent>/<prefix>XXXXXXXX`` (``parent``: :func:`memory_tmp`) that
    this process holds until :meth:`remove`; see the module docstring."""

    def __init__(self, prefix: str, parent: Path | None = None) -> None:
        where = parent or memory_tmp()
        sweep(where, prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=where)).absolute()
        fd = -1
        try:
            making = os.path.join(self.path, _HELD + ".new")
            fd = os.open(making, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(making, os.path.join(self.path, _HELD))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        self._fd = fd

    def remove(self) -> None:
        """Remove the directory, then let go of it (a sweeper never finds it unheld)."""
        if self._fd < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = -1


def sweep(where: Path, prefix: str) -> None:
    """Remove the directories ``prefix*`` of this user in ``where`` whose owner is gone."""
    try:
        entries = [e for e in os.scandir(where) if e.name.startswith(prefix)]
    except OSError:
        return
    now = time.time()
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        try:
            fd = os.open(os.path.join(e.path, _HELD),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:  # its owner died before it held it
            if now - st.st_mtime > ORPHAN_AGE_S:
                shutil.rmtree(e.path, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or now - st.st_mtime <= DEAD_AGE_S:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its owner is alive
                continue
            shutil.rmtree(e.path, ignore_errors=True)
        finally:
            os.close(fd)
