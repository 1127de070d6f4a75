#!/usr/bin/env python3
"""Bake and verify at the size of the real serving image (`sm89-serving-local` on the
10 GB serving base of vLLM 0.25.1), each against its anchor in the same run:

- bake, cold (a new SOURCE_DATE_EPOCH every run, so nothing is cached; the base and the
  patched tree are in the store, as the engine has its base loaded), as the CLI a user
  runs, against ``docker build --no-cache --network none`` of ``FROM <the serving base>``
  + ``COPY`` of the same baked files (the base loaded into the engine before the clock
  starts);
- ``verify --no-cache`` and memoised ``verify`` (CLI) against ``openssl dgst -sha256`` over
  the same layer blobs, alternating in pairs; the ratio is the median of the pairs'.

Needs the serving base and image in the store (`make serving-image`) and about 25 GB of
free disk for the engine's copy, so `make bench` runs it only when
PATCHBAKE_BENCH_SERVING=1. Writes bench/out/serving_image.json.
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

from bench_image import cli, copy_context, docker, openssl_sha256, paired_time  # noqa: E402
from patchbake import config  # noqa: E402
from patchbake.digest import Digest  # noqa: E402
from patchbake.images import definition  # noqa: E402
from patchbake.images.base import resolve_base  # noqa: E402
from patchbake.images.bake import bake_image  # noqa: E402
from patchbake.images.recipe import checked_base_tree  # noqa: E402
from patchbake.images.overlay import build_overlay  # noqa: E402
from patchbake.oci.image import StoreBlobs, load_image  # noqa: E402
from patchbake.patchset.patched import patched_tree  # noqa: E402
from patchbake.store import Store  # noqa: E402

NAME = "sm89-serving-local"
LINEAGE = "v0.25.1"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))


def repo_copy(work: Path) -> Path:
    repo = work / "repo"
    repo.mkdir()
    shutil.copy(REPO / "pipeline.yaml", repo)
    for d in ("images", "patch", "manifests"):
        shutil.copytree(REPO / d, repo / d)
    return repo


def docker_anchor(store: Store, pipeline: config.Pipeline, work: Path, base_digest: Digest,
                  runs: int) -> tuple[list[float], set[str]]:
    """docker build of FROM <serving base> + COPY of the baked files; the base is loaded
    into the engine first (not timed)."""
    lin = pipeline.lineage(LINEAGE)
    defn = definition.load(pipeline, NAME)
    base_tag = f"patchbake-bench/serving-base:{base_digest.hex[:12]}"
    cli(REPO, store, "image", "load", str(base_digest), "--tag", base_tag)
    patched = patched_tree(lin, store)
    base = resolve_base(defn, store, lin)
    tree = checked_base_tree(pipeline, defn, lin, base, store)
    overlay = build_overlay(defn, patched, lin, defn.base.name, base.manifest_digest, tree)
    ctx = work / "ctx"
    copy_context(overlay, ctx, base_tag)
    tags: list[str] = []
    samples: list[float] = []
    ids: set[str] = set()
    try:
        for i in range(runs + 1):
            tag = f"patchbake-bench/serving-copy:{i}"
            tags.append(tag)
            t = time.perf_counter()
            docker("build", "--network", "none", "--no-cache", "-q", "-t", tag, str(ctx))
            if i > 0:  # the first build after a load pays one-time costs: a warm-up
                samples.append(time.perf_counter() - t)
                ids.add(docker("image", "inspect", tag, "--format", "{{.Id}}").strip())
    finally:
        for tag in [*tags, base_tag]:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
    return samples, ids


def main() -> int:
    if os.environ.get("PATCHBAKE_BENCH_SERVING") != "1":
        print("serving image bench skipped: it needs the real serving image in the store "
              "(`make serving-image`) and ~25 GB of disk; set PATCHBAKE_BENCH_SERVING=1")
        return 0
    store = Store.open()
    work = Path(tempfile.mkdtemp(prefix="bench-serving-image.", dir=store.root.parent))
    try:
        repo = repo_copy(work)
        pipeline = config.load(repo / "pipeline.yaml")
        lin = pipeline.lineage(LINEAGE)
        ours = bake_image(pipeline, NAME, store, lineage=LINEAGE)
        img = load_image(StoreBlobs(store), ours.digest)
        layers = [str(d.digest) for d in img.layers]
        nbytes = sum(d.size for d in img.layers)
        print(f"{NAME} {ours.digest}: {nbytes / 1e9:.2f} GB in {len(layers)} layers")

        fresh = int(time.time())
        # warm-up: the copy's first CLI bake extracts the pinned sdist under the copy
        cli(repo, store, "--lineage", LINEAGE, "--json", "bake", NAME, epoch=fresh - 1)
        bakes = []
        for i in range(RUNS):
            t = time.perf_counter()
            cli(repo, store, "--lineage", LINEAGE, "--json", "bake", NAME, epoch=fresh + i)
            bakes.append(time.perf_counter() - t)
        bake_s = statistics.median(bakes)
        base_digest = resolve_base(definition.load(pipeline, NAME), store, lin).manifest_digest
        docker_s, ids = docker_anchor(store, pipeline, work, base_digest, RUNS) \
            if shutil.which("docker") else ([], set())

        def verify(*extra: str) -> Callable[[], object]:
            return lambda: cli(repo, store, "--lineage", LINEAGE, "--json", "verify",
                               str(ours.digest), "--definition", NAME, *extra)

        anchor = lambda: openssl_sha256(store, layers)  # noqa: E731
        figures = {"verify --no-cache (CLI)": paired_time(anchor, verify("--no-cache"), RUNS),
                   "verify, memoised (CLI)": paired_time(anchor, verify(), RUNS)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [(f"bake, cold, CLI (median of {RUNS})", f"{bake_s:.2f} s")]
    if docker_s:
        d = statistics.median(docker_s)
        rows += [(f"docker build --no-cache, FROM base + COPY (median of {RUNS})",
                  f"{d:.2f} s"), ("bake vs docker build", f"{d / bake_s:.1f}x faster" if d >= bake_s
                  else f"{bake_s / d:.1f}x slower"),
                 ("docker build: same image ID twice", str(len(ids) == 1))]
    a_s = statistics.median(a for a, _, _ in figures.values())
    rows.append(("openssl dgst -sha256 over the layers", f"{nbytes / a_s / 1e6:.0f} MB/s"))
    for k, (_, f, r) in figures.items():
        rows.append((k, f"{nbytes / f / 1e6:.0f} MB/s = {r:.0%} of openssl"))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    out = HERE / "out" / "serving_image.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "image": str(ours.digest), "bytes": nbytes, "machine": platform.node(),
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "runs": RUNS,
        "bake_cli_s": bakes, "docker_build_s": docker_s, "docker_ids": sorted(ids),
        "verify": {k: {"openssl_s": a, "s": f, "ratio_to_openssl": r}
                   for k, (a, f, r) in figures.items()}}, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
