"""Helpers for the images integration tests: a private copy of the repository's pipeline,
definitions and patch (so records land in a temp dir), and the CLI run as a process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def repo_copy(tmp: Path) -> Path:
    root = tmp / "repo"
    root.mkdir(parents=True)
    shutil.copy(REPO / "pipeline.yaml", root)
    shutil.copytree(REPO / "images", root / "images")
    shutil.copytree(REPO / "patch", root / "patch")
    return root


def cli(root: Path, home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHBAKE_HOME": str(home), "PATCHBAKE_NO_PROGRESS": "1",
           "NO_COLOR": "1"}
    env.pop("PATCHBAKE_PIPELINE", None)
    cp = subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=root, env=env,
                        capture_output=True, text=True, timeout=600, check=False)
    if check and cp.returncode != 0:
        raise AssertionError(f"patchbake {' '.join(args)} exited {cp.returncode}: {cp.stderr}")
    return cp


def cli_json(root: Path, home: Path, *args: str) -> Any:
    return json.loads(cli(root, home, *args, "--json").stdout)


def seed_sdist(shared: Path, fresh: Path) -> None:
    """Give a fresh store the sdist blob the shared store already fetched (no download)."""
    sha = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"
    src = shared / "blobs" / "sha256" / sha
    if src.is_file():
        dest = fresh / "blobs" / "sha256" / sha
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
