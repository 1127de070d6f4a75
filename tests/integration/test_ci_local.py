"""`make ci-local` (ci/local_runner.py) runs release.yml's jobs here: a workflow that cannot
produce a verifiable release fails here. candidate needs no GPU evidence and must end with
a release that `release verify` accepts on the proposed branch; sm89-stable needs sm89
evidence this machine cannot make, and must fail closed at its gate, naming it. Plus
actionlint over the workflows where it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.registry, pytest.mark.sdist]

REPO = Path(__file__).resolve().parents[2]


def registry_up() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:5000/v2/", timeout=3):
            return True
    except OSError:
        return False


def ci_local(*args: str) -> subprocess.CompletedProcess[str]:
    if not registry_up():
        pytest.skip("no registry on 127.0.0.1:5000 (make services)")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "PY")}
    env["PYTHONPATH"] = str(REPO / "tools")
    return subprocess.run([sys.executable, str(REPO / "ci" / "local_runner.py"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.slow
def test_candidate_ends_with_a_release_that_verifies() -> None:
    r = ci_local("release.yml", "--input", "channel=candidate")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "NOT RUN: no GPU here" in out
    assert "VERIFIED" in out and "release.yml: PASSED" in out


@pytest.mark.slow
def test_sm89_stable_fails_closed_at_the_gates() -> None:
    r = ci_local("release.yml", "--input", "channel=sm89-stable")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-6000:]
    # the approval is signed only for a release that can be made: the approve job signs
    # nothing, the gates job fails closed naming the gates, and nothing runs after it. The
    # offline stand-in has no Python to serve with, so validated's served suite blocks
    # first; the capability gate's row says what sm89 would still need.
    assert "'sm89-stable' is BLOCKED" in out and "first: evidence: suite 'dsv4-served-gpu'" in out
    assert ("capability    FAIL    missing input: no passing GPU evidence from a compute "
            "capability 8.9 device") in out
    assert "no approval signed" in out
    assert "gates: FAILED" in out and "promote /" not in out

def test_actionlint_passes_on_the_workflows() -> None:
    exe = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(exe).exists():
        pytest.skip("actionlint is not on PATH: the index offers no actionlint wheel (docs/ci.md)")
    r = subprocess.run([exe, "-no-color"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
