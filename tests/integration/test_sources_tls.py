"""A url-kind upstream over real TLS on loopback: a certificate pip's configuration does
not trust fails at once with one line saying what to set (exit 18, one attempt); the
same download succeeds once pip's ``cert`` (through PIP_CONFIG_FILE) names the CA."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import ssl
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from patchbake import entry, netconfig
from test_registry_sockets import _self_signed

pytestmark = [pytest.mark.integration]


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"setup()\n"
        ti = tarfile.TarInfo("demo-1.0/setup.py")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


ARCHIVE = _archive()


class _Files(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Files.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(ARCHIVE)))
        self.end_headers()
        self.wfile.write(ARCHIVE)

    def log_message(self, *a: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    """Counts the connections it accepts, handshakes that fail included."""

    accepted = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        _Server.accepted += 1
        return super().get_request()


@pytest.fixture
def tls_files(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(https URL of the archive on 127.0.0.1, the self-signed CA that signs it)."""
    cert, key = _self_signed(tmp_path)
    srv = _Server(("127.0.0.1", 0), _Files)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    _Files.requests, _Server.accepted = [], 0
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{srv.server_address[1]}/demo-1.0.tar.gz", cert
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def pipeline(tls_files: tuple[str, Path], tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pipeline whose upstream is the archive; pip's configuration a file of ours."""
    for var in list(os.environ):
        if var.startswith("PIP_") or var in netconfig.CA_ENV or var.lower().endswith("_proxy"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.setattr(netconfig, "file_locations", lambda: ([], [], []))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    doc = {"version": 1, "name": "t", "lineages": {"l": {
        "name": "n", "patch": "p", "files": "f", "source_record": "s",
        "upstream": {"kind": "url", "version": "1.0", "url": tls_files[0],
                     "sha256": hashlib.sha256(ARCHIVE).hexdigest()}}}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def test_an_untrusted_ca_fails_once_with_what_to_set(
        pipeline: Path, tls_files: tuple[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pip.conf").write_text("[global]\ntimeout = 30\n")
    assert entry.main(["--pipeline", str(pipeline), "fetch"]) == 18
    err = capsys.readouterr().err
    port = tls_files[0].split(":")[2].split("/")[0]
    assert err.count("\n") == 1 and err.startswith("patchbake: error: ")
    assert f"the certificate of 127.0.0.1:{port} is not trusted" in err
    assert "CERTIFICATE_VERIFY_FAILED" in err and "trust comes from certifi's bundle" in err
    assert "pip config set global.cert FILE" in err and "REQUESTS_CA_BUNDLE" in err
    assert _Files.requests == []  # the handshake failed: nothing was asked ...
    assert _Server.accepted == 1  # ... and nothing was retried
    assert not list((tmp_path / "store").rglob("demo-1.0*"))


def test_pips_cert_naming_the_ca_is_trusted(
        pipeline: Path, tls_files: tuple[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pip.conf").write_text(f"[global]\ncert = {tls_files[1]}\n")
    assert entry.main(["--pipeline", str(pipeline), "--json", "fetch"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["archive_sha256"] == hashlib.sha256(ARCHIVE).hexdigest()
    assert _Files.requests == ["/demo-1.0.tar.gz"]
