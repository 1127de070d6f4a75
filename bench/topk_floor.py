#!/usr/bin/env python3
"""How fast the fused top-k canonicalisation can get on one GPU: its network alone, and the rate
of the instruction the network is made of.

Not the benchmark of record (``bench_topk_gpu.py`` is): the measurements that say why that
benchmark's goals are or are not within reach, all under CUDA-graph replay (median us a call,
as ``bench_topk_gpu.py``'s "graph" columns), in one run:

- ``network``: the module's own bitonic network (``_bitonic_sort_rows``, imported from the
  tree under test) at the launch shape ``kernel_config`` gives, on keys loaded the module's
  way (same layout) from one small buffer that every program shares, so the loads hit L1;
  each sorted row is reduced to one number, and only that is stored. What is left is the
  kernel's compute: the network, the relabelling and the reduction (one multiply-add a
  value), with no pass over the tensor;
- ``network`` at other thread-per-row layouts (k=512: 16 and 8 threads a row);
- ``copy``: one in-place pass over the tensor (``bench_topk_gpu.copy_pass``): the memory floor;
- ``fused``: the module's kernel itself;
- ``minmax``: a kernel of 32-bit integer min/max only (two a value an iteration, on
  independent registers): the rate, in results per clock per SM, at the SM clock that
  ``nvidia-smi`` reports around the run.

    python3 bench/topk_floor.py --tree <dir holding the patched vllm/> [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_topk_gpu as B  # noqa: E402

SHAPES = [(4096, 512), (1024, 2048), (2048, 1024), (512, 4096)]

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the script says so and exits 0
    triton = None  # type: ignore[assignment]

_network = None  # the module's _bitonic_sort_rows, set from the tree before any compile

if triton is not None:

    @triton.jit
    def _network_only(src_ptr, out_ptr, n_rows, ROWS: tl.constexpr, HI: tl.constexpr,
                      LANES: tl.constexpr, VEC: tl.constexpr, LOG_K: tl.constexpr,
                      REG_BITS: tl.constexpr, N: tl.constexpr):
        # The module kernel's load (same offsets, so the same layout), from rows that every
        # program shares; each program's keys differ by an xor with its row number.
        LV: tl.constexpr = LANES * VEC
        KP: tl.constexpr = HI * LV
        row0 = tl.program_id(0) * ROWS
        r = tl.arange(0, ROWS)[:, None, None]
        hh = tl.arange(0, HI)[None, :, None]
        lv = tl.arange(0, LV)[None, None, :]
        x = tl.load(src_ptr + r * KP + hh * LV + lv)
        key = x ^ (row0 + r)
        key = tl.reshape(key, (ROWS, HI, LANES, VEC))
        key = tl.reshape(tl.permute(key, (0, 2, 1, 3)), (ROWS, KP))
        key = _network(key, LOG_K, REG_BITS, N)
        pos = tl.arange(0, KP)[None, :]
        rows = row0 + tl.arange(0, ROWS)
        tl.store(out_ptr + rows, tl.sum(key * (pos + 1), axis=1), mask=rows < n_rows)

    @triton.jit
    def _minmax(out_ptr, iters, V: tl.constexpr):
        # V values a program, two dependent min/max a value an iteration against the loop
        # counter and the value's own bound, so nothing folds.
        x = tl.arange(0, V) + tl.program_id(0)
        c = tl.arange(0, V) * 7
        for i in range(iters):
            x = tl.maximum(tl.minimum(x, i), c)
            x = tl.maximum(tl.minimum(x, i + 3), c)
        tl.store(out_ptr + tl.program_id(0) * V + tl.arange(0, V), x)


def sm_clock() -> dict[str, Any]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=True).stdout.split("\n")[0]
        cur, mx = (int(v) for v in out.split(","))
        return {"sm_mhz": cur, "max_sm_mhz": mx}
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)[:200]}


def network_runner(torch: Any, canon: Any, rows: int, k: int, cfg: dict[str, int]) -> Any:
    cfg = dict(cfg)
    nw = cfg.pop("num_warps")
    kp = 1 << cfg["LOG_K"]
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    src = B.make_full_rows(torch, cfg["ROWS"], kp, 3, dev)
    out = torch.empty(rows + cfg["ROWS"], dtype=torch.int32, device=dev)
    grid = (-(-rows // cfg["ROWS"]),)

    def run(_: Any) -> None:
        _network_only[grid](src, out, rows, REG_BITS=(cfg["HI"] * cfg["VEC"]).bit_length() - 1,
                            N=(kp * cfg["ROWS"]).bit_length() - 1, num_warps=nw, **cfg)

    def check() -> bool:
        run(None)
        n = grid[0] * cfg["ROWS"]
        g = torch.arange(n, device=src.device, dtype=torch.int32)
        keys = src.repeat(grid[0], 1) ^ g[:, None]
        keys = torch.sort(keys, dim=1).values[:rows].to(torch.int64)
        want = (keys * torch.arange(1, kp + 1, device=src.device)).sum(1)
        want = ((want + 2**31) % 2**32 - 2**31).to(torch.int32)
        return bool(torch.equal(out[:rows], want))
    return run, check


def layouts(canon: Any, rows: int, k: int) -> list[dict[str, int]]:
    base = canon.kernel_config(k, rows)
    out = [base]
    if k == 512:
        for lanes, nw in ((16, 2), (8, 2), (8, 4)):
            out.append({"ROWS": (32 // lanes) * nw, "HI": 512 // lanes // 4, "LANES": lanes,
                        "VEC": 4, "LOG_K": 9, "num_warps": nw})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", help="directory holding the patched vllm/ (default: $PATCHBAKE_TREE)")
    ap.add_argument("--json", default=str(HERE / "out" / "topk-floor.json"))
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("topk_floor: torch is not installed; skipping (GPU measurement)")
        return 0
    if triton is None or not torch.cuda.is_available():
        print("topk_floor: no CUDA device or no triton; skipping (this runs on a GPU box)")
        return 0
    tree = B.find_tree(args.tree)
    if tree is None:
        print(f"topk_floor: no tree with {B.CANON_REL}: pass --tree", file=sys.stderr)
        return 2
    canon = B.load_module(tree / B.CANON_REL)
    global _network
    _network = canon._bitonic_sort_rows
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    doc: dict[str, Any] = {
        "format": "patchbake-bench-topk-floor/1", "environment": B.environment(torch, triton),
        "clock_before": sm_clock(), "results": [],
        "module_sha256": hashlib.sha256((tree / B.CANON_REL).read_bytes()).hexdigest()}
    seq = B.torch_sequence(torch)
    copy = B.copy_pass(torch, triton)
    for rows, k in SHAPES:
        bufs = B.rotation(torch, rows, k, dev)
        x = B.make_full_rows(torch, rows, k, 7, dev)
        a, b = x.clone(), x.clone()
        seq(a)
        canon.canonicalize_topk_(b, 1)
        row: dict[str, Any] = {"shape": [rows, k], "fused_exact": bool(torch.equal(a, b))}
        row["graph_torch_us"] = round(B.time_graph(torch, seq, bufs), 2)
        row["graph_fused_us"] = round(B.time_graph(
            torch, lambda t: canon.canonicalize_topk_(t, 1), bufs), 2)
        row["graph_copy_us"] = round(B.time_graph(torch, copy, bufs), 2)
        row["network"] = []
        for cfg in layouts(canon, rows, k):
            run, check = network_runner(torch, canon, rows, k, cfg)
            ok = check()
            t = B.time_graph(torch, run, [None])
            row["network"].append({"config": cfg, "exact": ok, "graph_us": round(t, 2)})
        doc["results"].append(row)
        print(json.dumps(row), flush=True)
    sms = props.multi_processor_count
    v, iters = 32 * 4 * 16, 4096
    out = torch.empty(sms * 8 * v, dtype=torch.int32, device=dev)
    def mm(_: Any) -> None:
        _minmax[(sms * 8,)](out, iters, V=v, num_warps=4)
    t = statistics.median(B.time_graph(torch, mm, [None], calls=5) for _ in range(3))
    doc["clock_after"] = sm_clock()
    ops = sms * 8 * v * iters * 4
    # the clock right after the kernel ran (the one before it is the idle clock)
    mhz = doc["clock_after"].get("sm_mhz")
    doc["minmax"] = {"us": round(t, 2), "minmax_ops": ops, "sms": sms, "sm_mhz": mhz,
                     "per_clock_per_sm": round(ops / (t * 1e-6) / sms / (mhz * 1e6), 1)
                     if mhz else None}
    print(json.dumps(doc["minmax"]), flush=True)
    out_path = Path(args.json)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
