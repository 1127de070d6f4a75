"""Every committed evidence envelope verifies with the committed trust policy alone."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.evidence import policy, records
from patchbake.evidence.statement import PREDICATE_TYPE
from patchbake.release import attest, imageattest

REPO = Path(__file__).resolve().parents[2]
ALL = sorted((REPO / "manifests" / "evidence").glob("*/*.dsse.json"))


def _predicate_type(path: Path) -> str:
    payload = base64.b64decode(json.loads(path.read_bytes())["payload"])
    return str(json.loads(payload)["predicateType"])


# suite evidence; benchmark figures; the image's SBOM and provenance a release signs
FILES = [p for p in ALL if _predicate_type(p) == PREDICATE_TYPE]
BENCHMARKS = [p for p in ALL if _predicate_type(p) == attest.BENCHMARK_TYPE]
ATTESTATIONS = [p for p in ALL if p not in FILES and p not in BENCHMARKS]


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name[:12]}/{p.name}" for p in FILES])
def test_committed_evidence_verifies(path: Path) -> None:
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    suite = path.name.removesuffix(records.SUFFIX)
    v = records.verify_file(path, Digest.from_hex(path.parent.name), pol, suite)
    assert v.signer in {t.name for t in pol.keys.values()}
    env = v.statement.environment
    if v.statement.needs_gpu:
        # GPU evidence names the GPU it ran on (sm90 evidence is never passed off as sm89)
        assert env["gpu_name"] and env["compute_capability"] and env["driver"]
        assert env["torch"] and env["triton"] and env["cuda"]


def test_there_is_committed_evidence() -> None:
    assert FILES, "manifests/evidence/ holds no evidence"


@pytest.mark.parametrize("path", ATTESTATIONS,
                         ids=[f"{p.parent.name[:12]}/{p.name}" for p in ATTESTATIONS])
def test_committed_sbom_and_provenance_verify(path: Path) -> None:
    """Every other envelope is an SBOM or a provenance: signed by a release key, about the
    image its directory names, and checked as its kind."""
    kinds = {t: k for k, t in imageattest.PREDICATES.items()}
    kind = kinds[_predicate_type(path)]
    assert path.name.startswith(f"{kind}-")
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    keyid, stmt, items = imageattest.open_statement(
        path.read_bytes(), kind, Digest.from_hex(path.parent.name), pol, str(path))
    assert items > 0 and "release" in pol.keys[keyid].roles
    assert stmt.subject_digest == Digest.from_hex(path.parent.name)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name[:12]}/{p.name}" for p in FILES])
def test_committed_evidence_is_about_a_recorded_bake(path: Path) -> None:
    # evidence whose image has no committed record is orphaned: nothing says what it baked
    from patchbake.suites.image import find_record

    rec = find_record(REPO, Digest.from_hex(path.parent.name))
    assert rec is not None, f"no manifests/images/*/{path.parent.name}.json"
    assert rec.manifest_digest == Digest.from_hex(path.parent.name)
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    v = records.verify_file(path, rec.manifest_digest, pol)
    assert v.statement.subject_name == rec.definition


LATEST = sorted((REPO / "manifests" / "images").glob("*/latest.json"))


@pytest.mark.parametrize("latest", LATEST, ids=[p.parent.name for p in LATEST])
def test_latest_bakes_evidence_ran_the_committed_suites(latest: Path) -> None:
    """The gates take evidence only for the suite as committed: a change to a suite's files
    (even a lint fix) must come with new evidence, never leave the latest bake without any."""
    import json

    from patchbake.suites.run import suite_content_sha256

    digest = json.loads(latest.read_text())["digest"].removeprefix("sha256:")
    found = [p for p in FILES if p.parent.name == digest]
    assert found, f"the latest bake of {latest.parent.name} has no suite evidence"
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    for path in found:
        v = records.verify_file(path, Digest.from_hex(digest), pol,
                                path.name.removesuffix(records.SUFFIX))
        suite_dir = REPO / v.statement.suite_path
        assert v.statement.content_sha256 == suite_content_sha256(suite_dir), \
            f"{path.relative_to(REPO)}: the suite's files changed since it ran"


@pytest.mark.parametrize("path", BENCHMARKS,
                         ids=[f"{p.parent.name[:12]}/{p.name}" for p in BENCHMARKS])
def test_committed_benchmark_figures_verify_and_name_the_patched_module(path: Path) -> None:
    """Signed benchmark figures verify for the image their directory names, with a key the
    policy allows that benchmark, and were measured on the module the patch makes."""
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    name = path.name.removeprefix("benchmark-").removesuffix(".dsse.json")
    signed = attest.verify_benchmark(path, Digest.from_hex(path.parent.name), pol, name)
    env = signed.predicate["environment"]
    assert env["module_is_patch_post_image"] is True
    files = (REPO / "patch" / "FILES.txt").read_text().split()
    assert env["module_sha256"] in files
    assert env["gpu"] and env["capability"] and env["torch"] and env["triton"]
    # the figures are those of a committed raw run (manifests/gpu/<run>/figures.json)
    raw = [json.loads(f.read_text()) for f in (REPO / "manifests" / "gpu").glob("*/figures.json")]
    assert any(r["figures"] == signed.predicate["figures"] and r["environment"] == env
               for r in raw)
