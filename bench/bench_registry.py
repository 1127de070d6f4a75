#!/usr/bin/env python3
"""Push/pull benchmark: patchbake's registry client against `skopeo copy`, same image,
same machine, same run.

Images are generated deterministically: gzip layers of incompressible filler (like the
already-compressed layers of a real base) plus config and OCI manifest, at two sizes by
default: 36 MB in one layer, and 1 GB in 8 layers of 128 MB (a serving image has many
layers; independent blobs are what concurrent transfer can overlap). Every push goes to a
FRESH distribution registry (its own data dir and port), so neither tool can skip or mount
a blob it saw in an earlier round; a registry is removed as soon as its push is timed.
Pulls go into empty stores / layouts, each removed after it is timed: the 1 GB size needs
about 5 GB of free disk (store, pull source, one push or pull copy, temp files). Medians over the
rounds; the order of the tools alternates per round.

  python3 bench/bench_registry.py [--sizes 36x1:9,1024x8:3]   (MBxLAYERS:ROUNDS, ...)

Prints a table and writes bench/out/registry.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from patchbake.digest import Digest
from patchbake.errors import ImageError
from patchbake.fsutil import canonical_json
from patchbake.oci import layout
from patchbake.oci.media import Descriptor
from patchbake.oci.registry import RegistryClient
from patchbake.store import Store


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_image(store: Store, total_mb: int, layers: int = 1) -> tuple[str, int]:
    """Deterministic image in ``store``; returns (manifest digest, total blob bytes)."""
    import random

    blobs, diff_ids = [], []
    per_layer = max(1, total_mb // layers)
    for n in range(layers):
        rng = random.Random(f"bench-{total_mb}-{n}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for i in range(per_layer):
                data = rng.randbytes(1 << 20)
                ti = tarfile.TarInfo(f"opt/bench/l{n}/file{i:04d}.bin")
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                tf.addfile(ti, io.BytesIO(data))
        tar = buf.getvalue()
        # incompressible filler: deflate's stored blocks, a valid gzip made fast
        layer = gzip.compress(tar, compresslevel=0 if total_mb > 100 else 1, mtime=0)
        diff_ids.append(sha(tar))
        blobs.append(layer)
        store.put_bytes(layer)
    cfg = canonical_json({"architecture": "amd64", "os": "linux",
                          "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    man = canonical_json({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(b), "size": len(b)} for b in blobs]})
    for blob in (cfg, man):
        store.put_bytes(blob)
    layout.add_ref(store, "bench", Descriptor(
        "application/vnd.oci.image.manifest.v1+json", Digest.parse(sha(man)), len(man)))
    return sha(man), sum(map(len, blobs)) + len(cfg) + len(man)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def fresh_registry(work: Path) -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="reg.", dir=work))
    port = free_port()
    cfg = root / "config.yml"
    cfg.write_text((REPO / "ci" / "registry.yml.in").read_text()
                   .replace("@ROOT@", str(root / "data")).replace("@PORT@", str(port)))
    proc = subprocess.Popen(["docker-registry", "serve", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    try:
        import requests
        for _ in range(200):
            try:
                if requests.get(f"http://{host}/v2/", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.05)
        else:
            raise RuntimeError("registry did not start")
        yield host
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(argv: list[str], env: dict[str, str] | None = None) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1]} failed: {r.stderr[-500:]}")


def one_blob_at_a_time(fn: Callable[[Any], object]) -> Callable[[Any], object]:
    """The library call with concurrent blob transfer off: what concurrency buys."""
    def go(arg: Any) -> object:
        old = os.environ.get("PATCHBAKE_REGISTRY_CONCURRENCY")
        os.environ["PATCHBAKE_REGISTRY_CONCURRENCY"] = "1"
        try:
            return fn(arg)
        finally:
            if old is None:
                os.environ.pop("PATCHBAKE_REGISTRY_CONCURRENCY", None)
            else:
                os.environ["PATCHBAKE_REGISTRY_CONCURRENCY"] = old
    return go


def one_round(work: Path, store: Store, digest: str, rnd: int, ref_name: str = "bench"
              ) -> dict[str, float]:
    """One round: four pushes, each into a FRESH registry, then four pulls from the library's
    registry into empty stores. Only the pull source and one other registry exist at a
    time, and each pull's copy is removed before the next: at 1 GB the round peaks at about
    four copies of the image (store, pull source, one push target, one pull), not nine."""
    env = {**os.environ, "PATCHBAKE_NO_PROGRESS": "1", "PATCHBAKE_HOME": str(store.root)}
    skopeo = ["skopeo", "--insecure-policy", "copy", "--quiet"]
    t: dict[str, float] = {}

    def skopeo_push(r: str) -> None:
        # --preserve-digests: skopeo must push the manifest as it is (it would rewrite an
        # image with uncompressed layers, the serving image's, into another digest)
        run([*skopeo, "--dest-tls-verify=false", "--preserve-digests",
             f"oci:{store.root}:{ref_name}",
             f"docker://{r}/b/img:v1"])
        # What skopeo pushed must be the same image (same manifest digest), else the
        # comparison would be between different work.
        got = RegistryClient(r).get_manifest(f"{r}/b/img:v1")[2]
        if str(got) != digest:
            raise RuntimeError(f"skopeo pushed {got}, not {digest}: not comparable")

    pushes: list[tuple[str, Callable[[str], object]]] = [
        ("push_serial", one_blob_at_a_time(
            lambda r: RegistryClient(r).push(store, Digest.parse(digest), f"{r}/b/img:v1"))),
        ("push_cli", lambda r: run([sys.executable, "-m", "patchbake", "push", digest,
                                    f"{r}/b/img:v1", "--json"], env)),
        ("push_skopeo", skopeo_push),
    ]
    with fresh_registry(work) as r_lib:
        # the library push fills the registry every pull reads from
        t["push_lib"] = timed(lambda: RegistryClient(r_lib).push(
            store, Digest.parse(digest), f"{r_lib}/b/img:v1"))
        for name, fn in (pushes if rnd % 2 == 0 else pushes[::-1]):
            with fresh_registry(work) as reg:
                t[name] = timed_with(fn, reg)
        pulls: list[tuple[str, Callable[[Path], object]]] = [
            ("pull_lib", lambda d: RegistryClient(r_lib).pull(Store.open(d),
                                                              f"{r_lib}/b/img:v1")),
            ("pull_serial", one_blob_at_a_time(
                lambda d: RegistryClient(r_lib).pull(Store.open(d), f"{r_lib}/b/img:v1"))),
            ("pull_cli", lambda d: run([sys.executable, "-m", "patchbake", "pull",
                                        f"{r_lib}/b/img:v1", "--json"],
                                       {**env, "PATCHBAKE_HOME": str(d)})),
            ("pull_skopeo", lambda d: run([*skopeo, "--src-tls-verify=false",
                                           f"docker://{r_lib}/b/img:v1", f"oci:{d}:bench"])),
        ]
        for name, fn in (pulls if rnd % 2 == 0 else pulls[::-1]):
            dest = Path(tempfile.mkdtemp(prefix="pull.", dir=work))
            try:
                t[name] = timed_with(fn, dest / "into")
            finally:
                shutil.rmtree(dest, ignore_errors=True)
    # The CLI's fixed cost: interpreter start plus importing every command module.
    t["startup_cli"] = timed(lambda: run([sys.executable, "-m", "patchbake", "--version"], env))
    return t


def timed_with(fn: Callable[[Any], object], arg: Any) -> float:
    """Time ``fn(arg)`` (a push into a registry, or a pull into a directory)."""
    return timed(lambda: fn(arg))


def bench_size(work: Path, total_mb: int, layers: int, rounds: int) -> dict[str, object]:
    store = Store.open(work / f"store-{total_mb}")
    digest, nbytes = make_image(store, total_mb, layers)
    try:
        return measure(work, store, digest, nbytes, layers, rounds, "bench", GOALS.get(total_mb))
    finally:
        shutil.rmtree(store.root, ignore_errors=True)


def bench_stored(work: Path, name: str, rounds: int) -> dict[str, object]:
    """An image the user's store holds under ``name`` (the real serving image: ~10 GB in 6
    layers), transferred from that store as it is; the store is only read."""
    store = Store.open(Path(os.environ.get("PATCHBAKE_HOME",
                                           Path.home() / ".cache" / "patchbake")))
    try:
        found = layout.lookup(store, name)
    except ImageError as exc:
        raise SystemExit(f"bench_registry: {exc.one_line()} (`make serving-image` bakes "
                         "sm89-serving-local)") from None
    doc = json.loads(store.read_blob(found.digest))
    nbytes = found.size + doc["config"]["size"] + sum(x["size"] for x in doc["layers"])
    return measure(work, store, str(found.digest), nbytes, len(doc["layers"]), rounds, name,
                   GOALS[1024])


def measure(work: Path, store: Store, digest: str, nbytes: int, layers: int, rounds: int,
            ref_name: str, goal: float | None) -> dict[str, object]:
    runs = [one_round(work, store, digest, i, ref_name) for i in range(rounds)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    mb = nbytes / 1e6
    print(f"\nimage {digest}: {mb:.1f} MB in {layers} layer(s) + config; {rounds} rounds, "
          "medians")
    print(f"{'op':<5} {'tool':<26} {'median s':>9} {'MB/s':>8} {'vs skopeo':>10}")
    for op in ("push", "pull"):
        anchor = med[f"{op}_skopeo"]
        for who in ("lib", "serial", "cli", "skopeo"):
            sec = med[f"{op}_{who}"]
            label = {"lib": "patchbake (library call)", "cli": "patchbake (CLI process)",
                     "serial": "library, 1 blob at a time", "skopeo": "skopeo copy"}[who]
            verdict = "" if goal is None or who != "cli" else \
                f"  goal >= {goal}x: {'met' if anchor / sec >= goal else 'MISSED'}"
            print(f"{op:<5} {label:<26} {sec:>9.3f} {mb / sec:>8.1f} {anchor / sec:>9.2f}x"
                  f"{verdict}")
    print(f"CLI start-up alone (python3 -m patchbake --version): {med['startup_cli']:.3f} s")
    return {"image_digest": digest, "image_bytes": nbytes, "layers": layers,
            "rounds": runs, "median_s": med}


# Issue 17's goals for the CLI process (what a user runs) against `skopeo copy`, as
# speed ratios (skopeo's time / ours): at least this fast, by image size in MB.
GOALS = {36: 0.8, 1024: 1.5}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="36x1:9,1024x8:3",
                    help="MBxLAYERS:ROUNDS, comma-separated")
    ap.add_argument("--stored", default="", metavar="NAME[:ROUNDS]",
                    help="also an image the user's store holds under NAME, e.g. "
                         "sm89-serving-local:1 (the real serving image, ~10 GB: needs about "
                         "30 GB free)")
    args = ap.parse_args()
    for tool in ("skopeo", "docker-registry"):
        if not shutil.which(tool):
            print(f"bench_registry: {tool} is not installed; skipping", file=sys.stderr)
            return 0
    sizes = []
    for part in filter(None, args.sizes.split(",")):  # --sizes '': only --stored
        size, _, rounds = part.partition(":")
        mb, _, layers = size.partition("x")
        sizes.append((int(mb), int(layers or 1), int(rounds or 3)))
    work = Path(tempfile.mkdtemp(prefix="bench-registry."))
    try:
        results = {f"{mb}MBx{layers}": bench_size(work, mb, layers, rounds)
                   for mb, layers, rounds in sizes}
        if args.stored:
            name, _, rounds = args.stored.partition(":")
            results[name] = bench_stored(work, name, int(rounds or 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry.json").write_text(json.dumps({
        "version": 2, "sizes": results,
        "command": f"python3 bench/bench_registry.py --sizes {args.sizes}"
                   + (f" --stored {args.stored}" if args.stored else ""),
        "python": sys.executable, "load_average": os.getloadavg(), "cpus": os.cpu_count(),
        "concurrency": os.environ.get("PATCHBAKE_REGISTRY_CONCURRENCY", "default (4)"),
        "skopeo": subprocess.run(["skopeo", "--version"], capture_output=True, check=False,
                                 text=True).stdout.strip(),
    }, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
