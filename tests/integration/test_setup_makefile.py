"""The Makefile as a newcomer meets it: its own virtual environment unless one is active
(stock Debian python3 is externally managed), apt that waits for the dpkg lock and installs
no recommends, services that can be stopped. Read with `make -n` (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def dry(target: str, tmp_path: Path, **env: str) -> str:
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PY", "PIP")}
    r = subprocess.run(["make", "-n", "-C", str(REPO), target, f"VENV={tmp_path}/venv"],
                       env={**base, **env}, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_demo_makes_and_uses_its_own_venv(tmp_path: Path) -> None:
    out = dry("demo", tmp_path, PYTHON="/usr/bin/python3")
    assert f"/usr/bin/python3 -m venv {tmp_path}/venv" in out
    assert f"{tmp_path}/venv/bin/python -m pip install -q -e '.[test]'" in out
    # a pip that reads Metadata 2.4, so `pip show` names the license expression
    assert f"{tmp_path}/venv/bin/python -m pip install -q --upgrade 'pip>=25'" in out
    assert f"{tmp_path}/venv/bin/python -m patchbake run" in out


def test_make_alone_prints_help_and_runs_nothing() -> None:
    r = subprocess.run(["make", "--no-print-directory"], cwd=REPO, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("patchbake: make TARGET")
    dry = subprocess.run(["make", "-n", "--no-print-directory"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert all(line.startswith("echo ") for line in dry.splitlines()), dry
    listed = [line.split()[0] for line in r.stdout.splitlines()[1:]]
    makefile = (REPO / "Makefile").read_text()
    for target in listed:  # every target help names exists
        assert f"\n{target}:" in makefile, target


def test_an_active_venv_is_used_as_it_is(tmp_path: Path) -> None:
    out = dry("demo", tmp_path, VIRTUAL_ENV="/opt/someenv")
    assert "-m venv" not in out
    assert "/opt/someenv/bin/python -m patchbake run" in out


def test_apt_waits_for_the_lock_and_skips_recommends(tmp_path: Path) -> None:
    out = dry("setup-system", tmp_path)
    assert "-o DPkg::Lock::Timeout=" in out and "--no-install-recommends" in out
    assert "python3-venv" in out


def test_suite_needs_and_services_stop(tmp_path: Path) -> None:
    out = dry("setup-suite", tmp_path)
    assert "torch==" in out and "'.[suite]'" in out and "--progress-bar on" in out
    assert "ci/services.sh stop" in dry("services-stop", tmp_path)


def test_services_stop_stops_only_what_it_started(tmp_path: Path) -> None:
    """A registry started by ci/services.sh on a spare port, then stopped by pid."""
    if not shutil.which("docker-registry") or not shutil.which("curl"):
        pytest.skip("docker-registry/curl not installed (make setup installs them)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PATCHBAKE_SERVICES_DIR": str(tmp_path / "svc"),
           "PATCHBAKE_REGISTRY_PORT": str(port)}
    script = str(REPO / "ci" / "services.sh")
    docker_up = subprocess.run(["docker", "info"], capture_output=True,
                               check=False).returncode == 0 if shutil.which("docker") else False
    if not docker_up:
        pytest.skip("the engine part of services.sh needs a running or startable engine")
    r = subprocess.run([script], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"registry: started on 127.0.0.1:{port}" in r.stdout
    pid = int((tmp_path / "svc" / "registry.pid").read_text())
    r = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"registry: stopped (pid {pid})" in r.stdout
    assert "docker engine: not started by this script" in r.stdout  # the shared one stays
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
        f"/proc/{pid}/status").read_text()
