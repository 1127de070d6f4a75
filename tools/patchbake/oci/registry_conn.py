"""HTTP/1.1 connections for the registry client, on the standard library's ``http.client``.

One :class:`ConnectionPool` per client keeps idle keep-alive connections per
(scheme, host, port); each request takes one (blobs moving on several threads each get
their own) and gives it back once its response has been read to the end. What it sends
is exactly what it is given: no redirects, retries, cookies, proxies for loopback or
``Accept-Encoding`` compression (the policy above it, ``registry_http.Transport``,
decides those). A request body is ``bytes`` or a :class:`FileBody`, always with a
``Content-Length``: nothing is ever sent chunked. A file body goes out with
``sendfile(2)`` (no copy through Python) where the socket allows it.

It sits on ``http.client`` rather than a third-party HTTP stack because a push or pull
is a short process: that stack's import alone cost more than a small push's transfer.
"""

from __future__ import annotations

import http.client
import io
import os
import select
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Protocol, overload
from urllib.parse import urlsplit

from .. import __version__

# What a failed exchange raises: socket errors (refused, reset, timed out: all OSError,
# TLS errors included) and http.client's protocol errors (a connection closed before the
# status line, a body shorter than its Content-Length, a malformed status or chunk).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)
USER_AGENT = f"patchbake/{__version__}"
SENDFILE_SLICE = 8 << 20  # progress is reported after each slice of a file body
DRAIN_LIMIT = 64 << 10  # an unread rest of a known length up to this is read on close
Timeout = tuple[float, float]  # (connect, read) seconds


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
    back for reuse when the body was read to its end (a small unread rest is read first),
    and closes it otherwise."""

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
        if not data and n != 0:
            left = getattr(self._raw, "length", None)
            if left:  # the connection ended before the Content-Length did
                raise http.client.IncompleteRead(b"", left)
            self._ended = True
        elif n < 0:
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
            self._raw = io.BytesIO(self._content)

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
        left = getattr(self._raw, "length", None)
        if not self._ended and left is not None and left <= DRAIN_LIMIT:
            try:  # a small known rest (an error document, an empty 201) keeps the connection
                self._raw.read()
                self._ended = True
            except TRANSPORT_ERRORS:
                pass
        if self._release is not None:
            self._release(self._ended)


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

    def send_to(self, conn: http.client.HTTPConnection) -> None:
        """All ``len(self)`` bytes onto the connection's socket: ``sendfile(2)`` for a
        real file, else reads of 1 MiB."""
        sock = conn.sock
        try:
            fileno = self._f.fileno()
        except (AttributeError, OSError, ValueError):
            fileno = -1
        if fileno < 0 or sock is None:
            while data := self.read(1 << 20):
                conn.send(data)
            return
        offset = self._f.tell()
        end = offset + self._size
        while offset < end:
            sent = sock.sendfile(self._f, offset, min(SENDFILE_SLICE, end - offset))
            if sent <= 0:
                raise http.client.HTTPException(
                    f"the file body ended after {offset} of {self._size} bytes")
            offset += sent
            if self._progress:
                self._progress(sent)

    def close(self) -> None:
        self._f.close()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection the server has closed (or sent something on)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class ConnectionPool:
    """Keep-alive connections per (scheme, host, port), shared by a client's threads."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
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

    def _new(self, scheme: str, host: str, port: int,
             connect_timeout: float) -> http.client.HTTPConnection:
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=connect_timeout, context=self._context())
            _tunnel_through_proxy(conn, host, port)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=connect_timeout)
        return conn

    def _take(self, key: tuple[str, str, int], timeout: Timeout) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = None
        with self._lock:
            idle = self._idle.get(key, [])
            while idle and conn is None:
                conn = idle.pop()
                if _dropped(conn):
                    conn.close()
                    conn = None
        if conn is None:
            conn = self._new(*key, connect_timeout=timeout[0])
            try:
                conn.connect()
            except BaseException:
                conn.close()
                raise
        assert conn.sock is not None
        conn.sock.settimeout(timeout[1])
        return conn

    def _give_back(self, key: tuple[str, str, int], conn: http.client.HTTPConnection,
                   reusable: bool) -> None:
        if not reusable or conn.sock is None:
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
        host = parts.hostname or ""
        key = (scheme, host, parts.port or (443 if scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._take(key, timeout)
        try:
            conn.putrequest(method, target)
            for name, value in {"User-Agent": USER_AGENT, **headers}.items():
                conn.putheader(name, value)
            if isinstance(body, FileBody):
                conn.endheaders()
                body.send_to(conn)
            else:
                conn.endheaders(body or None)
            raw = conn.getresponse()
        except BaseException:
            conn.close()
            raise

        def release(done: bool) -> None:
            self._give_back(key, conn, done and raw.isclosed() and not raw.will_close)

        return Response(raw.status, raw.reason, Headers(raw.getheaders()), url, raw, release)


def _tunnel_through_proxy(conn: http.client.HTTPConnection, host: str, port: int) -> None:
    """HTTPS_PROXY (and NO_PROXY), as curl and other HTTP clients read them: connect to
    the proxy and open a CONNECT tunnel to the registry through it. Loopback registries
    are plain http and never proxied."""
    if not any(k in os.environ for k in ("https_proxy", "HTTPS_PROXY")):
        return
    import urllib.request

    proxy = urllib.request.getproxies_environment().get("https")
    if not proxy or urllib.request.proxy_bypass(host):  # NO_PROXY, on POSIX
        return
    p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not p.hostname:
        return
    conn.set_tunnel(host, port)
    # http.client connects to (conn.host, conn.port) and tunnels to the tunnel host
    conn.host, conn.port = p.hostname, p.port or 80
