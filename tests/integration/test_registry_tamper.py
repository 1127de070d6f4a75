"""A tampering proxy in front of the real registry: the bytes it alters are refused and
nothing reaches the store, whatever the Docker-Content-Digest header says."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from patchbake.errors import RegistryError
from patchbake.oci.registry import RegistryClient
from patchbake.store import Store
from test_registry_real import build_image

pytestmark = [pytest.mark.integration, pytest.mark.registry]


class _Tamper:
    what = ""  # "blob" or "manifest": which GET answers get one byte flipped


def _handler(upstream: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _forward(self) -> None:
            hdrs = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            up = requests.request(self.command, f"http://{upstream}{self.path}", headers=hdrs,
                                  timeout=30, allow_redirects=False)
            body = up.content
            hit = (_Tamper.what == "blob" and "/blobs/sha256:" in self.path) or \
                  (_Tamper.what == "manifest" and "/manifests/" in self.path)
            if hit and self.command == "GET" and body:
                body = body[:-1] + bytes([body[-1] ^ 0x01])
            self.send_response(up.status_code)
            for k, v in up.headers.items():  # Docker-Content-Digest passes through unchanged
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _forward

    return Handler


@pytest.fixture
def proxy(registry: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(registry))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("what,msg", [
    ("blob", "answered blob .* with other bytes"),
    ("manifest", "with a manifest hashing to"),
])
def test_tampered_bytes_are_refused(registry: str, proxy: str, tmp_path: Path,
                                    what: str, msg: str) -> None:
    src = Store.open(tmp_path / "src")
    img = build_image(src, f"tamper-{what}")
    RegistryClient(registry).push(src, img.digest, f"{registry}/pb/tamper:{what}")
    dst = Store.open(tmp_path / "dst")
    _Tamper.what = what
    try:
        with pytest.raises(RegistryError, match=msg) as ei:
            RegistryClient(proxy).pull(dst, f"{proxy}/pb/tamper@{img.digest}")
    finally:
        _Tamper.what = ""
    assert ei.value.exit_code == 31
    assert not any(dst.has(d) for d in (img.digest, *img.blobs))
    assert list((dst.root / "tmp").iterdir()) == []
    # The same pull through an honest path works, so the refusal was the tampering.
    assert RegistryClient(proxy).pull(dst, f"{proxy}/pb/tamper@{img.digest}") == img.digest
