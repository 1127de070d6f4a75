#!/usr/bin/env python3
"""`make bench`: run every bench/bench_*.py in one go, each printing its own table and
writing bench/out/<area>.json. A benchmark that needs hardware this machine lacks (the GPU
one) says so and exits 0; any other failure fails the run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if not scripts:
        print("no benchmarks found under bench/", file=sys.stderr)
        return 1
    (HERE / "out").mkdir(exist_ok=True)
    # the package byte-compiled first, as pip does at install: the benchmarks that time
    # CLI processes then measure what a user runs, whatever PYTHONDONTWRITEBYTECODE says
    subprocess.check_call([sys.executable, "-m", "compileall", "-q",
                           str(HERE.parent / "tools" / "patchbake")])
    failed = []
    for script in scripts:
        print(f"==> {script.name}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"<== {script.name}: exit {rc} in {time.monotonic() - t0:.1f}s", flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
