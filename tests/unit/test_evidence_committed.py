"""Every committed evidence envelope verifies with the committed trust policy alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.evidence import policy, records

REPO = Path(__file__).resolve().parents[2]
FILES = sorted((REPO / "manifests" / "evidence").glob("*/*.dsse.json"))


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name[:12]}/{p.name}" for p in FILES])
def test_committed_evidence_verifies(path: Path) -> None:
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    suite = path.name.removesuffix(records.SUFFIX)
    v = records.verify_file(path, f"sha256:{path.parent.name}", pol, suite)
    assert v.signer in {t.name for t in pol.keys.values()}
    env = v.statement.environment
    if v.statement.predicate["suiteDeclaration"]["requires"]["gpu"]:
        # GPU evidence names the GPU it ran on (sm90 evidence is never passed off as sm89)
        assert env["gpu_name"] and env["compute_capability"] and env["driver"]
        assert env["torch"] and env["triton"] and env["cuda"]


def test_there_is_committed_evidence() -> None:
    assert FILES, "manifests/evidence/ holds no evidence"


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name[:12]}/{p.name}" for p in FILES])
def test_committed_evidence_is_about_a_recorded_bake(path: Path) -> None:
    # evidence whose image has no committed record is orphaned: nothing says what it baked
    from patchbake.suites.image import find_record

    rec = find_record(REPO, f"sha256:{path.parent.name}")
    assert rec is not None, f"no manifests/images/*/{path.parent.name}.json"
    assert rec.manifest_digest == f"sha256:{path.parent.name}"
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    v = records.verify_file(path, rec.manifest_digest, pol)
    assert v.statement.subject_name == rec.definition
