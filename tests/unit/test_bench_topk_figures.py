"""The fused-kernel benchmark's signed-figures form: every shape's graph time and speedup,
with units the benchmark gate can compare, and the module named against the patch."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from patchbake.errors import EvidenceError
from patchbake.release import attest

REPO = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_topk_gpu_t", REPO / "bench" /
                                                  "bench_topk_gpu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


B = _bench()


def _run_output(module_sha: str) -> dict[str, Any]:
    return {
        "date": "2026-12-02T12:00:00+00:00", "command": "python3 bench/bench_topk_gpu.py",
        "environment": {"gpu": "NVIDIA H200", "capability": "9.0", "torch": "2.11.0",
                        "triton": "3.6.0", "cuda": "13.0", "multiprocessors": 132,
                        "python": "3.12.3"},
        "module_sha256": module_sha,
        "results": [{"shape": [rows, k], "graph_fused_us": 1.5 + i, "graph_speedup": 12.0 - i}
                    for i, (rows, k) in enumerate(B.SHAPES)],
    }


def test_every_shape_gives_a_time_and_a_speedup_the_gate_accepts() -> None:
    doc = B.figures_of(_run_output(B.patch_sha256()))
    figures = attest.check_figures(doc["figures"], "test")
    assert len(figures) == 2 * len(B.SHAPES)
    assert figures["fused_graph_us_4096x512"] == {"value": 3.5, "unit": "us", "better": "lower"}
    assert figures["speedup_graph_512x4096"]["better"] == "higher"
    assert doc["environment"]["module_is_patch_post_image"] is True
    assert doc["environment"]["gpu"] == "NVIDIA H200"


def test_a_module_other_than_the_patch_post_image_is_named_as_such() -> None:
    doc = B.figures_of(_run_output("0" * 64))
    assert doc["environment"]["module_is_patch_post_image"] is False


def test_the_post_image_hash_comes_from_files_txt() -> None:
    line = next(ln for ln in (REPO / "patch" / "FILES.txt").read_text().splitlines()
                if ln.startswith(B.CANON_REL + " "))
    assert B.patch_sha256() == line.split()[-1]
    assert B.patch_sha256("vllm/no/such/file.py") is None


def test_figures_from_an_earlier_run_need_no_gpu(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text(json.dumps(_run_output(B.patch_sha256())))
    fig = tmp_path / "figures.json"
    assert B.main(["--figures-from", str(out), "--figures", str(fig)]) == 0
    assert json.loads(fig.read_text()) == B.figures_of(_run_output(B.patch_sha256()))


def test_a_zero_time_cannot_be_signed() -> None:
    run = _run_output(B.patch_sha256())
    run["results"][0]["graph_fused_us"] = 0.0
    with pytest.raises(EvidenceError):
        attest.check_figures(B.figures_of(run)["figures"], "test")


def test_figures_from_without_figures_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        B.main(["--figures-from", str(tmp_path / "x.json")])
    assert exc.value.code == 2


RUNS = sorted((REPO / "manifests" / "gpu").glob("*/figures.json"))


@pytest.mark.parametrize("figures", RUNS, ids=[p.parent.name for p in RUNS])
def test_committed_figures_are_those_of_their_raw_run(figures: Path) -> None:
    """The figures a benchmark statement signs are made from the run beside them."""
    raw = json.loads((figures.parent / "topk-gpu.json").read_text())
    assert json.loads(figures.read_text()) == B.figures_of(raw)


def test_there_are_committed_figures() -> None:
    assert RUNS, "manifests/gpu/ holds no benchmark figures"
