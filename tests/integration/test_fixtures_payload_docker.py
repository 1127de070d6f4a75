"""The payload's CPU suite with the docker runner, inside a baked image that has Python.

CI has no GPU and the serving bases hold no interpreter, so the CPU part of the suite
runs in a definition baked for this test: the repository's canonical patch as one
overlay layer on a locally built Python + pytest + CPU torch image (fixtures_python_image),
pinned by the engine's image ID. The runner then runs ``dsv4-topk-cpu`` inside that exact
image by digest with no network, and probes it on the pristine upstream tree.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from fixtures_python_image import ensure_image, image_site
from patchbake.entry import main

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.sdist]

REPO = Path(__file__).resolve().parents[2]
SUITE = "tests/gpu_suites/dsv4_topk"


@pytest.mark.slow
def test_cpu_suite_runs_in_docker_inside_the_baked_image(
        shared_home: Path, docker_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    if not (REPO / SUITE).is_dir():
        pytest.skip(f"{SUITE} is not in this checkout")
    pytest.importorskip("torch", reason="the CPU suite needs torch in the image, taken from "
                                        "this machine's Python (pip install torch, CPU wheel)")
    monkeypatch.setenv("PATCHBAKE_HOME", str(shared_home))
    tag = ensure_image()
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                              capture_output=True, text=True, check=True).stdout.strip()
    root = tmp_path / "repo"
    shutil.copytree(REPO / SUITE, root / SUITE, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "patch", root / "patch")
    site = image_site()
    (root / "images").mkdir()
    (root / "images" / "cpu-ci.yaml").write_text(yaml.safe_dump({
        "version": 1, "description": "CI only: the patch on a local Python + torch image",
        "base": {"source": "docker", "name": tag, "digest": image_id,
                 "note": "built by tests/integration/fixtures_python_image.py; host-specific",
                 # no vLLM in this base: the overlay's files are the whole vllm/ tree
                 "has_vllm": False},
        "site_packages": site, "mode": "overlay"}))
    repo_pipeline = yaml.safe_load((REPO / "pipeline.yaml").read_text())
    pipeline = {"version": 1, "name": "ci", "lineages": repo_pipeline["lineages"],
                "images": {"cpu-ci": "images/cpu-ci.yaml"},
                "suites": {"dsv4-topk-cpu": repo_pipeline["suites"]["dsv4-topk-cpu"]}}
    if "default_lineage" in repo_pipeline:  # the repository's default, not the newest
        pipeline["default_lineage"] = repo_pipeline["default_lineage"]
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.chdir(root)

    assert main(["--json", "bake", "cpu-ci"]) == 0, capsys.readouterr().err
    baked = json.loads(capsys.readouterr().out)
    rc = main(["--json", "fixtures", "run", "dsv4-topk-cpu", "--image", "cpu-ci",
               "--runner", "docker", "--results-out", str(tmp_path / "cpu.json")])
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert rc == 0, err
    assert result["image"]["digest"] == baked["digest"]
    assert result["runner"] == "docker" and result["result"] == "PASSED"
    assert result["environment"]["image_config_digest"] == baked["config_digest"]
    assert result["counts"]["passed"] >= 10 and result["counts"]["failed"] == 0
    sens = result["probes"]["patch_sensitivity"]
    assert sens["status"] == "ok" and sens["failed"] > 0, sens
    assert result["probes"]["determinism"]["status"] == "ok"
