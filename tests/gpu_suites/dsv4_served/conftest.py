"""Fixtures of the served-determinism suite.

``PATCHBAKE_TREE`` names the directory that holds the ``vllm`` package under test (the
image's tree, patched or pristine). ``PATCHBAKE_SITE`` may name a second directory with
the rest of the image's site-packages (the fixtures bundle's ``site/``) where the tree
holds ``vllm`` alone. The engine runs in a child process per knob value: vLLM caches its
envs at start, so one process cannot serve two values of the knob.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from tiny_model import write_model  # noqa: E402

KNOB = "VLLM_DSV4_DETERMINISTIC_TOPK"
KNOB_VALUES = ("0", "1", "2")
NO_GPU = ("needs a CUDA GPU of compute capability 9.0 or 10.x (vLLM's FlashMLA sparse "
          "kernels and the DeepGEMM indexer); this machine has none (CI never does)")
WORKER_TIMEOUT_S = 300
# Judge a recorded run again (the PATCHBAKE_SERVED_OUT file of a GPU run) without a GPU:
# the tests read only what the engines recorded, so their verdicts can be re-checked.
REPLAY = "PATCHBAKE_SERVED_REPLAY"


def knob_values(tree: Path | None = None) -> tuple[str, ...]:
    """The knob values to serve; PATCHBAKE_SERVED_KNOBS narrows them. A tree whose
    ``vllm/envs.py`` does not name the knob (the pristine probe's) serves 1 alone: every
    value serves vLLM's own order there, so one engine says all (and knob 0/2 skip)."""
    picked = os.environ.get("PATCHBAKE_SERVED_KNOBS", "")
    values = tuple(k for k in picked.split(",") if k in KNOB_VALUES) or KNOB_VALUES
    envs = tree / "vllm" / "envs.py" if tree is not None else None
    if envs is not None and envs.is_file() and KNOB not in envs.read_text():
        return tuple(k for k in values if k == "1") or values[:1]
    return values


def _gpu_ok() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] in (9, 10)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not _gpu_ok() and not os.environ.get(REPLAY):
        for item in items:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


@pytest.fixture(scope="session")
def tree() -> Path:
    value = os.environ.get("PATCHBAKE_TREE")
    if not value or not (Path(value) / "vllm").is_dir():
        pytest.fail("PATCHBAKE_TREE must name the directory that holds the vllm package "
                    f"under test (got {value!r})")
    return Path(value).resolve()


def _worker(knob: str, tree: Path, model: Path, out: Path) -> dict[str, object]:
    site = os.environ.get("PATCHBAKE_SITE", "")
    roots = [str(tree)] + [p for p in site.split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(roots), **{KNOB: knob},
               VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONUNBUFFERED="1")
    log = out.with_suffix(".log")
    with log.open("w") as f:
        proc = subprocess.run(  # noqa: S603 - our own worker script, argv only
            [sys.executable, str(HERE / "served_worker.py"), "--model", str(model),
             "--out", str(out), "--roots", *roots],
            env=env, stdout=f, stderr=subprocess.STDOUT, timeout=WORKER_TIMEOUT_S,
            check=False)
    if proc.returncode != 0:
        tail = log.read_text()[-4000:]
        return {"error": f"the engine with {KNOB}={knob} exited {proc.returncode}", "log": tail}
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each knob value's engine run, one after the other."""
    if os.environ.get(REPLAY):
        return {k: v for k, v in json.loads(Path(os.environ[REPLAY]).read_text()).items()
                if k in knob_values() and not k.startswith("_")}
    tree: Path = request.getfixturevalue("tree")
    work = tmp_path_factory.mktemp("served")
    model = write_model(work / "model")
    # One engine at a time: engines started side by side on one GPU profile each other's
    # memory as their own (seen on the H200: "Available KV cache memory: -18.36 GiB").
    runs = {k: _worker(k, tree, model, work / f"knob{k}.json") for k in knob_values(tree)}
    keep = os.environ.get("PATCHBAKE_SERVED_OUT")
    if keep:
        _keep(Path(keep), tree, runs)
    return runs


def _keep(where: Path, tree: Path, runs: dict[str, dict]) -> None:
    """Write the engines' record to ``where``; a directory gets one file per run of the
    suite (``served-1.json``, ``served-2.json``: the patched run, then the pristine probe),
    each naming the tree it served."""
    if where.is_dir():
        n = len(list(where.glob("served-*.json"))) + 1
        where = where / f"served-{n}.json"
    where.write_text(json.dumps({**runs, "_tree": str(tree)}, indent=1, sort_keys=True))


@pytest.fixture
def run_of(served: dict[str, dict]):
    def get(knob: str) -> dict:
        if knob not in served:
            pytest.skip(f"{KNOB}={knob} was not served (PATCHBAKE_SERVED_KNOBS)")
        doc = served[knob]
        if "error" in doc:
            pytest.fail(f"{doc['error']}:\n{doc['log']}")
        return doc
    return get
