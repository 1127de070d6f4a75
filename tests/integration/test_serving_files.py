"""The GPU evidence of the real serving image is bound to its files.

The committed GPU runs (`manifests/gpu/dsv4-served-image-h200-2026-12-02/`) ran on a files
bundle of `sm89-serving-local`; here, on the image rebuilt from its pins, the bundle's
manifest the runs recorded is the one the image's layers give (what `evidence sign`
re-checks), a bundle made here opens, rebuilds the base's unpatched tree and runs the CPU
suite with `suites run --files`, and the `validated` gates pass with the committed evidence.

Needs the serving base of the v0.25.1 lock in a store here (as test_serving_image_docker).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from images_repo import cli, cli_json
from serving_support import REPO, serving_store
from patchbake.sources.digest import tree_digest
from patchbake.store import Store
from patchbake.suites import files
from patchbake.suites.result import SuiteResult

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.slow]
RUN = REPO / "manifests" / "gpu" / "dsv4-served-image-h200-2026-12-02"
LEAVE = ("vllm/vllm-rs=the HTTP front end", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so=sm8x only")


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory, shared_home: Path) -> tuple[Path, Path, str]:
    """A repository copy with the committed records and evidence, and the serving image
    baked into the store that holds its base."""
    store = serving_store(shared_home)
    root = tmp_path_factory.mktemp("serving-files") / "repo"
    root.mkdir()
    shutil.copy(REPO / "pipeline.yaml", root)
    for part in ("images", "patch", "manifests", "tests/gpu_suites"):
        shutil.copytree(REPO / part, root / part)
    out = cli_json(root, store, "bake", "sm89-serving-local")
    return root, store, out["digest"]


def test_the_committed_gpu_runs_ran_on_the_images_files(baked: tuple[Path, Path, str]) -> None:
    _, store, digest = baked
    for suite in ("dsv4-served-gpu", "dsv4-topk-gpu"):
        result = SuiteResult.load(RUN / f"{suite}.result.json")
        assert str(result.image.digest) == digest, "the committed run names another image"
        recorded = result.environment["image_files"]
        probe = result.probes["patch_sensitivity"]["vllm_tree_digest"]
        files.check_signable(Store.open(store), result.image, recorded, True, probe)


def test_a_files_bundle_runs_the_cpu_suite(baked: tuple[Path, Path, str], tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the CPU suite needs torch (make setup-suite)")
    root, store, digest = baked
    args = [a for item in LEAVE for a in ("--leave", item)]
    made = cli_json(root, store, "suites", "bundle", "--files", "sm89-serving-local",
                    "--dist", "pydantic", *args, "--out", str(tmp_path / "carry"))
    assert made["image"] == digest and made["left"] == 2 and made["pristine_files"] == 3
    b = files.check(tmp_path / "carry")
    pristine = files.pristine_tree(b, tmp_path / "pristine")
    assert str(tree_digest(pristine / "vllm")) == b.doc["pristine_vllm_digest"]
    assert "VLLM_DSV4_DETERMINISTIC_TOPK" in (b.tree / "vllm/envs.py").read_text()
    assert "VLLM_DSV4_DETERMINISTIC_TOPK" not in (pristine / "vllm/envs.py").read_text()
    res = tmp_path / "cpu.result.json"
    cli(root, store, "suites", "run", "dsv4-topk-cpu", "--image", digest, "--files",
        str(tmp_path / "carry"), "--results-out", str(res))
    result = SuiteResult.load(res)
    assert result.result == "PASSED" and result.probes["patch_sensitivity"]["status"] == "ok"
    rec = result.environment["image_files"]
    assert rec["manifest_sha256"] == b.sha256
    sources = {d["name"]: d["source"] for d in rec["distributions"]}
    assert sources["vllm"] == sources["pydantic"] == "image"
    # a bundle taken from one image cannot stand for another
    wrong = cli(root, store, "suites", "run", "dsv4-topk-cpu", "--image",
                "sha256:" + "0" * 64, "--files", str(tmp_path / "carry"), check=False)
    assert wrong.returncode != 0 and "carries the files of" in wrong.stderr


def test_validated_gates_pass_for_the_serving_image(baked: tuple[Path, Path, str]) -> None:
    root, store, digest = baked
    out = cli_json(root, store, "release", "gates", "--channel", "validated", "--image",
                   "sm89-serving-local")
    assert out["digest"] == digest and out["passed"] is True, out
