"""Atomic writes, hashing, canonical JSON and safe reads of named inputs, shared by every
stage. Standard library and errors.py only: tools/check_patch_files.py imports it."""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from .errors import InputLimitError, OutputPathError, PatchbakeError
from .staging import new_file, reclaim


CHUNK = 1 << 20
# what a file named as an input may hold unless its reader says otherwise: far above any
# record, statement, policy or patch the tool reads whole, far below what exhausts memory
INPUT_BYTES = 256 << 20

# how a reader says which error a refused input raises: an error class taking the message
# (ConfigError), or a function building one (a partial of EvidenceError with its reason)
ErrorFactory = Callable[[str], PatchbakeError]

_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")


def open_input(path: str | os.PathLike[str], what: str, error: ErrorFactory, *,
               missing: ErrorFactory | None = None) -> BinaryIO:
    """Open a file that a user, a repository or a bundle names, for reading.

    Opening never blocks (O_NONBLOCK: a FIFO opened so returns at once instead of waiting
    for a writer), and what was opened is checked on its descriptor (no race with a rename)
    to be a regular file: a FIFO, socket, device or directory is refused with
    ``error("<what> <path> is a FIFO ..., not a regular file")``, as is an unreadable file;
    a missing one raises ``missing("<what> <path> does not exist")`` (default: ``error``).
    Symbolic links are followed; what they lead to is checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise (missing or error)(f"{what} {path} does not exist") from None
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): name what it is
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path} is {_kind(mode)}, not a regular file; refusing to "
                        "read it") from None
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path} is {_kind(mode)}, not a regular file; refusing to "
                        "read it")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | os.PathLike[str], what: str, error: ErrorFactory,
               cap: int = INPUT_BYTES, *, missing: ErrorFactory | None = None,
               hint: str | None = None) -> bytes:
    """The bytes of a named input (see :func:`open_input`), at most ``cap`` of them: a
    larger file is an InputLimitError (exit 15) naming it, with ``hint``."""
    with open_input(path, what, error, missing=missing) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            data = f.read(cap + 1) if size <= cap else b""
        except OSError as exc:
            raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    if size > cap or len(data) > cap:
        raise InputLimitError(f"{what} {path}: {max(size, len(data))} bytes exceeds the cap of "
                              f"{cap}; refusing to read it", hint=hint)
    return data


def open_lock(path: str | os.PathLike[str], error: ErrorFactory) -> BinaryIO:
    """Open (creating it) a lock file for ``flock``, without blocking: a FIFO, socket,
    device or directory in its place is refused with ``error`` naming it, never waited
    on. A write the file system refuses is left to the caller as OSError."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise exc from None
        if stat.S_ISREG(mode):
            raise
        fd = -1
    else:
        mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        if fd >= 0:
            os.close(fd)
        raise error(f"lock file {path} is {_kind(mode)}, not a regular file; remove it "
                    "(nothing holds a lock through it)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a+b")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: the form every digest is taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def pretty_json(obj: Any) -> bytes:
    """Stable human-readable form for committed records (sorted keys, 2-space indent)."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs(path: str | os.PathLike[str]) -> bool:
    """syncfs(2) on the file system holding ``path``: one call flushes a whole extracted
    tree (per-file fsync of a 6,000-file tree costs seconds to minutes on a busy disk)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        return bool(fn(fd) == 0)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Make every file and directory under ``root`` durable: syncfs where the platform
    has it, else fsync each regular file and directory."""
    if _syncfs(root):
        return
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def staging_owner(name: str) -> int | None:
    """The pid in a staging name ``<what>.<pid>.<random>`` (or ``.<file>.<pid>.<r>.tmp``):
    a hint for a person reading the store, never a liveness test (see :mod:`staging`)."""
    m = re.match(r"^\.?[^.]+(?:\.[^.]+)*?\.(\d+)\.[^.]+(?:\.tmp)?$", name)
    return int(m.group(1)) if m else None


def _sweep_siblings(target: Path) -> None:
    """Remove ``.<name>.<pid>.<r>.tmp`` left beside ``target`` by a writer that died (one
    nobody holds: see :mod:`staging`)."""
    try:
        stale = list(target.parent.glob(f".{glob.escape(target.name)}.*.tmp"))
    except OSError:
        return
    for p in stale:
        try:
            reclaim(p)
        except OSError:
            pass


def read_optional(path: str | os.PathLike[str], what: str, error: ErrorFactory,
                  cap: int = INPUT_BYTES) -> bytes | None:
    """:func:`read_input`, except that nothing at ``path`` (not even a link) is None."""
    if not os.path.lexists(path):
        return None
    return read_input(path, what, error, cap)


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write to a temp file beside ``path``, fsync, rename. Nothing is left on failure."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_siblings(target)

    # held (locked) until renamed into place: a sweeper tells a crash's leftovers from a
    # live write by that lock
    fd, tmp = new_file(target.parent, f".{target.name}.{os.getpid()}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    with atomic_writer(path, mode) as f:
        f.write(data)


def cache_write(path: str | os.PathLike[str], data: bytes) -> str | None:
    """Write a file that only saves time (a memo, a cache): a file system that refuses it
    (full, read-only, no permission) is not an error -- the work is redone next time.
    Returns None when written, else why not; nothing half-written is left either way."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_once(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write ``data`` unless the file exists. Existing identical content is fine (returns
    False); existing different content raises ``FileExistsError`` -- records are never
    overwritten with something else."""
    p = Path(path)
    if p.exists():
        if p.read_bytes() == data:
            return False
        raise FileExistsError(str(p))
    atomic_write(p, data)
    return True


def _related(path: Path, dest: Path) -> bool:
    """Is ``path`` (an OSError's file) part of writing ``dest``: dest itself, inside it,
    one of its parents being made, or a temp file beside it?"""
    p, d = Path(os.path.abspath(path)), Path(os.path.abspath(dest))
    return p == d or d in p.parents or p in d.parents or p.parent == d.parent


@contextmanager
def output_to(dest: Path, option: str) -> Iterator[None]:
    """Turn a write the file system refuses at ``dest`` (under /proc, read-only, a file in
    the way, full) into one OutputPathError (17) naming it; other failures pass."""
    try:
        yield
    except OSError as exc:
        where = exc.filename
        if where is None or not _related(Path(os.fsdecode(where)), dest):
            raise
        raise OutputPathError(f"{dest} cannot be written: {exc.strerror or exc} "
                              f"({os.fsdecode(where)})",
                              hint=f"pass {option} a path on a writable file system") from exc
