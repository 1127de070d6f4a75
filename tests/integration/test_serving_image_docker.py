"""The baked real serving image starts in the Docker engine (CPU, --network none): Python
imports vLLM and torch from the installed wheels, the `vllm` launcher pip would write runs
vLLM's CLI, and the in-image verifier passes.

Needs the serving base of the v0.25.1 lock in a store here (`patchbake image base`); the
bake and the load go into that store and engine (about 2 minutes; 10 GB in the engine,
removed afterwards).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from images_repo import cli_json, repo_copy
from serving_support import serving_store

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.sdist]
NO_DEVICE = "Failed to infer device type"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600,
                        check=False)
    if check and cp.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {cp.stderr[-3000:]}")
    return cp


@pytest.fixture
def loaded(tmp_path: Path, shared_home: Path, docker_engine: str) -> Iterator[str]:
    store = serving_store(shared_home)
    root = repo_copy(tmp_path)
    baked = cli_json(root, store, "bake", "sm89-serving-local")
    out = cli_json(root, store, "image", "load", "sm89-serving-local")
    assert out["digest"] == baked["digest"]
    image_id = docker("image", "inspect", out["tag"], "--format", "{{.Id}}").stdout.strip()
    assert image_id == baked["config_digest"]  # the engine's Image ID is our config digest
    yield out["tag"]
    docker("rmi", "-f", out["tag"], check=False)


def run(tag: str, entrypoint: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return docker("run", "--rm", "--network", "none", "--entrypoint", entrypoint, tag, *args,
                  check=check)


@pytest.mark.slow
def test_serving_image_imports_vllm_and_runs_its_cli(loaded: str) -> None:
    got = run(loaded, "python3", "-c", "import vllm, torch, importlib.metadata as m; "
              "print(vllm.__version__, m.version('vllm'), torch.__version__)").stdout.split()
    assert got[:2] == ["0.25.1", "0.25.1"] and got[2].startswith("2.11.0")
    # the console script is pip's launcher; vLLM 0.25.1's CLI builds every subcommand's
    # parser before it reads --version, and that asks the platform for a device: with no
    # GPU it stops there, inside vLLM's own code, which is as far as a CPU host can go
    cli = run(loaded, "vllm", "--version", check=False)
    if cli.returncode == 0:
        assert cli.stdout.strip().endswith("0.25.1")
    else:
        assert "/dist-packages/vllm/entrypoints/cli/main.py" in cli.stderr, cli.stderr[-2000:]
        assert NO_DEVICE in cli.stderr, cli.stderr[-2000:]
    head = run(loaded, "head", "-1", "/usr/local/bin/vllm").stdout
    assert head == "#!/usr/bin/python3\n"
    ok = run(loaded, "python3", "/opt/patchbake/verify.py")
    assert "OK: " in ok.stdout, ok.stdout + ok.stderr
