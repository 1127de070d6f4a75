"""vLLM 0.33.0: every decode backend of SparseIndexerTopk.forward, run with the knob.

``vllm/model_executor/layers/indexer_topk.py`` is loaded from the tree by file path
with the vLLM modules it imports stood in (platform, config, workspace) and the
tree's own ``vllm/envs.py`` and ``dsv4_topk_canon.py``. The compiled selectors
(deep_select, cooperative, persistent, flashinfer, aiter, per_row) are not in an
sdist tree, so each is replaced by a selector that writes the correct top-k set in
a fresh random order on every call -- the varying order the knob exists for. The
``torch`` backend runs as shipped. What runs unchanged is the tree's dispatch and
whatever it does after the selector: with the knob on the indices must come out in
canonical order and bit-identical across runs, with it off exactly as the selector
wrote them. On the pristine tree the knob does nothing and these tests fail.
Marked cpu and, with CUDA tensors (the fused Triton path), gpu.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
from conftest import CANON_REL, ENVS_REL, INDEXER_TOPK_REL
from dsv4_topk_util import KNOB, NO_CUDA, digest, expected

BACKENDS = ["deep_select", "cooperative", "persistent", "flashinfer", "torch", "aiter",
            "per_row"]
FAKED = [b for b in BACKENDS if b != "torch"]
_calls = itertools.count()


class _Platform:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def is_cuda(self) -> bool:
        return self.cuda

    def is_rocm(self) -> bool:
        return False

    def is_device_capability_family(self, family: int) -> bool:
        return False

    def has_device_capability(self, cap: int) -> bool:
        return self.cuda


def _select_permuted(logits: torch.Tensor, row_ends: torch.Tensor, k: int,
                     out: torch.Tensor) -> None:
    """The right top-k set per row, in a new random order each call; -1 fill."""
    gen = torch.Generator().manual_seed(1000 + next(_calls))
    cols = torch.arange(logits.shape[1], device=logits.device)
    masked = logits.masked_fill(cols[None, :] >= row_ends.reshape(-1, 1), float("-inf"))
    idx = masked.topk(k, dim=-1).indices.to(torch.int32)
    valid = torch.arange(k, device=logits.device)[None, :] < row_ends.reshape(-1, 1)
    idx = torch.where(valid, idx, torch.full_like(idx, -1))
    order = torch.argsort(torch.rand(idx.shape, generator=gen), dim=1).to(idx.device)
    shuffled = torch.gather(idx, 1, order)
    # keep -1 last, as the selectors do: stable sort on "is padding"
    pad = (shuffled == -1).to(torch.int8)
    keep = torch.sort(pad, dim=1, stable=True).indices
    out[: idx.shape[0], :k].copy_(torch.gather(shuffled, 1, keep))


class Harness:
    def __init__(self, module: ModuleType, raw: list[torch.Tensor]) -> None:
        self.module = module
        self.raw = raw  # what the stand-in selectors wrote, per call


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _package(name: str, **attrs) -> ModuleType:
    m = ModuleType(name)
    m.__path__ = []  # type: ignore[attr-defined]
    m.__dict__.update(attrs)
    return m


@pytest.fixture
def harness_for(v033: Path, monkeypatch: pytest.MonkeyPatch):
    def make(device: torch.device) -> Harness:
        raw: list[torch.Tensor] = []

        def record(out, rows, k):
            raw.append(out[:rows, :k].clone())

        def fake_ends(logits, seq_lens, end=None):
            return seq_lens.reshape(-1)[: logits.shape[0]] if end is None else end

        def per_row(logits, next_n, seq_lens, out, rows, s0, s1, k):
            _select_permuted(logits, fake_ends(logits, seq_lens), k, out)
            record(out, rows, k)

        def radix(logits, seq_lens, out, workspace, k, max_seq_len):
            _select_permuted(logits, fake_ends(logits, seq_lens), k, out)
            record(out, logits.shape[0], k)

        def deep_select(logits, k, end=None, output_idx=None, **_):
            _select_permuted(logits, end, k, output_idx)
            record(output_idx, logits.shape[0], k)
            return output_idx

        def ragged(logits, offsets, ends, k):
            out = torch.empty(logits.shape[0], k, dtype=torch.int32, device=logits.device)
            _select_permuted(logits, ends, k, out)
            record(out, logits.shape[0], k)
            return out

        def aiter_decode(logits, next_n, ends, out, k):
            _select_permuted(logits, ends, k, out)
            record(out, logits.shape[0], k)

        platform = _Platform(device.type == "cuda")
        workspace = SimpleNamespace(get_simultaneous=lambda *specs: tuple(
            torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs))
        mods = {
            "vllm": _package("vllm"),
            "vllm._custom_ops": _package("vllm._custom_ops", top_k_per_row_decode=per_row),
            "vllm.config": _package("vllm.config", get_current_vllm_config=lambda: None),
            "vllm.platforms": _package("vllm.platforms", current_platform=platform),
            "vllm.utils": _package("vllm.utils"),
            "vllm.utils.flashinfer": _package("vllm.utils.flashinfer",
                                              has_flashinfer=lambda: True),
            "vllm.v1": _package("vllm.v1"),
            "vllm.v1.worker": _package("vllm.v1.worker"),
            "vllm.v1.worker.workspace": _package(
                "vllm.v1.worker.workspace", current_workspace_manager=lambda: workspace),
            "vllm._aiter_ops": _package("vllm._aiter_ops", rocm_aiter_ops=SimpleNamespace(
                indexer_top_k_decode=aiter_decode, is_enabled=lambda: True,
                is_indexer_top_k_enabled=lambda: True)),
            "flashinfer": _package("flashinfer"),
            "flashinfer.topk": _package("flashinfer.topk", top_k_ragged_transform=ragged),
            "vllm.model_executor": _package("vllm.model_executor"),
            "vllm.model_executor.layers": _package("vllm.model_executor.layers"),
        }
        for name, mod in mods.items():
            monkeypatch.setitem(sys.modules, name, mod)
        envs = _load(v033 / ENVS_REL, "vllm.envs")
        mods["vllm"].envs = envs  # type: ignore[attr-defined]
        mods["vllm"]._custom_ops = mods["vllm._custom_ops"]  # type: ignore[attr-defined]
        if (v033 / CANON_REL).is_file():
            canon = _load(v033 / CANON_REL, "vllm.model_executor.layers.dsv4_topk_canon")
            mods["vllm.model_executor.layers"].dsv4_topk_canon = canon  # type: ignore
        monkeypatch.setattr(torch.ops, "_C", SimpleNamespace(
            cooperative_topk=radix, persistent_topk=radix), raising=False)
        module = _load(v033 / INDEXER_TOPK_REL, "vllm.model_executor.layers.indexer_topk")
        monkeypatch.setattr(module, "deep_select_topk", deep_select)
        return Harness(module, raw)

    yield make
    for name in ("vllm.envs", "vllm.model_executor.layers.dsv4_topk_canon",
                 "vllm.model_executor.layers.indexer_topk"):
        sys.modules.pop(name, None)


def _inputs(device: torch.device, rows: int, width: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    # distinct scores per row: a permutation, so the top-k SET is unique
    logits = torch.argsort(torch.rand(rows, width, generator=gen), dim=1).float()
    seq_lens = torch.randint(1, width + 1, (rows, 1), generator=gen, dtype=torch.int32)
    seq_lens[0, 0] = width
    seq_lens[1, 0] = max(1, k // 3)  # a row shorter than k: -1 padding
    return logits.to(device), seq_lens.to(device)


def _run(h: Harness, backend: str, device: torch.device, rows: int, width: int, k: int,
         seed: int = 7) -> torch.Tensor:
    logits, seq_lens = _inputs(device, rows, width, k, seed)
    sel = h.module.SparseIndexerTopk(backend)
    sel.resolve_backend = lambda *a, **kw: backend  # the stand-ins have no constraints
    out = torch.full((rows, k), -7, dtype=torch.int32, device=device)
    sel(logits, seq_lens, 1, out, k, width)
    return out


def _check_backend(harness_for, monkeypatch, device, backend, rows, width, k,
                   record_property=None) -> None:
    h = harness_for(device)
    monkeypatch.setenv(KNOB, "1")
    outs = [_run(h, backend, device, rows, width, k) for _ in range(3)]
    if backend in FAKED:
        # the test can fail: the stand-in really wrote three different orders
        assert len({digest(r) for r in h.raw}) == 3, "stand-in selector did not permute"
    ref = expected(outs[0], 1)
    for out in outs:
        assert torch.equal(out.cpu(), ref), f"{backend}: knob=1 output is not ascending"
    assert len({digest(o) for o in outs}) == 1
    if record_property is not None:
        record_property("output_sha256", digest(outs[0]))
    monkeypatch.setenv(KNOB, "2")
    out = _run(h, backend, device, rows, width, k)
    assert torch.equal(out.cpu(), expected(out, 2)), f"{backend}: knob=2 not descending"
    assert not torch.equal(out, outs[0])


@pytest.mark.cpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_canonical_with_knob_cpu(harness_for, monkeypatch, backend) -> None:
    _check_backend(harness_for, monkeypatch, torch.device("cpu"), backend, 16, 1024, 64)


@pytest.mark.cpu
@pytest.mark.parametrize("backend", FAKED)
def test_backend_untouched_with_knob_off_cpu(harness_for, monkeypatch, backend) -> None:
    h = harness_for(torch.device("cpu"))
    monkeypatch.setenv(KNOB, "0")
    out = _run(h, backend, torch.device("cpu"), 16, 1024, 64)
    assert torch.equal(out, h.raw[-1]), "knob off must leave the selector's order"
    assert not torch.equal(out, expected(out, 1))  # the stand-in's order is not sorted


@pytest.mark.cpu
def test_torch_backend_upstream_order_with_knob_off(harness_for, monkeypatch) -> None:
    h = harness_for(torch.device("cpu"))
    monkeypatch.setenv(KNOB, "0")
    out = _run(h, "torch", torch.device("cpu"), 16, 1024, 64)
    logits, seq_lens = _inputs(torch.device("cpu"), 16, 1024, 64, 7)
    # upstream: torch.topk's order (by descending score), -1 past the row end
    cols = torch.arange(1024)
    masked = logits.masked_fill(cols[None, :] >= seq_lens.reshape(-1, 1), float("-inf"))
    ref = masked.topk(64, dim=-1).indices
    ref = torch.where(torch.arange(64)[None, :] < seq_lens.reshape(-1, 1), ref, -1)
    assert torch.equal(out, ref.to(torch.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows,width,k", [(64, 8192, 512), (32, 16384, 2048)])
def test_backend_canonical_with_knob_gpu(harness_for, monkeypatch, backend, rows, width, k,
                                         record_property) -> None:
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    _check_backend(harness_for, monkeypatch, torch.device("cuda"), backend, rows, width, k,
                   record_property)
