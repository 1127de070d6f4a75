#!/usr/bin/env python3
"""`patchbake port` 0.25.1 -> 0.33.0 on the real sdists, against `git apply --3way`.

Two patches: the repository's payload (patch/ of the v0.25.1 lineage) and the seed-scale
synthetic patch of bench_patch.py (70 files, made the same way in this run). For each,
in one run, median of RUNS after a warm-up, alternating:

  end to end   `patchbake port --to 0.33.0 --workspace W` (CLI process: both pins from
               the store, per-hunk verdicts, workspace at the new pristine tree with its
               pristine commit, result written, report kept) vs the same job done with
               git: `cp -a` of the 0.33.0 tree, `git init` + `add -A` + `commit`,
               `hash-object -w` of the 0.25.1 pre-images (what --3way needs), then
               `git apply --3way` of the same patch
  verdicts     compute_port() in-process (exact matching + one merge per unmatched hunk;
               no workspace) vs `git apply --3way` alone in that prepared repository

git's outcome is recorded beside ours: it applies atomically, so a patch with a vanished
target is refused as a whole (exit 1, nothing applied), and it gives no per-hunk report.
Prints a table; writes bench/out/port.json. Both sdists come from the store (PATCHBAKE_HOME
or the user cache dir), fetched through the configured index if absent.
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
sys.path.insert(0, str(HERE))

from bench_patch import synth_edits  # noqa: E402
from patchbake import config  # noqa: E402
from patchbake.patchset.diffparse import parse_patch  # noqa: E402
from patchbake.patchset.export import export  # noqa: E402
from patchbake.port.replay import compute_port  # noqa: E402
from patchbake.patchset.workspace import create_workspace  # noqa: E402
from patchbake.sources import fetch  # noqa: E402
from patchbake.store import Store  # noqa: E402

RUNS = int(os.environ.get("BENCH_PORT_RUNS", "3"))
SHA_OLD = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"
SHA_NEW = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
PIPELINE = f"""\
version: 1
name: bench-port
lineages:
  v0.25.1:
    name: {{name}}
    upstream: {{{{kind: index, package: vllm, version: 0.25.1, filename: vllm-0.25.1.tar.gz,
               sha256: {SHA_OLD}, strip: vllm-0.25.1}}}}
    patch: patch/{{name}}-v0.25.1.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
  v0.33.0:
    name: {{name}}
    upstream: {{{{kind: index, package: vllm, version: 0.33.0, filename: vllm-0.33.0.tar.gz,
               sha256: {SHA_NEW}, strip: vllm-0.33.0}}}}
    patch: patch/v0.33.0/{{name}}-v0.33.0.patch
    files: patch/v0.33.0/FILES.txt
    source_record: patch/v0.33.0/SOURCE
    series: patch/v0.33.0/series
"""
# no automatic gc: a detached `git gc` would race the clean-up of the throw-away repositories
GIT_ENV = {**os.environ, "PATCHBAKE_NO_PROGRESS": "1", "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": "gc.auto", "GIT_CONFIG_VALUE_0": "0",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@localhost"}


def sh(argv: list[str], cwd: Path | None = None, check: bool = True) -> int:
    return subprocess.run(argv, cwd=cwd, check=check, env=GIT_ENV, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


def median_alternating(a: Callable[[], object], b: Callable[[], object]) -> tuple[float, float]:
    a()
    b()
    sa, sb = [], []
    for _ in range(RUNS):
        for fn, out in ((a, sa), (b, sb)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(sa), statistics.median(sb)


def make_repo(work: Path, name: str, patch: bytes, files: bytes | None,
              tag: str = "") -> Path:
    repo = work / f"repo-{name}{tag}"
    (repo / "patch").mkdir(parents=True)
    (repo / "pipeline.yaml").write_text(PIPELINE.format(name=name))
    (repo / "patch" / f"{name}-v0.25.1.patch").write_bytes(patch)
    if files is not None:
        (repo / "patch" / "FILES.txt").write_bytes(files)
    return repo


def synthetic_patch(work: Path, store: Store) -> tuple[bytes, bytes]:
    repo = make_repo(work, "bench-seed", b"", None, "-make")
    (repo / "patch" / "bench-seed-v0.25.1.patch").unlink()
    lin = config.load(repo / "pipeline.yaml").lineage("v0.25.1")
    ws = work / "seed-ws"
    create_workspace(lin, store, ws)
    synth_edits(ws)
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "-qm", "bench"], ws)
    export(lin, store, str(ws))
    shutil.rmtree(ws, ignore_errors=True)
    return lin.patch.read_bytes(), lin.files.read_bytes()


def git_3way_repo(dest: Path, new_root: Path, old_root: Path, patch_path: Path) -> None:
    sh(["cp", "-a", str(new_root), str(dest)])
    sh(["git", "init", "-q", str(dest)])
    sh(["git", "add", "-A", "-f", "."], dest)
    sh(["git", "commit", "-qm", "0.33.0"], dest)
    pre = [str(old_root / f.path) for f in parse_patch(patch_path.read_bytes()).files
           if f.status != "A" and (old_root / f.path).is_file()]
    if pre:
        sh(["git", "hash-object", "-w", "--", *pre], dest)


def bench_one(work: Path, store: Store, name: str, patch: bytes,
              files: bytes | None) -> dict[str, object]:
    repo = make_repo(work, name, patch, files)
    pipe = config.load(repo / "pipeline.yaml")
    old, new = pipe.lineage("v0.25.1"), pipe.lineage("v0.33.0")
    old_root, new_root = fetch(old, store).root, fetch(new, store).root
    cli = [sys.executable, "-m", "patchbake", "--pipeline", str(repo / "pipeline.yaml")]
    n = [0]
    rcs: dict[str, int] = {}

    def ours() -> None:
        n[0] += 1
        w = work / f"ws-{name}-{n[0]}"
        rcs["ours"] = sh([*cli, "port", "--to", "0.33.0", "--workspace", str(w)], check=False)
        shutil.rmtree(w, ignore_errors=True)

    def theirs() -> None:
        n[0] += 1
        d = work / f"git-{name}-{n[0]}"
        git_3way_repo(d, new_root, old_root, old.patch)
        rcs["git"] = sh(["git", "apply", "--3way", str(old.patch)], d, check=False)
        shutil.rmtree(d, ignore_errors=True)

    e2e_ours, e2e_git = median_alternating(ours, theirs)
    prepared = work / f"git-{name}-prepared"
    git_3way_repo(prepared, new_root, old_root, old.patch)
    lp = parse_patch(old.patch.read_bytes())
    labels = ("ours", "base", "theirs")
    verdicts: dict[str, int] = {}

    def ours_lib() -> None:
        results = compute_port(lp, old_root, new_root, store.root / "tmp", labels)
        verdicts.clear()
        for r in results:
            for h in r.rows:
                verdicts[h.verdict] = verdicts.get(h.verdict, 0) + 1

    def git_only() -> None:
        rcs["git_only"] = sh(["git", "apply", "--3way", str(old.patch)], prepared, check=False)
        conflicted = subprocess.run(["git", "diff", "--name-only", "--diff-filter=U"],
                                    cwd=prepared, capture_output=True, text=True).stdout
        rcs["git_conflicted_files"] = len(conflicted.split())
        sh(["git", "reset", "-q", "--hard"], prepared)
        sh(["git", "clean", "-fdq"], prepared)

    lib_ours, lib_git = median_alternating(ours_lib, git_only)
    shutil.rmtree(prepared, ignore_errors=True)
    print(f"{name}: end to end {e2e_ours:.3f}s vs {e2e_git:.3f}s; verdicts {lib_ours:.3f}s vs "
          f"{lib_git:.3f}s; {verdicts}; {rcs}", flush=True)
    return {"patch": name, "files": len(lp.files), "added": lp.added, "removed": lp.removed,
            "hunks": sum(verdicts.values()), "verdicts": verdicts,
            "end_to_end": {"ours_s": round(e2e_ours, 3), "git_s": round(e2e_git, 3),
                           "ratio": round(e2e_ours / e2e_git, 2)},
            "verdicts_only": {"ours_s": round(lib_ours, 3), "git_s": round(lib_git, 3),
                              "ratio": round(lib_ours / lib_git, 2)},
            "exit": {"port": rcs.get("ours"), "git_apply_3way": rcs.get("git_only"),
                     "git_conflicted_files": rcs.get("git_conflicted_files")}}


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-port."))
    os.environ["PATCHBAKE_NO_PROGRESS"] = "1"
    try:
        store = Store.open()
        payload = (REPO / "patch" / "dsv4-deterministic-topk-v0.25.1.patch").read_bytes()
        payload_files = (REPO / "patch" / "FILES.txt").read_bytes()
        only = os.environ.get("BENCH_PORT_ONLY", "")  # payload | bench-seed (one of them)
        rows = []
        if only in ("", "payload"):
            rows.append(bench_one(work, store, "payload", payload, payload_files))
        if only in ("", "bench-seed"):
            seed, seed_files = synthetic_patch(work, store)
            rows.append(bench_one(work, store, "bench-seed", seed, seed_files))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"port 0.25.1 -> 0.33.0, median of {RUNS}")
    print(f"{'patch':11} {'files':>5} {'hunks':>5}  {'step':12} {'ours s':>8} "
          f"{'git --3way s':>12} {'ratio':>6}  verdicts / git exit")
    for r in rows:
        for step in ("end_to_end", "verdicts_only"):
            s = r[step]
            assert isinstance(s, dict)
            print(f"{r['patch']:11} {r['files']:5} {r['hunks']:5}  {step:12} "
                  f"{s['ours_s']:8.3f} {s['git_s']:12.3f} {s['ratio']:6.2f}  "
                  f"{r['verdicts']} / {r['exit']}")
    (HERE / "out").mkdir(exist_ok=True)
    out = HERE / "out" / ("port.json" if not only else f"port-{only}.json")
    out.write_text(json.dumps({
        "runs": RUNS, "machine": {"python": platform.python_version(),
                                  "cpus": os.cpu_count(), "platform": platform.platform(),
                                  "git": subprocess.run(["git", "--version"],
                                                        capture_output=True,
                                                        text=True).stdout.strip()},
        "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
