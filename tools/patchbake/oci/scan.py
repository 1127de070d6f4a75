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

import base64
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import ImageError, IntegrityError, UnsafeArchiveError
from ..fsutil import atomic_write
from .image import Blobs, Image
from .media import compression_of
from .tarstream import HashedBlob, LayerBytes, Member, members

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
CACHE_FORMAT = "patchbake-layer-ops/1"
KEEP = "opt/patchbake/"  # the identity record and verifier: kept in memory for checks
_KEEP_MAX = 16 << 20


class FileInfo(NamedTuple):  # a tuple: built once per tracked file, so keep it cheap
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


def _clean_name(name: str, layer: int) -> str:
    # fast path: the common, already-clean name (most entries of every real layer)
    if "\0" not in name and ".." not in name and "//" not in name and "/./" not in name \
            and not name.startswith(("./", "/")):
        return name.rstrip("/")
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
        # "DIR/*SUFFIX" tracks the entries directly in DIR whose name ends so (``*.pth``)
        self.named: dict[str, tuple[str, ...]] = {}
        for t in tracked:
            if "/*" in t:
                d, suffix = t[:t.index("/*")], t[t.index("/*") + 2:]
                self.named[d] = (*self.named.get(d, ()), suffix)
        self.tracked = tuple(t for t in tracked if "/*" not in t)
        self.view = View()
        self.dirs: set[str] = set()
        self.ops: list[list[Any]] | None = None  # what this layer did, for the layer cache
        self.write_root = write_root
        self.write_prefix = write_prefix
        self._left = 0
        # directories above the tracked region: replacing one with a file hides it all
        self.above = {"/".join(t.rstrip("/").split("/")[:i]) for t in tracked
                      for i in range(1, len(t.rstrip("/").split("/")) + 1)}

    def is_tracked(self, path: str) -> bool:
        if path.startswith(self.tracked):
            return True
        if self.named:
            parent, _, name = path.rpartition("/")
            return name.endswith(self.named.get(parent, ()))
        return False

    def _dest(self, path: str) -> Path | None:
        if self.write_root is None or not path.startswith(self.write_prefix):
            return None
        return self.write_root / path[len(self.write_prefix):]

    def set_file(self, path: str, info: FileInfo, data: bytes | None = None) -> None:
        self.view.files[path] = info
        if data is not None:
            self.view.contents[path] = data
        else:
            self.view.contents.pop(path, None)
        if self.ops is not None:
            self.ops.append(["f", path, *info[:4],
                             None if data is None else base64.b64encode(data).decode()])

    def add_dir(self, path: str) -> None:
        self.dirs.add(path)
        if self.ops is not None:
            self.ops.append(["d", path])

    def replace_dir(self, path: str, layer: int) -> None:
        self.dirs.discard(path)
        self.remove(path, layer, children_only=True)

    def replay(self, ops: list[list[Any]], layer: int) -> None:
        for op in ops:
            if op[0] == "f":
                data = None if op[6] is None else base64.b64decode(op[6])
                self.set_file(op[1], FileInfo(op[2], op[3], op[4], op[5], layer), data)
            elif op[0] == "d":
                self.add_dir(op[1])
            elif op[0] == "r":
                self.remove(op[1], layer, children_only=op[2])
            elif op[0] == "x":
                self.replace_dir(op[1], layer)

    def remove(self, path: str, layer: int, children_only: bool = False) -> None:
        if self.ops is not None:
            self.ops.append(["r", path, children_only])
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

    def entry(self, src: LayerBytes, m: Member, layer: int) -> None:
        """Handle one member; consumes its data (always exactly ``m.size`` bytes)."""
        try:
            self._entry(src, m, layer)
        finally:
            if self._left:
                src.skip(self._left)
                self._left = 0

    def _entry(self, src: LayerBytes, m: Member, layer: int) -> None:
        self._left = m.size
        path = _clean_name(m.name, layer)
        if not path:
            return
        base = path.rpartition("/")[2]
        parent = path.rpartition("/")[0]
        if m.type in (b"3", b"4", b"6"):
            raise UnsafeArchiveError(f"layer {layer} entry {path!r} is a device or fifo")
        if base == OPAQUE:
            self.remove(parent, layer, children_only=True)
            return
        if base.startswith(WHITEOUT):
            self.remove(f"{parent}/{base[len(WHITEOUT):]}" if parent else base[len(WHITEOUT):],
                        layer)
            return
        if m.type == b"5":
            if self.is_tracked(path + "/"):
                self.add_dir(path)
            return
        if path in self.dirs or path in self.above:
            if self.ops is not None:
                self.ops.append(["x", path])
                ops, self.ops = self.ops, None
                self.replace_dir(path, layer)
                self.ops = ops
            else:
                self.replace_dir(path, layer)
        if not self.is_tracked(path):
            return
        dest = self._dest(path)
        if m.type == b"2":
            if dest is not None:
                raise UnsafeArchiveError(f"layer {layer}: {path} is a symlink; a materialised "
                                         "vLLM tree holds regular files only")
            self.set_file(path, FileInfo("symlink", 0o777, 0,
                                         hashlib.sha256(m.linkname.encode()).hexdigest(), layer))
            return
        if m.type == b"1":
            target = _clean_name(m.linkname, layer)
            info = self.view.files.get(target)
            if info is None or info.kind != "file":
                raise UnsafeArchiveError(f"layer {layer}: hardlink {path} -> {m.linkname} "
                                         "points outside the checked files")
            self.set_file(path, FileInfo("file", m.mode & 0o7777, info.size, info.sha256, layer))
            linked = self._dest(target)
            if dest is not None and linked is not None:
                shutil.copyfile(linked, dest)
                os.chmod(dest, m.mode & 0o755)
            return
        h = hashlib.sha256()
        out = None
        keep: list[bytes | memoryview] | None = [] if path.startswith(KEEP) and m.size <= _KEEP_MAX else None
        if dest is not None:
            self.remove(path, layer)
            for anc in reversed(dest.relative_to(self.write_root).parents):  # type: ignore[arg-type]
                if (self.write_root / anc).is_symlink():  # type: ignore[operator]
                    raise UnsafeArchiveError(f"{path}: a parent directory is a symlink")
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = open(dest, "wb")  # noqa: SIM115 - closed in the finally below
        try:
            self._left = 0
            for chunk in src.pieces(m.size):
                h.update(chunk)
                if out is not None:
                    out.write(chunk)
                if keep is not None:
                    keep.append(chunk)
        finally:
            if out is not None:
                out.close()
                os.chmod(dest, 0o755 if m.mode & 0o111 else 0o644)  # type: ignore[arg-type]
        self.set_file(path, FileInfo("file", m.mode & 0o7777, m.size, h.hexdigest(), layer),
                      b"".join(keep) if keep is not None else None)


def _cache_file(cache_dir: Path | None, desc_digest: str, tracked: tuple[str, ...]
                ) -> Path | None:
    if cache_dir is None:
        return None
    key = hashlib.sha256("\0".join(tracked).encode()).hexdigest()[:16]
    return cache_dir / f"{desc_digest.removeprefix('sha256:')}-{key}.json"


def _load_ops(path: Path | None, digest: str, diff_id: str) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if doc.get("format") != CACHE_FORMAT or doc.get("digest") != digest \
            or doc.get("diff_id") != diff_id:
        return None
    return dict(doc)


def scan_image(image: Image, blobs: Blobs, tracked: tuple[str, ...], *,
               write_root: Path | None = None, write_prefix: str = "",
               progress: Callable[[int], None] | None = None,
               cache_dir: Path | None = None) -> View:
    """Stream every layer of ``image``; return the tracked region's final view.

    With ``cache_dir``, what a layer does to the tracked region (its "ops") is memoised by
    the layer digest: a later scan still reads and hashes every byte of the layer to EOF
    and checks digest and diff_id, and only when both match replays the ops instead of
    re-parsing -- the parse is a pure function of bytes that just hashed to that digest.
    """
    scanner = _Scanner(tracked, write_root, write_prefix)
    diff_ids = image.diff_ids
    if write_root is None and cache_dir is not None:
        memos = [_load_ops(_cache_file(cache_dir, d.digest, tracked), d.digest, diff_ids[i])
                 for i, d in enumerate(image.layers)]
        if all(m is not None for m in memos):
            return _replay_all(scanner, image, blobs, memos, progress)  # type: ignore[arg-type]
    for i, desc in enumerate(image.layers):
        compression = compression_of(desc.media_type)
        cache = _cache_file(cache_dir, desc.digest, tracked) if write_root is None else None
        memo = _load_ops(cache, desc.digest, diff_ids[i])
        with blobs.open(desc.digest) as raw:
            count = 0
            src: LayerBytes | HashedBlob
            if memo is not None:
                src = HashedBlob(raw, compression)
                clean = True
            else:
                src = LayerBytes(raw, compression)
                scanner.ops = [] if cache is not None else None
                try:
                    for m in members(src):
                        scanner.entry(src, m, i)
                        count += 1
                except IntegrityError as exc:
                    # a corrupt header: report a digest mismatch first when there is one
                    src.drain()
                    _check_digests(src, desc.digest, desc.size, diff_ids[i], i)
                    raise IntegrityError(f"layer {i} ({desc.digest}): {exc.message}") from None
                except BaseException:
                    src.close()
                    raise
                clean = src.drain()
        _check_digests(src, desc.digest, desc.size, diff_ids[i], i)
        if not clean:
            raise UnsafeArchiveError(f"layer {i} ({desc.digest}) has data after the end of "
                                     "its tar archive")
        if memo is not None:
            scanner.replay(memo["ops"], i)
            count = int(memo["entries"])
        elif cache is not None and scanner.ops is not None:
            atomic_write(cache, json.dumps({"format": CACHE_FORMAT, "digest": desc.digest,
                                            "diff_id": diff_ids[i], "entries": count,
                                            "ops": scanner.ops}).encode())
        scanner.ops = None
        scanner.view.layers.append(LayerReport(desc.digest, diff_ids[i], src.raw_size, count))
        scanner.view.bytes_read += src.raw_size
        if progress:
            progress(src.raw_size)
    return scanner.view


def _replay_all(scanner: _Scanner, image: Image, blobs: Blobs, memos: list[dict[str, Any]],
                progress: Callable[[int], None] | None) -> View:
    """Every layer memoised: hash all blobs in a thread (hashlib drops the GIL) while this
    thread replays the ops; nothing is returned before every digest and diff_id matched."""
    hashed: list[HashedBlob] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            for d in image.layers:
                with blobs.open(d.digest) as raw:
                    hashed.append(HashedBlob(raw, compression_of(d.media_type)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failed.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    for i, memo in enumerate(memos):
        scanner.replay(memo["ops"], i)
    worker.join()
    if failed:
        raise failed[0]
    for i, (desc, h, memo) in enumerate(zip(image.layers, hashed, memos)):
        _check_digests(h, desc.digest, desc.size, image.diff_ids[i], i)
        scanner.view.layers.append(LayerReport(desc.digest, image.diff_ids[i], h.raw_size,
                                               int(memo["entries"])))
        scanner.view.bytes_read += h.raw_size
        if progress:
            progress(h.raw_size)
    return scanner.view


def _check_digests(reader: LayerBytes | HashedBlob, digest: str, size: int, diff_id: str,
                   i: int) -> None:
    if not isinstance(diff_id, str):
        raise ImageError(f"layer {i}: diff_id {diff_id!r} is not a string")
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


def layer_ops(image: Image, blobs: Blobs, index: int, tracked: tuple[str, ...],
              cache_dir: Path | None = None) -> list[list[Any]]:
    """What layer ``index`` alone does (the layer-cache "ops": files set in the tracked
    region, every whiteout/opaque removal, directories replaced), after its digest and
    diff_id were checked to EOF. Verify reads the layers above the base with it. With
    ``cache_dir`` the ops are memoised like ``scan_image``'s (bytes still hashed)."""
    desc = image.layers[index]
    diff_id = image.diff_ids[index]
    cache = _cache_file(cache_dir, desc.digest, tracked)
    memo = _load_ops(cache, desc.digest, diff_id)
    if memo is not None:
        with blobs.open(desc.digest) as raw:
            hashed = HashedBlob(raw, compression_of(desc.media_type))
        _check_digests(hashed, desc.digest, desc.size, diff_id, index)
        return list(memo["ops"])
    scanner = _Scanner(tracked, None, "")
    scanner.ops = []
    count = 0
    with blobs.open(desc.digest) as raw:
        src = LayerBytes(raw, compression_of(desc.media_type))
        try:
            for m in members(src):
                scanner.entry(src, m, index)
                count += 1
        except BaseException:
            src.close()
            raise
        clean = src.drain()
    _check_digests(src, desc.digest, desc.size, diff_id, index)
    if not clean:
        raise UnsafeArchiveError(f"layer {index} ({desc.digest}) has data after the end of "
                                 "its tar archive")
    if cache is not None:
        atomic_write(cache, json.dumps({"format": CACHE_FORMAT, "digest": desc.digest,
                                        "diff_id": diff_id, "entries": count,
                                        "ops": scanner.ops}).encode())
    return scanner.ops
