"""A release-ready repository for tests: the committed pipeline pieces, a trust policy of
throwaway keys (release, evidence, approver), and signed statements made from suite
results written here (the gates are under test, not the suites: the CPU suite's real run
is in tests/integration/test_release_path.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from patchbake.digest import Digest
from patchbake import config
from patchbake.evidence import keys, policy, records, statement
from patchbake.fsutil import atomic_write
from patchbake.suites.result import RESULT_FORMAT, SuiteResult
from patchbake.release import attest, create, gates, ledger, manifest, tlog, vsa
from patchbake.release.facts import Attestation
from patchbake.config import suites as spec
from patchbake.suites.run import suite_content_sha256

REPO = Path(__file__).resolve().parents[2]
SUITE_DIR = "tests/gpu_suites/dsv4_topk"
IMAGE = "sm89-serving-offline"

CHANNELS = {
    "candidate": {"gates": ["guard", "record", "verify", "reproducible"]},
    "validated": {"gates": ["evidence"], "suites": ["dsv4-topk-gpu", "dsv4-topk-cpu"]},
    "sm89-stable": {"gates": ["capability", "benchmark", "approval"], "capability": "8.9",
                    "benchmark": {"name": "dsv4-topk-gpu", "tolerance": 0.10}},
}


@dataclass
class Keys:
    release: Path
    evidence: Path
    approver: Path
    other: Path  # trusted for evidence too (re-signing with it changes the envelope)
    outsider: Path  # in no policy


def make_key(where: Path) -> Path:
    return keys.generate(where).private_path


def _entry(path: Path, **extra: Any) -> dict[str, Any]:
    pub = keys.load_private(path).public_key()
    return {"keyid": keys.keyid_of(pub), "public_key": keys.public_pem(pub), **extra}


def write_policy(root: Path, k: Keys, *, drop: str | None = None) -> Path:
    grants = [{"predicate_type": statement.PREDICATE_TYPE, "suites": ["dsv4-topk-*"]},
              {"predicate_type": attest.BENCHMARK_TYPE, "suites": ["*"]}]
    entries = {"release": _entry(k.release, roles=["release"], owner="tests"),
               "evidence": _entry(k.evidence, allow=grants),
               "other": _entry(k.other, allow=grants),
               "approver": _entry(k.approver, roles=["approver"], channels=["sm89-stable"])}
    if drop:
        entries.pop(drop)
    path = root / "manifests" / "trust-policy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 2, "keys": entries}))
    return path


def make_repo(root: Path, key_dir: Path, channels: dict[str, Any] | None = None) -> Keys:
    """pipeline.yaml (the repository's lineage, offline image and suites, ``channels``),
    patch/, images/, the suite's directory, a throwaway trust policy."""
    for rel in ("patch", "images", SUITE_DIR):
        shutil.copytree(REPO / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    pipe = yaml.safe_load((REPO / "pipeline.yaml").read_text())
    pipe["channels"] = channels if channels is not None else CHANNELS
    pipe["images"] = {"sm89-serving-offline": "images/sm89-serving-offline.yaml"}
    pipe["signing"] = {"trust_policy": "manifests/trust-policy.yaml",
                       "evidence_dir": "manifests/evidence"}
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))
    k = Keys(*(make_key(key_dir / n) for n in ("release", "evidence", "approver", "other",
                                               "outsider")))
    write_policy(root, k)
    return k


def cli_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Keys]:
    """``make_repo`` in ``tmp_path``, made the repository and store the CLI acts on
    (``patchbake.entry.main([...])`` in the same process)."""
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    return root, k


def suite_result(root: Path, suite: str, image: str, digest: str, *,
                 capability: str | None = None, passed: int | None = None,
                 sensitivity: str = "ok", determinism: str = "ok",
                 environment: dict[str, Any] | None = None) -> SuiteResult:
    pipe = yaml.safe_load((root / "pipeline.yaml").read_text())
    s = spec.get(spec.parse_all(pipe["suites"], root), suite)
    n = passed if passed is not None else s.requires.min_tests + 2
    tests = [f"test_x::test_{i}" for i in range(n)]
    gpu = capability is not None
    return SuiteResult.from_json({
        "format": RESULT_FORMAT, "result": "PASSED", "problems": [],
        "image": {"name": image, "digest": digest, "config_digest": None},
        "suite": {**s.declaration(), "content_sha256": suite_content_sha256(s.path)},
        "passed_tests": tests, "failed_tests": [], "skipped_tests": [],
        "counts": {"tests": n, "passed": n, "failed": 0, "skipped": 0, "errors": 0},
        "environment": {"compute_capability": capability,
                        "gpu_name": "NVIDIA L40S" if capability == "8.9" else
                        ("NVIDIA H200" if gpu else None), "cuda_available": gpu,
                        **(environment or {})},
        "runner": s.runner,
        "probes": {"patch_sensitivity": {"status": sensitivity, "failed": n, "tests": n},
                   "determinism": {"status": determinism, "repeats": s.repeats,
                                   "digests": 4, "differences": []}},
        "started_at": "2026-12-01T00:00:00Z", "duration_s": 1.0, "junit_sha256": "0" * 64,
        "steps": [],
    }, "the test's suite result")


def sign_result(root: Path, key: Path, result: SuiteResult) -> Path:
    return records.sign_result(result, keys.load_private(key), root / "manifests" / "evidence")[0]


FIGURES = {"fused_us[15x512]": {"value": 4.83, "unit": "us", "better": "lower"},
           "speedup[15x512]": {"value": 26.2, "unit": "x", "better": "higher"}}


def sign_all(root: Path, k: Keys, image: str, digest: str, *,
             capability: str = "8.9") -> None:
    """Evidence for both suites, the benchmark figures and an approval for sm89-stable."""
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-gpu", image, digest,
                                               capability=capability))
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-cpu", image, digest))
    ev = root / "manifests" / "evidence"
    attest.sign_benchmark(ev, "dsv4-topk-gpu", image, Digest.parse(digest), FIGURES,
                          {"gpu": "NVIDIA L40S" if capability == "8.9" else "NVIDIA H200",
                           "capability": capability},
                          keys.load_private(k.evidence))
    sign_approval(root, k.approver, image, digest)


def sign_approval(root: Path, key: Path, image: str, digest: str, *, channel: str = "sm89-stable",
                  now: datetime | None = None, lifetime: timedelta = attest.LIFETIME,
                  name: str = "approver") -> Path:
    """An approval of the release the channel's signed gates describe now (their inputs)."""
    p = config.load(root / "pipeline.yaml")
    basis, _ = gates.approval_basis(create.evaluation(p, None, f"{image}@{digest}"), channel)
    return attest.sign_approval(root / "manifests" / "evidence", channel, image,
                                Digest.parse(digest), name, "tests", keys.load_private(key),
                                basis, now=now, lifetime=lifetime)


def make_release(root: Path, k: Keys, digest: str, channel: str = "sm89-stable",
                 capability: str = "8.9",
                 attestations: tuple[Attestation, ...] = ()) -> manifest.Release:
    """A release whose signed gates are evaluated (the store-bound ones are integration tests:
    recorded here as passed), recording ``attestations`` (release/imageattest.py) as its SBOM and provenance."""
    sign_all(root, k, IMAGE, digest, capability=capability)
    p = config.load(root / "pipeline.yaml")
    ev = create.evaluation(p, None, f"{IMAGE}@{digest}")
    decisions = []
    for g in p.channels[channel].gates:
        if g.kind in ("evidence", "capability", "benchmark", "approval"):
            st, reason = gates.GATES[g.kind](ev, g)
        else:  # recorded as a release would (release verify requires every gate recorded)
            st, reason = "pass", "not evaluated here: the store-bound gates are integration tests"
        decisions.append(gates.Decision(g.declared_in, g.kind, st, reason))
    table = gates.Table(channel, IMAGE, Digest.parse(digest), decisions)
    assert table.passed, table.decisions
    data = manifest.build(table, ev.facts, p.name, "v0.25.1",
                          (root / "manifests/trust-policy.yaml").read_bytes(), attestations)
    rel = publish(root, k.release, data)
    assert rel.image == IMAGE and str(rel.digest) == digest
    return rel


def publish(root: Path, key_path: Path, data: manifest.Manifest) -> manifest.Release:
    """Write ``data`` as a release signed by ``key_path`` (its VSA, a ledger entry, a new
    checkpoint): what the holder of a release key can do with any manifest."""
    rel, _ = manifest.write(root, data)
    key = keys.load_private(key_path)
    atomic_write(rel.path.parent / manifest.VSA_NAME, vsa.sign(rel, key))
    rdir = manifest.releases_dir(root)
    entries = ledger.read(rdir)
    entry = ledger.make_entry(entries, "release", rel, key)
    ledger.append(rdir, entry)
    tlog.publish(rdir, [*entries, entry], tlog.origin_of(data.pipeline), key,
                 policy.load(root / "manifests" / "trust-policy.yaml"))
    return rel
