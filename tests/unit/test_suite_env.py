"""The environment a suite's process gets: the image's code never sees patchbake's secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from patchbake import proc
from patchbake.config import suites
from patchbake.digest import Digest
from patchbake.suites import execution
from patchbake.suites.docker import DockerRunner
from patchbake.suites.host import HostRunner

REPO = Path(__file__).resolve().parents[2]
SECRETS = {name: f"sekrit-value-{i}" for i, name in enumerate((
    "PATCHBAKE_KEY_PEM", "PATCHBAKE_SIGNING_KEY", "PATCHBAKE_REGISTRY_PASSWORD", "GH_TOKEN",
    "ACTIONS_RUNTIME_TOKEN", "PATCHBAKE_EVIDENCE_KEY", "CUDA_SECRET", "PYTHON_TOKEN",
    "SOME_API_TOKEN"))}
def suite(**over: Any) -> suites.Suite:
    raw = {"path": str(REPO / "tests" / "fixtures" / "suites" / "passing"),
           "command": ["{python}", "-m", "pytest", "--junitxml={junit}"], "requires": {"min_tests": 1},
           **over}
    return suites.parse_suite("toy", raw, REPO)


def test_filter_keeps_what_a_suite_needs_and_never_a_secret() -> None:
    parent = {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C",
              "CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all",
              "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONHASHSEED": "0",
              "PATCHBAKE_SITE": "/site", "PATCHBAKE_HOME": "/store", "GITHUB_WORKSPACE": "/w",
              "AWS_ACCESS_KEY_ID": "a", **SECRETS}
    env = execution.suite_environment({"PATCHBAKE_TREE": "/tree"}, parent)
    assert env == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C",
                   "CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all",
                   "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONHASHSEED": "0",
                   "PATCHBAKE_SITE": "/site", "PATCHBAKE_TREE": "/tree"}
    for name in SECRETS:
        assert execution.is_secret_name(name), name


def test_host_suite_child_has_no_key_or_password(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """The environment handed to the child process (what subprocess.run gets from proc),
    with the parent holding every CI secret."""
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATCHBAKE_REGISTRY_USER", "ci")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    children: list[dict[str, str]] = []

    def child(args: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        children.append(kw["env"])
        Path(args[-1].split("=", 1)[1]).write_text('<testsuite><testcase classname="m" name="t"/></testsuite>')
        return subprocess.CompletedProcess(args, 0, b"", b"")

    monkeypatch.setattr("patchbake.proc.subprocess.run", child)
    runner = HostRunner(REPO, store=None, python=sys.executable)  # type: ignore[arg-type]
    ex = runner.execute(suite(env={"TOY_KNOB": "1"}), "/the/tree", tmp_path, 0)
    assert ex.report.counts["passed"] == 1
    seen = children[0]
    leaked = sorted(k for k in seen if k in SECRETS or execution.is_secret_name(k)
                    or "REGISTRY" in k or seen[k] in SECRETS.values())
    assert leaked == []
    assert seen["PATCHBAKE_TREE"] == "/the/tree"
    assert seen["TOY_KNOB"] == "1" and seen["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["PATH"]


def test_host_runner_replaces_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    def fake_run(argv: list[str], **kw: Any) -> proc.Result:
        calls.append(kw)
        Path(argv[-1].split("=", 1)[1]).write_text('<testsuite><testcase classname="m" name="t"/></testsuite>')
        return proc.Result(tuple(argv), 0, b"", b"")

    monkeypatch.setenv("PATCHBAKE_KEY_PEM", "pem")
    monkeypatch.setattr("patchbake.suites.host.proc.run", fake_run)
    HostRunner(REPO, store=None).execute(suite(), "/t", tmp_path, 0)  # type: ignore[arg-type]
    assert calls[0]["replace_env"] is True
    assert "PATCHBAKE_KEY_PEM" not in calls[0]["env"]


def test_docker_suite_container_gets_only_named_values(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """The container's environment is only the `--env NAME=VALUE` given: never a bare
    `--env NAME` (docker would copy it from patchbake's environment), never a secret."""
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    seen: list[list[str]] = []

    def fake_run(args: list[str], **kw: Any) -> proc.Result:
        seen.append(args)
        (tmp_path / "junit-0.xml").write_text(
            '<testsuite><testcase classname="m" name="t"/></testsuite>')
        return proc.Result(("docker",), 0, b"", b"")

    monkeypatch.setattr("patchbake.suites.docker.engine.run", fake_run)
    monkeypatch.setattr("patchbake.suites.docker.engine.remove_container",
                        lambda name: None)
    r = DockerRunner(REPO, None)
    r._target = str(Digest.from_hex("cd" * 32))
    r.execute(suite(env={"TOY_KNOB": "1"}), "/tree", tmp_path, 0)
    args = seen[0]
    envs = [args[i + 1] for i, a in enumerate(args) if a in ("--env", "-e")]
    assert all("=" in e for e in envs), envs
    names = {e.split("=", 1)[0] for e in envs}
    assert names == {"PYTHONDONTWRITEBYTECODE", "PATCHBAKE_TREE", "TOY_KNOB"}
    assert not any(v in " ".join(args) for v in SECRETS.values())
    assert "--env-file" not in args
