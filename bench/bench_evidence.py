#!/usr/bin/env python3
"""Evidence and runner overheads: Ed25519 DSSE sign/verify per envelope, and what the host
runner adds around a suite (probe, materialise, JUnit) against the same pytest run bare.

Prints a table; writes bench/out/evidence.json. CPU only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from patchbake.digest import Digest
from patchbake.evidence import keys, policy, records
from patchbake import config
from patchbake.config import suites
from patchbake.suites.host import HostRunner
from patchbake.suites.image import SuiteImage
from patchbake.suites.run import run_suite
from patchbake.store import Store

SUITES = REPO / "tests" / "fixtures" / "suites"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))


def median_ms(fn, rounds: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> int:
    import yaml
    from fixtures_toy_image import define_toy, toy_image  # the tests' real tiny image

    sys.path.insert(0, str(REPO / "tests" / "unit"))
    from test_evidence_sign_verify import SUBJECT, make_result, write_policy

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        k = keys.generate(t / "k")
        key = keys.load_private(k.private_path)
        pol = policy.load(write_policy(t / "p.yaml", k.public_path, k.keyid))
        n = [0]
        base = make_result()

        def sign() -> None:
            n[0] += 1
            records.sign_result(dataclasses.replace(base, duration_s=float(n[0])), key,
                                t / f"ev{n[0]}")

        rows.append(("sign one result (statement + DSSE + write)", median_ms(sign, 50)))
        path, _, _ = records.sign_result(make_result(), key, t / "ev")
        rows.append(("verify one envelope (policy, sig, subject, shape)",
                     median_ms(lambda: records.verify_file(path, SUBJECT, pol), 50)))

        store = Store.open(t / "store")
        digest, cfg = toy_image(store, SUITES / "trees" / "patched")
        ref = SuiteImage("toy", Digest.parse(digest), Digest.parse(cfg))
        raw = {"path": str(SUITES / "passing"), "command": [
            "{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
            "python_files=check_*.py", "--junitxml={junit}", str(SUITES / "passing")]}
        suite = suites.parse_suite("toy", raw, REPO)
        # the host runner takes where the image installs vllm from a definition and a
        # record naming it (never from the image's own labels), as the tests give it
        doc: dict[str, object] = {"version": 1, "name": "bench", "lineages": {"v1": {
            "name": "x", "patch": "p", "files": "f", "source_record": "s",
            "upstream": {"kind": "path", "version": "1",
                         "path": str(SUITES / "trees" / "pristine")}}}}
        define_toy(t, doc, digest, cfg)
        (t / "pipeline.yaml").write_text(yaml.safe_dump(doc))
        runner = HostRunner(REPO, store, pipeline=config.load(t / "pipeline.yaml"))
        runner.environment(suite, ref)  # probe once, as one CLI run does
        env = {**os.environ, "PATCHBAKE_TREE": str(SUITES / "trees" / "patched")}
        bare = median_ms(lambda: subprocess.run(
            [sys.executable, *raw["command"][1:-2], f"--junitxml={t}/j.xml",
             str(SUITES / "passing")], cwd=REPO, env=env, check=True, capture_output=True),
            ROUNDS)
        ours = median_ms(lambda: run_suite(suite, ref, runner), ROUNDS)
        rows.append(("toy suite: bare pytest with JUnit", bare))
        rows.append(("toy suite: host runner (materialise + run + parse)", ours))
        rows.append(("host runner overhead", ours - bare))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  median ms")
    for name, ms in rows:
        print(f"{name:<{width}}  {ms:9.2f}")
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "evidence.json").write_text(json.dumps(
        {"rounds": ROUNDS, "python": sys.version.split()[0],
         "rows": [{"measure": a, "median_ms": round(b, 3)} for a, b in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
