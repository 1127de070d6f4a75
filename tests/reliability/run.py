"""`make reliability`: the long reliability trials, and docs/RELIABILITY.md.

    PYTHONPATH=tools python3 tests/reliability/run.py [--trials 100] [--seed 11]
        [--registry 127.0.0.1:5000] [--out docs/RELIABILITY.md] [--quick]

1. the hostile-input corpus (corpus.py), each case as a real process;
2. the fault proxy (faultproxy.py) in front of the real registry: push and pull under
   5xx, 429 + Retry-After, resets, truncation (with and without a lying Content-Length),
   stalls, a dripped body, silence after a 10 GiB promise, a wrong Docker-Content-Digest,
   flipped bytes, 401, redirects;
3. seeded kill -9 / SIGTERM trials over fetch, export, bake, run, push and evidence sign;
4. 4-way concurrency on one store and one registry;
5. SIGTERM / SIGINT at a seeded instant while the CLI is still importing;
6. a fetch in another PID namespace while `store gc` loops on the same store.

Bounded: loopback only, every process under a timeout, the world a few hundred files.
Exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "tools")]
import corpus
import faultproxy as fp
import world as W

REPO = HERE.parents[1]
FAST_NET = {"PATCHBAKE_BACKOFF_S": "0.05", "PATCHBAKE_MAX_BACKOFF_S": "0.2",
            "PATCHBAKE_MAX_RETRY_AFTER_S": "2", "PATCHBAKE_READ_TIMEOUT_S": "2",
            "PATCHBAKE_CONNECT_TIMEOUT_S": "2", "PATCHBAKE_DEADLINE_S": "60"}


@dataclass
class Section:
    rows: list[list[str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def one_error_line(err: str) -> bool:
    """One error line last on stderr: `patchbake: error: ...`, or under --json one JSON
    document with an "error" object."""
    lines = [ln for ln in err.splitlines() if ln.startswith("patchbake: error")
             or (ln.startswith("{") and '"error"' in ln)]
    return "Traceback" not in err and len(lines) == 1 and err.rstrip().endswith(lines[0])


def fsck(home: Path, repo: Path | None = None) -> dict[str, Any]:
    args = ["store", "fsck", "--json"] + (["--repo", str(repo)] if repo else [])
    cp = W.cli(repo or home, home, *args, check=False)
    try:
        return dict(json.loads(cp.stdout))
    except ValueError:
        return {"clean": False, "error": cp.stderr.strip()}


# -- 1. corpus ---------------------------------------------------------------------------
def run_corpus(tmp: Path) -> Section:
    sec = Section()
    by_area: Counter[str] = Counter()
    for i, c in enumerate(corpus.CASES):
        root = tmp / f"case{i}"
        root.mkdir(parents=True)
        home = root / "store"
        os.environ["PATCHBAKE_HOME"] = str(home)
        try:
            args = c.build(root)
        finally:
            os.environ.pop("PATCHBAKE_HOME", None)
        e = W.env(home, PATCHBAKE_PIPELINE=str(root / "repo" / "pipeline.yaml"), **c.env)
        before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                        if not p.is_relative_to(home))
        cp = subprocess.run(W.argv(*args), cwd=root / "repo", env=e, capture_output=True,
                            text=True, timeout=300, check=False)
        after = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                       if not p.is_relative_to(home))
        problems = []
        if cp.returncode != c.code:
            problems.append(f"exit {cp.returncode}")
        if c.code and not one_error_line(cp.stderr):
            problems.append("not one clean line")
        if c.code and c.match and c.match not in cp.stderr:
            problems.append("message")
        if before != after:
            problems.append("wrote outside the store")
        if home.is_dir() and not fsck(home).get("clean"):
            problems.append("store not clean")
        by_area[c.area] += 1
        msg = cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else ""
        sec.rows.append([c.area, c.name, str(c.code), str(cp.returncode),
                         "ok" if not problems else "FAIL: " + ", ".join(problems),
                         msg.removeprefix("patchbake: error: ")[:90]])
        if problems:
            sec.failures.append(f"corpus {c.name}: {', '.join(problems)}: {cp.stderr[-300:]}")
        shutil.rmtree(root, ignore_errors=True)
    sec.figures = {"cases": len(corpus.CASES), "by_area": dict(by_area),
                   "failed": len(sec.failures)}
    return sec


# -- 2. fault proxy ------------------------------------------------------------------------
PUSH_FAULTS = [
    ("503 twice on upload start", [fp.Rule("POST", r"/blobs/uploads/$", "status:503", 2)], 0),
    ("429 + Retry-After on the manifest PUT", [fp.Rule("PUT", r"/manifests/sha256", "status:429:1", 1)], 0),
    ("connection reset answering a blob PUT", [fp.Rule("PUT", r"/blobs/uploads/.*digest=", "reset", 1)], 0),
    ("stall past the read timeout on HEAD", [fp.Rule("HEAD", r"/blobs/", "stall:5", 1)], 0),
    ("500 on every upload start", [fp.Rule("POST", r"/blobs/uploads/$", "status:500", -1)], 31),
    ("401 with a plain-http token realm off loopback",
     [fp.Rule("*", r"/v2/", '401:Bearer realm="http://registry.test/token",service="r"', -1)], 31),
]
PULL_FAULTS = [
    ("reset mid-body on blob GET, twice", [fp.Rule("GET", r"/blobs/sha256", "reset", 2)], 0),
    ("truncated under the full Content-Length, twice", [fp.Rule("GET", r"/blobs/sha256", "truncate", 2)], 0),
    ("short body, consistent lying Content-Length, twice", [fp.Rule("GET", r"/blobs/sha256", "short", 2)], 0),
    ("short body every time", [fp.Rule("GET", r"/blobs/sha256", "short", -1)], 31),
    ("truncated manifest once", [fp.Rule("GET", r"/manifests/", "truncate", 1)], 0),
    ("stall past the read timeout on the manifest", [fp.Rule("GET", r"/manifests/", "stall:5", 1)], 0),
    ("stall on every request (deadline 6 s)", [fp.Rule("*", r"/", "stall:30", -1)], 16),
    ("429 + Retry-After three times", [fp.Rule("GET", r"/manifests/", "status:429:1", 3)], 0),
    ("wrong Docker-Content-Digest on everything", [fp.Rule("*", r"/", "digest", -1)], 0),
    ("a flipped byte in a blob", [fp.Rule("GET", r"/blobs/sha256", "flip", -1)], 31),
    ("503 on every request", [fp.Rule("*", r"/", "status:503", -1)], 31),
    ("401 without a challenge", [fp.Rule("*", r"/", "401:", -1)], 31),
    ("redirect to user-info URL", [fp.Rule("GET", r"/blobs/sha256", "redirect:http://[::1]@registry.test/x", -1)], 31),
    ("redirect to plain http off loopback", [fp.Rule("GET", r"/blobs/sha256", "redirect:http://registry.test/x", -1)], 31),
    ("blob dripped at 2 bytes/s, every time", [fp.Rule("GET", r"/blobs/sha256", "drip:2", -1)], 31),
    ("10 GiB promised on a blob GET, then silence", [fp.Rule("GET", r"/blobs/sha256", f"silence:{10 << 30}", -1)], 31),
]


def _budget(blobs: int) -> int:
    from patchbake.limits import Limits

    lm = Limits()
    return lm.requests_base + lm.requests_per_blob * blobs


def run_faults(w: W.World, registry: str, tmp: Path, digest: str) -> Section:
    sec = Section()
    manifest = json.loads((w.home / "blobs" / "sha256" / digest[7:]).read_bytes())
    blobs = len(manifest["layers"]) + 1
    src = f"faults/src-{os.getpid()}"
    W.cli(w.repo, w.home, "push", digest, f"{registry}/{src}:1")
    scen = [("push", n, r, code) for n, r, code in PUSH_FAULTS] + \
           [("pull", n, r, code) for n, r, code in PULL_FAULTS]
    for i, (op, name, rules, want) in enumerate(scen):
        proxy = fp.Proxy(registry, [fp.Rule(r.method, r.path, r.fault, r.times) for r in rules])
        extra = dict(FAST_NET)
        if "deadline 6" in name:
            extra["PATCHBAKE_DEADLINE_S"] = "6"
        home = tmp / f"pull{i}"
        t0 = time.monotonic()
        with fp.Running(proxy) as px:
            if op == "push":
                ref = f"{px.host}/faults/p{os.getpid()}-{i}:1"
                cp = W.cli(w.repo, w.home, "--json", "push", digest, ref, check=False,
                           extra_env=extra, timeout=300)
            else:
                ref = f"{px.host}/{src}:1"
                cp = W.cli(w.repo, home, "--json", "pull", ref, check=False, extra_env=extra,
                           timeout=300)
        wall = time.monotonic() - t0
        problems = []
        budget = _budget(blobs + 1)
        if cp.returncode != want:
            problems.append(f"exit {cp.returncode}")
        if proxy.requests > budget:
            problems.append(f"{proxy.requests} requests > budget {budget}")
        if cp.returncode == 0:
            got = json.loads(cp.stdout)
            if got["digest"] != digest:
                problems.append("other digest")
        elif not one_error_line(cp.stderr):
            problems.append("not one clean line")
        if op == "pull" and home.is_dir() and not fsck(home).get("clean"):
            problems.append("store not clean")
        line = cp.stderr.strip().splitlines()[-1] if cp.returncode and cp.stderr.strip() else "verified"
        sec.rows.append([op, name, str(want), str(cp.returncode), str(proxy.requests),
                         str(proxy.faults), f"{wall:.1f}", "ok" if not problems else
                         "FAIL: " + ", ".join(problems), line.removeprefix("patchbake: error: ")[:80]])
        if problems:
            sec.failures.append(f"fault {op} {name}: {', '.join(problems)}: {cp.stderr[-300:]}")
        shutil.rmtree(home, ignore_errors=True)
    sec.figures = {"scenarios": len(scen), "failed": len(sec.failures),
                   "max_requests": max(int(r[4]) for r in sec.rows),
                   "budget": _budget(blobs + 1)}
    return sec


# -- 3. crash trials -----------------------------------------------------------------------
OPS = ["fetch", "export", "bake", "run", "push", "sign"]
RUN_ID = f"{os.getpid()}-{int(time.time())}"
LITTER = re.compile(r"^\..*\.\d+\.[a-z0-9_]+\.tmp$|\.staging\.")


def _uncache(w: W.World, op: str) -> None:
    """Make the next ``op`` do its work again (drop the caches that would short-cut it)."""
    store = w.home
    if op in ("fetch", "run"):
        for rec in (store / "sources").glob("*.json"):
            doc = json.loads(rec.read_bytes())
            if doc.get("upstream_version") == W.VERSION or doc.get("package") == "vllm":
                tree = store / "trees" / str(doc.get("tree_digest", "")).removeprefix("sha256:")
                rec.unlink()
                shutil.rmtree(tree, ignore_errors=True)
    if op in ("bake", "run"):
        for rec in (store / "bakes").glob("*.json"):
            rec.unlink()
    if op == "run":
        for rec in (store / "patched").glob("*.json"):
            key = rec.stem
            rec.unlink()
            shutil.rmtree(store / "trees" / key, ignore_errors=True)
    if op == "sign":
        for ev in (w.repo / "manifests" / "evidence").rglob("*.dsse.json"):
            ev.unlink()


def _op_argv(w: W.World, op: str, registry: str, n: int) -> list[str]:
    return {"fetch": ["--json", "fetch"],
            "export": ["--json", "patch", "export", "--from", str(w.workspace)],
            "bake": ["--json", "bake", "offline"],
            "run": ["--json", "run"],
            # a namespace per run: tags never move, and another run's world bakes another digest
            "push": ["--json", "push", "offline",
                     f"{registry}/faults/trial-{RUN_ID}-{n % 7}:t{n % 7}"],
            "sign": ["--json", "evidence", "sign", str(w.top / "result.json")]}[op]


def _digest_of(w: W.World, op: str, out: str) -> str:
    if op == "fetch":
        return str(json.loads(out)["tree_digest"])
    if op in ("bake", "push"):
        return str(json.loads(out)["digest"])
    if op == "run":
        return str(json.loads(out)["identity"].get("manifest_digest", ""))
    if op == "export":
        return hashlib.sha256((w.repo / "patch" / f"trial-v{W.VERSION}.patch").read_bytes()).hexdigest()
    ev = next((w.repo / "manifests" / "evidence").rglob("*.dsse.json"))
    return hashlib.sha256(ev.read_bytes()).hexdigest()


def _litter(w: W.World) -> list[str]:
    out = []
    for base in (w.repo, w.workspace, w.top):
        for p in base.rglob("*"):
            if ".git" in p.parts or p.is_relative_to(w.home):
                continue
            if LITTER.search(p.name):
                out.append(str(p.relative_to(w.top)))
    return sorted(set(out))


def run_trials(w: W.World, registry: str, trials: int, seed: int) -> Section:
    sec = Section()
    rng = random.Random(seed)
    durations: dict[str, float] = {}
    for op in OPS:  # reference duration (and digest) of each op doing its full work
        _uncache(w, op)
        t0 = time.monotonic()
        cp = subprocess.run(W.argv(*_op_argv(w, op, registry, 0)), cwd=w.repo, env=W.env(w.home),
                            capture_output=True, text=True, timeout=600, check=False)
        durations[op] = time.monotonic() - t0
        if cp.returncode:
            sec.failures.append(f"reference {op} failed: {cp.stderr[-300:]}")
            continue
        w.ref[op] = _digest_of(w, op, cp.stdout)
    stats: Counter[str] = Counter()
    for n in range(trials):
        op = OPS[n % len(OPS)]
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
        delay = rng.uniform(0.05, max(0.1, durations.get(op, 1.0)) * 1.1)
        _uncache(w, op)
        proc = subprocess.Popen(W.argv(*_op_argv(w, op, registry, n)), cwd=w.repo,
                                env=W.env(w.home), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(delay)
        finished_first = proc.poll() is not None
        if not finished_first:
            proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        rc = proc.returncode
        problems = []
        after_kill = fsck(w.home, w.repo)
        if after_kill.get("bad_blobs") or after_kill.get("bad_trees") or after_kill.get("stray"):
            problems.append("damaged objects after the kill")
        term_litter = len(after_kill.get("litter", [])) if sig == signal.SIGTERM and not finished_first else 0
        if term_litter:
            problems.append(f"SIGTERM left {term_litter} litter entries")
        if sig == signal.SIGTERM and not finished_first and "Traceback" in (err or ""):
            problems.append("traceback on SIGTERM")
        again = subprocess.run(W.argv(*_op_argv(w, op, registry, n)), cwd=w.repo,
                               env=W.env(w.home), capture_output=True, text=True, timeout=600,
                               check=False)
        if again.returncode:
            problems.append(f"next run exit {again.returncode}: {again.stderr.strip()[-200:]}")
        elif _digest_of(w, op, again.stdout) != w.ref.get(op):
            problems.append("digest differs from the reference")
        final = fsck(w.home, w.repo)
        if not final.get("clean"):
            problems.append(f"store not clean after the next run: {final.get('litter')}")
        left = _litter(w)
        if left:
            problems.append(f"litter outside the store after the next run: {left[:3]}")
        stats[f"{op}:{'finished' if finished_first else sig.name}"] += 1
        stats["litter_after_kill"] += len(after_kill.get("litter", []))
        sec.rows.append([str(n), op, "-" if finished_first else sig.name, f"{delay:.2f}",
                         str(rc), str(len(after_kill.get("litter", []))),
                         "ok" if not problems else "FAIL: " + "; ".join(problems)])
        if problems:
            sec.failures.append(f"trial {n} {op} {sig.name} at {delay:.2f}s: {'; '.join(problems)}")
    sec.figures = {"trials": trials, "seed": seed, "failed": len(sec.failures),
                   "durations_s": {k: round(v, 2) for k, v in durations.items()},
                   "outcomes": dict(stats)}
    return sec


# -- 4. concurrency ------------------------------------------------------------------------
def run_concurrency(w: W.World, registry: str) -> Section:
    sec = Section()
    for op in ("fetch", "bake", "push"):
        _uncache(w, op)

        def one(i: int, op: str = op) -> subprocess.CompletedProcess[str]:
            return subprocess.run(W.argv(*_op_argv(w, op, registry, 1000)), cwd=w.repo,
                                  env=W.env(w.home), capture_output=True, text=True,
                                  timeout=600, check=False)

        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(one, range(4)))
        digests = {(_digest_of(w, op, r.stdout) if r.returncode == 0 else f"exit {r.returncode}")
                   for r in results}
        lock_errors = sum("lock" in r.stderr.lower() for r in results)
        ok = len(digests) == 1 and digests == {w.ref.get(op)} and not lock_errors
        sec.rows.append([op, "4", ", ".join(sorted(d[:19] for d in digests)), str(lock_errors),
                         "ok" if ok else "FAIL"])
        if not ok:
            sec.failures.append(f"concurrency {op}: {digests} {[r.stderr[-200:] for r in results]}")
    final = fsck(w.home, w.repo)
    sec.figures = {"store_clean_after": bool(final.get("clean"))}
    if not final.get("clean"):
        sec.failures.append("store not clean after the concurrent runs")
    return sec


# -- 5. signals at any instant ----------------------------------------------------------------
def run_signals(w: W.World, seed: int, trials: int = 24) -> Section:
    """SIGTERM / SIGINT at a seeded instant in the first 300 ms of `store fsck` (the CLI
    still importing, or running): 143 / 130 with one line, or the command's own result;
    death by the signal only if it landed before the interpreter ran any code of ours."""
    sec = Section()
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    # started in the background (nohup, `&`), this process may ignore SIGINT, and so would
    # its children: give them the default a person's terminal gives
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for n in range(trials):
        sig = rng.choice([signal.SIGTERM, signal.SIGINT])
        after = rng.uniform(0.0, 0.3)
        proc = subprocess.Popen(W.argv("store", "fsck", "--no-trees"), cwd=w.repo,
                                env=W.env(w.home), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(after)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        rc = proc.returncode
        want = 143 if sig == signal.SIGTERM else 130
        # the interpreter's start-up (and runpy finding the package) is not ours: a signal
        # there ends the process by the signal, or as runpy reports it, with no frame of ours
        before_ours = rc in (-sig, 1) and "tools/patchbake/" not in err
        problems = []
        if not before_ours and "Traceback" in err:
            problems.append("traceback")
        if rc == want and not one_error_line(err):
            problems.append("not one clean line")
        if rc not in (0, want) and not before_ours:
            problems.append(f"exit {rc}")
        outcomes["landed before our code" if before_ours and rc else
                 {0: "finished first", want: f"{want} with one line"}.get(rc, f"exit {rc}")] += 1
        sec.rows.append([str(n), signal.Signals(sig).name, f"{after:.3f}", str(rc),
                         "ok" if not problems else "FAIL: " + ", ".join(problems)])
        if problems:
            sec.failures.append(f"signal {n} {signal.Signals(sig).name} at {after:.3f} s: "
                                f"{', '.join(problems)}: {err[-300:]}")
    sec.figures = {"trials": trials, "failed": len(sec.failures), "outcomes": dict(outcomes)}
    return sec


# -- 6. one store, two PID namespaces --------------------------------------------------------
def run_namespaces(w: W.World, trials: int = 3) -> Section:
    """A `fetch` in another PID namespace (`unshare --pid --fork`) while this one runs
    `store gc` over and over on the same store (it sweeps staging nobody holds): the fetch's tree must be the
    reference tree, and the store clean afterwards."""
    sec = Section()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        sec.figures = {"trials": 0, "failed": 0, "skipped": "needs root and unshare"}
        return sec
    for n in range(trials):
        _uncache(w, "fetch")
        inner = subprocess.Popen(["unshare", "--pid", "--fork", *W.argv("--json", "fetch")],
                                 cwd=w.repo, env=W.env(w.home), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        sweeps = 0
        while inner.poll() is None:
            W.cli(w.repo, w.home, "store", "gc", check=False)  # sweeps staging
            sweeps += 1
        out, err = inner.communicate(timeout=600)
        problems = []
        got = _digest_of(w, "fetch", out) if inner.returncode == 0 else f"exit {inner.returncode}"
        if got != w.ref["fetch"]:
            problems.append(f"tree {got[:19]}, reference {w.ref['fetch'][:19]}")
        verify = W.cli(w.repo, w.home, "fetch", "--verify", check=False)
        if verify.returncode:
            problems.append(f"fetch --verify exit {verify.returncode}")
        if not fsck(w.home, w.repo).get("clean"):
            problems.append("store not clean")
        sec.rows.append([str(n), str(sweeps), got[:19], "ok" if not problems else
                         "FAIL: " + ", ".join(problems)])
        if problems:
            sec.failures.append(f"namespaces {n}: {', '.join(problems)}: {err[-300:]}")
    sec.figures = {"trials": trials, "failed": len(sec.failures)}
    return sec


# -- report --------------------------------------------------------------------------------
def table(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *["| " + " | ".join(r) + " |" for r in esc]])


def write_report(out: Path, cmd: str, secs: dict[str, Section], seconds: float) -> None:
    c, f, t, k = secs["corpus"], secs["faults"], secs["trials"], secs["concurrency"]
    sg, ns = secs["signals"], secs["namespaces"]
    tf = t.figures
    text = f"""# Reliability

What `make reliability` checks, and its latest figures. Produced by

    {cmd}

in {seconds:.0f} s on this repository's CI machine kind (2 cores, loopback registry).
The fast part (the corpus, in-process, and the disk-full tests) also runs in `make test`
as `tests/reliability/test_corpus.py` and `tests/reliability/test_diskfull.py`.

## Summary

| part | what | result |
|---|---|---|
| hostile inputs | {c.figures['cases']} cases over {', '.join(f'{a} ({n})' for a, n in sorted(c.figures['by_area'].items()))} | {c.figures['cases'] - c.figures['failed']}/{c.figures['cases']} refused (or accepted) as expected, one clean line, nothing written outside the store, `store fsck` clean |
| fault proxy | {f.figures['scenarios']} push/pull scenarios against the real registry | {f.figures['scenarios'] - f.figures['failed']}/{f.figures['scenarios']} as expected; at most {f.figures['max_requests']} requests for one operation (budget {f.figures['budget']}) |
| crash trials | {tf['trials']} seeded kill -9 / SIGTERM trials (seed {tf['seed']}) over {', '.join(OPS)} | {tf['trials'] - tf['failed']}/{tf['trials']} with no damaged object, no litter after the next run, the reference digest |
| concurrency | 4 processes at once on one store and one registry (fetch, bake, push) | {len(k.rows) - len([r for r in k.rows if r[-1] != 'ok'])}/{len(k.rows)} identical digests, no lock errors; store clean after: {k.figures['store_clean_after']} |
| signals | {sg.figures['trials']} seeded SIGTERM / SIGINT trials in a command's first 300 ms (the CLI importing) | {sg.figures['trials'] - sg.figures['failed']}/{sg.figures['trials']} as expected; outcomes {json.dumps(sg.figures['outcomes'], sort_keys=True)} |
| PID namespaces | {ns.figures['trials']} `fetch` runs under `unshare --pid --fork` while `store gc` loops outside on the same store | {ns.figures['trials'] - ns.figures['failed']}/{ns.figures['trials']} with the reference tree, `fetch --verify` passing, the store clean{(' (' + ns.figures['skipped'] + ')') if ns.figures.get('skipped') else ''} |

`release promote` is not among the crash trials (it needs a signed release of the world);
its journal is tested in tests/unit/test_release_ledger.py, `release create`'s in
tests/unit/test_release_journal.py.

## Limits (each with its own error, and an environment override)

| cap | default | override | error |
|---|---|---|---|
| unpacked size of a source archive | 2 GiB | `PATCHBAKE_EXTRACT_TOTAL_BYTES` | ArchiveLimitError (14) |
| members in a source archive | 100,000 | `PATCHBAKE_EXTRACT_MEMBERS` | ArchiveLimitError (14) |
| one member's size | 512 MiB | `PATCHBAKE_EXTRACT_MEMBER_BYTES` | ArchiveLimitError (14) |
| one path component | 255 bytes | `PATCHBAKE_NAME_BYTES` | ArchiveLimitError (14) |
| one member path | 1,024 bytes | `PATCHBAKE_PATH_BYTES` | ArchiveLimitError (14) |
| a YAML file | 1 MiB | `PATCHBAKE_YAML_BYTES` | InputLimitError (15) |
| YAML nesting | 64 | `PATCHBAKE_YAML_DEPTH` | InputLimitError (15) |
| connect / read timeout per request (one socket read) | 10 s / 15 s | `PATCHBAKE_CONNECT_TIMEOUT_S`, `PATCHBAKE_READ_TIMEOUT_S` | retried, then 31 / 10 |
| minimum transfer rate of a body, over each read timeout's span | 1,024 bytes/s | `PATCHBAKE_MIN_RATE_BPS` | retried, then 31 / 10 |
| attempts per step, backoff | 5; 0.5 s doubling, capped at 8 s | `PATCHBAKE_ATTEMPTS`, `PATCHBAKE_BACKOFF_S`, `PATCHBAKE_MAX_BACKOFF_S` | 31 (registry), 10 (fetch) |
| Retry-After honoured up to | 30 s | `PATCHBAKE_MAX_RETRY_AFTER_S` | — |
| deadline per operation (push, pull, fetch) | 900 s | `PATCHBAKE_DEADLINE_S` | DeadlineError (16) |
| requests per operation | 40 + 12 per blob | `PATCHBAKE_REQUESTS_BASE`, `PATCHBAKE_REQUESTS_PER_BLOB` | DeadlineError (16) |

A body (a download, a blob) is read one socket read at a time whatever its size, so
the deadline is checked between reads and a peer dripping bytes under the minimum rate ends its attempt after one read timeout's
span; a peer that promises a body and goes silent ends it after one read
timeout, and one that drips its headers (each read answered in time, the headers never
ending) is cut off once one read timeout has passed since it was asked, as a whole
(`netpolicy`'s connections shut the socket down). By default a server that never answers is given up after about 82 s (5 tries
of 15 s, plus backoff), which `--help` of `fetch`, `push` and `pull` says; the deadline
bounds a transfer that keeps moving. Whatever ends a transfer, its `tmp/blob.*` is
removed (tests/integration/test_fetch_slow_peers.py, the drip and silence faults of
tests/reliability/test_faultproxy.py).

The overrides are environment variables only: the caps guard the reading of pipeline.yaml
itself, so they cannot live in it. One retry policy (`tools/patchbake/netpolicy.py`)
serves both the source download and the registry client; nested retry loops share one
budget and never multiply (the outer loop restarts the step with a fresh upload session).

## Store maintenance

`patchbake store fsck [--quarantine] [--no-trees] [--json]` re-hashes every blob and every
tree a record names, checks that every object a name reaches is there (index.json
parses; each image it names has its manifest, config and every layer, base layers
included: `tools/patchbake/storereach.py`), and lists crash litter (staging entries no
writer holds), stray files in `blobs/sha256/` (names that are no digest), idle lock
files and objects nothing names; exit 11 on a mismatch or a missing object, 13 on litter
or strays (`store gc` removes both).
`patchbake store gc [--dry-run] [--grace S]` removes litter, strays, idle locks and unreferenced
blobs and trees older than the grace period (1 h). Anything whose sha256 appears in the
store's records (index.json, sources/, patched/, bakes/, registry/) or the repository's
(pipeline.yaml, patch/, images/, manifests/: image records, evidence, releases, ledger),
or inside a JSON blob so named, is kept. Every command sweeps the litter of dead writers
when it opens the store; SIGTERM unwinds like Ctrl-C (exit 143), and one that lands
while a staging directory is being removed on the way out lets the removal finish first
(`staging.discard`). The handler is the first
instruction of `patchbake.entry.main`, and the rest of the program is imported after it,
so a SIGTERM or Ctrl-C that lands while the CLI is still loading also exits 143 or 130
with one line; one that lands after the command's result was written is ignored (the
exit code is the command's). Only a signal during the interpreter's own start-up, before
any code of ours runs, still ends the process by the signal (tests/reliability/test_signals.py). Outside the store, the
scratch directories that `patch check`'s re-export and `patch export`'s diff make on
`/dev/shm` (`patchbake-reexport.*`, `patchbake-export.*`: tens of megabytes of memory
for a large patch) and git's empty HOME in the temporary directory
(`patchbake-git-home.*`, one per process, removed as the process ends) are held with a
lock on their `.held` file while in use (`tools/patchbake/scratch.py`). Making the next
one removes this user's directories of the same kind whose lock nobody holds and that
have not changed for 10 minutes (a process killed with SIGKILL; on a file system whose
locks are not shared between hosts, such as NFS with local locks, those 10 minutes are
all that keeps a running owner's directory), and those that never got a lock file after
an hour; `.held` is opened without following links or waiting,
and the removal follows no symbolic link.

## A store shared between containers and hosts

A writer holds each of its staging entries (`tmp/blob.*`, `tmp/<what>.*/`, a half-written
`.<name>.*.tmp` record) with `flock` on the entry itself until it is renamed into place
or removed (`tools/patchbake/staging.py`); a sweep or `store gc` removes an entry only
after taking that lock itself, and removes it while holding it. Process ids are never
consulted (the number in a staging name is a hint for a person): they mean nothing
across PID namespaces. A tree is recorded only with its digest computed again from the
bytes at its final place in `trees/`.

A read-only store serves what needs no write: `pull` of an image it already holds under
that name compares the manifest with the stored bytes and writes nothing (exit 0), and
a command that must write says so as a store error (13), never as a verdict: `release
gates` on a read-only store is exit 13, not "blocked" (60), since no gate could be judged.

| where the store is shared | supported | why |
|---|---|---|
| processes on one host, any PID namespaces (containers bind-mounting one store) | yes | one kernel holds every `flock`; tests/integration/test_store_namespaces.py runs a writer under `unshare --pid --fork` |
| hosts over NFSv4 (or v3 with a lock manager) whose client maps `flock` to byte-range locks (Linux >= 2.6.12, the default `local_lock=none`) | yes | the server sees each host's locks |
| hosts over NFS mounted `local_lock=flock`/`all` or `nolock`, or another file system whose locks stay on one host | no | each host sees only its own writers: a sweep on one host can remove another host's live staging; give each host its own store (`PATCHBAKE_HOME`) |

## Hostile inputs

{table(['area', 'case', 'expected', 'got', 'check', 'message'], c.rows)}

## Named inputs and error messages

Every file a user, the repository or a bundle names (pipeline.yaml, image definitions,
suite results, JUnit reports, evidence envelopes and statements, the trust policy and
keys, the patch, FILES.txt, SOURCE, the series, image records and the latest-bake
pointer, OCI layouts' `index.json`, docker-archive tars, the ledger, release manifests and
VSAs, the release and promotion journals, a release's files on export, benchmark figures,
a local index page, a Dockerfile template) is read through
`fsutil.read_input` / `open_input`: the file is opened without blocking (`O_NONBLOCK`, so a
FIFO in its place never waits for a writer), and what was opened is checked on its
descriptor to be a regular file. A FIFO, socket, device or directory is refused at once,
in one line naming the path and what it is, with the reader's own exit code (3 for
configuration, 21 for the guard's inputs, 50 `unreadable` for evidence, 61 for the ledger,
62 for a release); a file over the input cap is exit 15. Lock files (the store's
`locks/*.lock`, the ledger's `.lock`) are opened the same way and refused unless regular
(13, 61); `store fsck` and `gc` skip a FIFO in the store or the repository rather than
wait on it (one under a digest's name is a bad blob). `tests/unit/test_inputs_safe.py`,
`tests/unit/test_inputs_fifo_readers.py` and the corpus hold it.

A value from an input that an error message prints goes through `errors.shown()`, a
`reprlib` representation bounded while it is built (depth, items, string length), so a
YAML alias bomb or a megabyte-long member name is cut short instead of expanded: the
`upstream.pins` bomb is refused in under a tenth of a second with a message of a few
hundred characters.

## Fault proxy

{table(['op', 'fault', 'expected', 'got', 'requests', 'faults', 'seconds', 'check', 'outcome'], f.rows)}

## Crash trials

Reference durations (s): {json.dumps(tf['durations_s'])}. Outcomes: {json.dumps(tf['outcomes'], sort_keys=True)}.
A trial starts the operation, kills it after a random delay within its reference
duration (SIGKILL or SIGTERM, seeded), runs `store fsck`, runs the operation again to
completion, compares its digest with the reference and runs `store fsck` again.

{table(['#', 'op', 'signal', 'after s', 'exit', 'litter after kill', 'check'], t.rows)}

## Concurrency

{table(['op', 'processes', 'digests', 'lock errors', 'check'], k.rows)}

## Signals at any instant

An exit by the signal itself (-15, -2; or runpy's report, exit 1, with no frame of ours)
is allowed only for a signal that landed before the interpreter ran any code of ours; a
traceback through our code, or 143/130 without its one line, fails.

{table(['#', 'signal', 'after s', 'exit', 'check'], sg.rows)}

## One store, two PID namespaces

{table(['#', 'gc runs meanwhile', 'tree', 'check'], ns.rows)}
"""
    if any(s.failures for s in secs.values()):
        text += "\n## Failures\n\n" + "\n".join(f"- {x}" for s in secs.values()
                                                for x in s.failures) + "\n"
    out.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--registry", default="127.0.0.1:5000")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "RELIABILITY.md")
    ap.add_argument("--skip", default="", help="comma list of corpus,faults,trials,"
                    "concurrency,signals,namespaces")
    a = ap.parse_args()
    skip = set(a.skip.split(",")) - {""}
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="patchbake-reliability."))
    secs: dict[str, Section] = {}
    try:
        secs["corpus"] = run_corpus(tmp / "corpus") if "corpus" not in skip else Section(
            figures={"cases": 0, "by_area": {}, "failed": 0})
        print(f"corpus: {secs['corpus'].figures}", flush=True)
        w = W.build(tmp / "world")
        digest = w.ref["bake"]
        secs["faults"] = run_faults(w, a.registry, tmp / "faults", digest) \
            if "faults" not in skip else Section(figures={"scenarios": 0, "failed": 0,
                                                          "max_requests": 0, "budget": 0})
        print(f"faults: {secs['faults'].figures}", flush=True)
        secs["trials"] = run_trials(w, a.registry, a.trials, a.seed) \
            if "trials" not in skip else Section(figures={"trials": 0, "seed": a.seed,
                                                          "failed": 0, "durations_s": {},
                                                          "outcomes": {}})
        print(f"trials: {secs['trials'].figures}", flush=True)
        secs["concurrency"] = run_concurrency(w, a.registry) \
            if "concurrency" not in skip else Section(figures={"store_clean_after": True})
        print(f"concurrency: {secs['concurrency'].rows}", flush=True)
        secs["signals"] = run_signals(w, a.seed) if "signals" not in skip else Section(
            figures={"trials": 0, "failed": 0, "outcomes": {}})
        print(f"signals: {secs['signals'].figures}", flush=True)
        secs["namespaces"] = run_namespaces(w) if "namespaces" not in skip else Section(
            figures={"trials": 0, "failed": 0})
        print(f"namespaces: {secs['namespaces'].figures}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cmd = "PYTHONPATH=tools python3 tests/reliability/run.py " + " ".join(sys.argv[1:])
    write_report(a.out, cmd.strip(), secs, time.monotonic() - t0)
    failures = [x for s in secs.values() for x in s.failures]
    for x in failures:
        print("FAIL", x, file=sys.stderr)
    print(f"wrote {a.out}; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
