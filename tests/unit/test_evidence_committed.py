"""Every committed evidence envelope verifies with the committed trust policy alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.evidence import policy, records

REPO = Path(__file__).resolve().parents[2]
FILES = sorted((REPO / "manifests" / "evidence").glob("*/*.dsse.json"))


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
    found = sorted((REPO / "manifests" / "evidence" / digest).glob("*.dsse.json"))
    assert found, f"the latest bake of {latest.parent.name} has no evidence"
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    for path in found:
        v = records.verify_file(path, Digest.from_hex(digest), pol,
                                path.name.removesuffix(records.SUFFIX))
        suite_dir = REPO / v.statement.suite_path
        assert v.statement.content_sha256 == suite_content_sha256(suite_dir), \
            f"{path.relative_to(REPO)}: the suite's files changed since it ran"
