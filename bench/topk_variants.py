#!/usr/bin/env python3
"""Experiments: variants of the fused top-k canonicalisation kernel, on one GPU.

Not the benchmark of record (that is ``bench_topk_gpu.py``): a one-call script that
times every candidate kernel against the three-launch torch sequence in the same run,
eager (do_bench, L2 flushed) and under CUDA graphs (rotating buffers from HBM, and one
L2-warm buffer), at the four shapes and two index distributions. Each timed shape is
first checked bit-exactly against the torch reference (both orders, full rows and rows
with -1 padding); then (``--checks full``) ragged k, odd row counts and rows that mix
index ranges. Timing comes first because the checks compile a kernel per shape and
order: on the H200 the packed variant's compiles alone outlasted a 300 s call.
Results go to ``--json`` after every variant, so a cut-short run keeps its figures.

Variants (all built from the module's own bitonic network, imported from the tree):

- ``base``: the module's kernel as committed;
- ``pipe<P>``: the same network in a persistent loop, P programs per SM, the next
  tile's load issued before the current tile's sort (overlaps HBM with the ALU work
  that a one-wave launch otherwise serialises);
- ``pack16``: two rows per 32-bit register (one row in each 16-bit half), sorted with
  ``min/max.u16x2`` (sm90 only), chosen per program inside the kernel when every index
  of its rows is <= 65534, else the 32-bit network on each half: exact for any input,
  fast only where the indices are small;
- ``pack16pipe<P>``: both.

Input distributions: ``sparse`` is bench_topk_gpu.py's generator (steps of 1..511:
indices up to ~131k at k=512, ~524k at k=2048, i.e. 0.5M-2M tokens of context at
ratio 4); ``dense`` is a random k-subset of [0, 16*k) (8,192 candidates at k=512:
32k tokens of context at ratio 4; 32,768 at k=2048).

    python3 bench/topk_variants.py --tree <dir holding the patched vllm/> [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_topk_gpu as B

SHAPES = B.SHAPES


import triton
import triton.language as tl


@triton.jit
def _indicator(N: tl.constexpr, j: tl.constexpr):
    # the module's helper: 0/1 along hypercube axis j
    ar = tl.arange(0, 2)
    return tl.reshape(ar, [1] * (N - j - 1) + [2] + [1] * j)



@triton.jit
def _umin2(a, b):
    return tl.inline_asm_elementwise("min.u16x2 $0, $1, $2;", "=r,r,r", [a, b],
                                     dtype=tl.int32, is_pure=True, pack=1)

@triton.jit
def _umax2(a, b):
    return tl.inline_asm_elementwise("max.u16x2 $0, $1, $2;", "=r,r,r", [a, b],
                                     dtype=tl.int32, is_pure=True, pack=1)

@triton.jit
def _hc(h, j: tl.constexpr, s: tl.constexpr, DIR: tl.constexpr, N: tl.constexpr,
        P16: tl.constexpr):
    y = h ^ tl.xor_sum(h, N - 1 - j, True)
    if P16:
        lo = _umin2(h, y)
        hi = _umax2(h, y)
    else:
        lo = tl.minimum(h, y)
        hi = tl.maximum(h, y)
    if DIR:
        return tl.where((_indicator(N, j) ^ _indicator(N, s)) != 0, hi, lo)
    else:
        return tl.where(_indicator(N, j) != 0, hi, lo)

@triton.jit
def _sort(x, LOG_K: tl.constexpr, REG_BITS: tl.constexpr, N: tl.constexpr,
          P16: tl.constexpr):
    # The module's network (same stage/direction scheme), min/max pluggable.
    shape: tl.constexpr = x.shape
    h = tl.reshape(x, [2] * N)
    for s in tl.static_range(1, LOG_K + 1):
        if s >= REG_BITS and s < LOG_K:
            if s - 1 >= REG_BITS and s > 1:
                h = h ^ ((0 - _indicator(N, s)) ^ (0 - _indicator(N, s - 1)))
            else:
                h = h ^ (0 - _indicator(N, s))
        elif s == LOG_K and s - 1 >= REG_BITS and s > 1:
            h = h ^ (0 - _indicator(N, s - 1))
        for jj in tl.static_range(s):
            h = _hc(h, s - 1 - jj, s, s < REG_BITS, N, P16)
    return tl.reshape(h, shape)

@triton.jit
def _load(idx_ptr, row0, n_rows, n_cols, stride_row, EVEN_COLS: tl.constexpr,
          R: tl.constexpr, HI: tl.constexpr, LV: tl.constexpr):
    r = tl.arange(0, R)[:, None, None]
    hh = tl.arange(0, HI)[None, :, None]
    lv = tl.arange(0, LV)[None, None, :]
    col = hh * LV + lv
    row = row0 + r
    mask = row < n_rows
    if not EVEN_COLS:
        mask = mask & (col < n_cols)
    return tl.load(idx_ptr + row * stride_row + col, mask=mask, other=-1)

@triton.jit
def _relabel(k, R: tl.constexpr, HI: tl.constexpr, LANES: tl.constexpr,
             VEC: tl.constexpr):
    k = tl.reshape(k, (R, HI, LANES, VEC))
    return tl.reshape(tl.permute(k, (0, 2, 1, 3)), (R, HI * LANES * VEC))

@triton.jit
def _store(idx_ptr, out, row0, n_rows, n_cols, stride_row, EVEN_COLS: tl.constexpr,
           R: tl.constexpr, KP: tl.constexpr):
    q = tl.arange(0, KP)[None, :]
    row2 = row0 + tl.arange(0, R)[:, None]
    smask = row2 < n_rows
    if not EVEN_COLS:
        smask = smask & (q < n_cols)
    tl.store(idx_ptr + row2 * stride_row + q, out, mask=smask)

@triton.jit
def _sort32(x, FLIP: tl.constexpr, R: tl.constexpr, HI: tl.constexpr,
            LANES: tl.constexpr, VEC: tl.constexpr, LOG_K: tl.constexpr,
            REG_BITS: tl.constexpr, N: tl.constexpr):
    key = tl.where(x == -1, 2147483647, x ^ FLIP)
    key = _sort(_relabel(key, R, HI, LANES, VEC), LOG_K, REG_BITS, N, False)
    return tl.where(key == 2147483647, -1, key ^ FLIP)

@triton.jit(do_not_specialize=["iters", "nprog"])  # grid 1 must not make nprog a constant
def _variant_kernel(idx_ptr, n_rows, n_cols, stride_row, iters, nprog,
                    FLIP: tl.constexpr, EVEN_COLS: tl.constexpr, R: tl.constexpr,
                    HI: tl.constexpr, LANES: tl.constexpr, VEC: tl.constexpr,
                    LOG_K: tl.constexpr, REG_BITS: tl.constexpr, N: tl.constexpr,
                    PACK: tl.constexpr):
    # A tile is two halves of R rows each. One loop iteration per tile; the next
    # tile's load is issued before this tile's sort.
    LV: tl.constexpr = LANES * VEC
    KP: tl.constexpr = HI * LV
    pid = tl.program_id(0)
    r0 = pid.to(tl.int64) * (2 * R)
    xa = _load(idx_ptr, r0, n_rows, n_cols, stride_row, EVEN_COLS, R, HI, LV)
    xb = _load(idx_ptr, r0 + R, n_rows, n_cols, stride_row, EVEN_COLS, R, HI, LV)
    for i in range(iters):
        row0 = (pid + i * nprog).to(tl.int64) * (2 * R)
        nrow0 = row0 + nprog * (2 * R)
        na = _load(idx_ptr, nrow0, n_rows, n_cols, stride_row, EVEN_COLS, R, HI, LV)
        nb = _load(idx_ptr, nrow0 + R, n_rows, n_cols, stride_row, EVEN_COLS, R, HI,
                   LV)
        if PACK:
            # -1 -> 0 here; any other negative becomes >= 2**31 unsigned: refused.
            ua = tl.where(xa == -1, 0, xa).to(tl.uint32, bitcast=True)
            ub = tl.where(xb == -1, 0, xb).to(tl.uint32, bitcast=True)
            m = tl.maximum(tl.max(tl.max(tl.max(ua, 2), 1), 0),
                           tl.max(tl.max(tl.max(ub, 2), 1), 0))
            if m <= 65534:
                # 16-bit keys: ascending x, descending 65534 - x; padding 0xFFFF.
                ka = tl.where(xa == -1, 65535, xa if FLIP == 0 else 65534 - xa)
                kb = tl.where(xb == -1, 65535, xb if FLIP == 0 else 65534 - xb)
                p = (_relabel(ka, R, HI, LANES, VEC) << 16) | _relabel(
                    kb, R, HI, LANES, VEC)
                p = _sort(p, LOG_K, REG_BITS, N, True)
                oa = (p >> 16) & 65535
                ob = p & 65535
                oa = tl.where(oa == 65535, -1, oa if FLIP == 0 else 65534 - oa)
                ob = tl.where(ob == 65535, -1, ob if FLIP == 0 else 65534 - ob)
            else:
                oa = _sort32(xa, FLIP, R, HI, LANES, VEC, LOG_K, REG_BITS, N)
                ob = _sort32(xb, FLIP, R, HI, LANES, VEC, LOG_K, REG_BITS, N)
        else:
            oa = _sort32(xa, FLIP, R, HI, LANES, VEC, LOG_K, REG_BITS, N)
            ob = _sort32(xb, FLIP, R, HI, LANES, VEC, LOG_K, REG_BITS, N)
        _store(idx_ptr, oa, row0, n_rows, n_cols, stride_row, EVEN_COLS, R, KP)
        _store(idx_ptr, ob, row0 + R, n_rows, n_cols, stride_row, EVEN_COLS, R, KP)
        xa = na
        xb = nb


def build(canon: Any) -> Any:
    return _variant_kernel


def make_runner(torch: Any, triton: Any, canon: Any, kern: Any, pack: bool,
                per_sm: int) -> Any:
    sms = torch.cuda.get_device_properties(0).multi_processor_count if \
        torch.cuda.is_available() else 132

    def run(x: Any, mode: int = 1) -> Any:
        n_rows, k = x.shape
        cfg = canon.kernel_config(k, n_rows)
        nw = cfg.pop("num_warps")
        R = cfg["ROWS"]
        kp = 1 << cfg["LOG_K"]
        if n_rows == 0:
            return x
        n_tiles = -(-n_rows // (2 * R))
        grid = n_tiles if per_sm == 0 else max(1, min(n_tiles, per_sm * sms))
        kern[(grid,)](x, n_rows, k, x.stride(0), -(-n_tiles // grid), grid,
                      FLIP=-1 if mode == 2 else 0, EVEN_COLS=k == kp, R=R, HI=cfg["HI"],
                      LANES=cfg["LANES"], VEC=cfg["VEC"], LOG_K=cfg["LOG_K"],
                      REG_BITS=(cfg["HI"] * cfg["VEC"]).bit_length() - 1,
                      N=(kp * R).bit_length() - 1, PACK=pack, num_warps=nw, num_stages=1)
        return x
    return run


def dense_rows(torch: Any, rows: int, k: int, seed: int, device: Any, span: int) -> Any:
    gen = torch.Generator(device=device).manual_seed(seed)
    keys = torch.rand(rows, span, generator=gen, device=device)
    return torch.topk(keys, k, dim=1).indices.to(torch.int32)


def check(torch: Any, canon: Any, fn: Any, device: Any) -> list[str]:
    """Bit-exact against the reference; returns failures."""
    bad = []
    g = torch.Generator().manual_seed(5)
    # the four shapes, then ragged k, odd row counts and tiny rows (k up to 2,048 here:
    # k=4096 compiles for a minute a variant, and the suite covers it for the module)
    cases = [(r, k) for r, k in SHAPES] + [(1, 512), (4097, 512), (3, 1), (5, 100), (7, 513),
                                            (33, 2047), (0, 512)]
    for rows, k in cases:
        for dist in ("sparse", "dense", "mixed"):
            if dist == "sparse":
                x = B.make_full_rows(torch, rows, k, 11, device) if rows else \
                    torch.empty(0, k, dtype=torch.int32, device=device)
            else:
                x = dense_rows(torch, rows, k, 12, device, max(16 * k, 64)) if rows else \
                    torch.empty(0, k, dtype=torch.int32, device=device)
                if dist == "mixed" and rows > 1:
                    x[rows // 2] += 70000  # one program's rows exceed 16 bits
                    x[-1, 0] = 65534
            if rows:  # random -1 padding
                nvalid = torch.randint(0, k + 1, (rows,), generator=g).to(device)
                x = torch.where(torch.arange(k, device=device)[None, :] < nvalid[:, None],
                                x, torch.full_like(x, -1))
                x = x[:, torch.randperm(k, generator=g).to(device)].contiguous()
            for mode in (1, 2):
                ref = canon.canonicalize_topk_reference(x, mode)
                y = x.clone()
                try:
                    fn(y, mode)
                except Exception as exc:  # noqa: BLE001 - a failing variant is data
                    bad.append(f"{rows}x{k} {dist} m{mode}: {type(exc).__name__}: {exc}"[:300])
                    continue
                if not torch.equal(y, ref):
                    bad.append(f"{rows}x{k} {dist} m{mode}: mismatch")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True)
    ap.add_argument("--json", default=str(HERE / "out" / "topk-variants.json"))
    ap.add_argument("--variants", default="base,pipe2,pipe4,pipe8,pack16,pack16pipe4")
    ap.add_argument("--checks", choices=("full", "none"), default="full",
                    help="after timing: ragged k, odd row counts, mixed index ranges")
    args = ap.parse_args(argv)
    import torch
    import triton
    import triton.testing

    canon = B.load_module(Path(args.tree) / B.CANON_REL)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: smoke test
    kern = build(canon)
    seq = B.torch_sequence(torch)
    variants: dict[str, Any] = {"base": lambda x, m=1: canon.canonicalize_topk_(x, m)}
    for name in args.variants.split(","):
        if name == "base":
            continue
        pack = name.startswith("pack16")
        rest = name[len("pack16"):] if pack else name
        per_sm = int(rest[len("pipe"):]) if rest.startswith("pipe") else 0
        variants[name] = make_runner(torch, triton, canon, kern, pack, per_sm)

    doc: dict[str, Any] = {"environment": B.environment(torch, triton), "variants": {},
                           "timings_us_eager_graph_warm": {}}
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(doc, indent=2) + "\n")

    # Timing first, so a run cut short still has figures: each timed shape is checked
    # bit-exactly (both orders, with -1 padding) right before that variant is timed on
    # it. The compile-heavy ragged and small cases come after (--checks).
    cases = []
    for dist in ("sparse", "dense"):
        for rows, k in SHAPES:
            def gen(seed: int, rows: int = rows, k: int = k, dist: str = dist) -> Any:
                if dist == "sparse":
                    return B.make_full_rows(torch, rows, k, seed, dev)
                return dense_rows(torch, rows, k, seed, dev, 16 * k)
            x = gen(7)
            n = max(2, min(16, (96 << 20) // (rows * k * 4)))
            padded = x.clone()
            padded[:, : k // 3] = -1
            padded = padded[:, torch.randperm(k, device=dev)].contiguous()
            cases.append((f"{dist} {rows}x{k}", x, padded, [gen(1000 + i) for i in range(n)]))

    def timed(f: Any, x: Any, bufs: list[Any]) -> list[float]:
        work = x.clone()
        return [round(B.time_do_bench(triton, lambda: f(work)), 2),
                round(B.time_graph(torch, f, bufs), 2), round(B.time_graph(torch, f, [work]), 2)]

    tim = doc["timings_us_eager_graph_warm"]
    for label, x, _, bufs in cases:
        tim[label] = {"torch": timed(seq, x, bufs)}
    for name, fn in variants.items():
        t0 = time.time()
        bad = []
        for label, x, padded, bufs in cases:
            for inp in (x, padded):
                for mode in (1, 2):
                    y = inp.clone()
                    try:
                        fn(y, mode)
                    except Exception as exc:  # noqa: BLE001 - a failing variant is data
                        bad.append(f"{label} m{mode}: {type(exc).__name__}: {exc}"[-300:])
                        continue
                    if not torch.equal(y, canon.canonicalize_topk_reference(inp, mode)):
                        bad.append(f"{label} m{mode}: mismatch")
            if not bad:
                tim[label][name] = timed(fn, x, bufs)
        doc["variants"][name] = {"timed_shapes_exact": not bad, "failures": bad[:10]}
        save()
        cells = "  ".join(
            f"{label}: {tim[label][name][0]:.1f}/{tim[label][name][1]:.1f}/"
            f"{tim[label][name][2]:.1f}" for label, *_ in cases if name in tim[label])
        print(f"{name} ({time.time() - t0:.0f}s) {'ok' if not bad else bad[:2]} | {cells}",
              flush=True)
    for label, *_ in cases:
        t = tim[label]["torch"]
        print(f"{label:16} torch {t[0]:.1f}/{t[1]:.1f}/{t[2]:.1f} | " + "  ".join(
            f"{nm} {v[0]:.1f}/{v[1]:.1f}/{v[2]:.1f} ({t[0] / v[0]:.1f}x/{t[1] / v[1]:.1f}x/"
            f"{t[2] / v[2]:.1f}x)" for nm, v in tim[label].items() if nm != "torch"),
            flush=True)
    if args.checks == "full":
        for name, fn in variants.items():
            t0 = time.time()
            bad = check(torch, canon, fn, dev)
            doc["variants"][name].update(correct=not bad, check_failures=bad[:10],
                                         check_s=round(time.time() - t0, 1))
            save()
            print(f"check {name}: {'ok' if not bad else 'FAIL ' + str(len(bad))} "
                  f"({time.time() - t0:.1f}s) {bad[:2]}", flush=True)
    save()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
