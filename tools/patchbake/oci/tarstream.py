"""A streaming tar reader for layer blobs, built for verification speed.

One background thread reads the blob in 1 MiB chunks and hashes the raw bytes (the layer
digest) and, for gzip, inflates and hashes the tar bytes (the diff_id); hashlib and zlib
release the GIL, so this overlaps with the main thread, which parses headers and hashes
file contents straight out of the chunks (memoryview slices, no copies). Formats read:
ustar, pax ``x`` headers (path, linkpath, size), GNU long names (``L``/``K``); global pax
headers are skipped; sparse files and unknown types are refused.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ImageError, IntegrityError

BLOCK = 512
_READ = 1 << 20
_ZERO = bytes(BLOCK)
_META_MAX = 16 << 20  # pax / GNU long-name header bodies
_END = object()


class LayerBytes:
    """Tar bytes of a layer blob, produced by a hashing reader thread."""

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        self.raw = raw
        self.gzip = compression == "gzip"
        self.raw_hash = hashlib.sha256()
        self.tar_hash = hashlib.sha256() if self.gzip else self.raw_hash
        self.raw_size = 0
        self._q: queue.Queue[object] = queue.Queue(maxsize=16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._thread.start()
        self._cur = b""
        self._off = 0
        self._eof = False

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        inflate = zlib.decompressobj(31) if self.gzip else None
        try:
            while not self._stop.is_set():
                chunk = self.raw.read(_READ)
                if not chunk:
                    break
                self.raw_size += len(chunk)
                self.raw_hash.update(chunk)
                if inflate is not None:
                    out = inflate.decompress(chunk)
                    while inflate.eof and inflate.unused_data:  # concatenated members
                        rest = inflate.unused_data
                        inflate = zlib.decompressobj(31)
                        out += inflate.decompress(rest)
                    self.tar_hash.update(out)
                    chunk = out
                if chunk and not self._put(chunk):
                    return
            if inflate is not None:
                tail = inflate.flush()
                self.tar_hash.update(tail)
                if tail:
                    self._put(tail)
            self._put(_END)
        except zlib.error as exc:
            self._put(IntegrityError(f"layer is not valid gzip: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def _next(self) -> bool:
        if self._eof:
            return False
        item = self._q.get()
        if item is _END:
            self._eof = True
            return False
        if isinstance(item, BaseException):
            self._eof = True
            raise item
        self._cur, self._off = item, 0  # type: ignore[assignment]
        return True

    def read_exact(self, n: int) -> bytes | None:
        """``n`` bytes, or None at EOF (a short read at EOF is an error)."""
        if len(self._cur) - self._off >= n:
            out = self._cur[self._off:self._off + n]
            self._off += n
            return out
        parts = [self._cur[self._off:]]
        have = len(parts[0])
        self._cur, self._off = b"", 0
        while have < n:
            if not self._next():
                if have == 0:
                    return None
                raise IntegrityError(f"layer ends inside a tar block ({have} of {n} bytes)")
            take = min(n - have, len(self._cur))
            parts.append(self._cur[:take])
            self._off = take
            have += take
        return b"".join(parts)

    def pieces(self, n: int) -> Iterator[memoryview]:
        """Yield ``n`` bytes as zero-copy slices."""
        if n and len(self._cur) - self._off >= n:  # the common case: one slice
            off = self._off
            self._off = off + n
            yield memoryview(self._cur)[off:off + n]
            return
        while n:
            if self._off >= len(self._cur) and not self._next():
                raise IntegrityError(f"layer ends inside a file ({n} bytes missing)")
            take = min(n, len(self._cur) - self._off)
            yield memoryview(self._cur)[self._off:self._off + take]
            self._off += take
            n -= take

    def skip(self, n: int) -> None:
        if len(self._cur) - self._off >= n:  # within the current chunk: just move on
            self._off += n
            return
        for _ in self.pieces(n):
            pass

    def drain(self, check: bool = True) -> bool:
        """Read to EOF; True when all bytes after the tar end are zero (when ``check``)."""
        clean = not check or self._cur[self._off:].count(0) == len(self._cur) - self._off
        while self._next():
            clean = clean and (not check or self._cur.count(0) == len(self._cur))
        self._cur, self._off = b"", 0
        self._thread.join()
        return clean

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class HashedBlob:
    """Digest, diff_id and size of a blob read straight through in this thread (the
    memoised path of a scan needs no tar parsing, so no reader thread either)."""

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        self.raw_hash = hashlib.sha256()
        self.tar_hash = hashlib.sha256() if compression == "gzip" else self.raw_hash
        self.raw_size = 0
        inflate = zlib.decompressobj(31) if compression == "gzip" else None
        try:
            for chunk in iter(lambda: raw.read(_READ), b""):
                self.raw_size += len(chunk)
                self.raw_hash.update(chunk)
                if inflate is not None:
                    out = inflate.decompress(chunk)
                    while inflate.eof and inflate.unused_data:
                        rest = inflate.unused_data
                        inflate = zlib.decompressobj(31)
                        out += inflate.decompress(rest)
                    self.tar_hash.update(out)
            if inflate is not None:
                self.tar_hash.update(inflate.flush())
        except zlib.error as exc:
            raise IntegrityError(f"layer is not valid gzip: {exc}") from None


@dataclass
class Member:
    name: str
    mode: int
    size: int
    type: bytes  # b"0" file, b"1" hardlink, b"2" symlink, b"3"/b"4" device, b"5" dir, b"6" fifo
    linkname: str


def _octal(field: bytes, what: str) -> int:
    try:  # the common field: octal digits, then NUL or spaces (int() skips the spaces)
        return int(field.split(b"\0", 1)[0], 8)
    except ValueError:
        pass  # empty, base-256 or not a number: the careful path below decides
    if field[:1] and field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise IntegrityError(f"tar header field {what} is not a number: {field!r}") from None


def _pax(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        # "<len> <key>=<value>\n", len counting the whole record: a length that does not
        # move forward past its own digits (or runs off the end) would loop or misparse
        sp = data.find(b" ", pos)
        try:
            length = int(data[pos:sp]) if sp > pos else -1
        except ValueError:
            length = -1
        if length <= sp - pos + 1 or pos + length > len(data):
            raise IntegrityError(f"malformed pax header record at offset {pos} (corrupt layer)")
        record = data[sp + 1:pos + length - 1]
        key, _, value = record.partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _pax_size(text: str) -> int:
    if not (text.isascii() and text.isdigit()):  # refuses signs and non-ASCII digits
        raise IntegrityError(f"pax header size {text!r} is not a number (corrupt layer)")
    return int(text)


def members(src: LayerBytes) -> Iterator[Member]:
    """Yield members; the caller must consume (``pieces``) or ``skip`` each member's data
    before asking for the next (``Member.size`` bytes, padding is handled here)."""
    pax: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None
    while True:
        block = src.read_exact(BLOCK)
        if block is None or block == _ZERO:
            return  # end of archive (the rest is drained and checked by the caller)
        stored = _octal(block[148:156], "chksum")
        if stored != sum(block[:148]) + 256 + sum(block[156:]):
            raise IntegrityError("tar header checksum mismatch (corrupt layer)")
        typ = block[156:157] or b"0"
        size = _octal(block[124:136], "size")
        if typ in (b"x", b"g", b"L", b"K"):
            if size > _META_MAX:  # read into memory: a layer must not make us hold GBs
                raise IntegrityError(f"tar {typ.decode()} header of {size} bytes, over the "
                                     f"{_META_MAX} cap (corrupt layer)")
            data = src.read_exact(size + (-size % BLOCK)) if size else b""
            payload = (data or b"")[:size]
            if typ == b"x":
                pax = _pax(payload)
            elif typ == b"L":
                long_name = payload.rstrip(b"\0").decode("utf-8", "surrogateescape")
            elif typ == b"K":
                long_link = payload.rstrip(b"\0").decode("utf-8", "surrogateescape")
            continue
        name = block[0:100].split(b"\0", 1)[0]
        if block[257:262] == b"ustar":
            prefix = block[345:500].split(b"\0", 1)[0]
            if prefix:
                name = prefix + b"/" + name
        link = block[157:257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        m = Member(
            name=pax.get("path") or long_name or name.decode("utf-8", "surrogateescape"),
            mode=_octal(block[100:108], "mode"),
            size=_pax_size(pax["size"]) if "size" in pax else size,
            type=b"0" if typ in (b"\0", b"7") else typ,
            linkname=pax.get("linkpath") or long_link or link,
        )
        pax, long_name, long_link = {}, None, None
        if m.type not in (b"0", b"1", b"2", b"3", b"4", b"5", b"6"):
            raise ImageError(f"tar entry {m.name!r} has unsupported type {m.type!r}")
        if m.type != b"0":
            m.size = 0  # only regular files hand data to the caller
        yield m  # the caller consumes exactly m.size bytes (pieces or skip)
        pad = -m.size % BLOCK if m.type == b"0" else size + (-size % BLOCK)
        if pad:
            src.skip(pad)
