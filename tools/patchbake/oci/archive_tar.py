"""The outer tar of a docker-archive, read as ``docker load`` reads it, or refused.

``docker load`` untars the archive with Go's archive/tar (moby ``chrootarchive.Untar`` ->
``archive.Unpack``: each name through ``filepath.Clean``, links created, a later copy of a
path replacing the earlier) and then opens ``manifest.json``, the config and the layers by
path, following symlinks inside the directory (``FollowSymlinkInScope``). So the archive
is read here with the Go-exact reader of layers (:func:`tarstream.members`, and every
refusal of it), names are cleaned as the engines clean them (``entries.clean_name``), and
only regular files and directories are accepted: a symlink, a hard link or a device would
let the engine read other bytes under a name than the member of that name holds.

One pass reads every member front to back, hashing its bytes and noting where they lie;
later reads (:meth:`ArchiveTar.read_bytes`, :meth:`ArchiveTar.chunks`) seek there and are
checked against that hash, so what is read later is what was checked now.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..digest import Digest
from ..errors import AmbiguousLayerError, ImageError, IntegrityError, UnsafeArchiveError
from ..fsutil import open_input
from .entries import clean_name
from .tarstream import LayerBytes, members
from .tarstream import _pax as pax_records

_READ = 1 << 20
_KINDS = {b"1": "hard link", b"2": "symlink", b"3": "character device",
          b"4": "block device", b"6": "fifo"}
# PAX records that do not touch a member's name; any other (path, linkpath, ...) and GNU
# long names are refused, as before this reader: Python's tarfile, GNU tar and Go resolve
# them differently, and no docker save or export of ours writes them
_NAMELESS_PAX = frozenset({"size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})


@dataclass(frozen=True)
class Member:
    offset: int  # of the member's bytes in the archive file
    size: int
    digest: Digest  # of those bytes, taken on the first pass
    head: bytes  # their first two bytes (gzip magic)


class _Positioned(LayerBytes):
    """Tar bytes that know how far the reader has got, and the header blocks (and
    extension bodies) read since the last member."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(raw, "none")
        self.pos = 0
        self.reads: list[bytes] = []

    def read_exact(self, n: int) -> bytes | None:
        out = super().read_exact(n)
        if out is not None:
            self.pos += len(out)
            self.reads.append(out)
        return out

    def skip(self, n: int) -> None:
        self.pos += n
        super().skip(n)


@dataclass
class ArchiveTar:
    path: Path
    files: dict[str, Member] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, path: Path) -> ArchiveTar:
        raw = open_input(path, "docker-archive tar", ImageError)
        out = cls(path)
        with raw:
            src = _Positioned(raw)
            try:
                out._index(src)
            except AmbiguousLayerError as exc:
                raise ImageError(f"{path}: {exc.message}; tar readers disagree on the archive, "
                                 "refusing it") from None
            except IntegrityError as exc:
                raise ImageError(f"{path} is not a readable docker-archive tar: {exc.message}; "
                                 "nothing was stored") from None
            except (ImageError, UnsafeArchiveError) as exc:
                raise type(exc)(f"{path}: {exc.message}") from None
            finally:
                src.close()
        return out

    def _index(self, src: _Positioned) -> None:
        for m in members(src):
            name = _name_of(m.name, m.type, src.reads, self.files, self.dirs)
            src.reads = []
            offset, h, head = src.pos, hashlib.sha256(), b""
            for piece in src.pieces(m.size):
                head = head or bytes(piece[:2])
                h.update(piece)
            src.pos += m.size  # members() skips (and so counts) the padding itself
            if m.type == b"0":
                self.files[name] = Member(offset, m.size, Digest.from_hex(h.hexdigest()), head)
        if not src.drain(check=True):
            raise ImageError("bytes other than zeros follow the tar's end-of-archive marker; "
                             "refusing the archive")

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def member(self, name: str) -> Member:
        """The regular file ``name`` (a path as manifest.json gives it) names."""
        clean = clean_name(name, f"{self.path}: unsafe archive")
        if clean in self.files:
            return self.files[clean]
        if clean in self.dirs:
            raise ImageError(f"archive member {name!r} is not a regular file")
        raise ImageError(f"archive has no member {name!r}")

    def chunks(self, name: str) -> Iterator[bytes]:
        m = self.member(name)
        with open_input(self.path, "docker-archive tar", ImageError) as f:
            f.seek(m.offset)
            left = m.size
            while left:
                chunk = f.read(min(_READ, left))
                if not chunk:
                    raise IntegrityError(f"{self.path} changed while it was read (member "
                                         f"{name!r} is cut short); nothing was stored")
                left -= len(chunk)
                yield chunk

    def read_bytes(self, name: str) -> bytes:
        data = b"".join(self.chunks(name))
        if Digest.of(data) != self.member(name).digest:
            raise IntegrityError(f"{self.path} changed while it was read (member {name!r}); "
                                 "nothing was stored")
        return data


def _name_of(raw: str, typ: bytes, reads: list[bytes], files: dict[str, Member],
             dirs: set[str]) -> str:
    """The cleaned name of a member (noted in ``dirs``), refused where docker load would
    not write a plain file or directory there, or where tar readers disagree on it."""
    if raw.startswith("/"):
        raise UnsafeArchiveError(f"unsafe archive entry {raw!r} is an absolute path")
    name = clean_name(raw, "unsafe archive")
    if typ not in (b"0", b"5"):
        raise UnsafeArchiveError(f"unsafe archive entry {raw!r} is a "
                                 f"{_KINDS.get(typ, 'link')}: docker load would create it "
                                 "and read through it; only regular files and directories "
                                 "are accepted")
    _check_headers(raw, reads)
    parents = [name[:i] for i, c in enumerate(name) if c == "/"]
    below = next((p for p in parents if p in files), None)
    if below is not None or (typ == b"0" and (name in dirs or not name)):
        raise ImageError(f"archive entry {raw!r} replaces or lies below another entry "
                         f"({below or name!r}); which bytes are the image cannot be told, "
                         "nothing was stored")
    if name in files:
        raise ImageError(f"archive entry {name!r} appears twice; which copy is the image "
                         "cannot be told, nothing was stored")
    dirs.update(parents)
    if typ == b"5":
        dirs.add(name)
    return name


def _check_headers(name: str, reads: list[bytes]) -> None:
    """Refuse names that tar readers could read differently (the checks this import made
    before it read with Go's rules; kept, so nothing it refused is accepted now): bytes in
    345-500 of the header (a ustar prefix to some readers, GNU times to others), and a
    name from a PAX ``path`` or a GNU long-name header."""
    *extension, header = reads
    if header[345:500].strip(b"\0"):
        raise ImageError(f"member {name!r} has bytes in the ustar prefix / GNU time "
                         "fields; tar readers disagree on its name, refusing the archive")
    if not extension:
        return
    pax = extension[0][156:157] == b"x" and len(extension) == 2
    if not pax or set(pax_records(extension[1].rstrip(b"\0"))) - _NAMELESS_PAX:
        raise ImageError(f"member {name!r} is named by a PAX or GNU long-name header; "
                         "tar readers disagree on such names, refusing the archive")
