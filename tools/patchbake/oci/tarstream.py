"""A streaming tar reader for layer blobs, built for verification speed.

One background thread reads the blob in 1 MiB chunks and hashes the raw bytes (the layer
digest) and, for gzip, inflates and hashes the tar bytes (the diff_id); hashlib and zlib
release the GIL, so this overlaps with the main thread, which parses headers and hashes
file contents straight out of the chunks (memoryview slices, no copies). Formats read:
ustar, pax ``x`` headers, GNU long names (``L``/``K``), exactly as Go's archive/tar (the
engines' reader) resolves them; what readers resolve differently (global pax headers, sparse
files, a pax path beside a GNU long name, ...) is refused, see ``members``.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import AmbiguousLayerError, ImageError, IntegrityError

BLOCK = 512
_READ = 1 << 20
HASH_READ = 4 << 20  # the most a background hasher reads at once: few GIL hand-offs a layer
_ZERO = bytes(BLOCK)
_END = object()
_TRUNCATED = ("layer is a truncated gzip stream (no end of stream): Go's gzip reader, so "
              "the engines, fail on it")


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
        self._done = 0  # tar bytes of the chunks before ``_cur``
        self._eof = False

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:  # noqa: C901 - read, hash, inflate, hand over; failures mapped
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
                if not inflate.eof:  # Go's gzip reader: io.ErrUnexpectedEOF
                    raise IntegrityError(_TRUNCATED)
            self._put(_END)
        except IntegrityError as exc:
            self._put(exc)
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
        self._done += len(self._cur)
        self._cur, self._off = item, 0  # type: ignore[assignment]
        return True

    def tell(self) -> int:
        """How many tar bytes were consumed: a member's data offset in the tar stream
        (for an uncompressed layer, in the blob) once its header was read."""
        return self._done + self._off

    def read_exact(self, n: int) -> bytes | None:
        """``n`` bytes, or None at EOF (a short read at EOF is an error)."""
        if len(self._cur) - self._off >= n:
            out = self._cur[self._off:self._off + n]
            self._off += n
            return out
        parts = [self._cur[self._off:]]
        have = len(parts[0])
        self._done += len(self._cur)
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
    """Digest, diff_id and size of a blob read straight through (the memoised path of a
    scan needs no tar parsing). An uncompressed blob is read into one reused buffer in
    large pieces: hashlib drops the GIL while it hashes a piece, so a hashing thread needs
    the GIL a few times per layer and the caller's thread keeps it the rest of the time.
    ``buf`` is that buffer (a caller hashing several blobs allocates it once); ``stop``
    (set by another thread) ends the read early; ``complete`` says whether it ran to EOF."""

    def __init__(self, raw: BinaryIO, compression: str, stop: threading.Event | None = None,
                 buf: memoryview | None = None) -> None:
        self.raw_hash = hashlib.sha256()
        self.tar_hash = hashlib.sha256() if compression == "gzip" else self.raw_hash
        self.raw_size = 0
        self.complete = False
        if compression == "gzip":
            self._gzip(raw, stop)
        else:
            self._plain(raw, stop, buf if buf is not None else memoryview(bytearray(_READ)))

    def _plain(self, raw: BinaryIO, stop: threading.Event | None, buf: memoryview) -> None:
        readinto = getattr(raw, "readinto", None)
        if readinto is None:  # a reader without readinto: plain reads of the same size
            for chunk in iter(lambda: raw.read(len(buf)), b""):
                if stop is not None and stop.is_set():
                    return
                self.raw_size += len(chunk)
                self.raw_hash.update(chunk)
            self.complete = True
            return
        while not (stop is not None and stop.is_set()):
            n = readinto(buf)
            if not n:
                self.complete = True
                return
            self.raw_size += n
            self.raw_hash.update(buf[:n])

    def _gzip(self, raw: BinaryIO, stop: threading.Event | None) -> None:
        inflate = zlib.decompressobj(31)
        try:
            for chunk in iter(lambda: raw.read(_READ), b""):
                if stop is not None and stop.is_set():
                    return
                self.raw_size += len(chunk)
                self.raw_hash.update(chunk)
                out = inflate.decompress(chunk)
                while inflate.eof and inflate.unused_data:
                    rest = inflate.unused_data
                    inflate = zlib.decompressobj(31)
                    out += inflate.decompress(rest)
                self.tar_hash.update(out)
            self.tar_hash.update(inflate.flush())
            if not inflate.eof:
                raise IntegrityError(_TRUNCATED)
        except zlib.error as exc:
            raise IntegrityError(f"layer is not valid gzip: {exc}") from None
        self.complete = True


@dataclass
class Member:
    name: str
    mode: int
    size: int
    type: bytes  # b"0" file, b"1" hardlink, b"2" symlink, b"3"/b"4" device, b"5" dir, b"6" fifo
    linkname: str


class _Bad(Exception):
    """A header Go's archive/tar rejects (ErrHeader): the consumer fails on this layer."""


# The rules below are Go's archive/tar Reader (reader.go: Next/next, readHeader, mergePAX,
# parsePAX, parsePAXRecord, handleRegularFile; strconv.go: parseNumeric, parseOctal,
# parseString; format.go: getFormat), the reader of moby/containerd/umoci/skopeo. Where two
# Go versions or the engines would act differently the layer is refused (AmbiguousLayerError);
# where Go itself fails, the layer is refused as corrupt (IntegrityError). docs/images.md,
# "How layers are read", has the table.
_OCTAL_CANON = re.compile(rb"(?:[0-7]{7}\0){3}[0-7]{11}\0[0-7]{11}\0").fullmatch  # 100:148
_FAST = re.compile(rb"(?:[0-7]{7}\0){3}(?:[0-7]{11}\0){2}[0-7]{6}\0 ").match  # 100:156
_DEV_CANON = re.compile(rb"(?:[0-7]{7}\0|\0{8}){2}").fullmatch  # 329:345
_OCTAL = re.compile(rb"[0-7]+").fullmatch
_GO_INT = re.compile(r"[+-]?[0-9]+").fullmatch  # strconv.ParseInt(s, 10, 64)
_GO_TIME = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?").fullmatch  # parsePAXTime
_HEADER_ONLY = frozenset(b"123456")  # isHeaderOnlyType: no data, whatever the size field says
_SPECIAL_MAX = 1 << 20  # readSpecialFile: Go fails on a bigger pax / long-name body
_INT64 = 1 << 63
_OVERLAY_XATTRS = tuple(f"{p}.xattr.{ns}.overlay." for p in ("SCHILY", "LIBARCHIVE")
                        for ns in ("trusted", "user"))
_USTAR, _GNU_MAGIC, _GNU_VERSION, _STAR_TRAILER = b"ustar\0", b"ustar ", b" \0", b"tar\0"


def _numeric(field: bytes) -> int:
    """parseNumeric: base-256 when the top bit is set (two's complement, the first byte's
    low 7 bits included), else parseOctal (trim spaces/NULs, cut at NUL, digits 0-7)."""
    if field and field[0] & 0x80:
        inv = 0xFF if field[0] & 0x40 else 0
        x = 0
        for i, c in enumerate(field):
            c ^= inv
            if i == 0:
                c &= 0x7F
            if x >> 56:
                raise _Bad("base-256 number overflows")
            x = x << 8 | c
        if x >> 63:
            raise _Bad("base-256 number overflows")
        return ~x if inv else x
    text = field.strip(b" \0").split(b"\0", 1)[0]
    if not text:
        return 0
    if not _OCTAL(text) or int(text, 8) >= 1 << 64:
        raise _Bad(f"{field!r} is not an octal number")
    return int(text, 8)


def _cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _checksum_ok(block: bytes) -> bool:
    if block[148] & 0x80:  # getFormat reads the checksum with parseOctal: no base-256
        return False
    stored = _numeric(block[148:156])
    unsigned = sum(block) - sum(block[148:156]) + 256
    if stored == unsigned:
        return True
    high = sum(1 for c in block[:148] + block[156:] if c & 0x80)
    return stored == unsigned - 256 * high  # Go accepts the signed-char sum too


def _base_header(block: bytes) -> tuple[bytes, bytes, int, int, bytes, bytes]:
    """(type, name, size, mode, linkname, ignored-prefix) of one header block, as Go's
    readHeader builds them; raises _Bad where Go returns ErrHeader."""
    # fast path: the header every ustar/pax writer (Go's, Python's) produces -- canonical
    # octal fields and checksum, "ustar\0" "00", no star trailer; the slow path decides
    # everything else
    if _FAST(block, 100) and block[257:265] == b"ustar\x0000" and _DEV_CANON(block, 329, 345) \
            and block[508:512] != _STAR_TRAILER \
            and int(block[148:154], 8) == sum(block) - sum(block[148:156]) + 256:
        name = block[0:100].split(b"\0", 1)[0]
        prefix = block[345:500].split(b"\0", 1)[0]
        return (block[156:157], prefix + b"/" + name if prefix else name,
                int(block[124:135], 8), int(block[100:107], 8),
                block[157:257].split(b"\0", 1)[0], b"")
    return _slow_header(block)


def _slow_header(  # noqa: C901 - one pass over the tar header, each branch a field or magic
        block: bytes) -> tuple[bytes, bytes, int, int, bytes, bytes]:
    try:
        ok = _checksum_ok(block)
    except _Bad:
        ok = False
    if not ok:
        raise IntegrityError("tar header checksum mismatch (corrupt layer)")
    if _OCTAL_CANON(block, 100, 148):  # the common, canonical numeric fields
        mode, size = int(block[100:107], 8), int(block[124:135], 8)
    else:
        mode, size = _numeric(block[100:108]), _numeric(block[124:136])
        _numeric(block[108:116]), _numeric(block[116:124]), _numeric(block[136:148])
    typ = block[156:157]
    name = _cstr(block[0:100])
    link = _cstr(block[157:257])
    magic, version, trailer = block[257:263], block[263:265], block[508:512]
    gnu = magic == _GNU_MAGIC and version == _GNU_VERSION
    whole = _cstr(block[345:500])  # what a plain ustar reader takes as the prefix
    shadow = b""  # a prefix some reader would use and Go does not (or the other way round)
    prefix = b""
    if (magic == _USTAR or gnu) and not _DEV_CANON(block, 329, 345):
        _numeric(block[329:337]), _numeric(block[337:345])
    if magic == _USTAR and trailer == _STAR_TRAILER:  # star: 131-byte prefix, then times
        prefix = _cstr(block[345:476])
        _numeric(block[476:488]), _numeric(block[488:500])
        shadow = whole if whole != prefix else b""
    elif magic == _USTAR:  # Go does not look at the version; strict readers want "00"
        prefix = whole
        shadow = whole if version != b"00" else b""
    elif gnu:
        for times in (block[345:357], block[357:369]):
            if times[0]:
                try:
                    _numeric(times)
                except _Bad:  # Go then reads 345.. as a ustar prefix, GNU tar does not
                    shadow = whole or b"?"
    elif magic[:5] == b"ustar":  # a near-ustar magic: Go reads V7 (no prefix)
        shadow = whole
    if prefix:
        name = prefix + b"/" + name
    return typ, name, size, mode, link, shadow


def _pax(data: bytes) -> dict[str, str]:
    """parsePAX: records ``"<len> <key>=<value>\\n"``; a repeated key: the last one wins."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        digits = data[pos:sp].decode("latin-1") if sp >= 0 else ""
        length = int(digits) if _GO_INT(digits) else -1
        if length < 5 or pos + length > len(data) or length <= len(digits) + 1 \
                or data[pos + length - 1:pos + length] != b"\n":
            raise _Bad(f"malformed pax header record at offset {pos}")
        key, eq, value = data[sp + 1:pos + length - 1].partition(b"=")
        if not eq or not key:
            raise _Bad(f"malformed pax header record at offset {pos}")
        k = key.decode("utf-8", "surrogateescape")
        if (b"\0" in value) if k in ("path", "linkpath", "uname", "gname") else (b"\0" in key):
            raise _Bad(f"pax header record {k!r} holds a NUL byte")
        if k in ("GNU.sparse.offset", "GNU.sparse.numbytes"):
            k = "GNU.sparse.map"  # parsePAX folds these into the 0.0 sparse map
        out[k] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _go_int(text: str, what: str) -> int:
    if not _GO_INT(text) or not -_INT64 <= int(text) < _INT64:
        raise _Bad(f"pax header {what} {text!r} is not a number")
    return int(text)


def _merge_pax(  # noqa: C901 - Go's mergePAX: one branch per pax record
        pax: dict[str, str], name: str, link: str, size: int) -> tuple[str, str, int]:
    """mergePAX: an empty value keeps the header's; numbers must parse like Go's."""
    for k, v in pax.items():
        if not v:
            continue
        if k == "path":
            name = v
        elif k == "linkpath":
            link = v
        elif k == "size":
            size = _go_int(v, "size")
        elif k in ("uid", "gid"):
            _go_int(v, k)
        elif k in ("mtime", "atime", "ctime"):
            if not _GO_TIME(v) or not -_INT64 <= int(v.partition(".")[0]) < _INT64:
                raise _Bad(f"pax header {k} {v!r} is not a time")
        elif k.startswith(_OVERLAY_XATTRS):
            raise AmbiguousLayerError(f"entry {name!r} carries the overlayfs attribute {k}: "
                                      "overlayfs engines (moby createTarFile sets xattrs) act "
                                      "on it, naive appliers and umoci do not")
        elif k.startswith("GNU.sparse."):
            raise AmbiguousLayerError(f"entry {name!r} is a GNU sparse file (pax {k}); its "
                                      "content depends on the reader's sparse support")
    return name, link, size


def _special(src: LayerBytes, typ: bytes, size: int) -> bytes:
    if size > _SPECIAL_MAX:
        raise _Bad(f"tar {typ.decode('latin-1')} header body of {size} bytes, over the "
                   f"{_SPECIAL_MAX}-byte cap of Go's reader")
    data = src.read_exact(size + (-size % BLOCK)) if size else b""
    if data is None or len(data) < size:
        raise IntegrityError("layer ends inside a tar extension header")
    return data[:size]


def _long_name(payload: bytes, what: str) -> str:
    head, _, tail = payload.partition(b"\0")
    if tail.strip(b"\0"):
        raise AmbiguousLayerError(f"GNU long {what} {payload!r} holds bytes after a NUL "
                                  "(Go cuts there, other readers do not)")
    return head.decode("utf-8", "surrogateescape")


def _resolve(name: str, link: str, pax: dict[str, str], long_name: str, long_link: str,
             size: int) -> tuple[str, str, int]:
    name, link, size = _merge_pax(pax, name, link, size)
    # Go >= 1.10 lets a GNU long name/link override the pax record; Go < 1.10 let the
    # later header win: when both are there and differ, readers disagree
    if long_name and pax.get("path") and pax["path"] != long_name:
        raise AmbiguousLayerError(f"entry has both a pax path {pax['path']!r} and a GNU long "
                                  f"name {long_name!r}; readers pick different ones")
    if long_link and pax.get("linkpath") and pax["linkpath"] != long_link:
        raise AmbiguousLayerError(f"entry has both a pax linkpath {pax['linkpath']!r} and a "
                                  f"GNU long link {long_link!r}; readers pick different ones")
    return long_name or name, long_link or link, size


def members(src: LayerBytes) -> Iterator[Member]:
    """Yield members as Go's tar.Reader.Next returns them; the caller must consume
    (``pieces``) or ``skip`` each member's data before asking for the next (``Member.size``
    bytes; padding is handled here). A header Go rejects raises IntegrityError; one that
    readers resolve differently raises AmbiguousLayerError."""
    try:
        yield from _members(src)
    except _Bad as exc:
        raise IntegrityError(f"{exc} (Go's archive/tar refuses this header; corrupt layer)"
                             ) from None


def _members(src: LayerBytes) -> Iterator[Member]:  # noqa: C901 - Go's Reader.Next: each header
    pax: dict[str, str] = {}
    long_name = long_link = ""
    while True:
        block = src.read_exact(BLOCK)
        if block is None or block == _ZERO:
            return  # end of archive (the rest is drained and checked by the caller)
        typ, raw_name, size, mode, raw_link, shadow = _base_header(block)
        if size < 0:
            raise _Bad(f"negative size in the header of {raw_name!r}")
        if typ in (b"x", b"L", b"K"):
            payload = _special(src, typ, size)
            if typ == b"x":
                pax = _pax(payload)
            elif typ == b"L":
                long_name = _long_name(payload, "name")
            else:
                long_link = _long_name(payload, "link")
            continue
        name = raw_name.decode("utf-8", "surrogateescape")
        if typ == b"g":
            raise AmbiguousLayerError(f"global pax header {name!r}: Go's reader hands it to "
                                      "the engine as an entry and applies none of its records, "
                                      "other tar readers apply them to every later entry")
        link = raw_link.decode("utf-8", "surrogateescape")
        if pax or long_name or long_link:
            name, link, size = _resolve(name, link, pax, long_name, long_link, size)
            pax, long_name, long_link = {}, "", ""
        if size < 0:
            raise _Bad(f"negative size for {name!r} (pax header or base-256 field)")
        if shadow:
            raise AmbiguousLayerError(f"entry {name!r}: header magic {block[257:265]!r} "
                                      "leaves bytes 345-500 to be read as a path prefix by "
                                      "some readers and not others")
        if typ == b"S":
            raise AmbiguousLayerError(f"entry {name!r} is an old GNU sparse file ('S'); its "
                                      "content depends on the reader's sparse support")
        if typ == b"\0" and name.endswith("/"):
            raise AmbiguousLayerError(f"entry {name!r} has type NUL and a trailing '/': Go "
                                      "reads a directory, older readers a file")
        typ = b"0" if typ == b"\0" else typ
        if typ[0] in _HEADER_ONLY:
            size = 0
        if typ not in (b"0", b"1", b"2", b"3", b"4", b"5", b"6"):
            raise ImageError(f"tar entry {name!r} has type {typ!r}, which the engines refuse "
                             "to unpack")
        m = Member(name=name, mode=mode, size=size, type=typ, linkname=link)
        yield m  # the caller consumes exactly m.size bytes (pieces or skip)
        if -size % BLOCK:
            src.skip(-size % BLOCK)
