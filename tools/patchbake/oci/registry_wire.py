"""HTTP/1.1 messages as the registry client reads them: status line, header fields,
and a body framed as RFC 9112 frames it (no body for HEAD, 1xx, 204 and 304;
``Transfer-Encoding: chunked``; ``Content-Length``, a body cut short of it being an
error, never a short success; otherwise to the end of the connection). Interim 1xx
answers are skipped; line and header sizes are capped. Connections are in
``registry_conn``.

Why not ``http.client``: it parses headers with the ``email`` package, and importing
that (with ``ssl``, which it imports even for plain http) was a tenth of a push or
pull process's start-up; a registry speaks plain HTTP/1.1 and needs none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Protocol, overload

    class Reader(Protocol):
        def read(self, n: int = -1) -> bytes: ...

DRAIN_LIMIT = 64 << 10  # an unread rest of a known length up to this is read on close
MAX_LINE = 64 << 10  # a status, header or chunk-size line
MAX_HEADERS = 100


class ProtocolError(Exception):
    """The server's answer is not well-formed HTTP/1.1, or ended before its framing said
    it would (a body shorter than its Content-Length, a chunk cut off)."""


# What a failed exchange raises: socket errors (refused, reset, timed out: all OSError,
# TLS errors included) and answers that break HTTP's framing.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, ProtocolError)


class Headers:
    """Response header fields by case-insensitive name; a repeated field's values are
    joined with ", " (RFC 9110 5.3)."""

    def __init__(self, fields: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._d: dict[str, str] = {}
        for k, v in (fields.items() if isinstance(fields, Mapping) else fields):
            key = k.lower()
            self._d[key] = f"{self._d[key]}, {v}" if key in self._d else v

    if TYPE_CHECKING:
        @overload
        def get(self, name: str) -> str | None: ...
        @overload
        def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._d.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._d

    def setdefault(self, name: str, value: str) -> str:
        return self._d.setdefault(name.lower(), value)

    def items(self) -> list[tuple[str, str]]:
        return list(self._d.items())


class Response:
    """One response: status, headers, and a body read on demand (``iter_content``,
    ``read``) or whole (``content``, ``text``, ``json()``). ``close()`` hands the connection
    back for reuse when the body was read to its end (a small unread rest of known length
    is read first), and closes it otherwise."""

    def __init__(self, status: int, reason: str, headers: Headers, url: str, raw: Reader,
                 release: Callable[[bool], None] | None = None) -> None:
        self.status_code = status
        self.reason = reason
        self.headers = headers
        self.url = url
        self._raw = raw
        self._release = release
        self._content: bytes | None = None
        self._ended = False
        self._closed = False

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        if not data and n != 0 or n < 0:
            self._ended = True
        return data

    def iter_content(self, chunk_size: int) -> Iterator[bytes]:
        while True:
            data = self.read(chunk_size)
            if not data:
                return
            yield data

    def preload(self) -> None:
        """Read the whole body now (so a transport error while reading it surfaces here)."""
        if self._content is None:
            self._content = b"".join(self.iter_content(1 << 16))
            self._raw = _Bytes(self._content)

    @property
    def content(self) -> bytes:
        self.preload()
        assert self._content is not None
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        import json

        return json.loads(self.content)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        left = getattr(self._raw, "remaining", None)
        if not self._ended and left is not None and left <= DRAIN_LIMIT:
            try:  # a small known rest (an error document, an empty 201) keeps the connection
                self._raw.read()
                self._ended = True
            except TRANSPORT_ERRORS:
                pass
        if self._release is not None:
            self._release(self._ended)


class _Bytes:
    """A body already read: served from memory."""

    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else self._pos + n
        out = self._data[self._pos:end]
        self._pos += len(out)
        return out


# -- reading an answer ---------------------------------------------------------------------

def _line(rfile: IO[bytes], what: str) -> bytes:
    line = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise ProtocolError(f"{what} line longer than {MAX_LINE} bytes")
    return line


def read_head(rfile: IO[bytes]) -> tuple[str, int, str, list[tuple[str, str]]]:
    """(version, status, reason, header fields) of the next final answer (1xx skipped)."""
    while True:
        line = _line(rfile, "status")
        if not line:
            raise ConnectionResetError("the server closed the connection without answering")
        version, _, rest = line.decode("iso-8859-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
        fields = _read_fields(rfile)
        status = int(code)
        if not 100 <= status < 200 or status == 101:
            return version, status, reason.strip(), fields


def _read_fields(rfile: IO[bytes]) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    while True:
        line = _line(rfile, "header")
        if line in (b"\r\n", b"\n"):
            return fields
        if not line:
            raise ProtocolError("the connection ended inside the header")
        if len(fields) >= MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} header fields")
        text = line.decode("iso-8859-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and fields:  # obsolete line folding: a continuation
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {text.strip()}")
            continue
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"malformed header line: {line[:80]!r}")
        fields.append((name, value.strip()))


class Body:
    """A response body framed as RFC 9112 6.3 says; ``remaining`` is the bytes still due
    when a Content-Length says (None for chunked or to-the-end bodies)."""

    def __init__(self, rfile: IO[bytes], method: str, status: int, headers: Headers) -> None:
        self._rfile = rfile
        self.chunked = False
        self.to_close = False
        self.remaining: int | None = 0
        self._chunk_left = 0
        self._done = False
        if method == "HEAD" or status in (204, 304) or status < 200:
            return
        coding = headers.get("Transfer-Encoding")
        if coding is not None:
            self.chunked = coding.split(",")[-1].strip().lower() == "chunked"
            self.to_close = not self.chunked
            self.remaining = None
            return
        length = headers.get("Content-Length")
        if length is None:
            self.to_close, self.remaining = True, None
            return
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise ProtocolError(f"invalid Content-Length {length[:40]!r}")
        self.remaining = int(values.pop())

    @property
    def done(self) -> bool:
        return self.remaining == 0 if self.remaining is not None else self._done

    def read(self, n: int = -1) -> bytes:
        if self.chunked:
            return self._read_chunked(n)
        if self.remaining is None:  # to the end of the connection
            data = self._rfile.read(n) if n >= 0 else self._rfile.read()
            self._done = self._done or not data and n != 0
            return data
        want = self.remaining if n < 0 else min(n, self.remaining)
        data = self._rfile.read(want) if want else b""
        if len(data) < want:
            raise ProtocolError(f"the body ended {self.remaining - len(data)} bytes short "
                                "of its Content-Length")
        self.remaining -= len(data)
        return data

    def _read_chunked(self, n: int) -> bytes:
        out = bytearray()
        while not self._done and (n < 0 or len(out) < n):
            if self._chunk_left == 0:
                self._next_chunk()
                continue
            want = self._chunk_left if n < 0 else min(n - len(out), self._chunk_left)
            data = self._rfile.read(want)
            if len(data) < want:
                raise ProtocolError("the connection ended inside a chunk")
            out += data
            self._chunk_left -= len(data)
            if self._chunk_left == 0 and _line(self._rfile, "chunk end") not in (b"\r\n", b"\n"):
                raise ProtocolError("a chunk is longer than its size line says")
            if n > 0 and out:
                break  # like a socket read: what is here now
        return bytes(out)

    def _next_chunk(self) -> None:
        line = _line(self._rfile, "chunk size")
        size = line.split(b";", 1)[0].strip()
        if not line or not size or any(c not in b"0123456789abcdefABCDEF" for c in size):
            raise ProtocolError(f"bad chunk size line {line[:40]!r}")
        self._chunk_left = int(size, 16)
        if self._chunk_left == 0:
            _read_fields(self._rfile)  # trailer fields, then the final CRLF
            self._done = True
