#!/usr/bin/env python3
"""Pinned sources on the real vLLM 0.25.1 sdist: safe extraction against GNU tar, tree
digest against sha256sum over the same files, cached fetch and the CLI round trip.

Prints a table; writes bench/out/sources.json. The sdist is fetched once through the
configured index into the store (PATCHBAKE_HOME or the user cache dir).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tools"))

from patchbake import config
from patchbake.sources import fetch, tree_digest
from patchbake.sources.extract import extract
from patchbake.store import Store

RUNS = 5


def timed(fn: Callable[[], object], runs: int = RUNS) -> float:
    """Median wall seconds of ``runs`` calls (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> int:
    lin = config.load(REPO / "pipeline.yaml").lineage("v0.25.1")
    store = Store.open()
    t = time.perf_counter()
    f = fetch(lin, store)
    first = time.perf_counter() - t
    archive = store.blob_path(f.archive_sha256 or "")
    tmp = Path(tempfile.mkdtemp(prefix="bench-sources.", dir=store.root / "tmp"))
    try:
        n = [0]

        def ours_extract() -> None:
            n[0] += 1
            extract(archive, tmp / f"ours{n[0]}", strip=None)

        def tar_extract() -> None:
            n[0] += 1
            d = tmp / f"tar{n[0]}"
            d.mkdir()
            subprocess.run(["tar", "-xzf", str(archive), "-C", str(d)], check=True)

        def sha256sum() -> None:
            subprocess.run("find . -type f -print0 | sort -z | xargs -0 sha256sum >/dev/null",
                           shell=True, check=True, cwd=f.root)

        rows = [
            ("extract 37 MB tar.gz (safe)", timed(ours_extract, 3), "tar -xzf", timed(tar_extract, 3)),
            (f"tree digest ({f.files} files)", timed(lambda: tree_digest(f.root)),
             "find|sort|xargs sha256sum", timed(sha256sum)),
            ("fetch, cached (in process)", timed(lambda: fetch(lin, store)), "", None),
            ("patchbake fetch --json (cached, CLI)",
             timed(lambda: subprocess.run([sys.executable, "-m", "patchbake", "fetch", "--json"],
                                          check=True, capture_output=True, cwd=REPO), 3),
             "python3 -c pass", timed(lambda: subprocess.run([sys.executable, "-c", "pass"],
                                                              check=True), 3)),
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'measure':40} {'ours s':>8}  {'anchor':28} {'anchor s':>8} {'ratio':>6}")
    out = []
    for name, ours, anchor, base in rows:
        ratio = f"{ours / base:.2f}" if base else ""
        anchor_s = f"{base:8.3f}" if base is not None else " " * 8
        print(f"{name:40} {ours:8.3f}  {anchor:28} {anchor_s} {ratio:>6}")
        out.append({"measure": name, "seconds": round(ours, 4), "anchor": anchor or None,
                    "anchor_seconds": round(base, 4) if base else None})
    doc = {"area": "sources", "first_fetch_seconds": round(first, 3), "files": f.files,
           "tree_digest": f.tree_digest, "rows": out, "runs": RUNS,
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "platform": platform.platform()}}
    (HERE / "out").mkdir(exist_ok=True)
    # digests are Digest objects: written as their text
    (HERE / "out" / "sources.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
