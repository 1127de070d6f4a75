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
from typing import Any

from ..digest import Digest
from ..errors import AmbiguousLayerError, ImageError, IntegrityError, UnsafeArchiveError
from ..fsutil import cache_write
from .image import Blobs, Image
from .media import Descriptor, compression_of
from .tarstream import HASH_READ, HashedBlob, LayerBytes, Member, members

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
CACHE_FORMAT = "patchbake-layer-ops/3"  # /1 replayed no checks, /2 kept base64: never reused
KEEP = "opt/patchbake/"  # the identity record and verifier: kept in memory for checks
_KEEP_MAX = 16 << 20


@dataclass(frozen=True, slots=True)
class FileInfo:
    kind: str  # "file" | "symlink" | "other"
    mode: int
    size: int
    sha256: str  # content hash; for a symlink, hash of the target
    layer: int


@dataclass
class LayerReport:
    digest: Digest
    diff_id: Digest
    size: int
    entries: int


@dataclass
class View:
    files: dict[str, FileInfo] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)  # small files under KEEP
    layers: list[LayerReport] = field(default_factory=list)
    bytes_read: int = 0


def _clean_name(name: str, where: str) -> str:
    """filepath.Clean as the engines apply it (moby Unpack/UnpackLayer, containerd applyNaive,
    umoci CleanPath), relative to the root; ``..`` is refused (moby refuses a breakout, umoci
    clamps it at the root: two readings) and so is NUL."""
    # fast path: the common, already-clean name (most entries of every real layer)
    if "\0" not in name and ".." not in name and "//" not in name and "/./" not in name \
            and not name.startswith(("./", "/")) and not name.endswith("/."):
        return name.rstrip("/")
    parts = name.split("/")
    if "\0" in name or ".." in parts:
        raise UnsafeArchiveError(f"{where} entry {name!r} escapes the image root")
    return "/".join(p for p in parts if p not in ("", "."))




def _ancestors(paths: tuple[str, ...]) -> set[str]:
    """Each path (trailing '/' dropped) and every prefix of it ending before a '/'."""
    out: set[str] = set()
    for t in paths:
        p = t.rstrip("/")
        while p not in out:  # a path already in holds its ancestors too
            out.add(p)
            if "/" not in p:
                break
            p = p.rpartition("/")[0]
    return out


class _Scanner:
    """The image's filesystem as the engines build it, kept for the tracked region (files,
    directories) and, for the whole image, the symlinks that an entry could be written
    through. Every state change goes through an event (``_event``) that the layer cache
    records and replays: a replay re-runs the same checks against the lower layers of the
    image at hand, so a memoised layer is refused exactly when a fresh read refuses it."""

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
        self.dirs: set[str] = set()  # tracked directories, explicit or implied by a file
        self.links: dict[str, int] = {}  # every symlink of the image -> the layer that made it
        self.ops: list[list[Any]] | None = None  # this layer's events, for the layer cache
        self.write_root = write_root
        self.write_prefix = write_prefix
        self._left = 0
        # directories above the tracked region: replacing one with a file hides it all
        self.above = _ancestors((*self.tracked, *self.named))
        self._on = {"p": self._on_p, "s": self._on_s, "d": self._on_d, "n": self._on_n,
                    "f": self._on_f, "h": self._on_h, "w": self._on_w, "o": self._on_o}
        self.new_layer(0)

    def new_layer(self, layer: int, digest: Digest | None = None) -> None:
        self.layer = layer
        self.where = f"layer {layer} ({digest})" if digest else f"layer {layer}"
        self.seen: set[str] = set()  # directories this layer has written entries under
        self.written: set[str] = set()  # paths this layer wrote (not whiteouts)
        self.whited: set[str] = set()  # paths this layer whited out

    def _ambiguous(self, path: str, why: str) -> AmbiguousLayerError:
        return AmbiguousLayerError(f"{self.where} entry {path!r}: {why}")

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

    # -- events: the only code that changes the view (fresh read and replay alike) --------

    def _event(self, op: list[Any]) -> None:
        if self.ops is not None:
            self.ops.append(op)
        self._on[op[0]](op)

    def replay(self, ops: list[list[Any]], layer: int, digest: Digest | None = None) -> None:
        self.new_layer(layer, digest)
        on = self._on
        files, contents, dirs, above = self.view.files, self.view.contents, self.dirs, self.above
        for op in ops:
            # the common event inline (a file of the tracked region, no kept content): the
            # same steps as _on_f + set_file, at a third of the cost
            if op[0] == "f" and op[6] is None and op[1] not in dirs and op[1] not in above:
                path = op[1]
                files[path] = FileInfo(op[2], op[3], op[4], op[5], layer)
                if contents:
                    contents.pop(path, None)
                d = path.rpartition("/")[0]
                while d and d not in dirs:
                    dirs.add(d)
                    d = d.rpartition("/")[0]
            else:
                on[op[0]](op)

    def _on_p(self, op: list[Any]) -> None:
        """The layer writes an entry below directory ``d`` (first time in this layer)."""
        d = op[1]
        if d in self.links:
            raise self._ambiguous(d, "an entry is written below this path, which is a "
                             "symlink: naive appliers (umoci, vfs) write through it, overlayfs "
                             "engines replace it with a directory")
        info = self.view.files.get(d)
        if info is not None:
            raise self._ambiguous(d, f"an entry is written below this path, which is a "
                             f"{info.kind}: overlayfs engines replace it with a directory, "
                             "naive appliers fail")

    def _on_s(self, op: list[Any]) -> None:
        path, target, tracked = op[1], op[2], op[3]
        self.links[path] = self.layer
        if path in self.dirs or path in self.above:
            self._replace_dir(path)
        if tracked:
            self.set_file(path, FileInfo("symlink", 0o777, 0,
                                         hashlib.sha256(target.encode()).hexdigest(),
                                         self.layer))

    def _on_d(self, op: list[Any]) -> None:
        path = op[1]
        if path in self.view.files:  # a directory replaces a file or symlink
            self._drop(path)
            dest = self._dest(path)
            if dest is not None and dest.is_file():
                dest.unlink()
        self.dirs.add(path)

    def _on_n(self, op: list[Any]) -> None:
        """A non-directory entry outside the tracked region, on a path above it."""
        self._replace_dir(op[1])

    def _on_f(self, op: list[Any]) -> None:
        path, data = op[1], op[6]
        if path in self.dirs or path in self.above:
            self._replace_dir(path)
        self.set_file(path, FileInfo(op[2], op[3], op[4], op[5], self.layer), data)

    def _on_h(self, op: list[Any]) -> None:
        path, target, mode = op[1], op[2], op[3]
        info = self.view.files.get(target)
        if info is None or info.kind != "file":
            raise UnsafeArchiveError(f"{self.where}: hardlink {path} -> {target} "
                                     "points outside the checked files")
        if info.layer != self.layer:
            raise self._ambiguous(path, f"hard link to {target!r} of an earlier layer: "
                             "overlayfs engines cannot link across layers and fail, naive "
                             "appliers link to the lower file")
        if path in self.dirs or path in self.above:
            self._replace_dir(path)
        self.set_file(path, FileInfo("file", mode, info.size, info.sha256, self.layer),
                      self.view.contents.get(target))

    def _on_w(self, op: list[Any]) -> None:
        path = op[1]
        self.remove(path)
        for k in [k for k in self.links if k == path or k.startswith(path + "/")]:
            del self.links[k]

    def _on_o(self, op: list[Any]) -> None:
        path = op[1]
        self.remove(path, children_only=True)
        pre = path + "/"
        for k in [k for k, lay in self.links.items() if lay < self.layer and k.startswith(pre)]:
            del self.links[k]

    # -- view helpers ----------------------------------------------------------------

    def set_file(self, path: str, info: FileInfo, data: bytes | None = None) -> None:
        self.view.files[path] = info
        if data is not None:
            self.view.contents[path] = data
        else:
            self.view.contents.pop(path, None)
        d = path.rpartition("/")[0]
        while d and d not in self.dirs:  # a file implies its parent directories
            self.dirs.add(d)
            d = d.rpartition("/")[0]

    def _drop(self, path: str) -> None:
        self.view.files.pop(path, None)
        self.view.contents.pop(path, None)

    def _replace_dir(self, path: str) -> None:
        """A non-directory replaces ``path``: whatever was below it goes (every layer's)."""
        if path not in self.dirs and path not in self.above:
            return
        self.dirs.discard(path)
        pre = path + "/"
        for k in [k for k in self.view.files if k.startswith(pre)]:
            self._drop(k)
        dest = self._dest(path)
        if dest is not None and dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        for k in [k for k in self.dirs if k.startswith(pre)]:
            self.dirs.discard(k)

    def remove(self, path: str, layer: int | None = None, children_only: bool = False) -> None:
        """A whiteout (or, ``children_only``, an opaque directory): what lower layers put
        there goes; this layer's own entries stay (the OCI rule, and what every engine does
        once a whiteout and an entry of one layer on one path are refused)."""
        layer = self.layer if layer is None else layer
        pre = path + "/"
        doomed = [k for k, v in self.view.files.items()
                  if v.layer < layer and (k.startswith(pre) or (k == path and not children_only))]
        for k in doomed:
            self._drop(k)
        dest = self._dest(path + "/") if children_only else self._dest(path)
        if dest is not None and (dest.exists() or dest.is_symlink()):
            if dest.is_dir() and not dest.is_symlink():
                for child in list(dest.iterdir()) if children_only else [dest]:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            elif not children_only:
                dest.unlink()

    # -- a fresh read ----------------------------------------------------------------

    def entry(self, src: LayerBytes, m: Member, layer: int) -> None:
        """Handle one member; consumes its data (always exactly ``m.size`` bytes)."""
        try:
            self._entry(src, m, layer)
        finally:
            if self._left:
                src.skip(self._left)
                self._left = 0

    def _parents(self, parent: str) -> None:
        d = parent
        while d and d not in self.seen:
            if d in self.whited:
                raise self._ambiguous(d, "the layer whites this path out and writes "
                                 "below it: engines apply the two in different orders")
            self.seen.add(d)
            self._event(["p", d])
            d = d.rpartition("/")[0]

    def _whiteout(self, parent: str, base: str, layer: int) -> None:
        if base == OPAQUE:
            if not parent:  # overlayfs, naive appliers and umoci treat an opaque root apart
                raise self._ambiguous(base, "an opaque marker for the image root")
            self._event(["o", parent])
            return
        target = base[len(WHITEOUT):]
        if base.startswith(WHITEOUT + WHITEOUT) or target in ("", ".", ".."):
            raise self._ambiguous(f"{parent}/{base}", "not a whiteout the engines agree on "
                             "(aufs metadata or an empty name)")
        path = f"{parent}/{target}" if parent else target
        if path in self.written or path in self.seen:
            raise self._ambiguous(path, "the same layer writes this path and whites it out: "
                             "umoci keeps the entry, moby's applier deletes it when the whiteout "
                             "comes later, overlayfs engines fail")
        self.whited.add(path)
        self._event(["w", path])

    def _entry(self, src: LayerBytes, m: Member, layer: int) -> None:
        self._left = m.size
        path = _clean_name(m.name, self.where)
        if not path:
            if m.type != b"5":  # moby's applier would RemoveAll the root and recreate it
                raise self._ambiguous(m.name, "a non-directory entry names the image root")
            return
        parent, _, base = path.rpartition("/")
        if parent and parent not in self.seen:
            self._parents(parent)
        if path in self.written:
            raise self._ambiguous(path, "the layer holds this path twice: Docker's layer "
                             "store (tar-split) refuses the layer, containerd and umoci keep "
                             "the later entry")
        if m.type == b"1" and _clean_name(m.linkname, self.where) not in self.written:
            raise self._ambiguous(path, f"hard link to {m.linkname!r}, which this layer has not "
                                  "written before it: overlayfs engines link inside the layer "
                                  "and fail, naive appliers link to a lower file")
        self.written.add(path)
        if m.type in (b"3", b"4", b"6"):
            raise UnsafeArchiveError(f"{self.where} entry {path!r} is a device or fifo")
        if base.startswith(WHITEOUT):
            self._whiteout(parent, base, layer)
            return
        if path in self.whited:
            raise self._ambiguous(path, "the same layer whites this path out and writes it: "
                             "engines apply the two in different orders")
        if m.type != b"5" and path in self.seen:
            raise self._ambiguous(path, "the layer writes entries below this path and then "
                             "replaces it with a non-directory")
        tracked = self.is_tracked(path)
        if m.type == b"5":
            if tracked or path in self.above:
                self._event(["d", path])
            return
        if m.type == b"2":
            if tracked and self._dest(path) is not None:
                raise UnsafeArchiveError(f"{self.where}: {path} is a symlink; a materialised "
                                         "vLLM tree holds regular files only")
            self._event(["s", path, m.linkname, tracked])
            return
        if not tracked:
            if path in self.above:
                self._event(["n", path])
            return
        if m.type == b"1":
            self._hardlink(path, m, layer)
            return
        self._file(src, m, path, layer)

    def _hardlink(self, path: str, m: Member, layer: int) -> None:
        target = _clean_name(m.linkname, self.where)
        self._event(["h", path, target, m.mode & 0o7777])
        dest, linked = self._dest(path), self._dest(target)
        if dest is not None and linked is not None:
            shutil.copyfile(linked, dest)
            os.chmod(dest, m.mode & 0o755)

    def _file(self, src: LayerBytes, m: Member, path: str, layer: int) -> None:
        dest = self._dest(path)
        h = hashlib.sha256()
        out = None
        keep: list[bytes | memoryview] | None = [] if path.startswith(KEEP) and m.size <= _KEEP_MAX else None
        if dest is not None:
            self.remove(path, layer + 1)
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
        data = b"".join(keep) if keep is not None else None
        op = ["f", path, "file", m.mode & 0o7777, m.size, h.hexdigest(), data]
        if self.ops is not None:
            self.ops.append(op)
        self._on_f(op)


def _memo_name(desc_digest: Digest, tracked: tuple[str, ...]) -> str:
    key = hashlib.sha256("\0".join(tracked).encode()).hexdigest()[:16]
    return f"{desc_digest.hex}-{key}.json"


def _cache_file(cache_dir: Path | None, desc_digest: Digest, tracked: tuple[str, ...]
                ) -> Path | None:
    return None if cache_dir is None else cache_dir / _memo_name(desc_digest, tracked)


def memoised(image: Image, tracked: tuple[str, ...], cache_dir: Path,
             layers: range | None = None) -> bool:
    """Whether every one of ``layers`` (all by default) has a memo for ``tracked`` (which
    may still fail its checks when it is loaded)."""
    return all((cache_dir / _memo_name(image.layers[i].digest, tracked)).is_file()
               for i in (range(len(image.layers)) if layers is None else layers))


def _load_ops(path: Path | None, digest: Digest, diff_id: Digest) -> dict[str, Any] | None:
    """A layer's memo, its kept file contents read back from their content-addressed files
    (checked against their sha256); None when anything is missing or does not match."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if doc.get("format") != CACHE_FORMAT or doc.get("digest") != str(digest) \
            or doc.get("diff_id") != str(diff_id):
        return None
    for op in doc["ops"]:
        if op[0] == "f" and op[6] is not None:
            try:
                data = (path.parent / "kept" / op[5]).read_bytes()
            except OSError:
                return None
            if hashlib.sha256(data).hexdigest() != op[5]:
                return None
            op[6] = data
    return dict(doc)


def _save_ops(path: Path, doc: dict[str, Any]) -> None:
    """Kept contents (the identity record, the tree manifest) go beside the memo as raw
    files named by their sha256: no base64 inside the JSON to decode on every verify.
    A memo only saves time: when the store cannot take it (disk full, read-only) it is
    skipped and the layer is read again next time."""
    for op in doc["ops"]:
        if op[0] == "f" and op[6] is not None:
            kept = path.parent / "kept" / op[5]
            if not kept.is_file() and cache_write(kept, op[6]) is not None:
                return  # without its kept file the memo would be refused anyway
            op[6] = op[5]
    cache_write(path, json.dumps(doc).encode())


def scan_image(image: Image, blobs: Blobs, tracked: tuple[str, ...], *,
               write_root: Path | None = None, write_prefix: str = "",
               progress: Callable[[int], None] | None = None,
               cache_dir: Path | None = None, digests: LayerDigests | None = None) -> View:
    """Stream every layer of ``image``; return the tracked region's final view.

    With ``cache_dir``, what a layer does to the tracked region (its "ops") is memoised by
    the layer digest: a later scan still reads and hashes every byte of the layer to EOF
    and checks digest and diff_id, and only when both match replays the ops instead of
    re-parsing -- the parse is a pure function of bytes that just hashed to that digest.

    With ``digests`` (hashing this image's blobs in the background) and every layer
    memoised, the view comes back before the digests are checked and with no layer
    reports: ``digests.settle(view)`` checks every layer and adds them, and nothing may be
    taken from the view before it returned.
    """
    scanner = _Scanner(tracked, write_root, write_prefix)
    diff_ids = image.diff_ids
    if write_root is None and cache_dir is not None:
        memos = [_load_ops(_cache_file(cache_dir, d.digest, tracked), d.digest, diff_ids[i])
                 for i, d in enumerate(image.layers)]
        if all(m is not None for m in memos):
            if digests is not None:
                return _replay_all(scanner, image, memos, digests)  # type: ignore[arg-type]
            with LayerDigests(image, blobs) as own:
                view = _replay_all(scanner, image, memos, own)  # type: ignore[arg-type]
                own.settle(view, progress)
            return view
    if digests is not None:
        digests.cancel()  # read layer by layer below, each hashed as it is parsed
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
                scanner.new_layer(i, desc.digest)
                count, clean = _read_entries(scanner, src, desc, diff_ids[i], i, count)
        _check_digests(src, desc.digest, desc.size, diff_ids[i], i)
        if not clean:
            raise UnsafeArchiveError(f"layer {i} ({desc.digest}) has data after the end of "
                                     "its tar archive")
        if memo is not None:
            scanner.replay(memo["ops"], i, desc.digest)
            count = int(memo["entries"])
        elif cache is not None and scanner.ops is not None:
            _save_ops(cache, {"format": CACHE_FORMAT, "digest": str(desc.digest),
                              "diff_id": str(diff_ids[i]), "entries": count, "ops": scanner.ops})
        scanner.ops = None
        scanner.view.layers.append(LayerReport(desc.digest, diff_ids[i], src.raw_size, count))
        scanner.view.bytes_read += src.raw_size
        if progress:
            progress(src.raw_size)
    return scanner.view


def _replay_all(scanner: _Scanner, image: Image, memos: list[dict[str, Any]],
                digests: LayerDigests) -> View:
    """Every layer memoised: replay the ops in this thread while ``digests`` hashes the
    blobs in its own. A layer refused on replay is reported as a fresh read reports it:
    a changed blob at or below it first."""
    for i, memo in enumerate(memos):
        try:
            scanner.replay(memo["ops"], i, image.layers[i].digest)
        except (IntegrityError, ImageError, UnsafeArchiveError):
            digests.check_through(i)
            raise
    digests.entries = [int(m["entries"]) for m in memos]
    return scanner.view


class LayerDigests:
    """Every layer blob of an image hashed front to back in one background thread while
    the caller works on the layers' memoised ops (hashlib drops the GIL as it hashes).
    ``settle`` checks each layer's digest, size and diff_id in layer order, as a fresh read
    does; a result built from memoised ops is sound only once it returned. ``cancel``
    stops the hashing (the caller then reads and hashes the layers itself)."""

    def __init__(self, image: Image, blobs: Blobs) -> None:
        self.image = image
        self.blobs = blobs
        self.entries: list[int] | None = None  # per layer, set by a deferred replay
        self._hashed: list[HashedBlob] = []
        self._failed: BaseException | None = None
        self._checked = 0  # layers [0, _checked) passed
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def __enter__(self) -> LayerDigests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    @property
    def active(self) -> bool:
        return not self._stop.is_set()

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()

    def _work(self) -> None:
        try:
            # one buffer for every blob: as big as the largest layer, up to HASH_READ
            size = min(HASH_READ, max([d.size for d in self.image.layers if d.size > 0],
                                       default=1))
            buf = memoryview(bytearray(max(size, 1 << 16)))
            for d in self.image.layers:
                compression = compression_of(d.media_type)
                with self.blobs.open(d.digest) as raw:
                    h = HashedBlob(raw, compression, self._stop, buf)
                if not h.complete:
                    return
                with self._cond:
                    self._hashed.append(h)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            with self._cond:
                self._failed = exc
                self._cond.notify_all()

    def _result(self, i: int) -> HashedBlob:
        with self._cond:
            self._cond.wait_for(lambda: len(self._hashed) > i or self._failed is not None
                                or not self._thread.is_alive())
            if len(self._hashed) > i:
                return self._hashed[i]
            if self._failed is not None:
                raise self._failed
        raise ImageError(f"layer {i} was not hashed (the hashing was cancelled)")

    def check_through(self, last: int) -> None:
        """Check layers up to ``last`` (inclusive), in order."""
        while self._checked <= last:
            i = self._checked
            desc = self.image.layers[i]
            _check_digests(self._result(i), desc.digest, desc.size, self.image.diff_ids[i], i)
            self._checked += 1

    def settle(self, view: View, progress: Callable[[int], None] | None = None
               ) -> list[LayerReport]:
        """Check every layer; add the deferred layer reports to ``view``; its reports."""
        if self.entries is not None and not view.layers:
            self.check_through(len(self.image.layers) - 1)
            for i, (desc, h) in enumerate(zip(self.image.layers, self._hashed, strict=True)):
                view.layers.append(LayerReport(desc.digest, self.image.diff_ids[i],
                                               h.raw_size, self.entries[i]))
                view.bytes_read += h.raw_size
                if progress:
                    progress(h.raw_size)
        if len(view.layers) != len(self.image.layers):
            raise ImageError("not every layer of the image was checked")
        return view.layers


def _read_entries(scanner: _Scanner, src: LayerBytes, desc: Descriptor, diff_id: Digest,
                  index: int, count: int) -> tuple[int, bool]:
    """Feed one layer's entries to ``scanner``; (entries so far, whether only zero padding
    followed the archive's end). A refused layer reports a digest mismatch first when there
    is one, and its reason names the layer."""
    try:
        for m in members(src):
            scanner.entry(src, m, index)
            count += 1
    except (IntegrityError, ImageError, UnsafeArchiveError) as exc:
        src.drain()
        _check_digests(src, desc.digest, desc.size, diff_id, index)
        if exc.message.startswith(scanner.where):
            raise
        raise type(exc)(f"{scanner.where}: {exc.message}") from None
    except BaseException:
        src.close()
        raise
    return count, src.drain()

def _check_digests(reader: LayerBytes | HashedBlob, digest: Digest, size: int,
                   diff_id: Digest,
                   i: int) -> None:
    got = Digest.from_hex(reader.raw_hash.hexdigest())
    if got != digest:
        raise IntegrityError(f"layer {i}: blob {digest} hashes to {got}: the layer's bytes "
                             "were changed")
    if reader.raw_size != size:
        raise IntegrityError(f"layer {i}: blob {digest} is {reader.raw_size} bytes; the "
                             f"manifest says {size}")
    got_diff = Digest.from_hex(reader.tar_hash.hexdigest())
    if got_diff != diff_id:
        raise IntegrityError(f"layer {i}: uncompressed tar hashes to {got_diff}; the config's "
                             f"diff_id is {diff_id} (layer swapped or config edited)")


def final_files(image: Image, blobs: Blobs) -> dict[str, FileInfo]:
    """Every regular file and symlink of the image's final filesystem (all layers, whiteouts
    applied, every layer read as the engines read it, or refused), path -> FileInfo; a
    symlink's ``sha256`` is that of its target. What the differential test compares with
    the files a real unpacker writes."""
    return scan_image(image, blobs, ("",)).files


def layer_ops(image: Image, blobs: Blobs, index: int, tracked: tuple[str, ...],
              cache_dir: Path | None = None, digests: LayerDigests | None = None
              ) -> list[list[Any]]:
    """What layer ``index`` alone does, after its digest and diff_id were checked to EOF
    and it was read as the engines read it (or refused): ``["f", path, kind, mode, size,
    sha256, base64-or-None]`` for a file or symlink set in the tracked region (a hard link
    gives its same-layer target's content), ``["r", path, children_only]`` for a whiteout
    (an opaque directory), ``["d", path]`` for a directory, ``["x", path]`` for a
    non-directory on a path above the tracked region. Verify reads the layers above the
    base with it. With ``cache_dir`` the layer is memoised like ``scan_image``'s (bytes
    still hashed); with ``digests`` too, a memoised layer's bytes are hashed and checked
    there, and the ops may be used only once ``digests.settle`` returned."""
    desc = image.layers[index]
    diff_id = image.diff_ids[index]
    cache = _cache_file(cache_dir, desc.digest, tracked)
    memo = _load_ops(cache, desc.digest, diff_id)
    if memo is not None and digests is not None and digests.active:
        return _plain_ops(memo["ops"])  # checked when the caller settles ``digests``
    if memo is not None:
        with blobs.open(desc.digest) as raw:
            hashed = HashedBlob(raw, compression_of(desc.media_type))
        _check_digests(hashed, desc.digest, desc.size, diff_id, index)
        return _plain_ops(memo["ops"])
    if digests is not None and digests.active:  # the layers below it are reported first
        digests.check_through(index - 1)
    scanner = _Scanner(tracked, None, "")
    scanner.ops = []
    scanner.new_layer(index, desc.digest)
    count = 0
    with blobs.open(desc.digest) as raw:
        src = LayerBytes(raw, compression_of(desc.media_type))
        count, clean = _read_entries(scanner, src, desc, diff_id, index, count)
    _check_digests(src, desc.digest, desc.size, diff_id, index)
    if not clean:
        raise UnsafeArchiveError(f"layer {index} ({desc.digest}) has data after the end of "
                                 "its tar archive")
    events = scanner.ops
    plain = _plain_ops(events)
    if cache is not None:
        _save_ops(cache, {"format": CACHE_FORMAT, "digest": str(desc.digest),
                          "diff_id": str(diff_id),
                          "entries": count, "ops": events})
    return plain


def _plain_ops(events: list[list[Any]]) -> list[list[Any]]:
    """The scanner's events as layer_ops describes them (checks and parents dropped)."""
    out: list[list[Any]] = []
    files: dict[str, list[Any]] = {}
    for op in events:
        kind = op[0]
        if kind == "f":
            data = op[6]
            if isinstance(data, bytes):
                data = base64.b64encode(data).decode()
            elif data is not None:  # a memo's kept content is named by its sha256
                data = None
            files[op[1]] = ["f", op[1], op[2], op[3], op[4], op[5], data]
            out.append(files[op[1]])
        elif kind == "s" and op[3]:
            out.append(["f", op[1], "symlink", 0o777, 0,
                        hashlib.sha256(op[2].encode()).hexdigest(), None])
        elif kind == "h" and op[2] in files:
            t = files[op[2]]
            files[op[1]] = ["f", op[1], "file", op[3], t[4], t[5], t[6]]
            out.append(files[op[1]])
        elif kind in ("w", "o"):
            out.append(["r", op[1], kind == "o"])
        elif kind == "d":
            out.append(["d", op[1]])
        elif kind == "n":
            out.append(["x", op[1]])
    return out
