"""Fixtures of the DeepSeek-V4 top-k suite.

The tree under test is the directory named by ``PATCHBAKE_TREE`` that holds the
``vllm`` package (a baked image's tree, a patched checkout, or the pristine
upstream to show the suite fails there). Nothing is imported from an installed
vLLM: the canonicalisation module is loaded by file path (it imports only torch
and triton) and ``vllm/envs.py`` is loaded in isolation (it imports only the
standard library at import time).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from dsv4_topk_util import KNOB, NO_CUDA

CANON_REL = "vllm/model_executor/layers/dsv4_topk_canon.py"
ENVS_REL = "vllm/envs.py"
INDEXER_REL = "vllm/model_executor/layers/sparse_attn_indexer.py"
# vLLM 0.33.0 moved the decode selectors behind a backend class in this module;
# its presence tells the two layouts apart (0.25.1 has no such file).
INDEXER_TOPK_REL = "vllm/model_executor/layers/indexer_topk.py"
SPARSE_MQA_LOGITS_REL = "vllm/model_executor/kernels/attention/dsa/sparse_mqa_logits.py"


@pytest.fixture(scope="session")
def tree() -> Path:
    value = os.environ.get("PATCHBAKE_TREE")
    if not value:
        pytest.fail("PATCHBAKE_TREE is not set: name the directory that holds the vllm "
                    "package under test (e.g. PATCHBAKE_TREE=/path/to/vllm-0.25.1)")
    root = Path(value).resolve()
    if not (root / "vllm").is_dir():
        pytest.fail(f"PATCHBAKE_TREE={root} holds no vllm/ package directory")
    return root


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered so that triton's JIT can find the module of its kernels
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def canon_path(tree: Path) -> Path:
    path = tree / CANON_REL
    if not path.is_file():
        pytest.fail(f"{CANON_REL} is absent from {tree}: the tree does not carry the "
                    "deterministic top-k patch")
    return path


@pytest.fixture(scope="session")
def canon(canon_path: Path) -> ModuleType:
    return _load(canon_path, "patchbake_suite_dsv4_topk_canon")


@pytest.fixture(scope="session")
def envs_path(tree: Path) -> Path:
    path = tree / ENVS_REL
    if not path.is_file():
        pytest.fail(f"{ENVS_REL} is absent from {tree}")
    return path


@pytest.fixture
def load_envs(envs_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Load envs.py afresh with the knob set to a value (None: unset)."""
    counter = iter(range(1_000_000))

    def load(value: str | None) -> ModuleType:
        if value is None:
            monkeypatch.delenv(KNOB, raising=False)
        else:
            monkeypatch.setenv(KNOB, value)
        return _load(envs_path, f"patchbake_suite_vllm_envs_{next(counter)}")

    return load


@pytest.fixture(scope="session")
def indexer_source(tree: Path) -> str:
    path = tree / INDEXER_REL
    if not path.is_file():
        pytest.fail(f"{INDEXER_REL} is absent from {tree}")
    return path.read_text()


@pytest.fixture(scope="session")
def layout(tree: Path) -> str:
    """'0.33': decode selectors in indexer_topk.SparseIndexerTopk; '0.25': inline."""
    return "0.33" if (tree / INDEXER_TOPK_REL).is_file() else "0.25"


@pytest.fixture(scope="session")
def v033(tree: Path, layout: str) -> Path:
    """The tree, when it has the 0.33.0 layout (the tests of its call sites)."""
    if layout != "0.33":
        pytest.skip(f"{INDEXER_TOPK_REL} is absent: a 0.25.1-layout tree has no "
                    "SparseIndexerTopk backends")
    return tree


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    return torch.device("cuda")
