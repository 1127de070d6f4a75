"""`patchbake doctor` and `patchbake init` against the real parts: git, the package index
pip is configured with (and its TLS trust), the Docker engine and a registry; run as a
downstream user would, from a directory outside any repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from patchbake import config

pytestmark = [pytest.mark.integration, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]


def patchbake(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_NO_PROGRESS": "1",
            **env}
    full.pop("PATCHBAKE_PIPELINE", None)
    return subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=300, check=False)


def checks(out: str) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in json.loads(out)["checks"]}


def test_doctor_outside_a_repository(tmp_path: Path, registry: str) -> None:
    r = patchbake(tmp_path, "doctor", "--json", PATCHBAKE_HOME=str(tmp_path / "home"),
                  PATCHBAKE_DEFAULT_REGISTRY=registry)
    assert r.returncode == 0, r.stdout + r.stderr
    got = checks(r.stdout)
    assert list(got) == ["pipeline", "python", "git", "index and TLS trust", "store",
                         "engine", "registry", "signing key", "mmdebstrap"]
    assert got["pipeline"]["status"] == "warn" and "patchbake init" in got["pipeline"]["fix"]
    for name in ("python", "git", "index and TLS trust", "store", "registry"):
        assert got[name]["status"] == "ok", got[name]
    assert "TLS trust:" in got["index and TLS trust"]["detail"]
    assert got["registry"]["detail"] == f"{registry} speaks the distribution API"


def test_doctor_names_what_is_missing_with_its_fix(tmp_path: Path) -> None:
    """No git on PATH and a pip cert that does not exist: both needed, exit 6, each row
    says what to do; the optional checks only warn."""
    bare = tmp_path / "bin"
    bare.mkdir()
    r = patchbake(tmp_path, "doctor", "--json", PATH=str(bare),
                  PATCHBAKE_HOME=str(tmp_path / "home"), PIP_CERT=str(tmp_path / "no-ca.pem"),
                  REQUESTS_CA_BUNDLE="", CURL_CA_BUNDLE="",  # pip's cert, not requests'
                  PATCHBAKE_DEFAULT_REGISTRY="127.0.0.1:9")
    assert r.returncode == 6, r.stderr
    got = checks(r.stdout)
    assert got["git"]["status"] == "missing" and "install git" in got["git"]["fix"]
    index = got["index and TLS trust"]
    assert index["status"] == "missing" and "no-ca.pem" in index["detail"]
    assert "pip config list -v" in index["fix"]
    for name in ("engine", "registry", "mmdebstrap"):
        assert got[name]["status"] == "warn" and got[name]["needed"] is False, got[name]
    err = json.loads(r.stderr)["error"]
    assert err["code"] == 6 and err["message"].startswith("2 needed check(s) failed; first: git")


def test_doctor_in_the_repository_checks_its_pin(tmp_path: Path) -> None:
    r = patchbake(REPO, "doctor", "--json", PATCHBAKE_HOME=str(tmp_path / "home"))
    got = checks(r.stdout)
    assert got["pipeline"]["status"] == "ok", got["pipeline"]
    assert "vllm-0.25.1.tar.gz listed with the pinned sha256" in \
        got["index and TLS trust"]["detail"], got["index and TLS trust"]


def test_init_pins_what_the_repository_pins(tmp_path: Path) -> None:
    """Through the real index: `init --vllm 0.25.1` writes the very pin this repository
    carries, and a pipeline every command loads."""
    r = patchbake(tmp_path, "init", "--vllm", "0.25.1", "--json")
    assert r.returncode == 0, r.stderr
    mine = config.load(tmp_path / "pipeline.yaml").lineage().upstream
    ours = config.load(REPO / "pipeline.yaml").lineage("v0.25.1").upstream
    assert (mine.filename, mine.sha256, mine.strip) == (ours.filename, ours.sha256, ours.strip)
    r = patchbake(tmp_path, "patch", "check", "--no-tree")
    assert r.returncode == 21 and "does not exist" in r.stderr  # no patch exported yet
