"""A few fault-proxy scenarios against the real registry (the full set runs in
`make reliability`): retried to verified bytes, or one clean line within the budget."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))
import faultproxy as fp  # noqa: E402
import world as W  # noqa: E402
from fixtures_toy_image import toy_image  # noqa: E402
from patchbake.limits import Limits  # noqa: E402
from patchbake.store import Store  # noqa: E402
from patchbake.storecheck import fsck  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
FAST = {"PATCHBAKE_BACKOFF_S": "0.05", "PATCHBAKE_MAX_BACKOFF_S": "0.1",
        "PATCHBAKE_READ_TIMEOUT_S": "2", "PATCHBAKE_MAX_RETRY_AFTER_S": "1"}


@pytest.fixture
def pushed(tmp_path: Path, registry: str) -> tuple[str, str, Path]:
    store = Store.open(tmp_path / "src")
    digest, _ = toy_image(store, HERE.parent / "fixtures" / "suites" / "trees" / "patched")
    W.cli(tmp_path, store.root, "push", digest, f"{registry}/faults/toy:1")
    return registry, digest, tmp_path


@pytest.mark.parametrize(("name", "rules", "code"), [
    ("consistent lying Content-Length", [fp.Rule("GET", r"/blobs/sha256", "short", 2)], 0),
    ("reset mid-body", [fp.Rule("GET", r"/blobs/sha256", "reset", 2)], 0),
    ("wrong Docker-Content-Digest", [fp.Rule("*", r"/", "digest", -1)], 0),
    ("503 forever", [fp.Rule("*", r"/", "status:503", -1)], 31),
    ("flipped byte", [fp.Rule("GET", r"/blobs/sha256", "flip", -1)], 31),
])
def test_pull_through_faults(pushed: tuple[str, str, Path], name: str,
                             rules: list[fp.Rule], code: int) -> None:
    registry, digest, tmp = pushed
    home = tmp / "dst"
    proxy = fp.Proxy(registry, rules)
    with fp.Running(proxy) as px:
        cp = W.cli(tmp, home, "--json", "pull", f"{px.host}/faults/toy:1", check=False,
                   extra_env=FAST)
    assert cp.returncode == code, cp.stderr
    lm = Limits()
    assert proxy.requests <= lm.requests_base + lm.requests_per_blob * 4
    if code == 0:
        assert json.loads(cp.stdout)["digest"] == digest
    else:
        # under --json the one error line is a JSON document on stderr
        lines = [json.loads(ln)["error"] for ln in cp.stderr.splitlines()
                 if ln.startswith('{"error"') or ln.startswith('{"format_version"')]
        assert len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr
        assert lines[0]["code"] == code and lines[0]["message"]
    if home.is_dir():
        assert fsck(Store(home)).clean


def test_stalled_registry_hits_the_deadline(pushed: tuple[str, str, Path]) -> None:
    registry, _, tmp = pushed
    proxy = fp.Proxy(registry, [fp.Rule("*", r"/", "stall:30", -1)])
    with fp.Running(proxy) as px:
        cp = W.cli(tmp, tmp / "dst", "pull", f"{px.host}/faults/toy:1", check=False,
                   extra_env={**FAST, "PATCHBAKE_DEADLINE_S": "4"})
    assert cp.returncode == 16, cp.stderr
    assert "deadline" in cp.stderr and proxy.requests <= 5


@pytest.mark.parametrize(("name", "rule"), [
    ("a blob dripped at 2 bytes/s", fp.Rule("GET", r"/blobs/sha256", "drip:2", -1)),
    ("10 GiB promised, then silence", fp.Rule("GET", r"/blobs/sha256", f"silence:{10 << 30}", -1)),
])
def test_slow_or_silent_blob_ends_within_the_policy(pushed: tuple[str, str, Path], name: str,
                                                     rule: fp.Rule) -> None:
    """Whatever the chunking, a pull ends within the deadline (and the minimum rate ends
    each attempt first), with one line, and leaves no tmp/blob.* behind."""
    registry, _, tmp = pushed
    home = tmp / "dst"
    env = {**FAST, "PATCHBAKE_DEADLINE_S": "20", "PATCHBAKE_ATTEMPTS": "3"}
    with fp.Running(fp.Proxy(registry, [rule])) as px:
        t0 = time.monotonic()
        cp = W.cli(tmp, home, "pull", f"{px.host}/faults/toy:1", check=False, extra_env=env)
        took = time.monotonic() - t0
    assert cp.returncode in (16, 31), (name, cp.stderr)
    assert took < 20 + 8, (name, took)  # the deadline, plus start-up and one read timeout
    lines = [ln for ln in cp.stderr.splitlines() if ln.startswith("patchbake: error")]
    assert len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr
    assert list((home / "tmp").glob("blob.*")) == []
