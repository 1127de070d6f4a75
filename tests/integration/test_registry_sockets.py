"""The registry transport on real loopback sockets: keep-alive reuse, a connection the
server closed while idle, chunked answers, TLS (a file body over TLS too), a CONNECT proxy
named by HTTPS_PROXY; and what requests is not trusted with: a peer dripping its body
(the deadline and the minimum rate hold), redirects (each hop under the URL policy,
credentials not carried to another host), ~/.netrc and proxies for plain loopback http."""

from __future__ import annotations

import datetime
import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from patchbake.errors import DeadlineError, RegistryError, TrustError
from patchbake.netpolicy import RetryPolicy
from patchbake.oci.registry_http import FileBody, Transport

pytestmark = pytest.mark.integration


class Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    bodies: list[bytes]
    authorizations: list[str | None]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, *a: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def _answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _drip(self) -> None:
        """A body of a declared 100,000 bytes, one byte every 20 ms (50 bytes/s)."""
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(500):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass  # the client gave up, as it should
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.authorizations.append(self.headers.get("Authorization"))
        port = self.server.server_address[1]
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"abc", b"defgh"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/close":  # answers, then closes the idle connection
            self._answer(200, b"ok")
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/drip":
            self._drip()
        elif self.path == "/elsewhere":  # to another host (a name for the same server)
            self._answer(307, b"", Location=f"http://localhost:{port}/landed")
        elif self.path == "/off-loopback":
            self._answer(307, b"", Location="http://10.0.0.9/blob")
        else:
            self._answer(200, self.path.encode())

    def do_PUT(self) -> None:  # noqa: N802
        self.server.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(201, b"")


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.bodies, srv.authorizations = [], []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def transport(srv: Server, scheme: str = "http", **policy: float) -> Transport:
    t = Transport(f"{scheme}://127.0.0.1:{srv.server_address[1]}",
                  retry=RetryPolicy(attempts=1, **policy), sleep=lambda s: None)  # type: ignore[arg-type]
    t.begin("test")
    return t


def get(t: Transport, path: str) -> bytes:
    return t.read(t.request("GET", path, stream=True), 1 << 20, path)


def test_one_connection_serves_many_requests(server: Server) -> None:
    t = transport(server)
    for i in range(5):
        assert get(t, f"/n{i}") == f"/n{i}".encode()
    assert t.request("GET", "/n5").content == b"/n5"  # read whole, not streamed
    assert get(t, "/chunked") == b"abcdefgh"
    assert server.connections == 1


def test_a_connection_the_server_closed_is_not_reused(server: Server) -> None:
    t = transport(server)
    assert get(t, "/close") == b"ok"
    time.sleep(0.2)  # idle: the close reaches us before the next request (urllib3 checks)
    assert get(t, "/after") == b"/after"
    assert server.connections == 2


@pytest.mark.parametrize("stream", [True, False])
def test_a_dripping_body_stops_at_the_deadline(server: Server, stream: bool) -> None:
    t = transport(server, deadline_s=1.0)
    start = time.monotonic()
    with pytest.raises(DeadlineError, match="deadline") as ei:
        if stream:
            get(t, "/drip")
        else:
            t.request("GET", "/drip")
    assert time.monotonic() - start < 3 and ei.value.exit_code == 16


def test_a_dripping_body_under_the_minimum_rate_is_a_failure(server: Server) -> None:
    t = transport(server, read_timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(RegistryError, match="failed after 1 attempts.*under 1024 bytes/s"):
        t.with_retries("GET /drip", lambda: get(t, "/drip"))
    assert time.monotonic() - start < 3


def test_a_redirect_to_another_host_drops_the_credentials(server: Server) -> None:
    t = transport(server)
    resp = t.request("GET", "/elsewhere", headers={"Authorization": "Bearer secret"})
    assert resp.content == b"/landed"
    assert server.authorizations == ["Bearer secret", None]


def test_a_redirect_off_loopback_is_refused_before_it_is_followed(server: Server) -> None:
    with pytest.raises(RegistryError, match="refusing plain http to 10.0.0.9"):
        transport(server).request("GET", "/off-loopback")


def test_netrc_and_proxies_are_not_used_for_loopback_http(
        server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login mallory password stolen\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert get(transport(server), "/direct") == b"/direct"
    assert server.authorizations == [None]


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
    t = transport(srv, "https")
    assert get(t, "/tls") == b"/tls"
    sent: list[int] = []
    r = t.request("PUT", "/up", ok=(201,), body=lambda: FileBody(
        open(blob, "rb"), 1 << 20, sent.append, t.budget.check))  # noqa: SIM115 - closed by the transport
    assert r.status_code == 201 and srv.bodies == [blob.read_bytes()] and sum(sent) == 1 << 20
    assert srv.connections == 1


def test_tls_without_trusting_the_certificate_fails(tls_server: tuple[Server, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    srv, _ = tls_server
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with pytest.raises(TrustError, match="CERTIFICATE_VERIFY_FAILED") as err:
        transport(srv, "https").request("GET", "/x")
    assert "pip config set global.cert" in err.value.one_line()
    assert srv.bodies == []


def test_tls_trusts_the_ca_pips_cert_names(tls_server: tuple[Server, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    srv, cert = tls_server
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"):
        monkeypatch.delenv(name, raising=False)
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {cert}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert get(transport(srv, "https"), "/pip") == b"/pip"


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
    assert get(transport(srv, "https"), "/via") == b"/via"
    lsock.close()
    port = srv.server_address[1]
    assert seen and seen[0].startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.".encode())
    assert b"Proxy-Authorization: Basic dXNlcjpwdw==" in seen[0]
