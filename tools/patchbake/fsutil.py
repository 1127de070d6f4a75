"""Atomic writes, hashing and canonical JSON shared by every stage."""

from __future__ import annotations

import hashlib
import json
import os
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


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every regular file and directory under ``root`` (root included)."""
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


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write to a temp file beside ``path``, fsync, rename. Nothing is left on failure."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
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
