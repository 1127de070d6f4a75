"""An image's files as the engines build them, kept for the tracked region.

``Scanner`` holds the view (``View``: path -> ``FileInfo``, with whiteouts and opaque
directories applied) and changes it only through events: a fresh read of a layer
(``oci.entries``) emits them, a memoised layer (``oci.layerops``) replays them, and both
run the same checks against the lower layers of the image at hand. With ``write_root``
the tracked vLLM files are also kept on disk under a staging directory.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import AmbiguousLayerError, UnsafeArchiveError


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
    contents: dict[str, bytes] = field(default_factory=dict)  # small files under entries.KEEP
    layers: list[LayerReport] = field(default_factory=list)
    bytes_read: int = 0


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


class Scanner:
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
        # directories above the tracked region: replacing one with a file hides it all
        self.above = _ancestors((*self.tracked, *self.named))
        self._on = {"p": self._on_p, "s": self._on_s, "d": self._on_d, "n": self._on_n,
                    "f": self._on_f, "h": self._on_h, "w": self._on_w, "o": self._on_o}
        self.new_layer(0)

    def new_layer(self, layer: int, digest: Digest | None = None) -> None:
        self.layer = layer
        self.where = f"layer {layer} ({digest})" if digest else f"layer {layer}"

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
