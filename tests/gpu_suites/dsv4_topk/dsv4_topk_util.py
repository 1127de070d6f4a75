"""Data and references shared by the DeepSeek-V4 top-k suite's tests."""

from __future__ import annotations

import hashlib

import torch

KNOB = "VLLM_DSV4_DETERMINISTIC_TOPK"
NO_CUDA = "CUDA is not available: the fused Triton kernel needs an NVIDIA GPU and a CUDA torch"

# The shapes of the issue: [rows, k].
SHAPES = [(1, 512), (15, 512), (1024, 512), (4096, 512), (1024, 2048)]


def shape_id(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def make_topk(rows: int, k: int, seed: int, *, pad_last: bool = True) -> torch.Tensor:
    """Indices as a top-k selector writes them: per row a random count of distinct
    valid indices in random order, then -1 padding (row 0 full, row 1 empty)."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, k + 1, (rows,), generator=gen)
    counts[0] = k
    if rows > 1:
        counts[1] = 0
    # distinct per row: a random increasing walk, shuffled within the row
    steps = torch.randint(1, 64, (rows, k), generator=gen, dtype=torch.int64)
    values = torch.cumsum(steps, dim=1)
    order = torch.argsort(torch.rand(rows, k, generator=gen), dim=1)
    values = torch.gather(values, 1, order)
    col = torch.arange(k).expand(rows, k)
    out = torch.where(col < counts[:, None], values, torch.full_like(values, -1))
    if not pad_last:
        out = shuffle_within_rows(out, seed + 1)
    return out.to(torch.int32)


def shuffle_within_rows(x: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    order = torch.argsort(torch.rand(x.shape, generator=gen), dim=1).to(x.device)
    return torch.gather(x, 1, order)


def expected(x: torch.Tensor, mode: int) -> torch.Tensor:
    """The suite's own reference, independent of the module: row by row in Python."""
    rows = []
    for row in x.cpu().tolist():
        valid = sorted((v for v in row if v != -1), reverse=(mode == 2))
        rows.append(valid + [-1] * (len(row) - len(valid)))
    return torch.tensor(rows, dtype=x.dtype).reshape(x.shape)


def torch_reference(x: torch.Tensor, mode: int) -> torch.Tensor:
    """The three-launch torch sequence the fused kernel replaces (vectorised)."""
    sentinel = torch.iinfo(x.dtype).max
    key = x if mode == 1 else torch.bitwise_not(x)
    key = torch.where(x == -1, sentinel, key)
    key = torch.sort(key, dim=1).values
    out = key if mode == 1 else torch.bitwise_not(key)
    return torch.where(key == sentinel, -1, out)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
