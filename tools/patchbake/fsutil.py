"""Atomic writes, hashing and canonical JSON shared by every stage."""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


CHUNK = 1 << 20


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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def staging_owner(name: str) -> int | None:
    """The pid in a staging name ``<what>.<pid>.<random>`` (or ``.<file>.<pid>.<r>.tmp``)."""
    m = re.match(r"^\.?[^.]+(?:\.[^.]+)*?\.(\d+)\.[^.]+(?:\.tmp)?$", name)
    return int(m.group(1)) if m else None


def _sweep_siblings(target: Path) -> None:
    """Remove ``.<name>.<pid>.<r>.tmp`` left beside ``target`` by a writer that died."""
    try:
        stale = list(target.parent.glob(f".{glob.escape(target.name)}.*.tmp"))
    except OSError:
        return
    for p in stale:
        pid = staging_owner(p.name)
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            try:
                p.unlink()
            except OSError:
                pass


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write to a temp file beside ``path``, fsync, rename. Nothing is left on failure."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_siblings(target)

    # the pid in the name lets `patchbake store gc` tell a crash's leftovers from a live write
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                               dir=target.parent)
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
