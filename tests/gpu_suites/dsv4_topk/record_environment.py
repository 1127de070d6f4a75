#!/usr/bin/env python3
"""Write the environment a suite run had, as JSON: GPU, driver, CUDA, torch, triton,
Python, and which tree was tested (the sha256 of each file the suite reads, and the
canonical patch's sha256 when given). Not a test: pytest does not collect it.

    python3 tests/gpu_suites/dsv4_topk/record_environment.py --tree DIR --out env.json \
        [--patch-sha256 HEX] [--label patched]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

SUITE_FILES = (
    "vllm/envs.py",
    "vllm/model_executor/layers/dsv4_topk_canon.py",
    "vllm/model_executor/layers/sparse_attn_indexer.py",
    # vLLM 0.33.0 only (None on a 0.25.1 tree)
    "vllm/model_executor/layers/indexer_topk.py",
    "vllm/model_executor/kernels/attention/dsa/sparse_mqa_logits.py",
)


def _nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    q = "name,driver_version,compute_cap,memory.total,clocks.max.sm"
    r = subprocess.run([exe, f"--query-gpu={q}", "--format=csv,noheader"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        return {}
    fields = [f.strip() for f in r.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(["name", "driver", "compute_cap", "memory_total", "max_sm_clock"], fields))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--patch-sha256", default="")
    args = ap.parse_args(argv)
    tree = Path(args.tree).resolve()
    env: dict[str, object] = {
        "format": "patchbake-suite-environment/1",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "nvidia_smi": _nvidia_smi(),
        "tree": {"label": args.label, "path": str(tree),
                 "patch_sha256": args.patch_sha256 or None,
                 "files": {rel: (hashlib.sha256((tree / rel).read_bytes()).hexdigest()
                                 if (tree / rel).is_file() else None)
                           for rel in SUITE_FILES}},
    }
    try:
        import torch
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
            env["gpu_count"] = torch.cuda.device_count()
    except ImportError:
        env["torch"] = None
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    Path(args.out).write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    print(json.dumps(env, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
