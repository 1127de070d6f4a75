"""HTTP/1.1 connections for the registry client: a small client on the standard library's
sockets (and ``ssl`` for https).

One :class:`ConnectionPool` per client keeps idle keep-alive connections per
(scheme, host, port); each request takes one (blobs moving on several threads each get
their own) and gives it back once its response has been read to the end. What it sends
is exactly what it is given: no redirects, retries, cookies or compression (the policy
above it, ``registry_http.Transport``, decides those). A request body is ``bytes`` or a
:class:`FileBody`, always with a ``Content-Length``: nothing is ever sent chunked. A file
body goes out with ``sendfile(2)`` (no copy through Python) where the socket allows it.

Responses are read as RFC 9112 frames them: no body for HEAD, 1xx, 204 and 304;
``Transfer-Encoding: chunked``; ``Content-Length`` (a body cut short of it is an error,
never a short success); otherwise to the end of the connection. Interim 1xx answers are
skipped. Header and line sizes are capped.

Why not ``http.client``: it parses headers with the ``email`` package, and importing
that (with ``ssl``, which it imports even for plain http) was a tenth of a push or
pull process's start-up; a registry speaks plain HTTP/1.1 and needs none of it.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Protocol, overload
from urllib.parse import unquote, urlsplit

from .. import __version__
from ..errors import RegistryError

USER_AGENT = f"patchbake/{__version__}"
SENDFILE_SLICE = 8 << 20  # progress is reported after each slice of a file body
DRAIN_LIMIT = 64 << 10  # an unread rest of a known length up to this is read on close
MAX_LINE = 64 << 10  # a status, header or chunk-size line
MAX_HEADERS = 100
SMALL_WRITE = 64 << 10  # a body below this goes out in one send with the header
Timeout = tuple[float, float]  # (connect, read) seconds


class ProtocolError(Exception):
    """The server's answer is not well-formed HTTP/1.1, or ended before its framing said
    it would (a body shorter than its Content-Length, a chunk cut off)."""


# A reused keep-alive connection the server had already closed: sending fails, or the
# answer is the end of the connection.
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

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


class Reader(Protocol):
    def read(self, n: int = -1) -> bytes: ...


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


class Sender(Protocol):
    """What sends one HTTP exchange (the pool below; an in-memory registry in tests)."""

    def send(self, method: str, url: str, headers: Mapping[str, str],
             body: bytes | FileBody | None, timeout: Timeout) -> Response: ...


class FileBody:
    """A request body read from a file of known length (sent with a Content-Length,
    never chunked), reporting progress as it goes out."""

    def __init__(self, f: IO[bytes], size: int,
                 progress: Callable[[int], None] | None = None) -> None:
        self._f, self._size, self._progress = f, size, progress

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        if self._progress and data:
            self._progress(len(data))
        return data

    def tell(self) -> int:
        return self._f.tell()

    def seek(self, offset: int) -> None:
        self._f.seek(offset)

    def send_to(self, sock: socket.socket) -> None:
        """All ``len(self)`` bytes onto ``sock``: ``sendfile(2)`` where the socket allows
        (Python falls back to reads and sends where it does not, e.g. under TLS)."""
        offset = self._f.tell()
        end = offset + self._size
        while offset < end:
            sent = sock.sendfile(self._f, offset, min(SENDFILE_SLICE, end - offset))
            if sent <= 0:
                raise ProtocolError(f"the file body ended after {offset} of "
                                    f"{self._size} bytes")
            offset += sent
            if self._progress:
                self._progress(sent)

    def close(self) -> None:
        self._f.close()


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


# -- connections ---------------------------------------------------------------------------

def _checked(text: str, what: str) -> str:
    if any(c in text for c in "\r\n\0"):
        raise RegistryError(f"refusing to send a {what} with a line break or NUL in it: "
                            f"{text[:80]!r}")
    return text


class Connection:
    """One HTTP/1.1 connection (TCP, or TLS over TCP, perhaps through a CONNECT proxy)."""

    def __init__(self, sock: socket.socket, host_header: str) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.host_header = host_header

    def dropped(self) -> bool:
        """An idle keep-alive connection the server has closed (or sent something on)."""
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()

    def exchange(self, method: str, target: str, headers: Mapping[str, str],
                 body: bytes | FileBody | None
                 ) -> tuple[int, str, Headers, Body, bool]:
        """Send one request; (status, reason, headers, body, keep-alive) of its answer."""
        lines = [f"{_checked(method, 'method')} {_checked(target, 'target')} HTTP/1.1",
                 f"Host: {self.host_header}", f"User-Agent: {USER_AGENT}"]
        lines += [f"{_checked(k, 'header name')}: {_checked(v, 'header value')}"
                  for k, v in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1")
        if isinstance(body, FileBody):
            self.sock.sendall(head)
            body.send_to(self.sock)
        elif body and len(body) >= SMALL_WRITE:
            self.sock.sendall(head)
            self.sock.sendall(body)
        else:
            self.sock.sendall(head + (body or b""))
        version, status, reason, fields = read_head(self.rfile)
        hdrs = Headers(fields)
        framing = Body(self.rfile, method, status, hdrs)
        tokens = {t.strip().lower() for t in (hdrs.get("Connection") or "").split(",")}
        keep = ("close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens)
        return status, reason, hdrs, framing, keep and not framing.to_close


class ConnectionPool:
    """Keep-alive connections per (scheme, host, port), shared by a client's threads."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._lock = threading.Lock()
        self._tls: Any = None  # ssl.SSLContext, made on the first https request

    def _context(self) -> Any:
        if self._tls is None:
            import ssl

            # REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE: the CA file users of earlier versions
            # pointed the client at; otherwise the system's store (and SSL_CERT_FILE).
            cafile = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
            self._tls = ssl.create_default_context(cafile=cafile or None)
        return self._tls

    def _connect(self, key: tuple[str, str, int], connect_timeout: float) -> Connection:
        scheme, host, port = key
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host
        host_header = name if port == default else f"{name}:{port}"
        proxy = _proxy_for(host) if scheme == "https" else None
        # An ASCII name as bytes (getaddrinfo takes either): a str has the socket module
        # import the idna codec first, a millisecond of a short push.
        target = proxy[0] if proxy else (host, port)
        address = (target[0].encode("ascii") if target[0].isascii() else target[0], target[1])
        sock = socket.create_connection(address,  # type: ignore[arg-type]  # bytes host: see above
                                        timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if proxy:
                _tunnel(sock, f"{name}:{port}", proxy[1])
            if scheme == "https":
                sock = self._context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return Connection(sock, host_header)

    def _take(self, key: tuple[str, str, int], timeout: Timeout) -> tuple[Connection, bool]:
        """A connection for ``key`` and whether it is a reused one."""
        conn: Connection | None = None
        with self._lock:
            idle = self._idle.get(key, [])
            while idle and conn is None:
                conn = idle.pop()
                if conn.dropped():
                    conn.close()
                    conn = None
        reused = conn is not None
        if conn is None:
            conn = self._connect(key, timeout[0])
        conn.sock.settimeout(timeout[1])
        return conn, reused

    def _give_back(self, key: tuple[str, str, int], conn: Connection, reusable: bool) -> None:
        if not reusable:
            conn.close()
            return
        with self._lock:
            self._idle.setdefault(key, []).append(conn)

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in conns:
            c.close()

    def send(self, method: str, url: str, headers: Mapping[str, str],
             body: bytes | FileBody | None, timeout: Timeout) -> Response:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        key = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn, (status, reason, hdrs, framing, keep) = self._exchange(
            key, timeout, method, target, headers, body)

        def release(done: bool) -> None:
            self._give_back(key, conn, done and keep and framing.done)

        return Response(status, reason, hdrs, url, framing, release)

    def _exchange(self, key: tuple[str, str, int], timeout: Timeout, method: str,
                  target: str, headers: Mapping[str, str], body: bytes | FileBody | None
                  ) -> tuple[Connection, tuple[int, str, Headers, Body, bool]]:
        start = body.tell() if isinstance(body, FileBody) else 0
        conn, reused = self._take(key, timeout)
        try:
            try:
                return conn, conn.exchange(method, target, headers, body)
            except _STALE:
                if not reused:
                    raise
            # The server closed the idle connection as we reused it (it had not read the
            # request): once more on a new connection, as HTTP clients do.
            conn.close()
            if isinstance(body, FileBody):
                body.seek(start)
            conn = self._connect(key, timeout[0])
            conn.sock.settimeout(timeout[1])
            return conn, conn.exchange(method, target, headers, body)
        except BaseException:
            conn.close()
            raise


# -- proxies -------------------------------------------------------------------------------

def _proxy_for(host: str) -> tuple[tuple[str, int], str | None] | None:
    """((proxy host, port), Proxy-Authorization) from HTTPS_PROXY unless NO_PROXY exempts
    ``host``, as curl and other HTTP clients read them. Loopback registries are plain http
    and never proxied."""
    if not any(k in os.environ for k in ("https_proxy", "HTTPS_PROXY")):
        return None
    import urllib.request

    proxy = urllib.request.getproxies_environment().get("https")
    if not proxy or urllib.request.proxy_bypass(host):  # NO_PROXY, on POSIX
        return None
    p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not p.hostname:
        return None
    auth = None
    if p.username is not None:
        import base64

        raw = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        auth = "Basic " + base64.b64encode(raw).decode("ascii")
    return (p.hostname, p.port or 80), auth


def _tunnel(sock: socket.socket, authority: str, auth: str | None) -> None:
    """CONNECT ``authority`` through the proxy ``sock`` is connected to."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if auth:
        lines.append(f"Proxy-Authorization: {auth}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1"))
    rfile = sock.makefile("rb", buffering=0)
    try:
        _, status, reason, _ = read_head(rfile)  # type: ignore[arg-type]
    finally:
        rfile.close()
    if status != 200:
        raise ProtocolError(f"the proxy refused to open a tunnel to {authority}: "
                            f"HTTP {status} {reason}")
