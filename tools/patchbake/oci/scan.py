"""Stream an image's layers without extracting them.

Each layer blob is read once, front to back: the raw bytes are hashed for the layer digest,
the (decompressed) tar bytes for the diff_id, and tar headers are parsed on the fly. Files
inside the *tracked* region (the vLLM package and /opt/patchbake) are hashed in memory;
whiteouts and opaque directories are applied to that in-memory view. A layer is trusted
only after it has been drained to EOF and both its digests matched; a bad digest, a size
mismatch or an unsafe entry raises before anything is returned.

With ``write_root`` the tracked vLLM files are also written under a staging directory
(``materialise``); symlinks, hardlinks to untracked files and devices are refused there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ImageError, IntegrityError, UnsafeArchiveError
from .image import Blobs, Image
from .media import compression_of

_READ = 1 << 20
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
KEEP = "opt/patchbake/"  # the identity record and verifier: kept in memory for checks
_KEEP_MAX = 16 << 20


@dataclass(frozen=True)
class FileInfo:
    kind: str  # "file" | "symlink" | "other"
    mode: int
    size: int
    sha256: str  # content hash; for a symlink, hash of the target
    layer: int


@dataclass
class LayerReport:
    digest: str
    diff_id: str
    size: int
    entries: int


@dataclass
class View:
    files: dict[str, FileInfo] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)  # small files under KEEP
    layers: list[LayerReport] = field(default_factory=list)
    bytes_read: int = 0


class _LayerReader:
    """File-like reader over a blob: hashes raw bytes (digest) and tar bytes (diff_id)."""

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        self.raw = raw
        self.raw_hash = hashlib.sha256()
        self.tar_hash = self.raw_hash if compression == "none" else hashlib.sha256()
        self.raw_size = 0
        self.inflate = zlib.decompressobj(31) if compression == "gzip" else None
        self.pending = b""
        self.eof = False

    def _fill(self) -> bytes:
        chunk = self.raw.read(_READ)
        if not chunk:
            self.eof = True
            if self.inflate is not None:
                tail = self.inflate.flush()
                self.tar_hash.update(tail)
                return tail
            return b""
        self.raw_size += len(chunk)
        self.raw_hash.update(chunk)
        if self.inflate is None:
            return chunk
        out = self.inflate.decompress(chunk)
        # concatenated gzip members are legal in layers: restart on each new member
        while self.inflate.eof and self.inflate.unused_data:
            rest = self.inflate.unused_data
            self.inflate = zlib.decompressobj(31)
            out += self.inflate.decompress(rest)
        self.tar_hash.update(out)
        return out

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or len(self.pending) < n) and not self.eof:
            try:
                self.pending += self._fill()
            except zlib.error as exc:
                raise IntegrityError(f"layer is not valid gzip: {exc}") from None
        if n < 0:
            n = len(self.pending)
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def drain(self) -> bool:
        """Read to EOF; True when everything left after the tar end is zero bytes."""
        clean = not self.pending.strip(b"\0")
        self.pending = b""
        while not self.eof:
            rest = self._fill()
            clean = clean and not rest.strip(b"\0")
        return clean


def _clean_name(name: str, layer: int) -> str:
    n = name
    while n.startswith("./"):
        n = n[2:]
    n = n.lstrip("/").rstrip("/")
    parts = n.split("/")
    if "\0" in n or any(p == ".." for p in parts):
        raise UnsafeArchiveError(f"layer {layer} entry {name!r} escapes the image root")
    return "/".join(p for p in parts if p not in ("", "."))


class _Scanner:
    def __init__(self, tracked: tuple[str, ...], write_root: Path | None,
                 write_prefix: str) -> None:
        self.tracked = tracked
        self.view = View()
        self.dirs: set[str] = set()
        self.write_root = write_root
        self.write_prefix = write_prefix

    def is_tracked(self, path: str) -> bool:
        return any(path.startswith(p) for p in self.tracked)

    def _dest(self, path: str) -> Path | None:
        if self.write_root is None or not path.startswith(self.write_prefix):
            return None
        return self.write_root / path[len(self.write_prefix):]

    def remove(self, path: str, layer: int, children_only: bool = False) -> None:
        pre = path + "/"
        doomed = [k for k, v in self.view.files.items()
                  if v.layer < layer and (k.startswith(pre) or (k == path and not children_only))]
        for k in doomed:
            del self.view.files[k]
            self.view.contents.pop(k, None)
        dest = self._dest(path + "/") if children_only else self._dest(path)
        if dest is not None and (dest.exists() or dest.is_symlink()):
            if dest.is_dir() and not dest.is_symlink():
                for child in list(dest.iterdir()) if children_only else [dest]:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            elif not children_only:
                dest.unlink()

    def entry(self, tar: tarfile.TarFile, m: tarfile.TarInfo, layer: int) -> None:
        path = _clean_name(m.name, layer)
        if not path:
            return
        base = path.rpartition("/")[2]
        parent = path.rpartition("/")[0]
        if m.ischr() or m.isblk() or m.isfifo():
            raise UnsafeArchiveError(f"layer {layer} entry {path!r} is a device or fifo")
        if base == OPAQUE:
            self.remove(parent, layer, children_only=True)
            return
        if base.startswith(WHITEOUT):
            self.remove(f"{parent}/{base[len(WHITEOUT):]}" if parent else base[len(WHITEOUT):],
                        layer)
            return
        if m.isdir():
            if self.is_tracked(path + "/"):
                self.dirs.add(path)
            return
        if path in self.dirs or any(p.startswith(path + "/") for p in self.tracked):
            self.dirs.discard(path)
            self.remove(path, layer, children_only=True)
        if not self.is_tracked(path):
            return
        dest = self._dest(path)
        if m.issym():
            if dest is not None:
                raise UnsafeArchiveError(f"layer {layer}: {path} is a symlink; a materialised "
                                         "vLLM tree holds regular files only")
            self.view.files[path] = FileInfo("symlink", 0o777, 0,
                                             hashlib.sha256(m.linkname.encode()).hexdigest(), layer)
            return
        if m.islnk():
            target = _clean_name(m.linkname, layer)
            info = self.view.files.get(target)
            if info is None or info.kind != "file":
                raise UnsafeArchiveError(f"layer {layer}: hardlink {path} -> {m.linkname} "
                                         "points outside the checked files")
            self.view.files[path] = FileInfo("file", m.mode & 0o7777, info.size, info.sha256,
                                             layer)
            src = self._dest(target)
            if dest is not None and src is not None:
                shutil.copyfile(src, dest)
                os.chmod(dest, m.mode & 0o755)
            return
        if not m.isreg():
            raise UnsafeArchiveError(f"layer {layer} entry {path!r} has tar type {m.type!r}")
        h = hashlib.sha256()
        src_f = tar.extractfile(m)
        assert src_f is not None
        out = None
        keep: list[bytes] | None = [] if path.startswith(KEEP) and m.size <= _KEEP_MAX else None
        if dest is not None:
            self.remove(path, layer)
            for anc in reversed(dest.relative_to(self.write_root).parents):  # type: ignore[arg-type]
                if (self.write_root / anc).is_symlink():  # type: ignore[operator]
                    raise UnsafeArchiveError(f"{path}: a parent directory is a symlink")
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = open(dest, "wb")
        try:
            for chunk in iter(lambda: src_f.read(_READ), b""):
                h.update(chunk)
                if out is not None:
                    out.write(chunk)
                if keep is not None:
                    keep.append(chunk)
        finally:
            if out is not None:
                out.close()
                os.chmod(dest, 0o755 if m.mode & 0o111 else 0o644)  # type: ignore[arg-type]
        self.view.files[path] = FileInfo("file", m.mode & 0o7777, m.size, h.hexdigest(), layer)
        if keep is not None:
            self.view.contents[path] = b"".join(keep)
        else:
            self.view.contents.pop(path, None)


def scan_image(image: Image, blobs: Blobs, tracked: tuple[str, ...], *,
               write_root: Path | None = None, write_prefix: str = "",
               progress: Callable[[int], None] | None = None) -> View:
    """Stream every layer of ``image``; return the tracked region's final view."""
    scanner = _Scanner(tracked, write_root, write_prefix)
    diff_ids = image.diff_ids
    for i, desc in enumerate(image.layers):
        compression = compression_of(desc.media_type)
        with blobs.open(desc.digest) as raw:
            reader = _LayerReader(raw, compression)
            count = 0
            try:
                with tarfile.open(fileobj=reader, mode="r|", bufsize=_READ) as tar:  # type: ignore[call-overload]
                    for m in tar:
                        scanner.entry(tar, m, i)
                        count += 1
                        tar.members = []  # stream mode keeps every member otherwise
            except tarfile.TarError as exc:
                reader.drain()
                _check_digests(reader, desc.digest, desc.size, diff_ids[i], i)
                raise IntegrityError(f"layer {i} ({desc.digest}) is not a valid tar: {exc}") from None
            clean = reader.drain()
        _check_digests(reader, desc.digest, desc.size, diff_ids[i], i)
        if not clean:
            raise UnsafeArchiveError(f"layer {i} ({desc.digest}) has data after the end of "
                                     "its tar archive")
        scanner.view.layers.append(LayerReport(desc.digest, diff_ids[i], reader.raw_size, count))
        scanner.view.bytes_read += reader.raw_size
        if progress:
            progress(reader.raw_size)
    return scanner.view


def _check_digests(reader: _LayerReader, digest: str, size: int, diff_id: str,
                   i: int) -> None:
    got = "sha256:" + reader.raw_hash.hexdigest()
    if got != digest:
        raise IntegrityError(f"layer {i}: blob {digest} hashes to {got}: the layer's bytes "
                             "were changed")
    if reader.raw_size != size:
        raise IntegrityError(f"layer {i}: blob {digest} is {reader.raw_size} bytes; the "
                             f"manifest says {size}")
    got_diff = "sha256:" + reader.tar_hash.hexdigest()
    if got_diff != diff_id:
        raise IntegrityError(f"layer {i}: uncompressed tar hashes to {got_diff}; the config's "
                             f"diff_id is {diff_id} (layer swapped or config edited)")
    if not isinstance(diff_id, str):
        raise ImageError(f"layer {i}: diff_id {diff_id!r} is not a string")
