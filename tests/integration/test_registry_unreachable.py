"""push/pull to a loopback port where nothing listens: one line saying so and how to start
a registry (exit 31), not seconds of retries ending in "overloaded"."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_toy_image import toy_image
from patchbake.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening, then closed: refused
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHBAKE_HOME": str(home), "PATCHBAKE_NO_PROGRESS": "1",
           "PATCHBAKE_PIPELINE": str(REPO / "pipeline.yaml")}
    return subprocess.run([sys.executable, "-m", "patchbake", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_push_and_pull_where_nothing_listens(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store")
    digest, _ = toy_image(store, REPO / "tests" / "fixtures" / "suites" / "trees" / "patched")
    port = _closed_port()
    r = _cli(store.root, "push", digest, f"127.0.0.1:{port}/t/img:v1")
    assert r.returncode == 31, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line == (f"patchbake: error: nothing listens at 127.0.0.1:{port} (connection "
                    "refused): no registry is running there (start one (as root: `make "
                    "services` runs a registry on 127.0.0.1:5000), or check the host and port)")
    r = _cli(store.root, "pull", f"127.0.0.1:{port}/t/img:v1", "--json")
    assert r.returncode == 31 and r.stdout == ""
    error = json.loads(r.stderr)["error"]
    assert error["class"] == "RegistryError" and "nothing listens" in error["message"]
    assert "retry later" not in r.stderr
