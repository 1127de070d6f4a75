"""The payload's CPU suite on the v0.33.0 lineage: the real 0.33.0 sdist, the committed
port, the offline stand-in image for 0.33.0, the host runner and a real pytest. It must
pass on the baked image and fail on the pristine 0.33.0 tree (the patch-sensitivity
probe), and the 0.25.1-only layout must not leak into it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from images_repo import cli_json, repo_copy

pytestmark = [pytest.mark.integration, pytest.mark.sdist]

REPO = Path(__file__).resolve().parents[2]
SUITE = Path("tests") / "gpu_suites" / "dsv4_topk"


@pytest.mark.slow
def test_cpu_suite_on_the_v033_image(shared_home: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = repo_copy(tmp_path)
    shutil.copytree(REPO / SUITE, root / SUITE, ignore=shutil.ignore_patterns("__pycache__"))
    # no --lineage: the definition's lineage (v0.33.0) is used although v0.25.1 is the
    # default, so the pristine probe runs on the 0.33.0 tree
    baked = cli_json(root, shared_home, "bake", "sm89-serving-offline-v0.33.0")
    result = cli_json(root, shared_home, "fixtures", "run",
                      "dsv4-topk-cpu", "--image", "sm89-serving-offline-v0.33.0",
                      "--runner", "host", "--results-out", str(tmp_path / "cpu.json"))
    assert result["image"]["digest"] == baked["digest"]
    assert result["result"] == "PASSED"
    # every test ran: the 0.33.0 call-site and backend tests skip only on 0.25.1 trees
    assert result["counts"]["failed"] == 0 and result["counts"]["skipped"] == 0
    assert result["counts"]["passed"] >= 45
    sens = result["probes"]["patch_sensitivity"]
    assert sens["status"] == "ok" and sens["failed"] > 0, sens
    assert "vllm==0.33.0" in sens["tree"], sens
    assert result["environment"]["upstream_pins"] == {"torch": "2.14.0"}
