#!/usr/bin/env python3
"""Fused top-k canonicalisation against the three-launch torch sequence, on one GPU.

Both run in the same process on the same inputs: rows of k valid int32 indices in
random order (the case above 2,048 tokens of context, where every slot is filled).
The torch sequence is the one the fused kernel replaces: where(-1 -> INT32_MAX),
sort, where(INT32_MAX -> -1) and a copy back in place.

Timing, three ways (medians):
- ``do_bench``: ``triton.testing.do_bench``, CUDA events around each call, L2
  flushed before every call (cold data: the pessimistic case);
- ``graph``: CUDA-graph replay of 50 back-to-back calls over rotating buffers
  larger than L2 together (no launch gaps, data from HBM);
- ``graph_warm``: the same on one buffer, so the indices are L2-resident, as
  they are in vLLM right after the selector kernel wrote them.
A Triton in-place copy of the same tensor, timed the same three ways, gives the
floor of any one pass over the data (``copy_*``).

Without CUDA (or torch) it says so and exits 0, so ``make bench`` passes on CPU
machines. The module is loaded by file path from the tree under test:

    PATCHBAKE_TREE=/path/to/patched/tree python3 bench/bench_topk_gpu.py
    python3 bench/bench_topk_gpu.py --tree /path/to/tree --json out.json [--sweep]

``--figures FILE`` also writes the figures in the form ``patchbake release benchmark``
signs (``{"figures": {metric: {value, unit, better}}, "environment": {...}}``): the
"graph" time and speedup at every shape. ``--figures-from OUT.json`` makes that file from
an earlier run's output, with no GPU. The environment names the module's sha256 and says
whether it is the post-image the patch's FILES.txt records for it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CANON_REL = "vllm/model_executor/layers/dsv4_topk_canon.py"
SHAPES = [(15, 512), (1024, 512), (4096, 512), (2048, 1024), (1024, 2048), (512, 4096)]
GOAL_SPEEDUP = 10.0
GOAL_US_4096 = 10.0
INT32_MAX = 2**31 - 1


def find_tree(arg: str | None) -> Path | None:
    for cand in (arg, os.environ.get("PATCHBAKE_TREE"), str(REPO / ".payload" / "patched")):
        if cand and (Path(cand) / CANON_REL).is_file():
            return Path(cand).resolve()
    return None


def load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("bench_dsv4_topk_canon", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_full_rows(torch: Any, rows: int, k: int, seed: int, device: Any) -> Any:
    gen = torch.Generator().manual_seed(seed)
    steps = torch.randint(1, 512, (rows, k), generator=gen)
    vals = torch.cumsum(steps, dim=1)
    order = torch.argsort(torch.rand(rows, k, generator=gen), dim=1)
    return torch.gather(vals, 1, order).to(torch.int32).to(device)


def torch_sequence(torch: Any) -> Callable[[Any], None]:
    def run(x: Any) -> None:
        key = torch.where(x == -1, INT32_MAX, x)
        key = torch.sort(key, dim=1).values
        x.copy_(torch.where(key == INT32_MAX, -1, key))
    return run


def copy_pass(torch: Any, triton: Any) -> Callable[[Any], None]:
    """One in-place read+write pass over the tensor: the floor of any fused kernel."""
    import triton.language as tl

    @triton.jit
    def _copy(p, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(p + o, tl.load(p + o, mask=o < n), mask=o < n)

    def run(x: Any) -> None:
        n = x.numel()
        _copy[(triton.cdiv(n, 4096),)](x, n, BLOCK=4096)
    return run


def time_do_bench(triton: Any, fn: Callable[[], None]) -> float:
    ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    return float(ms) * 1000.0


def time_graph(torch: Any, fn: Callable[[Any], None], bufs: list[Any], calls: int = 50) -> float:
    """Median per-call time (us) of graph replays of `calls` calls over rotating buffers."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for b in bufs:  # warm up (compile, allocator) outside the capture
            fn(b)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(bufs[i % len(bufs)])
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(times)


def rotation(torch: Any, rows: int, k: int, device: Any) -> list[Any]:
    # enough buffers that their sum exceeds the 60 MB L2 for the large shapes
    n = max(2, min(16, (96 << 20) // max(1, rows * k * 4)))
    return [make_full_rows(torch, rows, k, 1000 + i, device) for i in range(n)]


def sweep_configs(k: int, rows: int) -> list[dict[str, int]]:
    """Candidate launch shapes: threads per row (so values per thread), warps, rows."""
    kp = 1 << (k - 1).bit_length()
    warps = (1, 2) if rows < 128 else (2, 4, 8)
    out = []
    for lanes in (32, 16, 8):
        per_thread = kp // lanes
        if per_thread < 4 or per_thread > 128:
            continue
        for nw in warps:
            out.append({"ROWS": (32 // lanes) * nw, "HI": per_thread // 4, "LANES": lanes,
                        "VEC": 4, "LOG_K": kp.bit_length() - 1, "num_warps": nw})
    return out


def patch_sha256(rel: str = CANON_REL) -> str | None:
    """The post-image sha256 that patch/FILES.txt records for ``rel`` (None: not listed)."""
    files = REPO / "patch" / "FILES.txt"
    if not files.is_file():
        return None
    for line in files.read_text().splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[0] == rel:
            return cols[-1]
    return None


def figures_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The signed-figures form of one run's output: graph time and speedup at every shape."""
    figures: dict[str, dict[str, Any]] = {}
    for r in doc["results"]:
        shape = "x".join(map(str, r["shape"]))
        figures[f"fused_graph_us_{shape}"] = {
            "value": r["graph_fused_us"], "unit": "us", "better": "lower"}
        figures[f"speedup_graph_{shape}"] = {
            "value": r["graph_speedup"], "unit": "x", "better": "higher"}
    env = dict(doc["environment"])
    env.update(date=doc["date"], command=doc["command"], module_sha256=doc["module_sha256"],
               module_is_patch_post_image=doc["module_sha256"] == patch_sha256(),
               timing="graph: median us a call of 50-call CUDA-graph replays over rotating "
                      "buffers larger than L2; speedup against the three-launch torch "
                      "sequence timed the same way in the same run")
    return {"figures": figures, "environment": env}


def environment(torch: Any, triton: Any) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "capability": "{}.{}".format(*torch.cuda.get_device_capability(0)),
        "multiprocessors": props.multi_processor_count,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", help="directory holding the patched vllm/ (default: $PATCHBAKE_TREE)")
    ap.add_argument("--json", default=str(HERE / "out" / "topk-gpu.json"))
    ap.add_argument("--sweep", action="store_true", help="also time candidate launch shapes")
    ap.add_argument("--figures", help="also write the figures `patchbake release benchmark` signs")
    ap.add_argument("--figures-from", metavar="OUT_JSON",
                    help="only write --figures from an earlier run's --json output (no GPU)")
    args = ap.parse_args(argv)
    if args.figures_from:
        if not args.figures:
            ap.error("--figures-from needs --figures")
        done = json.loads(Path(args.figures_from).read_text())
        Path(args.figures).write_text(json.dumps(figures_of(done), indent=2) + "\n")
        print(f"wrote {args.figures}")
        return 0

    try:
        import torch
    except ImportError:
        print("bench_topk_gpu: torch is not installed; skipping (GPU benchmark)")
        return 0
    if not torch.cuda.is_available():
        print("bench_topk_gpu: no CUDA device; skipping (this benchmark runs on a GPU box)")
        return 0
    try:
        import triton
        import triton.testing
    except ImportError:
        print("bench_topk_gpu: triton is not installed; skipping")
        return 0
    tree = find_tree(args.tree)
    if tree is None:
        print(f"bench_topk_gpu: no tree with {CANON_REL}: pass --tree or set PATCHBAKE_TREE",
              file=sys.stderr)
        return 2
    canon_file = tree / CANON_REL
    canon = load_module(canon_file)
    dev = torch.device("cuda")
    seq = torch_sequence(torch)
    results = []
    sweeps: dict[str, list[dict[str, Any]]] = {}
    for rows, k in SHAPES:
        x = make_full_rows(torch, rows, k, 7, dev)
        a, b = x.clone(), x.clone()
        seq(a)
        canon.canonicalize_topk_(b, 1)
        if not torch.equal(a, b):
            print(f"MISMATCH at [{rows},{k}]: the fused kernel differs from torch", file=sys.stderr)
            return 1
        work = x.clone()
        copy = copy_pass(torch, triton)
        t_torch = time_do_bench(triton, lambda w=work: seq(w))
        t_fused = time_do_bench(triton, lambda w=work: canon.canonicalize_topk_(w, 1))
        t_copy = time_do_bench(triton, lambda w=work, c=copy: c(w))
        bufs = rotation(torch, rows, k, dev)
        def fused(t: Any) -> None:
            canon.canonicalize_topk_(t, 1)
        g = {name: time_graph(torch, fn, bufs) for name, fn in
             (("torch", seq), ("fused", fused), ("copy", copy))}
        w = {name: time_graph(torch, fn, [work]) for name, fn in
             (("torch", seq), ("fused", fused), ("copy", copy))}
        cfg = canon.kernel_config(k, rows)
        results.append({
            "shape": [rows, k], "torch_us": round(t_torch, 2), "fused_us": round(t_fused, 2),
            "speedup": round(t_torch / t_fused, 1), "copy_us": round(t_copy, 2),
            "graph_torch_us": round(g["torch"], 2), "graph_fused_us": round(g["fused"], 2),
            "graph_speedup": round(g["torch"] / g["fused"], 1), "graph_copy_us": round(g["copy"], 2),
            "graph_warm_torch_us": round(w["torch"], 2),
            "graph_warm_fused_us": round(w["fused"], 2),
            "graph_warm_speedup": round(w["torch"] / w["fused"], 1),
            "graph_warm_copy_us": round(w["copy"], 2),
            "bytes_moved": rows * k * 8, "config": cfg,
        })
        if args.sweep and (rows, k) != (1024, 512):
            rows_out = []
            for c in sweep_configs(k, rows):
                y = x.clone()
                try:
                    canon.canonicalize_topk_(y, 1, config=c)
                    ok = torch.equal(y, a)
                    t = time_do_bench(
                        triton, lambda c=c, w=work: canon.canonicalize_topk_(w, 1, config=c))
                except Exception as exc:  # noqa: BLE001 - a candidate that fails is data too
                    rows_out.append({"config": c, "error": str(exc)[:200]})
                    continue
                rows_out.append({"config": c, "us": round(t, 2), "correct": ok})
            sweeps[f"{rows}x{k}"] = sorted(rows_out, key=lambda r: r.get("us", 1e9))

    at4096 = next(r for r in results if r["shape"] == [4096, 512])
    goals = {}
    for method, prefix in (("do_bench", ""), ("graph", "graph_"), ("graph_warm", "graph_warm_")):
        goals[method] = {
            "speedup_at_least_10x_every_shape":
                all(r[prefix + "speedup"] >= GOAL_SPEEDUP for r in results),
            "at_most_10us_at_4096x512": at4096[prefix + "fused_us"] <= GOAL_US_4096,
        }
    doc = {
        "format": "patchbake-bench-topk-gpu/1",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python3 bench/bench_topk_gpu.py" + (" --sweep" if args.sweep else ""),
        "environment": environment(torch, triton),
        "module_sha256": hashlib.sha256(canon_file.read_bytes()).hexdigest(),
        "timing": "do_bench: median us per call, L2 flushed before each; graph: median us "
                  "per call of 50-call CUDA-graph replays over rotating buffers (from HBM); "
                  "graph_warm: the same on one L2-resident buffer; copy_*: one in-place "
                  "Triton copy of the tensor timed the same way (the floor of any pass)",
        "results": results,
        "goals": goals,
        "sweep": sweeps,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.figures:
        Path(args.figures).write_text(json.dumps(figures_of(doc), indent=2) + "\n")

    env = doc["environment"]
    print(f"{env['gpu']} (sm{env['capability'].replace('.', '')}), torch {env['torch']}, "
          f"triton {env['triton']}")
    print(f"{'':>12} {'--------- do_bench ---------':>30} {'---------- graph ----------':>30} "
          f"{'------- graph, L2 warm -------':>30}")
    head = f"{'torch':>8} {'fused':>7} {'x':>5} {'copy':>7}"
    print(f"{'shape':>12} {head:>30} {head:>30} {head:>30}")
    for r in results:
        cells = []
        for p in ("", "graph_", "graph_warm_"):
            cells.append(f"{r[p + 'torch_us']:>8.2f} {r[p + 'fused_us']:>7.2f} "
                         f"{r[p + 'speedup']:>5.1f} {r[p + 'copy_us']:>7.2f}")
        print(f"{'x'.join(map(str, r['shape'])):>12} " + " ".join(f"{c:>30}" for c in cells))
    for name, rows_out in sweeps.items():
        best = [r for r in rows_out if "us" in r][:3]
        print(f"sweep {name}: " + "; ".join(
            f"{r['us']}us {r['config']['ROWS']}r/{r['config']['LANES']}l/w{r['config']['num_warps']}"
            for r in best))
    for method, g in goals.items():
        print(f"goals ({method}): " + ", ".join(
            f"{k}={'met' if v else 'MISSED'}" for k, v in g.items()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
