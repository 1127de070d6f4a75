"""The committed split series must keep reproducing the canonical patch: CI notices the
moment an export makes it stale."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.sdist]


def _series_verify(repo: Path, home: Path, *lineage: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PATCHBAKE_HOME": str(home),
           "PATCHBAKE_NO_PROGRESS": "1", "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "patchbake", *lineage, "series", "verify",
                           "--json"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def test_committed_series_reproduces_the_canonical_tree(shared_home: Path) -> None:
    r = _series_verify(REPO, shared_home)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True
    assert out["series_digest"] == out["canonical_digest"]
    assert out["patches"] == len((REPO / "patch" / "series" / "series").read_text().split())


def test_committed_v033_series_reproduces_its_canonical_tree(shared_home: Path) -> None:
    r = _series_verify(REPO, shared_home, "--lineage", "v0.33.0")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["series_digest"] == out["canonical_digest"]
    series = REPO / "patch" / "v0.33.0" / "series" / "series"
    assert out["patches"] == len(series.read_text().split())


def test_series_missing_a_patch_names_the_first_differing_file(shared_home: Path,
                                                               tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(REPO / "pipeline.yaml", repo)
    shutil.copytree(REPO / "patch", repo / "patch")
    series = repo / "patch" / "series" / "series"
    names = series.read_text().split()
    series.write_text("\n".join(names[:-1]) + "\n")  # the last commit's work is dropped
    r = _series_verify(repo, shared_home)
    assert r.returncode == 24, r.stderr
    assert "vllm/model_executor/layers/sparse_attn_indexer.py" in r.stderr
