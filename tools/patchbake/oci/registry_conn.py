"""HTTP/1.1 connections for the registry client: a small client on the standard library's
sockets (and ``ssl`` for https); messages are read by ``registry_wire``.

One :class:`ConnectionPool` per client keeps idle keep-alive connections per
(scheme, host, port); each request takes one (blobs moving on several threads each get
their own) and gives it back once its response has been read to the end. What it sends
is exactly what it is given: no redirects, retries, cookies or compression (the policy
above it, ``registry_http.Transport``, decides those). A request body is ``bytes`` or a
:class:`FileBody`, always with a ``Content-Length``: nothing is ever sent chunked. A file
body goes out with ``sendfile(2)`` (no copy through Python) where the socket allows it.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlsplit

from .. import __version__
from ..errors import RegistryError
from .registry_wire import TRANSPORT_ERRORS, Body, Headers, ProtocolError, Response, read_head

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Protocol

    class Sender(Protocol):
        """What sends one HTTP exchange (the pool below; an in-memory registry in tests)."""

        def send(self, method: str, url: str, headers: Mapping[str, str],
                 body: bytes | FileBody | None, timeout: Timeout) -> Response: ...

__all__ = ["TRANSPORT_ERRORS", "ConnectionPool", "FileBody", "Headers", "ProtocolError",
           "Response", "Sender"]

USER_AGENT = f"patchbake/{__version__}"
SENDFILE_SLICE = 8 << 20  # progress is reported after each slice of a file body
SMALL_WRITE = 64 << 10  # a body below this goes out in one send with the header
Timeout = tuple[float, float]  # (connect, read) seconds

# A reused keep-alive connection the server had already closed: sending fails, or the
# answer is the end of the connection.
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

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
