#!/usr/bin/env python3
"""Instruction counts of the fused top-k canonicalisation, compiled without a GPU.

Compiles the module's kernel (from the tree under test) with Triton's own compiler and
ptxas for a target (sm90: the H200; sm89: Ada), at each benchmark shape with the launch
shape ``kernel_config`` gives (or every thread-per-row layout, ``--layouts``), and counts
the SASS opcodes ``cuobjdump -sass`` prints, per sorted value. The arguments are compiled
as Triton specialises them at run time (the pointer, and each size divisible by 16).

A bitonic network of 2**p values has p(p+1)/2 levels, and each value takes part in one
compare-exchange a level: so at least that many integer min/max (VIMNMX/IMNMX) a value.

    python3 bench/topk_sass.py --tree <dir holding the patched vllm/> [--arch 90] [--json out.json]

Needs ``triton`` (its wheel carries ptxas and cuobjdump); no GPU, no torch CUDA.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_topk_gpu as B  # noqa: E402
import topk_floor  # noqa: E402

OPCODE = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
# SASS opcodes that issue to the integer ALU pipe (the one min/max runs on)
ALU = {"VIMNMX", "IMNMX", "LOP3", "SEL", "ISETP", "IADD3", "SHF", "SGXT", "PLOP3", "LEA",
       "VIADD", "FMNMX"}


def levels(k: int) -> int:
    p = max(0, (k - 1).bit_length())
    return p * (p + 1) // 2


def compile_counts(canon: Any, rows: int, k: int, cfg: dict[str, int], arch: int
                   ) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = dict(cfg)
    nw = cfg.pop("num_warps")
    kp = 1 << cfg["LOG_K"]
    kern = canon._canonicalize_topk_kernel
    consts = dict(FLIP=0, EVEN_COLS=k == kp, REG_BITS=(cfg["HI"] * cfg["VEC"]).bit_length() - 1,
                  N=(kp * cfg["ROWS"]).bit_length() - 1, **cfg)
    sig = {"idx_ptr": "*i32", "n_rows": "i32", "n_cols": "i32", "stride_row": "i32"}
    sig.update({c: "constexpr" for c in consts})
    src = ASTSource(fn=kern, signature=sig,
                    constexprs={(kern.arg_names.index(c),): v for c, v in consts.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i, v in
                           enumerate((16, rows, k, k)) if v % 16 == 0})
    ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": nw})
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(ck.asm["cubin"])
        sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True,
                              text=True, check=True).stdout
    ops: collections.Counter[str] = collections.Counter()
    for line in sass.splitlines():
        m = OPCODE.match(line)
        if m:
            ops[m.group(1)] += 1
    per_thread = kp * cfg["ROWS"] / (nw * 32)
    return {
        "shape": [rows, k], "arch": f"sm{arch}", "config": {**cfg, "num_warps": nw},
        "values_per_thread": per_thread, "levels": levels(kp),
        "spills": ops.get("STL", 0) + ops.get("LDL", 0),
        "minmax_per_value": round((ops["VIMNMX"] + ops["IMNMX"]) / per_thread, 1),
        "alu_per_value": round(sum(n for o, n in ops.items() if o in ALU) / per_thread, 1),
        "shfl_per_value": round(ops["SHFL"] / per_thread, 1),
        "all_per_value": round(sum(ops.values()) / per_thread, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", help="directory holding the patched vllm/ (default: $PATCHBAKE_TREE)")
    ap.add_argument("--arch", type=int, action="append", help="compute capability as 90, 89 "
                    "(repeatable; default 90)")
    ap.add_argument("--layouts", action="store_true",
                    help="also the other thread-per-row layouts topk_floor.py times (k=512)")
    ap.add_argument("--json", help="write the counts here too")
    args = ap.parse_args(argv)
    try:
        import triton  # noqa: F401
    except ImportError:
        print("topk_sass: triton is not installed; skipping")
        return 0
    tree = B.find_tree(args.tree)
    if tree is None:
        print(f"topk_sass: no tree with {B.CANON_REL}: pass --tree", file=sys.stderr)
        return 2
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="topk-sass-"))
    canon = B.load_module(tree / B.CANON_REL)
    rows_out = []
    print(f"{'arch':>5} {'shape':>10} {'layout':>16} {'levels':>6} {'min/max':>8} "
          f"{'ALU':>6} {'SHFL':>5} {'all':>6} {'spills':>6}  (a value)")
    for arch in args.arch or [90]:
        for rows, k in B.SHAPES:
            # the launch shape kernel_config gives; with --layouts, the ones topk_floor.py times
            cfgs = topk_floor.layouts(canon, rows, k) if args.layouts \
                else [canon.kernel_config(k, rows)]
            for cfg in cfgs:
                r = compile_counts(canon, rows, k, cfg, arch)
                rows_out.append(r)
                c = r["config"]
                lay = f"{c['LANES']}l x{r['values_per_thread']:.0f}v w{c['num_warps']}"
                print(f"{r['arch']:>5} {rows:>5}x{k:<4} {lay:>16} {r['levels']:>6} "
                      f"{r['minmax_per_value']:>8} {r['alu_per_value']:>6} "
                      f"{r['shfl_per_value']:>5} {r['all_per_value']:>6} {r['spills']:>6}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "format": "patchbake-bench-topk-sass/1", "module_sha256":
            hashlib.sha256((tree / B.CANON_REL).read_bytes()).hexdigest(),
            "results": rows_out}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
