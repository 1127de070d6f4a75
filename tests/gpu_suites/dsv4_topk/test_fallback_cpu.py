"""The exact torch path (CPU, or CUDA without triton): runs wherever torch is installed."""

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

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cpu_matches_reference(canon, shape, record_property) -> None:
    rows, k = shape
    x = make_topk(rows, k, seed=rows * 7 + k)
    out = canon.canonicalize_topk_(x.clone(), 1)
    assert torch.equal(out, expected(x, 1))
    record_property("output_sha256", digest(out))


@pytest.mark.parametrize("mode", [1, 2])
def test_cpu_reference_function(canon, mode) -> None:
    x = make_topk(64, 512, seed=11)
    assert torch.equal(canon.canonicalize_topk_reference(x, mode), torch_reference(x, mode))


def test_cpu_in_place_and_returns_input(canon) -> None:
    x = make_topk(8, 64, seed=3)
    out = canon.canonicalize_topk_(x, 1)
    assert out is x
    assert torch.equal(x, expected(make_topk(8, 64, seed=3), 1))


def test_cpu_mode_off_leaves_indices_untouched(canon) -> None:
    x = make_topk(32, 512, seed=5)
    before = x.clone()
    out = canon.canonicalize_topk_(x, 0)
    assert out is x and torch.equal(x, before)


def test_cpu_mode_descending_changes_results(canon) -> None:
    x = make_topk(32, 512, seed=6)
    asc = canon.canonicalize_topk_(x.clone(), 1)
    desc = canon.canonicalize_topk_(x.clone(), 2)
    assert torch.equal(desc, expected(x, 2))
    assert not torch.equal(asc, desc)
    # same sets, -1 padding last in both
    assert torch.equal(asc.sort(dim=1).values, desc.sort(dim=1).values)


def test_cpu_knob_from_envs_drives_the_order(canon, load_envs) -> None:
    x = make_topk(16, 512, seed=8)
    for value, want in (("0", x), ("1", expected(x, 1)), ("2", expected(x, 2))):
        mode = load_envs(value).VLLM_DSV4_DETERMINISTIC_TOPK
        assert torch.equal(canon.canonicalize_topk_(x.clone(), mode), want), value


def test_cpu_permutation_invariance(canon) -> None:
    x = make_topk(256, 512, seed=9)
    a = canon.canonicalize_topk_(x.clone(), 1)
    b = canon.canonicalize_topk_(shuffle_within_rows(x, 10), 1)
    assert torch.equal(a, b)


@pytest.mark.parametrize("mode", [3, -1])
def test_cpu_invalid_mode(canon, mode) -> None:
    with pytest.raises(ValueError):
        canon.canonicalize_topk_(make_topk(2, 8, seed=1), mode)


def test_cpu_int64_and_batched_shapes(canon) -> None:
    x = make_topk(12, 100, seed=12).to(torch.int64)
    assert torch.equal(canon.canonicalize_topk_(x.clone(), 1), expected(x, 1))
    x3 = make_topk(12, 100, seed=13).reshape(3, 4, 100)
    want = expected(x3.reshape(12, 100), 1).reshape(3, 4, 100)
    assert torch.equal(canon.canonicalize_topk_(x3.clone(), 1), want)
