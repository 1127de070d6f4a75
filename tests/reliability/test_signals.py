"""SIGTERM cleans up like Ctrl-C; SIGKILL's leftovers are reclaimed by the next run.

The fetch is held mid-download by a loopback server that sends half the archive and
waits, so the signal always lands while a partial blob sits in the store's tmp/."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import world as W

pytestmark = [pytest.mark.integration]
DATA = os.urandom(1 << 20)


@pytest.fixture
def held_server() -> Iterator[tuple[str, threading.Event]]:
    release = threading.Event()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA[: len(DATA) // 2])
            self.wfile.flush()
            release.wait(60)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/up-1.0.tar.gz", release
    finally:
        release.set()
        srv.shutdown()
        srv.server_close()


def start_fetch(tmp: Path, url: str) -> tuple[subprocess.Popen[str], Path, Path]:
    repo, home = tmp / "repo", tmp / "store"
    repo.mkdir()
    (repo / "pipeline.yaml").write_text(
        "version: 1\nname: t\nlineages:\n  v1:\n    name: t\n"
        f"    upstream: {{kind: url, package: up, version: '1.0', url: '{url}', "
        f"sha256: {hashlib.sha256(DATA).hexdigest()}}}\n"
        "    patch: p.patch\n    files: FILES.txt\n    source_record: SOURCE\n")
    proc = subprocess.Popen(W.argv("fetch"), cwd=repo, env=W.env(home), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(600):  # until the partial blob exists (the process is mid-download)
        if (home / "tmp").is_dir() and any((home / "tmp").iterdir()):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError("the fetch never started writing")
    return proc, repo, home


def test_sigterm_removes_the_partial_download(tmp_path: Path,
                                              held_server: tuple[str, threading.Event]) -> None:
    proc, _, home = start_fetch(tmp_path, held_server[0])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "terminated (SIGTERM)" in err
    assert list((home / "tmp").iterdir()) == []


def test_sigkill_litter_is_reported_then_reclaimed(tmp_path: Path,
                                                  held_server: tuple[str, threading.Event]) -> None:
    proc, repo, home = start_fetch(tmp_path, held_server[0])
    proc.kill()
    proc.communicate(timeout=60)
    left = list((home / "tmp").iterdir())
    assert left and all(p.name.startswith(f"blob.{proc.pid}.") for p in left)
    cp = W.cli(repo, home, "store", "fsck", "--no-trees", check=False)
    assert cp.returncode == 13 and "leftover(s) of crashed runs" in cp.stderr
    cp = W.cli(repo, home, "store", "gc", "--repo", str(repo))
    assert list((home / "tmp").iterdir()) == []
    assert W.cli(repo, home, "store", "fsck", "--no-trees", check=False).returncode == 0


# The signal lands while the CLI is still being imported: the child sends it to itself
# from the import hook the first time a module named here is imported, which happens
# inside main() (click, the package's errors and ui) -- the old entry imported some of
# them before main() had installed anything.
AT_IMPORT = """
import builtins, os, signal, sys, time
sys.argv = ["patchbake", *sys.argv[1:]]
real = builtins.__import__
def hook(name, globals=None, locals=None, fromlist=(), level=0):
    if name in ("click", "errors", "ui", "cli") and not os.environ.get("SENT"):
        os.environ["SENT"] = "1"
        os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))
        time.sleep(0.2)
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = hook
from patchbake.entry import main
sys.exit(main())
"""


def _default_sigint() -> None:
    """In the child, before exec: SIGINT at its default. A shell starts a background job
    with SIGINT ignored, the child inherits that, and Python then installs no handler for
    it (as it should): the test is about patchbake's handling, not about how it was run."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("sig", "code", "line"), [("SIGTERM", 143, "terminated (SIGTERM)"),
                                                   ("SIGINT", 130, "aborted")])
def test_a_signal_during_import_exits_with_one_line(tmp_path: Path, sig: str, code: int,
                                                    line: str) -> None:
    cp = subprocess.run([sys.executable, "-c", AT_IMPORT, "--version"],
                        env={**W.env(tmp_path / "store"), "SIG": sig}, capture_output=True,
                        text=True, timeout=60, check=False, preexec_fn=_default_sigint)
    assert cp.returncode == code, (cp.returncode, cp.stderr)
    [only] = cp.stderr.splitlines()
    assert only.startswith(f"patchbake: error: {line}"), cp.stderr


AFTER_MAIN = """
import os, signal, sys
sys.argv = ["patchbake", "--version"]
from patchbake.entry import main
code = main()
os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))  # the work is done and printed
sys.exit(code)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_after_the_work_is_done_keeps_its_exit_code(tmp_path: Path, sig: str) -> None:
    cp = subprocess.run([sys.executable, "-c", AFTER_MAIN],
                        env={**W.env(tmp_path / "store"), "SIG": sig}, capture_output=True,
                        text=True, timeout=60, check=False, preexec_fn=_default_sigint)
    assert cp.returncode == 0 and cp.stdout.strip() and "Traceback" not in cp.stderr, cp
