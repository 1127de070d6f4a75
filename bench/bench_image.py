#!/usr/bin/env python3
"""Images on the real vLLM 0.25.1 sdist and the repository's patch.

1. bake: the embedded overlay bake (one deterministic layer, no daemon) against
   `docker build --network none --no-cache` of the equivalent COPY Dockerfile on the same
   base (the stand-in, `docker load`ed first); goal: 10x faster.
2. verify: `verify_image` (stream every layer, digest + diff_id, hash every vLLM file,
   compare with a fresh apply and the pristine tree) against plain sha256 of the same
   layer bytes; goal: at least 80% of that throughput on the offline image (worst case:
   every byte is a vLLM file, hashed twice) and 90% on the offline image plus a 256 MiB
   layer of large non-vLLM files (the real base's shape: CUDA and torch libraries dwarf
   the vLLM tree). Raw and verify runs alternate; the ratio is the median of per-pair
   ratios.
3. the engine's non-reproducibility: two `docker build --no-cache` of one Dockerfile.

Prints a table; writes bench/out/image.json. Store: PATCHBAKE_HOME or the user cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tools"))

from patchbake import config
from patchbake.digest import Digest
from patchbake.images.bake import bake_image, checked_base_tree
from patchbake.verify.baked import verify_image
from patchbake.images import definition
from patchbake.images.base import resolve_base
from patchbake.images.overlay import build_overlay
from patchbake.images.standin import build_standin
from patchbake.oci import layout
from patchbake.oci.archive import export_docker_archive
from patchbake.oci.image import StoreBlobs, load_image
from patchbake.oci.media import OCI_LAYER_TAR, Descriptor
from patchbake.oci.tarwriter import file_entry, with_parents, write_layer
from patchbake.patchset.patched import patched_tree
from patchbake.store import Store

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
DOCKER_RUNS = 3
BIG = 256 << 20


def median_time(fn: Callable[[int], object], runs: int) -> tuple[float, list[float]]:
    samples = []
    for i in range(runs):
        t = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), samples


def paired_time(anchor: Callable[[], object], fn: Callable[[], object], runs: int
                ) -> tuple[float, float, float]:
    """Median anchor time, median ``fn`` time, median of the per-pair ratios anchor/fn."""
    a_s, f_s, ratios = [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        anchor()
        a = time.perf_counter() - t
        t = time.perf_counter()
        fn()
        f = time.perf_counter() - t
        a_s.append(a)
        f_s.append(f)
        ratios.append(a / f)
    return statistics.median(a_s), statistics.median(f_s), statistics.median(ratios)


def raw_sha256(store: Store, digests: list[str]) -> int:
    n = 0
    for d in digests:
        h = hashlib.sha256()
        with store.open_blob(Digest.parse(d)) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                n += len(chunk)
        assert "sha256:" + h.hexdigest() == str(d)
    return n


def docker_ok() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, check=False).returncode == 0


def docker(*args: str) -> str:
    cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600,
                        check=False)
    if cp.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {cp.stderr[-500:]}")
    return cp.stdout


def big_image(store: Store, pipeline: config.Pipeline, patched: object, name: str,
              base_digest: str) -> tuple[str, str]:
    """A valid image of the real base's shape: a base made of ``base_digest`` (the
    definition's stand-in) plus one layer of 8 x 32 MiB untracked files (libraries'
    stand-in), pinned by a copy of definition ``name`` that names it (an ``oci-layout``
    base: the store is one), then baked. Returns (image digest, its definition's name)."""
    img = load_image(StoreBlobs(store), base_digest)
    # the same bytes every run: the store keeps one copy, not one per run
    blob = random.Random(0).randbytes(32 << 20)
    entries = [file_entry(f"usr/local/cuda/lib64/libfake{i}.so", data=blob)
               for i in range(BIG // len(blob))]
    hexd = store.put_stream(write_layer(with_parents(entries), 0))
    size = store.blob_path(hexd).stat().st_size
    config_doc = json.loads(img.config_bytes)
    config_doc["rootfs"]["diff_ids"].append(str(hexd))  # uncompressed: same id
    cd, cs, _ = layout.put_json(store, config_doc)
    manifest = dict(img.manifest)
    manifest["config"] = {**manifest["config"], "digest": str(cd), "size": cs}
    manifest["layers"] = [*manifest["layers"],
                          Descriptor(OCI_LAYER_TAR, hexd, size).to_json()]
    md, _, _ = layout.put_json(store, manifest)
    defs = pipeline.root / "images"
    text = (defs / f"{name}.yaml").read_text()
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("base:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")
               and not lines[i].startswith("#"))
    lines[start:end] = ["base:", "  source: oci-layout", f"  path: {store.root}",
                        "  name: bench/standin-with-libraries", f"  digest: {md}",
                        "  verified: true"]
    big = f"{name}-big"
    (defs / f"{big}.yaml").write_text("\n".join(lines) + "\n")
    # declared in the bench's copy of pipeline.yaml, beside the definitions it copies
    text = pipeline.path.read_text()
    pipeline.path.write_text(text.replace("\nimages:\n", f"\nimages:\n  {big}: images/{big}.yaml\n", 1))
    res = bake_image(config.load(pipeline.path), big, store, patched=patched,  # type: ignore[arg-type]
                     epoch=0, record=False)
    return res.digest, big


def main() -> int:
    store = Store.open()
    work = Path(tempfile.mkdtemp(prefix="bench-image."))
    try:
        return run(store, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cli(repo: Path, store: Store, *args: str, epoch: int | None = None) -> None:
    """``python -m patchbake ARGS`` as a user runs it, in the bench's repository copy."""
    env = {**os.environ, "PATCHBAKE_HOME": str(store.root), "PATCHBAKE_NO_PROGRESS": "1",
           "PYTHONPATH": str(REPO / "tools")}
    env.pop("PATCHBAKE_PIPELINE", None)
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    cp = subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=repo, env=env,
                        capture_output=True, text=True, check=False)
    if cp.returncode != 0:
        raise RuntimeError(f"patchbake {' '.join(args)}: exit {cp.returncode}: {cp.stderr}")


def openssl_sha256(store: Store, digests: list[str]) -> None:
    """The anchor a user would reach for: ``openssl dgst -sha256`` over the layer files."""
    subprocess.run(["openssl", "dgst", "-sha256",
                    *(str(store.blob_path(Digest.parse(d))) for d in digests)],
                   capture_output=True, check=True)


def run(store: Store, work: Path) -> int:
    repo = work / "repo"
    repo.mkdir()
    shutil.copy(REPO / "pipeline.yaml", repo)
    shutil.copytree(REPO / "images", repo / "images")
    shutil.copytree(REPO / "patch", repo / "patch")
    pipeline = config.load(repo / "pipeline.yaml")
    lin = pipeline.lineage()
    patched = patched_tree(lin, store)
    name = "sm89-serving-offline"
    first = bake_image(pipeline, name, store, patched=patched, epoch=0)
    results: dict[str, object] = {"machine": platform.node(), "cpus": os.cpu_count(),
                                  "python": platform.python_version(), "image": first.digest,
                                  "baked_files": first.baked_files,
                                  "load_average": os.getloadavg()}
    base_digest = definition.load(pipeline, name).base.digest
    big_digest, big = big_image(store, pipeline, patched, name, base_digest)
    pipeline = config.load(pipeline.path)  # with the big image's definition

    # 1. bake: every run a new epoch, so nothing is cached (base and patched tree are in
    # the store, as the engine has its base loaded); blobs and records are fsynced. The
    # two bases alternate within a round, so the load's drift hits both alike.
    fresh = int(time.time())  # epochs never used before in this store: truly cold bakes
    bakes: dict[str, list[float]] = {}
    for i in range(RUNS):
        for label, defname in (("34 MB base", name), ("303 MB base", big)):
            t = time.perf_counter()
            bake_image(pipeline, defname, store, patched=patched, epoch=fresh + 2 * i)
            bakes.setdefault(f"in process, {label}", []).append(time.perf_counter() - t)
            t = time.perf_counter()
            cli(repo, store, "--json", "bake", defname, epoch=fresh + 2 * i + 1)
            bakes.setdefault(f"CLI, {label}", []).append(time.perf_counter() - t)
    t = time.perf_counter()
    cli(repo, store, "--version")
    startup = time.perf_counter() - t
    med = {k: statistics.median(v) for k, v in bakes.items()}
    cached, _ = median_time(lambda i: bake_image(pipeline, name, store, patched=patched,
                                                 epoch=0), RUNS)
    results["bake"] = {"cold_median_s": med, "cold_samples_s": bakes, "cached_s": cached,
                       "cli_startup_s": startup}
    rows = [(f"bake, cold, {k} (median of {RUNS})", f"{v * 1000:.0f} ms")
            for k, v in med.items()]
    rows += [("bake, 303 MB / 34 MB base, in process",
              f"{med['in process, 303 MB base'] / med['in process, 34 MB base']:.2f}x"),
             ("bake, 303 MB / 34 MB base, CLI",
              f"{med['CLI, 303 MB base'] / med['CLI, 34 MB base']:.2f}x"),
             ("bake, cached, in process", f"{cached * 1000:.1f} ms"),
             ("CLI start-up (patchbake --version)", f"{startup * 1000:.0f} ms")]
    if docker_ok():
        rows += docker_bake(store, pipeline, patched, work, results, med)
    else:
        rows.append(("docker build", "skipped: no Docker engine"))

    # 2. verify throughput against `openssl dgst -sha256` and in-process sha256 of the
    # same layer bytes
    images = [("offline image (all vLLM files)", first.digest, name),
              ("offline + 256 MiB library layer", big_digest, big)]
    for label, digest, defname in images:
        rows += verify_rows(store, pipeline, lin, patched, repo, label, digest, defname,
                            results)

    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    out = HERE / "out" / "image.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
    return 0


def verify_rows(store: Store, pipeline: config.Pipeline, lin: config.Lineage, patched: object,
                repo: Path, label: str, digest: str, defname: str,
                results: dict[str, object]) -> list[tuple[str, str]]:
    digest = str(digest)  # a bake result's Digest, or text
    img = load_image(StoreBlobs(store), Digest.parse(digest))
    layers = [str(d.digest) for d in img.layers]
    warm = verify_image(pipeline, digest, store, lin, patched=patched,  # type: ignore[arg-type]
                        definition=defname)
    if not warm.ok:  # a ratio of an image that fails would time the wrong work
        raise SystemExit(f"bench: {label}: verify does not pass: {warm}")
    nbytes = raw_sha256(store, layers)

    def lib(use_cache: bool) -> Callable[[], object]:
        return lambda: verify_image(pipeline, digest, store, lin, patched=patched,  # type: ignore[arg-type]
                                    definition=defname, use_cache=use_cache)

    def cmd(*extra: str) -> Callable[[], object]:
        return lambda: cli(repo, store, "--json", "verify", digest, "--definition", defname,
                           *extra)

    # each measure alternates with its anchor, and the ratio is the median of the
    # per-pair ratios: on a shared machine the load drifts between blocks, not in a pair
    anchor = lambda ls=layers: openssl_sha256(store, ls)  # noqa: E731
    figures = {
        "openssl": paired_time(anchor, anchor, RUNS),
        "in-process sha256": paired_time(anchor, lambda ls=layers: raw_sha256(store, ls), RUNS),
        "verify --no-cache (CLI)": paired_time(anchor, cmd("--no-cache"), RUNS),
        "verify, memoised (CLI)": paired_time(anchor, cmd(), RUNS),
        "verify --no-cache (in process)": paired_time(anchor, lib(False), RUNS),
        "verify, memoised (in process)": paired_time(anchor, lib(True), RUNS),
    }
    results.setdefault("verify", {})[label] = {  # type: ignore[index]
        "bytes": nbytes, "anchor": "openssl dgst -sha256 over the layer blobs",
        **{k: {"anchor_s": a, "s": f, "MBps": nbytes / f / 1e6, "ratio_to_openssl": r}
           for k, (a, f, r) in figures.items()}}
    a_s = figures["openssl"][0]
    rows = [(f"openssl dgst -sha256: {label}",
             f"{nbytes / a_s / 1e6:.0f} MB/s ({nbytes / 1e6:.0f} MB)")]
    for k, (_, f, r) in figures.items():
        if k != "openssl":
            rows.append((f"{k}: {label}", f"{nbytes / f / 1e6:.0f} MB/s = {r:.0%} of openssl"))
    return rows


def copy_context(overlay: Any, ctx: Path, base_tag: str) -> None:
    """The anchor's build context: the overlay's files under rootfs/ and a Dockerfile that
    COPYs them onto ``base_tag`` (the same bytes our bake writes)."""
    for e in overlay.entries:
        if e.kind == "file" and not e.path.rpartition("/")[2].startswith(".wh."):
            dest = ctx / "rootfs" / e.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(e.data or b"")
    (ctx / "Dockerfile").write_text(f"FROM {base_tag}\nCOPY rootfs/ /\n")


def docker_bake(store: Store, pipeline: config.Pipeline, patched: object, work: Path,
                results: dict[str, object], bakes: dict[str, float]) -> list[tuple[str, str]]:
    defn = definition.load(pipeline, "sm89-serving-offline")
    lin = pipeline.lineage()
    standin = build_standin(store, lin, defn.site_packages)
    base_tag = f"patchbake-bench/standin:{standin.manifest.digest.hex[:12]}"
    archive = export_docker_archive(store, standin.manifest.digest, work / "base.tar",
                                    [base_tag])
    docker("load", "-i", str(archive))
    ctx = work / "ctx"
    base = resolve_base(defn, store, lin)
    tree = checked_base_tree(pipeline, defn, lin, base, store)
    overlay = build_overlay(defn, patched, lin, defn.base.name,  # type: ignore[arg-type]
                            standin.manifest.digest, tree)
    copy_context(overlay, ctx, base_tag)
    tags: list[str] = []
    try:
        def build(i: int, nocache: bool = True) -> str:
            tag = f"patchbake-bench/copy:{i}"
            tags.append(tag)
            docker("build", "--network", "none", *(["--no-cache"] if nocache else []),
                   "-q", "-t", tag, str(ctx))
            return docker("image", "inspect", tag, "--format", "{{.Id}}").strip()

        build(99)  # warm-up: the engine's first build after load pays one-time costs
        cold, samples = median_time(build, DOCKER_RUNS)
        warm, _ = median_time(lambda i: build(50 + i, nocache=False), DOCKER_RUNS)
        ids = {build(200 + i) for i in range(2)}
    finally:
        for tag in [*tags, base_tag]:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
    lib, cmd = bakes["in process, 34 MB base"], bakes["CLI, 34 MB base"]
    results["docker_build"] = {"cold_s": cold, "cold_samples": samples, "cached_s": warm,
                               "speedup_in_process_vs_docker_cold": cold / lib,
                               "speedup_cli_vs_docker_cold": cold / cmd,
                               "two_builds_image_ids": sorted(ids),
                               "reproducible": len(ids) == 1}
    return [("docker build --network none --no-cache (COPY, 34 MB base)",
             f"{cold * 1000:.0f} ms"),
            ("docker build --network none (cached)", f"{warm * 1000:.0f} ms"),
            ("speed-up: bake in process vs docker build (cold)", f"{cold / lib:.1f}x (goal 10x)"),
            ("speed-up: `patchbake bake` CLI vs docker build (cold)",
             f"{cold / cmd:.1f}x (goal 10x)"),
            ("docker build twice -> Image IDs",
             f"{len(ids)} distinct ({'reproducible' if len(ids) == 1 else 'NOT reproducible'})")]


if __name__ == "__main__":
    sys.exit(main())
