"""The registry client's connections on real loopback sockets: keep-alive reuse, a
connection the server closed while idle, chunked answers, TLS (a file body over TLS
too) and a CONNECT proxy named by HTTPS_PROXY."""

from __future__ import annotations

import datetime
import ipaddress
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from patchbake.oci.registry_conn import ConnectionPool, FileBody

pytestmark = pytest.mark.integration
TIMEOUT = (5.0, 5.0)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    bodies: list[bytes]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, *a: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"abc", b"defgh"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/close":  # answers, then closes the idle connection
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            self.wfile.flush()
            self.close_connection = True
            return
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:  # noqa: N802
        self.server.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.bodies = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: Server, path: str, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{srv.server_address[1]}{path}"


def test_one_connection_serves_many_requests(server: Server) -> None:
    pool = ConnectionPool()
    for i in range(5):
        r = pool.send("GET", _url(server, f"/n{i}"), {}, None, TIMEOUT)
        assert r.status_code == 200 and r.content == f"/n{i}".encode()
        r.close()
    r = pool.send("GET", _url(server, "/chunked"), {}, None, TIMEOUT)
    assert b"".join(r.iter_content(2)) == b"abcdefgh"
    r.close()
    assert server.connections == 1


def test_a_connection_the_server_closed_is_not_reused(server: Server) -> None:
    pool = ConnectionPool()
    r = pool.send("GET", _url(server, "/close"), {}, None, TIMEOUT)
    assert r.content == b"ok"
    r.close()
    r = pool.send("GET", _url(server, "/after"), {}, None, TIMEOUT)
    assert r.content == b"/after"
    r.close()
    assert server.connections == 2


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(server: Server, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    cert, key = _self_signed(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    yield server, cert


def test_tls_with_the_ca_named_and_a_file_body(tls_server: tuple[Server, Path],
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    srv, cert = tls_server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)) * 4096)
    pool = ConnectionPool()
    r = pool.send("GET", _url(srv, "/tls", "https"), {}, None, TIMEOUT)
    assert r.content == b"/tls"
    r.close()
    sent: list[int] = []
    with open(blob, "rb") as f:
        r = pool.send("PUT", _url(srv, "/up", "https"), {"Content-Length": str(1 << 20)},
                      FileBody(f, 1 << 20, sent.append), TIMEOUT)
    assert r.status_code == 201 and srv.bodies == [blob.read_bytes()] and sum(sent) == 1 << 20
    r.close()


def test_tls_without_trusting_the_certificate_fails(tls_server: tuple[Server, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    srv, _ = tls_server
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with pytest.raises(ssl.SSLCertVerificationError):
        ConnectionPool().send("GET", _url(srv, "/x", "https"), {}, None, TIMEOUT)


def _connect_proxy(seen: list[bytes]) -> tuple[socket.socket, threading.Thread]:
    """A CONNECT-only proxy: one tunnel, piped both ways."""
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        client, _ = lsock.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(1)
        seen.append(head)
        host, port = head.split()[1].decode().rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        socks = [client, upstream]
        while True:
            ready, _, _ = select.select(socks, [], [], 5)
            if not ready:
                break
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                (upstream if s is client else client).sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return lsock, t


def test_https_goes_through_the_proxy_https_proxy_names(tls_server: tuple[Server, Path],
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    srv, cert = tls_server
    seen: list[bytes] = []
    lsock, _ = _connect_proxy(seen)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:pw@127.0.0.1:{lsock.getsockname()[1]}")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    r = ConnectionPool().send("GET", _url(srv, "/via", "https"), {}, None, TIMEOUT)
    assert r.content == b"/via"
    r.close()
    lsock.close()
    port = srv.server_address[1]
    assert seen and seen[0].startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n".encode())
    assert b"Proxy-Authorization: Basic dXNlcjpwdw==" in seen[0]
