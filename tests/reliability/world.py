"""A small but complete world for the crash trials and the fault proxy: a synthetic vLLM
sdist (a few hundred files), a repository whose canonical patch is exported by the real
``patch export`` from a real workspace, the offline stand-in base, a bake, and a toy image
with a fixture-suite result and a signing key for ``evidence sign``. Everything runs
through the CLI as separate processes (``python -m patchbake``), as users run it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools"
SUITES = REPO / "tests" / "fixtures" / "suites"
SP = "/usr/local/lib/python3.12/dist-packages"
VERSION = "9.9.9"


def env(home: Path, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PATCHBAKE_")}
    e.update({"PATCHBAKE_HOME": str(home), "PATCHBAKE_NO_PROGRESS": "1", "NO_COLOR": "1",
              "PYTHONPATH": str(TOOLS) + os.pathsep + e.get("PYTHONPATH", ""),
              "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@localhost",
              "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@localhost"})
    e.update(extra)
    return e


def argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "patchbake", *args]


def cli(root: Path, home: Path, *args: str, check: bool = True, timeout: float = 600,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(argv(*args), cwd=root, env=env(home, **(extra_env or {})),
                        capture_output=True, text=True, timeout=timeout, check=False)
    if check and cp.returncode:
        raise AssertionError(f"patchbake {' '.join(args)} exited {cp.returncode}: {cp.stderr}")
    return cp


def cli_json(root: Path, home: Path, *args: str, **kw: Any) -> Any:
    return json.loads(cli(root, home, "--json", *args, **kw).stdout)


def _sdist(files: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        def add(name: str, data: bytes) -> None:
            ti = tarfile.TarInfo(f"vllm-{VERSION}/{name}")
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tf.addfile(ti, io.BytesIO(data))
        add("setup.py", b"setup()\n")
        add("vllm/__init__.py", b"")
        add("vllm/envs.py", b"A = 1\n" * 200)
        for i in range(files):
            body = "".join(f"def f{i}_{j}(x):\n    return x + {j}\n" for j in range(60))
            add(f"vllm/mod{i // 50}/m{i}.py", body.encode())
    return buf.getvalue()


PIPELINE = """version: 1
name: trial
lineages:
  v{version}:
    name: trial
    upstream: {{kind: path, package: vllm, version: "{version}", path: ../vllm-{version}.tar.gz, sha256: {sha}, strip: vllm-{version}}}
    patch: patch/trial-v{version}.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
images:
  offline: images/offline.yaml
suites:
  toy:
    path: {suites}/passing
    runner: host
    command: ["{{python}}", -m, pytest, -q, -p, no:cacheprovider, -o, "python_files=check_*.py", "--junitxml={{junit}}", {suites}/passing]
signing:
  trust_policy: policy.yaml
  evidence_dir: manifests/evidence
  key: {keys}/signing.key
"""


@dataclass
class World:
    top: Path
    repo: Path
    home: Path  # the store every trial shares (litter accumulates there)
    workspace: Path
    ref: dict[str, str]  # op -> the digest a completed run reports

    def run(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return cli(self.repo, self.home, *args, **kw)


def build(top: Path, files: int = 400) -> World:
    top.mkdir(parents=True, exist_ok=True)
    data = _sdist(files)
    (top / f"vllm-{VERSION}.tar.gz").write_bytes(data)
    repo, home = top / "repo", top / "store"
    (repo / "patch").mkdir(parents=True)
    (repo / "images").mkdir()
    keys = top / "keys"
    (repo / "pipeline.yaml").write_text(PIPELINE.format(
        version=VERSION, sha=hashlib.sha256(data).hexdigest(), suites=SUITES, keys=keys))
    ws = top / "ws"
    cli(repo, home, "patch", "workspace", str(ws))
    envs = ws / "vllm" / "envs.py"
    envs.write_text(envs.read_text() + "DETERMINISTIC_TOPK = True\n")
    (ws / "vllm" / "topk.py").write_text("def topk(x):\n    return sorted(x)[:1]\n")
    subprocess.run(["git", "add", "-A"], cwd=ws, env=env(home), check=True)
    subprocess.run(["git", "commit", "-qm", "topk"], cwd=ws, env=env(home), check=True)
    cli(repo, home, "patch", "export", "--from", str(ws))
    standin = cli_json(repo, home, "image", "standin", "--site-packages", SP)
    (repo / "images" / "offline.yaml").write_text(
        f"version: 1\nbase:\n  source: standin\n  name: patchbake/standin-vllm:{VERSION}\n"
        f"  digest: {standin['digest']}\n  verified: true\nsite_packages: {SP}\nmode: overlay\n")
    ref: dict[str, str] = {}
    ref["fetch"] = cli_json(repo, home, "fetch")["tree_digest"]
    ref["bake"] = cli_json(repo, home, "bake", "offline")["digest"]
    ref["export"] = hashlib.sha256((repo / "patch" / f"trial-v{VERSION}.patch").read_bytes()).hexdigest()
    gen = cli_json(repo, home, "keys", "generate", "--out", str(keys))
    (repo / "policy.yaml").write_text("version: 1\nkeys:\n" + gen["policy_entry"])
    # the toy suite fails on this tree (exit 40); its result is evidence all the same
    cli(repo, home, "fixtures", "run", "toy", "--image", "offline", "--runner", "host",
        "--results-out", str(top / "result.json"), check=False)
    signed = cli_json(repo, home, "evidence", "sign", str(top / "result.json"))["signed"][0]
    ref["sign"] = hashlib.sha256(Path(signed["evidence"]).read_bytes()).hexdigest()
    return World(top, repo, home, ws, ref)
