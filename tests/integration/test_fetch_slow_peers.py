"""``patchbake fetch`` against a server on 127.0.0.1 that drips its answer or promises a
body and goes silent: the fetch ends within its deadline (the minimum rate usually ends
each attempt first) with one line, whatever the chunking, and leaves no tmp/blob.*.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
TOOLS = Path(__file__).resolve().parents[2] / "tools"
BODY = os.urandom(1 << 20)  # one MiB: a single read chunk of the old reader
SHA = hashlib.sha256(BODY).hexdigest()
PIPELINE = """version: 1
name: slow
lineages:
  v1:
    name: slow
    upstream: {{kind: url, package: demo, version: "1", url: "{url}", sha256: {sha}}}
    patch: patch/p.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
suites: {{}}
"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/headers":  # a status line, then a header one byte every 2 s
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(60):
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(2)
            except OSError:
                pass
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", str(10 << 30 if self.path == "/silent" else len(BODY)))
        self.end_headers()
        self.wfile.flush()
        try:
            if self.path == "/silent":
                self.connection.settimeout(120)
                self.connection.recv(1)  # until the client hangs up
            elif self.path == "/trickle":  # one byte every 2 s
                for i in range(len(BODY)):
                    self.wfile.write(BODY[i:i + 1])
                    self.wfile.flush()
                    time.sleep(2)
            else:  # /drip: 20 KB/s, in 2 KB writes
                for i in range(0, len(BODY), 2048):
                    self.wfile.write(BODY[i:i + 2048])
                    self.wfile.flush()
                    time.sleep(0.1)
        except OSError:
            pass
        self.close_connection = True


class Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = Quiet(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def fetch(tmp: Path, url: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp / "pipeline.yaml").write_text(PIPELINE.format(url=url, sha=SHA))
    e = {k: v for k, v in os.environ.items() if not k.startswith("PATCHBAKE_")}
    e.update({"PATCHBAKE_HOME": str(tmp / "store"), "PATCHBAKE_NO_PROGRESS": "1",
              "PYTHONPATH": str(TOOLS), **env})
    t0 = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "patchbake", "fetch"], cwd=tmp, env=e,
                        capture_output=True, text=True, timeout=300, check=False)
    return cp, time.monotonic() - t0


def one_line(cp: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in cp.stderr.splitlines() if ln.startswith("patchbake: error")]
    assert len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr
    return lines[0]


def test_a_drip_faster_than_the_minimum_rate_ends_at_the_deadline(server: str,
                                                                    tmp_path: Path) -> None:
    cp, took = fetch(tmp_path, f"{server}/drip", PATCHBAKE_DEADLINE_S="6")
    assert cp.returncode == 16, cp.stderr
    assert "deadline" in one_line(cp)
    assert took < 6 + 6, took  # the deadline, plus start-up; never a whole 1 MiB chunk
    assert list((tmp_path / "store" / "tmp").glob("blob.*")) == []


def test_a_drip_under_the_minimum_rate_is_retried_then_refused(server: str,
                                                               tmp_path: Path) -> None:
    cp, took = fetch(tmp_path, f"{server}/drip", PATCHBAKE_MIN_RATE_BPS="65536",
                     PATCHBAKE_READ_TIMEOUT_S="1", PATCHBAKE_ATTEMPTS="2",
                     PATCHBAKE_BACKOFF_S="0.1")
    assert cp.returncode == 10, cp.stderr
    assert "under 65536 bytes/s" in one_line(cp)
    assert took < 15, took
    assert list((tmp_path / "store" / "tmp").glob("blob.*")) == []


def test_one_byte_every_two_seconds_is_refused_at_the_minimum_rate(server: str,
                                                                    tmp_path: Path) -> None:
    """Each read answers within the read timeout, so only the minimum rate (1 KiB/s over
    a read timeout's span, the default) ends each attempt."""
    cp, took = fetch(tmp_path, f"{server}/trickle", PATCHBAKE_READ_TIMEOUT_S="3",
                     PATCHBAKE_ATTEMPTS="2", PATCHBAKE_BACKOFF_S="0.1")
    assert cp.returncode == 10, cp.stderr
    assert "under 1024 bytes/s" in one_line(cp)
    assert took < 20, took
    assert list((tmp_path / "store" / "tmp").glob("blob.*")) == []


def test_headers_dripped_end_the_attempt_after_one_read_timeout(server: str,
                                                                 tmp_path: Path) -> None:
    """Every socket read answers in time, but the headers never end: the wait for them
    is bounded as a whole (netpolicy's connections), as the body's is by the minimum
    rate; before, this fetch ran past any deadline."""
    cp, took = fetch(tmp_path, f"{server}/headers", PATCHBAKE_READ_TIMEOUT_S="2",
                     PATCHBAKE_ATTEMPTS="2", PATCHBAKE_BACKOFF_S="0.1",
                     PATCHBAKE_DEADLINE_S="30")
    assert cp.returncode == 10, cp.stderr
    assert "failed after 2 attempts" in one_line(cp)
    assert took < 15, took
    assert list((tmp_path / "store" / "tmp").glob("blob.*")) == []


def test_silence_after_a_10_gib_promise_ends_by_the_read_timeout(server: str,
                                                                 tmp_path: Path) -> None:
    cp, took = fetch(tmp_path, f"{server}/silent", PATCHBAKE_READ_TIMEOUT_S="1",
                     PATCHBAKE_ATTEMPTS="2", PATCHBAKE_BACKOFF_S="0.1")
    assert cp.returncode == 10, cp.stderr
    assert "failed after 2 attempts" in one_line(cp)
    assert took < 15, took
    assert list((tmp_path / "store" / "tmp").glob("blob.*")) == []


def test_the_default_wait_on_a_silent_peer_is_what_a_person_waits_for() -> None:
    from patchbake.netpolicy import RetryPolicy

    assert RetryPolicy.from_limits().silent_peer_s() <= 90
    help_text = subprocess.run([sys.executable, "-m", "patchbake", "fetch", "--help"],
                               env={**os.environ, "PYTHONPATH": str(TOOLS)},
                               capture_output=True, text=True, check=True).stdout
    assert "never answers is given up after" in " ".join(help_text.split())


def test_nothing_listens_is_refused_quickly(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cp, took = fetch(tmp_path, f"http://127.0.0.1:{port}/x", PATCHBAKE_ATTEMPTS="2",
                     PATCHBAKE_BACKOFF_S="0.1")
    assert cp.returncode == 10 and took < 15, cp.stderr
