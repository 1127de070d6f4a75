"""A fault-injecting HTTP proxy of our own, in front of the real distribution registry.

Every request is forwarded to the registry unless a rule matches it; a rule fires a fixed
number of times (or always) and answers with one fault: an HTTP status (with optional
Retry-After), a connection reset mid-body, a body cut short under the full
Content-Length, a short body under a Content-Length that agrees with it (the consistent
liar), a stall, silence after headers promising a length, a body dripped a byte at a
time, a wrong Docker-Content-Digest header, a flipped byte, a 401 with a
challenge, or a redirect. Loopback only; it counts every request it sees.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Rule:
    method: str  # "GET", "HEAD", ... or "*"
    path: str  # regex on the request path
    fault: str  # status:<n>[:<retry-after>] | reset | truncate | short | stall:<s> | digest | flip | 401:<header> | redirect:<url> | silence:<content-length> | drip:<bytes/s>
    times: int = 1  # -1: always
    fired: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times != -1 and self.fired >= self.times:
            return False
        return (self.method in ("*", method)) and re.search(self.path, path) is not None


@dataclass
class Proxy:
    upstream: str  # host:port of the real registry
    rules: list[Rule] = field(default_factory=list)
    requests: int = 0
    faults: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, method: str, path: str) -> Rule | None:
        with self.lock:
            self.requests += 1
            for r in self.rules:
                if r.matches(method, path):
                    r.fired += 1
                    self.faults += 1
                    return r
        return None


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def _forward(self) -> tuple[int, list[tuple[str, str]], bytes]:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
            hdrs = {k: v for k, v in self.headers.items()
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding")}
            conn.request(self.command, self.path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp.status, resp.getheaders(), data

        def _send(self, status: int, headers: list[tuple[str, str]], data: bytes,
                  length: int | None = None, cut: int | None = None) -> None:
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("content-length", "connection", "transfer-encoding",
                                     "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.send_header("Connection", "close" if cut is not None else "keep-alive")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data if cut is None else data[:cut])
            if cut is not None:
                self.wfile.flush()
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.close_connection = True

        def _silence(self, length: int) -> None:
            """Headers promising ``length`` bytes, then nothing until the client leaves."""
            self.send_response(200)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.flush()
            self.connection.settimeout(120)
            try:
                self.connection.recv(1)  # returns (b"") when the client hangs up
            except OSError:
                pass
            self.close_connection = True

        def _drip(self, status: int, headers: list[tuple[str, str]], data: bytes,
                  per_s: float) -> None:
            """The real answer, one byte every 1/``per_s`` seconds."""
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("content-length", "connection", "transfer-encoding",
                                     "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1.0 / per_s)
            except OSError:
                pass  # the client gave up: the point
            self.close_connection = True

        def _handle(self) -> None:
            rule = proxy.pick(self.command, self.path)
            if rule is None:
                self._send(*self._forward())
                return
            kind, _, arg = rule.fault.partition(":")
            if kind == "status":
                code, _, after = arg.partition(":")
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                extra = [("Retry-After", after)] if after else []
                self._send(int(code), extra, b'{"errors":[{"code":"FAULT","message":"injected"}]}')
                return
            if kind == "401":
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                self._send(401, [("WWW-Authenticate", arg)] if arg else [], b"")
                return
            if kind == "redirect":
                self._send(307, [("Location", arg)], b"")
                return
            if kind == "stall":
                time.sleep(float(arg))
                self._send(*self._forward())
                return
            if kind == "silence":
                self._silence(int(arg))
                return
            if kind == "drip":
                self._drip(*self._forward(), float(arg))
                return
            status, headers, data = self._forward()
            if kind == "reset":
                self._send(status, headers, data, cut=len(data) // 2)
            elif kind == "truncate":
                self._send(status, headers, data, length=len(data), cut=len(data) // 2)
            elif kind == "short":
                self._send(status, headers, data[: len(data) // 2])
            elif kind == "digest":
                self._send(status, [(k, v) for k, v in headers
                                    if k.lower() != "docker-content-digest"]
                           + [("Docker-Content-Digest", "sha256:" + "0" * 64)], data)
            elif kind == "flip":
                b = bytearray(data)
                if b:
                    b[len(b) // 2] ^= 0x01
                self._send(status, headers, bytes(b))
            else:
                raise ValueError(kind)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

    return Handler


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on an injected fault is the point, not news


class Running:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.server = _Quiet(("127.0.0.1", 0), _handler(proxy))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Running:  # noqa: PYI034 - a final class
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
