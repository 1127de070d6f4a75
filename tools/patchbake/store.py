"""Content-addressed store: blobs named by sha256, written atomically, shared under locks.

Layout under the store root (``PATCHBAKE_HOME`` or the user cache dir)::

    blobs/sha256/<hex>      immutable content
    trees/<hex>/            extracted trees keyed by the blob (or tree) digest
    locks/<name>.lock       advisory flock files
    sources/<key>.json      source records written by patchbake.sources (pin -> tree)
    tmp/                    staging for downloads and extractions (same filesystem)
    quarantine/             blobs ``store fsck --quarantine`` moved aside

A staging entry is held by its writer with a lock on the entry itself (see
:mod:`patchbake.staging`): one nobody holds is litter from a crash, swept when the store
is next opened (and by ``patchbake store gc``). Liveness is never judged by a process id,
which means nothing across PID namespaces (two containers sharing one store). Disk full, quota and read-only file systems become one-line
StoreErrors (exit 13); whatever was being written is removed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .digest import ALGORITHM, Digest, is_hex
from .errors import IntegrityError, StoreError
from .fsutil import CHUNK, fsync_dir, fsync_tree, open_lock
from .staging import is_litter as is_litter  # re-exported: the store's litter test
from .staging import discard, new_dir, new_file, reclaim, release
from .staging import remove_entry as remove_entry  # re-exported: storecheck
from .userdirs import user_cache_dir


# errno values that mean "this store cannot take writes", as opposed to a bug
NO_WRITE = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
            errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted"}


def file_system_of(path: str | os.PathLike[str]) -> str:
    """The mount point of the file system holding ``path`` (or its nearest existing
    parent): what a person frees space on."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        dev = p.stat().st_dev
        while p != p.parent and p.parent.stat().st_dev == dev:
            p = p.parent
    except OSError:
        pass
    return str(p)


def write_failure(exc: OSError, where: object) -> StoreError | None:
    """A StoreError for a write the file system refused (full, read-only, ...), else None.
    It names the file and the file system (its mount point)."""
    why = NO_WRITE.get(exc.errno or 0)
    if why is None:
        return None
    name = getattr(exc, "filename", None) or where
    return StoreError(f"cannot write {name}: {why} (the file system at "
                      f"{file_system_of(os.fsdecode(str(name)))}); nothing half-written was kept",
                      hint="free space or make the store writable (PATCHBAKE_HOME), then rerun")


def default_root() -> Path:
    env = os.environ.get("PATCHBAKE_HOME")
    if env:
        try:
            return Path(env).expanduser()
        except RuntimeError:  # ~user of no such user
            raise StoreError(f"PATCHBAKE_HOME={env!r}: no such user's home directory",
                             hint="set PATCHBAKE_HOME to a directory path") from None

    return user_cache_dir()


@dataclass(frozen=True, slots=True)
class Store:
    """The content-addressed store at ``root``."""

    root: Path

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None, *, sweep: bool = True) -> Store:
        """The store at ``root`` (made if missing); ``sweep`` removes crash litter."""
        r = Path(root) if root else default_root()
        try:
            for sub in ("blobs/sha256", "trees", "locks", "tmp", "sources"):
                (r / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"store at {r} is not writable: {exc.strerror}",
                hint="set PATCHBAKE_HOME to a writable directory",
            ) from exc
        store = cls(r)
        if sweep:
            store.sweep_tmp()
        return store

    def sweep_tmp(self) -> list[Path]:
        """Remove staging entries left by processes that died (kill -9, power loss)."""
        gone: list[Path] = []
        try:
            entries = list((self.root / "tmp").iterdir())
        except OSError:
            return gone
        now = time.time()
        for p in entries:
            try:
                if reclaim(p, now):
                    gone.append(p)
            except OSError:
                continue  # a read-only store: fsck reports it
        # half-written records (``.<name>.<pid>.<r>.tmp``) in the record directories
        for sub in ("", "sources", "patched", "bakes", "registry"):
            d = self.root / sub
            try:
                found = [p for p in d.glob(".*.tmp") if is_litter(p, now)]
            except OSError:
                continue
            for p in found:
                try:
                    if reclaim(p, now):
                        gone.append(p)
                except OSError:
                    continue
        return gone

    # -- blobs -------------------------------------------------------------------------
    def blob_path(self, digest: Digest) -> Path:
        return self.root / "blobs" / digest.algorithm / digest.hex

    def has(self, digest: Digest) -> bool:
        return self.blob_path(digest).is_file()

    def blob_digests(self) -> list[Digest]:
        """Every blob's digest, by its file name (what a short digest may expand to)."""
        d = self.root / "blobs" / ALGORITHM
        return [Digest.from_hex(p.name) for p in (d.iterdir() if d.is_dir() else ())
                if is_hex(p.name)]

    def tmpdir(self, prefix: str = "tmp") -> Path:
        try:
            return new_dir(self.root / "tmp", f"{prefix}.{os.getpid()}.")
        except OSError as exc:
            raise write_failure(exc, self.root / "tmp") or exc

    def lock_path(self, name: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        return self.root / "locks" / f"{safe}.lock"

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        path = self.lock_path(name)
        while True:
            try:
                f = open_lock(path, StoreError)
            except OSError as exc:
                raise write_failure(exc, path) or exc
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                # `store gc` unlinks idle lock files (while holding them): a lock taken on
                # an unlinked file guards nothing, so take the one now at the path
                try:
                    same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
                except FileNotFoundError:
                    same = False
                if not same:
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
                return
            finally:
                f.close()

    def put_stream(self, chunks: Iterable[bytes], expected: Digest | None = None) -> Digest:
        """Store a stream; verify ``expected`` before the blob becomes visible."""
        try:
            fd, tmp = new_file(self.root / "tmp", f"blob.{os.getpid()}.")
        except OSError as exc:
            raise write_failure(exc, self.root / "tmp") or exc
        h = hashlib.sha256()
        try:
            # the file stays open (its lock held) until it is renamed into place
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
                got = Digest.from_hex(h.hexdigest())
                if expected is not None and got != expected:
                    raise IntegrityError(
                        f"content hashed to {got}, expected {expected}; nothing was stored"
                    )
                dest = self.blob_path(got)
                os.chmod(tmp, 0o444)
                os.replace(tmp, dest)
            fsync_dir(dest.parent)
            return got
        except BaseException as exc:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            failed = write_failure(exc, tmp) if isinstance(exc, OSError) else None
            if failed is not None:
                raise failed from exc
            raise

    def put_bytes(self, data: bytes, expected: Digest | None = None) -> Digest:
        return self.put_stream([data], expected)

    def hold_bytes(self, data: bytes, expected: Digest) -> Digest:
        """:meth:`put_bytes`, unless the store already holds exactly ``data`` under that
        name (compared, not trusted by name): nothing is written, so a read-only store
        that has it is enough."""
        try:
            with open(self.blob_path(expected), "rb") as f:
                if f.read(len(data) + 1) == data:
                    return expected
        except FileNotFoundError:
            pass
        return self.put_bytes(data, expected)

    def put_file(self, path: str | os.PathLike[str], expected: Digest | None = None) -> Digest:
        with open(path, "rb") as f:
            return self.put_stream(iter(lambda: f.read(CHUNK), b""), expected)

    def open_blob(self, digest: Digest) -> BinaryIO:
        p = self.blob_path(digest)
        if not p.is_file():
            raise StoreError(f"blob {digest} is not in the store at {self.root}")
        return open(p, "rb")

    def read_blob(self, digest: Digest) -> bytes:
        with self.open_blob(digest) as f:
            return f.read()

    # -- trees -------------------------------------------------------------------------
    def tree_path(self, key: Digest) -> Path:
        return self.root / "trees" / key.hex

    def publish_tree(self, staging: Path, key: Digest) -> Path:
        """Move a fully built staging directory into place under ``key`` (atomic rename)."""
        dest = self.tree_path(key)
        if dest.exists():
            shutil.rmtree(staging, ignore_errors=True)
            self.release(staging)
            return dest
        # every file and directory reaches the disk before the rename makes the tree
        # visible: after a power loss a final name never holds empty files
        fsync_tree(staging)
        try:
            os.replace(staging, dest)
        except OSError:
            # another process published the same key between our check and rename
            # (rename onto a non-empty directory fails): theirs is as good as ours
            if not dest.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
            self.release(staging)
            return dest
        self.release(staging)
        fsync_dir(dest.parent)
        return dest

    @staticmethod
    def discard(staging: Path) -> None:
        """Remove a staging directory from :meth:`tmpdir` and let go of it (an interrupt
        landing meanwhile does not cut the removal short)."""
        discard(staging)

    @staticmethod
    def release(staging: Path) -> None:
        """Let go of a staging directory from :meth:`tmpdir` (a no-op for one inside it:
        the lock is on the directory :meth:`tmpdir` made)."""
        release(staging)
