"""The fused Triton kernel on CUDA: exact, order-independent, repeatable, in place."""

from __future__ import annotations

import pytest
import torch
from dsv4_topk_util import (
    SHAPES,
    digest,
    expected,
    make_topk,
    shape_id,
    shuffle_within_rows,
    torch_reference,
)

pytestmark = pytest.mark.gpu


@pytest.fixture
def fused_only(canon, monkeypatch: pytest.MonkeyPatch):
    """The module, with its torch path made to fail: a pass means the kernel ran."""
    if not canon.HAS_TRITON:
        pytest.fail("triton is not importable: the fused kernel cannot run")

    def refuse(*a, **k):
        raise AssertionError("the torch fallback ran where the fused kernel should")

    monkeypatch.setattr(canon, "canonicalize_topk_torch_", refuse)
    return canon


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("mode", [1, 2])
def test_fused_matches_reference(fused_only, cuda, shape, mode, record_property) -> None:
    rows, k = shape
    x = make_topk(rows, k, seed=rows * 31 + k + mode)
    gx = x.to(cuda)
    out = fused_only.canonicalize_topk_(gx, mode)
    assert out is gx
    assert torch.equal(out.cpu(), expected(x, mode))
    assert torch.equal(out, torch_reference(x.to(cuda), mode))
    record_property("output_sha256", digest(out))


@pytest.mark.parametrize("shape", [(15, 512), (4096, 512), (1024, 2048)], ids=shape_id)
def test_fused_permutation_invariance(fused_only, cuda, shape, record_property) -> None:
    rows, k = shape
    x = make_topk(rows, k, seed=rows + k).to(cuda)
    ref = fused_only.canonicalize_topk_(x.clone(), 1)
    for seed in range(5):
        shuffled = shuffle_within_rows(x, 100 + seed)
        assert not torch.equal(shuffled, x)
        assert torch.equal(fused_only.canonicalize_topk_(shuffled, 1), ref), seed
    # the rows are independent: reordering rows reorders the output the same way
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(7)).to(cuda)
    assert torch.equal(fused_only.canonicalize_topk_(x[perm].contiguous(), 1), ref[perm])
    record_property("output_sha256", digest(ref))


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_fused_determinism_100_repeats(fused_only, cuda, shape, record_property) -> None:
    rows, k = shape
    x = make_topk(rows, k, seed=rows * 3 + k).to(cuda)
    first = fused_only.canonicalize_topk_(x.clone(), 1)
    outs = torch.empty((100, rows, k), dtype=x.dtype, device=cuda)
    for i in range(100):
        outs[i].copy_(x)
        fused_only.canonicalize_topk_(outs[i], 1)
    torch.cuda.synchronize()
    assert bool((outs == first).all()), "a repeat differed"
    record_property("output_sha256", digest(first))


def test_fused_knob_modes(fused_only, cuda, load_envs) -> None:
    x = make_topk(1024, 512, seed=21)
    for value, want in (("0", x), ("1", expected(x, 1)), ("2", expected(x, 2))):
        mode = load_envs(value).VLLM_DSV4_DETERMINISTIC_TOPK
        gx = x.to(cuda)
        assert torch.equal(fused_only.canonicalize_topk_(gx, mode).cpu(), want), value
    asc = fused_only.canonicalize_topk_(x.to(cuda), 1)
    desc = fused_only.canonicalize_topk_(x.to(cuda), 2)
    assert not torch.equal(asc, desc), "mode 2 (the control) must change the order"


@pytest.mark.parametrize("rows,k", [(0, 512), (1, 1), (7, 2), (3, 3), (129, 64), (33, 100),
                                    (9, 500), (5, 513), (17, 1000), (4097, 512), (3, 2047),
                                    (2, 3000), (4, 4096)])
def test_fused_any_rows_any_k(fused_only, cuda, rows, k) -> None:
    x = make_topk(max(rows, 1), k, seed=rows * 13 + k)[:rows]
    for mode in (1, 2):
        gx = x.to(cuda)
        assert torch.equal(fused_only.canonicalize_topk_(gx, mode).cpu(), expected(x, mode))


def test_fused_strided_rows_in_place(fused_only, cuda) -> None:
    # the indexer sorts a [:rows, :topk] view of a wider buffer: only that view changes
    buf = torch.randint(-1, 10_000, (300, 640), dtype=torch.int32,
                        generator=torch.Generator().manual_seed(4)).to(cuda)
    x = make_topk(257, 512, seed=4).to(cuda)
    buf[:257, :512] = x
    before = buf.clone()
    view = buf[:257, :512]
    fused_only.canonicalize_topk_(view, 1)
    assert torch.equal(view.cpu(), expected(x.cpu(), 1))
    assert torch.equal(buf[:, 512:], before[:, 512:])
    assert torch.equal(buf[257:], before[257:])


def test_fused_agrees_with_cpu_path(fused_only, canon, cuda) -> None:
    x = make_topk(1024, 2048, seed=41)
    gpu = fused_only.canonicalize_topk_(x.to(cuda), 1).cpu()
    cpu = canon.canonicalize_topk_reference(x, 1)
    assert torch.equal(gpu, cpu)


def test_fused_in_cuda_graph(fused_only, cuda) -> None:
    # decode runs under CUDA graphs: capture once, replay on new contents
    static = make_topk(64, 512, seed=50).to(cuda)
    fused_only.canonicalize_topk_(static.clone(), 1)  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fused_only.canonicalize_topk_(static, 1)
    torch.cuda.current_stream().wait_stream(stream)
    for seed in (51, 52):
        fresh = make_topk(64, 512, seed=seed)
        static.copy_(fresh.to(cuda))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static.cpu(), expected(fresh, 1))


def test_cuda_int64_uses_exact_torch_path(canon, cuda) -> None:
    x = make_topk(33, 512, seed=60).to(torch.int64)
    assert torch.equal(canon.canonicalize_topk_(x.to(cuda), 1).cpu(), expected(x, 1))
