#!/usr/bin/env python3
"""The serving base from its lock: patchbake's daemonless build against `docker build` of
the equivalent Dockerfile, on the same artifact files, in the same run.

What is compared (downloads are left out of both: every wheel and .deb of the lock is in
the store before the clock starts, and both sides read the same files):

- ours, cold: ``build_serving_base`` into a fresh store that holds the lock's artifacts and
  nothing else: mmdebstrap's root filesystem, then the wheels installed as pip installs
  them, written as five deterministic layers. Run twice, in two fresh stores, so the run
  also shows whether the digest is the same.
- ours, warm: the same call again in a store that has built it (the memoised base).
- anchor, cold: ``docker build --no-cache --network none`` of a Dockerfile that starts FROM
  the same root filesystem (our OS layer, imported; not timed), COPYs the same wheel files
  and runs ``pip install --require-hashes --no-index --no-deps`` on them. Run twice, so the
  run shows whether docker's image ID is the same.
- anchor, warm: the same ``docker build`` with its cache.

The anchor's root filesystem is given to it (imported before the clock starts), ours is
built inside the timed call; the table says so in its rows.

It needs about 35 GB of free disk and 20-30 minutes on 2 cores, so `make bench` runs it only
when PATCHBAKE_BENCH_SERVING=1; otherwise it says so and exits 0. Writes
bench/out/serving_base.json.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from patchbake import config  # noqa: E402
from patchbake.images.servingbase import ServingBase, build_serving_base, lock_of  # noqa: E402
from patchbake.store import Store  # noqa: E402

LINEAGE = os.environ.get("BENCH_SERVING_LINEAGE", "v0.25.1")
OS_IMAGE = "patchbake-bench/serving-os:latest"
ANCHOR_IMAGE = "patchbake-bench/serving-anchor"


def say(text: str) -> None:
    print(f"  {text}", flush=True)


def docker(*args: str, quiet: bool = True) -> str:
    out = subprocess.run(["docker", *args], check=True, text=True,
                         stdout=subprocess.PIPE if quiet else None)
    return (out.stdout or "").strip()


def fresh_store(warm: Store, lineage: config.Lineage, parent: Path, name: str) -> Store:
    """A new store holding the lock's wheels and .debs (hard links to the warm store's
    blobs) and nothing else."""
    lock, _ = lock_of(lineage)
    store = Store.open(parent / name)
    for digest in [w.sha256 for w in lock.wheels] + [d.sha256 for d in lock.os.packages]:
        dest = store.blob_path(digest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(warm.blob_path(digest), dest)
    return store


def ours_cold(warm: Store, lineage: config.Lineage, parent: Path, name: str
              ) -> tuple[float, ServingBase]:
    store = fresh_store(warm, lineage, parent, name)
    t0 = time.monotonic()
    base = build_serving_base(store, lineage, step=say)
    seconds = time.monotonic() - t0
    say(f"{name}: {seconds:.1f}s ({base.manifest.digest})")
    warm_t0 = time.monotonic()
    again = build_serving_base(store, lineage)
    say(f"memoised again in {time.monotonic() - warm_t0:.2f}s ({again.manifest.digest})")
    shutil.rmtree(store.root, ignore_errors=True)
    return seconds, base


def anchor_context(warm: Store, lineage: config.Lineage, base: ServingBase, ctx: Path) -> str:
    """The Dockerfile's context: the lock's wheels by file name, a requirements file with
    their hashes, and a pip wheel to run pip from. Returns the pip version used."""
    lock, _ = lock_of(lineage)
    wheels = ctx / "wheels"
    wheels.mkdir(parents=True)
    for w in lock.wheels:
        os.link(warm.blob_path(w.sha256), wheels / w.filename)
    (wheels / "requirements.txt").write_text("".join(w.requirement() + "\n"
                                                     for w in lock.wheels))
    tools = ctx / "pip"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "--dest", str(tools), "pip"], check=True)
    pip_wheel = next(tools.glob("pip-*.whl")).name
    os_layer = warm.blob_path(base.layers[0].descriptor.digest)
    docker("import", str(os_layer), OS_IMAGE)
    # no --target: Debian's interpreter installs into /usr/local (its posix_local scheme),
    # where the lock's site_packages and our base put them
    (ctx / "Dockerfile").write_text(
        f"FROM {OS_IMAGE}\n"
        "COPY wheels /wheels\n"
        "COPY pip /pip\n"
        f"RUN python3 /pip/{pip_wheel}/pip install --no-index --no-deps --require-hashes "
        "--no-compile --break-system-packages --root-user-action=ignore "
        "--disable-pip-version-check --find-links /wheels -r /wheels/requirements.txt\n")
    return pip_wheel.split("-")[1]


def anchor_build(ctx: Path, tag: str, cache: bool) -> tuple[float, str]:
    t0 = time.monotonic()
    docker("build", *([] if cache else ["--no-cache"]), "--force-rm", "--network", "none",
           "--quiet", "-t", tag, str(ctx))
    seconds = time.monotonic() - t0
    return seconds, docker("image", "inspect", "--format", "{{.Id}}", tag)


def main() -> int:
    if os.environ.get("PATCHBAKE_BENCH_SERVING") != "1":
        print("serving base bench skipped: it needs ~35 GB of disk and 20-30 minutes; "
              "set PATCHBAKE_BENCH_SERVING=1 to run it")
        return 0
    if shutil.which("docker") is None:
        print("serving base bench skipped: no docker on PATH")
        return 0
    pipeline = config.load(REPO / "pipeline.yaml")
    lineage = pipeline.lineage(LINEAGE)
    warm = Store.open(Path(os.environ.get("PATCHBAKE_HOME",
                                          Path.home() / ".cache" / "patchbake")))
    print(f"serving base of {LINEAGE}: artifacts into the store first (not timed)", flush=True)
    reference = build_serving_base(warm, lineage, step=say)
    parent = Path(tempfile.mkdtemp(prefix="bench-serving-", dir=warm.root.parent))
    rows: list[dict[str, object]] = []
    try:
        print("ours, cold, twice (fresh stores holding only the artifacts)", flush=True)
        t1, b1 = ours_cold(warm, lineage, parent, "fresh-1")
        t2, b2 = ours_cold(warm, lineage, parent, "fresh-2")
        rows += [{"side": "ours", "run": "cold 1", "seconds": round(t1, 1),
                  "identity": str(b1.manifest.digest)},
                 {"side": "ours", "run": "cold 2", "seconds": round(t2, 1),
                  "identity": str(b2.manifest.digest)}]
        t0 = time.monotonic()
        build_serving_base(warm, lineage)
        rows.append({"side": "ours", "run": "warm (memoised)",
                     "seconds": round(time.monotonic() - t0, 2), "identity": str(reference.manifest.digest)})
        print("anchor: docker build of the equivalent Dockerfile", flush=True)
        ctx = parent / "context"
        pip_version = anchor_context(warm, lineage, reference, ctx)
        docker_cold: list[float] = []
        docker_ids: list[str] = []
        for n in (1, 2):
            seconds, image_id = anchor_build(ctx, f"{ANCHOR_IMAGE}:{n}", cache=False)
            docker_cold.append(seconds)
            docker_ids.append(image_id)
            say(f"docker build --no-cache #{n}: {seconds:.1f}s ({image_id})")
            rows.append({"side": "docker build", "run": f"cold {n}",
                         "seconds": round(seconds, 1), "identity": image_id})
        seconds, image_id = anchor_build(ctx, f"{ANCHOR_IMAGE}:warm", cache=True)
        rows.append({"side": "docker build", "run": "warm (build cache)",
                     "seconds": round(seconds, 2), "identity": image_id})
    finally:
        for tag in (f"{ANCHOR_IMAGE}:1", f"{ANCHOR_IMAGE}:2", f"{ANCHOR_IMAGE}:warm",
                    OS_IMAGE):
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
        # a failed build leaves its last step's image untagged
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True, check=False)
        shutil.rmtree(parent, ignore_errors=True)
    ratio = ((t1 + t2) / 2) / (sum(docker_cold) / 2)
    print("\n| side | run | s | identity |\n|---|---|---:|---|")
    for r in rows:
        print(f"| {r['side']} | {r['run']} | {r['seconds']} | `{r['identity']}` |")
    same_ours = b1.manifest.digest == b2.manifest.digest == reference.manifest.digest
    same_docker = docker_ids[0] == docker_ids[1]
    print(f"\nours / docker build (cold, mean of 2): {ratio:.2f}x the time ({1 / ratio:.2f}x "
          "faster); ours includes the root filesystem (mmdebstrap), docker's FROM is given")
    print(f"same identity twice: ours {same_ours}, docker build {same_docker}")
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "serving_base.json").write_text(json.dumps({
        "lineage": LINEAGE, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "pip": pip_version, "rows": rows, "ratio_cold": round(ratio, 3),
        "same_identity": {"ours": same_ours, "docker build": same_docker}},
        indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
