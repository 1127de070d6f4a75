"""A layer's tar entries read as the engines apply them, or refused.

Each entry is checked against what the same layer wrote before it (a path twice, a
whiteout and an entry on one path, a hard link to a lower layer: the engines disagree, so
the layer is refused) and turned into the ``Scanner``'s events; files of the tracked region
are hashed as they stream by. ``read_entries`` feeds one layer through and names the layer
in any refusal, a digest mismatch first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..digest import Digest
from ..errors import ImageError, IntegrityError, UnsafeArchiveError
from .layerdigests import check_digests
from .media import Descriptor
from .tarstream import LayerBytes, Member, members
from .view import Scanner

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
KEEP = "opt/patchbake/"  # the identity record and verifier: kept in memory for checks
KEEP_RECORD = ".dist-info/RECORD"  # a tracked distribution's RECORD: verify checks its rows
_KEEP_MAX = 16 << 20


def clean_name(name: str, where: str) -> str:
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


class EntryReader(Scanner):
    """A ``Scanner`` that also reads a layer's entries fresh; the events it emits are the
    ones a memo records for replay."""

    def __init__(self, tracked: tuple[str, ...], write_root: Path | None,
                 write_prefix: str) -> None:
        super().__init__(tracked, write_root, write_prefix)
        self._left = 0  # data bytes of the current entry not consumed yet

    def new_layer(self, layer: int, digest: Digest | None = None) -> None:
        super().new_layer(layer, digest)
        self.seen: set[str] = set()  # directories this layer has written entries under
        self.written: set[str] = set()  # paths this layer wrote (not whiteouts)
        self.whited: set[str] = set()  # paths this layer whited out

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
        path = self._admit(m)
        if path is None:
            return
        parent, _, base = path.rpartition("/")
        if base.startswith(WHITEOUT):
            self._whiteout(parent, base, layer)
            return
        if path in self.whited:
            raise self._ambiguous(path, "the same layer whites this path out and writes it: "
                             "engines apply the two in different orders")
        if m.type != b"5" and path in self.seen:
            raise self._ambiguous(path, "the layer writes entries below this path and then "
                             "replaces it with a non-directory")
        self._apply(src, m, path, layer)

    def _admit(self, m: Member) -> str | None:
        """The entry's cleaned path once the checks every entry kind passes are done and
        the layer has it as written; None for the image root's directory entry."""
        path = clean_name(m.name, self.where)
        if not path:
            if m.type != b"5":  # moby's applier would RemoveAll the root and recreate it
                raise self._ambiguous(m.name, "a non-directory entry names the image root")
            return None
        parent = path.rpartition("/")[0]
        if parent and parent not in self.seen:
            self._parents(parent)
        if path in self.written:
            raise self._ambiguous(path, "the layer holds this path twice: Docker's layer "
                             "store (tar-split) refuses the layer, containerd and umoci keep "
                             "the later entry")
        if m.type == b"1" and clean_name(m.linkname, self.where) not in self.written:
            raise self._ambiguous(path, f"hard link to {m.linkname!r}, which this layer has not "
                                  "written before it: overlayfs engines link inside the layer "
                                  "and fail, naive appliers link to a lower file")
        self.written.add(path)
        if m.type in (b"3", b"4", b"6"):
            raise UnsafeArchiveError(f"{self.where} entry {path!r} is a device or fifo")
        return path

    def _apply(self, src: LayerBytes, m: Member, path: str, layer: int) -> None:
        """The event a checked, non-whiteout entry makes, by its kind and region."""
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
        target = clean_name(m.linkname, self.where)
        self._event(["h", path, target, m.mode & 0o7777])
        dest, linked = self._dest(path), self._dest(target)
        if dest is not None and linked is not None:
            shutil.copyfile(linked, dest)
            os.chmod(dest, m.mode & 0o755)

    def _file(self, src: LayerBytes, m: Member, path: str, layer: int) -> None:
        dest = self._dest(path)
        h = hashlib.sha256()
        out = None
        keep: list[bytes | memoryview] | None = [] if (
            path.startswith(KEEP) or path.endswith(KEEP_RECORD)) and m.size <= _KEEP_MAX else None
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


def read_entries(scanner: EntryReader, src: LayerBytes, desc: Descriptor, diff_id: Digest,
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
        check_digests(src, desc.digest, desc.size, diff_id, index)
        if exc.message.startswith(scanner.where):
            raise
        raise type(exc)(f"{scanner.where}: {exc.message}") from None
    except BaseException:
        src.close()
        raise
    return count, src.drain()
