"""Content-addressed store: blobs named by sha256, written atomically, shared under locks.

Layout under the store root (``PATCHBAKE_HOME`` or the user cache dir)::

    blobs/sha256/<hex>      immutable content
    trees/<hex>/            extracted trees keyed by the blob (or tree) digest
    locks/<name>.lock       advisory flock files
    sources/<key>.json      source records written by patchbake.sources (pin -> tree)
    tmp/                    staging for downloads and extractions (same filesystem)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import platformdirs

from .digest import hex_of
from .errors import IntegrityError, PatchbakeError, StoreError
from .fsutil import CHUNK, fsync_dir


def default_root() -> Path:
    env = os.environ.get("PATCHBAKE_HOME")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("patchbake"))


def _check_hex(digest: str) -> str:
    """A blob's hex from ``sha256:<hex>`` or a bare hex; anything else is refused."""
    try:
        return hex_of(digest)
    except PatchbakeError:
        raise IntegrityError(f"'{digest}' is not a sha256 digest (64 lowercase hex "
                             "digits)") from None


@dataclass(frozen=True)
class Store:
    root: Path

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None) -> Store:
        r = Path(root) if root else default_root()
        try:
            for sub in ("blobs/sha256", "trees", "locks", "tmp", "sources"):
                (r / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"store at {r} is not writable: {exc.strerror}",
                hint="set PATCHBAKE_HOME to a writable directory",
            ) from exc
        return cls(r)

    # -- blobs -------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / _check_hex(digest)

    def has(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def tmpdir(self, prefix: str = "tmp") -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{prefix}.", dir=self.root / "tmp"))

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        path = self.root / "locks" / f"{safe}.lock"
        with open(path, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def put_stream(self, chunks: Iterable[bytes], expected: str | None = None) -> str:
        """Store a stream; verify ``expected`` before the blob becomes visible."""
        want = _check_hex(expected) if expected else None
        fd, tmp = tempfile.mkstemp(prefix="blob.", dir=self.root / "tmp")
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            got = h.hexdigest()
            if want and got != want:
                raise IntegrityError(
                    f"content hashed to sha256:{got}, expected sha256:{want}; nothing was stored"
                )
            dest = self.blob_path(got)
            os.chmod(tmp, 0o444)
            os.replace(tmp, dest)
            fsync_dir(dest.parent)
            return got
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def put_bytes(self, data: bytes, expected: str | None = None) -> str:
        return self.put_stream([data], expected)

    def put_file(self, path: str | os.PathLike[str], expected: str | None = None) -> str:
        with open(path, "rb") as f:
            return self.put_stream(iter(lambda: f.read(CHUNK), b""), expected)

    def open_blob(self, digest: str) -> BinaryIO:
        p = self.blob_path(digest)
        if not p.is_file():
            raise StoreError(f"blob sha256:{_check_hex(digest)} is not in the store at {self.root}")
        return open(p, "rb")

    def read_blob(self, digest: str) -> bytes:
        with self.open_blob(digest) as f:
            return f.read()

    def fsck(self) -> list[str]:
        """Return the digests of blobs whose content no longer matches their name."""
        bad = []
        for p in sorted((self.root / "blobs" / "sha256").iterdir()):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    h.update(chunk)
            if h.hexdigest() != p.name:
                bad.append(p.name)
        return bad

    # -- trees -------------------------------------------------------------------------
    def tree_path(self, key: str) -> Path:
        return self.root / "trees" / _check_hex(key)

    def publish_tree(self, staging: Path, key: str) -> Path:
        """Move a fully built staging directory into place under ``key`` (atomic rename)."""
        dest = self.tree_path(key)
        if dest.exists():
            shutil.rmtree(staging, ignore_errors=True)
            return dest
        try:
            os.replace(staging, dest)
        except OSError:
            # another process published the same key between our check and rename
            # (rename onto a non-empty directory fails): theirs is as good as ours
            if not dest.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
            return dest
        fsync_dir(dest.parent)
        return dest
