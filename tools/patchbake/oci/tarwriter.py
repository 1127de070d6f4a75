"""Deterministic layer tar writer ("patchbake-tar/1").

Our own writer rather than :mod:`tarfile`, so the bytes of a layer depend only on its
entries and the epoch -- never on the Python version writing it (that is what makes two
bakes on two machines give the same diff_id). The format is fixed:

- POSIX ustar headers; a path or link target that does not fit ustar's name/prefix split
  gets a pax ``x`` header (``path=`` / ``linkpath=`` only) named ``././@PaxHeader``;
- entries sorted bytewise by path; every parent directory written explicitly (mode 0755);
- mtime = the epoch (SOURCE_DATE_EPOCH or 0), uid/gid 0 (an entry may carry others: a Debian
  root filesystem keeps its numeric owners), uname/gname empty, devmajor/minor 0;
- modes normalised: files 0644 or 0755 (any execute bit), directories 0755, symlinks 0777
  (:func:`file_entry`; an :class:`Entry` made directly keeps its exact mode, setuid included);
- no hardlinks, no xattrs; the archive ends with two zero blocks and no record padding;
- whiteouts are empty regular files named ``.wh.<name>`` (OCI/AUFS convention).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from contextlib import AbstractContextManager
from typing import Protocol

from ..errors import ImageError

FORMAT = "patchbake-tar/1 (ustar, pax path records when needed)"
BLOCK = 512
_READ = 1 << 20


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


@dataclass(frozen=True)
class Entry:
    """One layer entry. ``path`` is relative ('usr/lib/x'), no leading '/' or './'."""

    path: str
    kind: str  # "file" | "dir" | "symlink"
    mode: int = 0o644
    data: bytes | None = None  # file content held in memory, or
    source: Path | None = None  # file content read from disk at write time
    size: int = 0
    target: str = ""  # symlink target
    # file content opened only when the entry is written (a member of a wheel streamed
    # straight into the layer); ``size`` must be what it yields
    opener: Callable[[], AbstractContextManager[Readable]] | None = None
    uid: int = 0
    gid: int = 0


def file_entry(path: str, *, data: bytes | None = None, source: Path | None = None,
               executable: bool = False) -> Entry:
    if (data is None) == (source is None):
        raise ValueError("a file entry needs exactly one of data or source")
    size = len(data) if data is not None else source.stat().st_size  # type: ignore[union-attr]
    return Entry(path, "file", 0o755 if executable else 0o644, data, source, size)


def symlink_entry(path: str, target: str) -> Entry:
    return Entry(path, "symlink", 0o777, target=target)


def whiteout_entry(path: str) -> Entry:
    parent, _, name = path.rpartition("/")
    return file_entry(f"{parent}/.wh.{name}" if parent else f".wh.{name}", data=b"")


def _check_path(path: str) -> None:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "\0" in path:
        raise ImageError(f"refusing to write layer entry {path!r}: not a clean relative path")


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Add every missing parent directory (0755) and sort bytewise by path."""
    by_path: dict[str, Entry] = {}
    for e in entries:
        _check_path(e.path)
        if e.path in by_path:
            raise ImageError(f"layer entry {e.path!r} given twice")
        by_path[e.path] = e
    for p in list(by_path):
        parts = p.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            existing = by_path.get(d)
            if existing is None:
                by_path[d] = Entry(d, "dir", 0o755)
            elif existing.kind != "dir":
                raise ImageError(f"layer entry {d!r} is both a file and a parent directory")
    return sorted(by_path.values(), key=lambda e: e.path.encode())


def _octal(value: int, width: int) -> bytes:
    text = b"%0*o" % (width - 1, value)
    if len(text) > width - 1:
        raise ImageError(f"value {value} does not fit a {width}-byte tar field")
    return text + b"\0"


def _split_ustar(name: bytes) -> tuple[bytes, bytes] | None:
    if len(name) <= 100:
        return b"", name
    for i in range(len(name) - 1, 0, -1):
        if name[i:i + 1] == b"/" and i <= 155 and len(name) - i - 1 <= 100:
            return name[:i], name[i + 1:]
    return None


def _header(name: bytes, mode: int, size: int, mtime: int, typeflag: bytes,
            linkname: bytes = b"", prefix: bytes = b"", uid: int = 0, gid: int = 0) -> bytes:
    fields = [
        name.ljust(100, b"\0"), _octal(mode, 8), _octal(uid, 8), _octal(gid, 8),
        _octal(size, 12), _octal(mtime, 12), b" " * 8, typeflag,
        linkname.ljust(100, b"\0"), b"ustar\0", b"00", b"\0" * 32, b"\0" * 32,
        _octal(0, 8), _octal(0, 8), prefix.ljust(155, b"\0"), b"\0" * 12,
    ]
    block = bytearray(b"".join(fields))
    checksum = sum(block)
    block[148:156] = b"%06o\0 " % checksum
    return bytes(block)


def _pax_record(key: str, value: bytes) -> bytes:
    body = b" " + key.encode() + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n = len(str(n).encode()) + len(body)
    return str(n).encode() + body


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def _headers(e: Entry, mtime: int) -> bytes:
    name = e.path.encode() + (b"/" if e.kind == "dir" else b"")
    link = e.target.encode()
    pax = b""
    split = _split_ustar(name)
    if split is None:
        pax += _pax_record("path", name)
        split = (b"", name[:100])
    if len(link) > 100:
        pax += _pax_record("linkpath", link)
        link = link[:100]
    typeflag = {"file": b"0", "dir": b"5", "symlink": b"2"}[e.kind]
    size = e.size if e.kind == "file" else 0
    out = b""
    if pax:
        out += _header(b"././@PaxHeader", 0o644, len(pax), mtime, b"x") + pax + _padding(len(pax))
    return out + _header(split[1], e.mode, size, mtime, typeflag, link, split[0], e.uid, e.gid)


def write_layer(entries: Iterable[Entry], mtime: int) -> Iterator[bytes]:
    """Yield the layer's bytes. Entries need parents and order: pass ``with_parents(...)``."""
    for e in entries:
        yield _headers(e, mtime)
        if e.kind != "file":
            continue
        if e.data is not None:
            yield e.data
            written = len(e.data)
        else:
            written = 0
            with e.opener() if e.opener is not None else open(e.source, "rb") as f:  # type: ignore[arg-type]
                for chunk in iter(lambda: f.read(_READ), b""):
                    written += len(chunk)
                    yield chunk
        if written != e.size:
            raise ImageError(f"{e.source or e.path} changed size while it was being written "
                             "to a layer")
        yield _padding(written)
    yield b"\0" * (2 * BLOCK)
