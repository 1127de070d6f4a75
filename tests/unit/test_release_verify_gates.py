"""`release verify` and `report` judge a release against its channel as pipeline.yaml
declares it, never against the gates the manifest chose to record: the holder of a release
key re-signs manifests that leave the approval gate out, record it passed with no, a
duplicate or their own approval, or drop a suite's evidence; each is refused with one line
and its exit code. The image record the identity chain comes from is checked too."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.errors import ReleaseError
from patchbake.evidence import keys, policy
from patchbake.fsutil import sha256_bytes
from patchbake.release import attest, bundle, ledger, manifest
from patchbake.release.facts import Approval
from release_support import (
    CHANNELS,
    REPO,
    Keys,
    cli_repo,
    make_key,
    make_release,
    publish,
    sign_approval,
)

DIGEST = "sha256:" + "cd" * 32
IMAGE = "sm89-serving-offline"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Keys]:
    return cli_repo(tmp_path, monkeypatch)


def verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["release", "verify", *argv])
    got = capsys.readouterr()
    return rc, got.out, got.err


def resign(root: Path, k: Keys, rel: manifest.Release, **changes: Any) -> manifest.Release:
    """The release's manifest with ``changes``, signed and recorded with the release key."""
    return publish(root, k.release, dataclasses.replace(rel.manifest, **changes))


def without_approval_gate(rel: manifest.Release) -> dict[str, Any]:
    return {"gates": tuple(g for g in rel.manifest.gates if g.gate != "approval"),
            "approvals": ()}


def _approval_of(root: Path, path: Path) -> Approval:
    a = attest.read_approval(path, Digest.parse(DIGEST),
                             policy.load(root / "manifests/trust-policy.yaml"), "sm89-stable")
    return Approval(path.relative_to(root).as_posix(), a.keyid, a.signer, a.envelope_sha256)


def test_an_honest_release_verifies_against_its_channel(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    capsys.readouterr()
    assert main(["--json", "release", "verify", rel.id]) == 0
    doc = json.loads(capsys.readouterr().out)
    checks = {c["check"]: c["detail"] for c in doc["checks"]}
    assert checks["gates"] == ("8 gates of 'sm89-stable' in pipeline.yaml, each recorded as "
                               "passed; 4 signed one(s) backed by the signed inputs")
    assert doc["gates_checked"] is True and "unchecked" not in doc


@pytest.mark.parametrize("tamper, message", [
    ("no approval gate", "the release records no 'approval' gate (declared in 'sm89-stable'), "
                         "which channel 'sm89-stable' requires in pipeline.yaml"),
    ("no approvals", "the 'approval' gate is recorded as passed, but it records 0 approval(s) "
                     "for 'sm89-stable' by distinct keys and owners; the channel requires 1"),
    ("one approval twice", "are by the same key: the release counts one approver twice"),
    ("two by one key", "are by the same key: the release counts one approver twice"),
    ("no guard gate", "the release records no 'guard' gate (declared in 'candidate')"),
    ("no benchmark", "the 'benchmark' gate is recorded as passed, but it records no signed "
                     "figures of benchmark 'dsv4-topk-gpu'"),
])
def test_a_release_key_holder_cannot_leave_a_gate_out(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str], tamper: str,
        message: str) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    m = rel.manifest
    if tamper == "no approval gate":
        changes = without_approval_gate(rel)
    elif tamper == "no approvals":
        changes = {"approvals": ()}
    elif tamper == "one approval twice":
        changes = {"approvals": m.approvals * 2}
    elif tamper == "two by one key":
        later = sign_approval(root, k.approver, IMAGE, DIGEST,
                              now=attest.utcnow() - timedelta(minutes=2))
        changes = {"approvals": (*m.approvals, _approval_of(root, later))}
    elif tamper == "no guard gate":
        changes = {"gates": tuple(g for g in m.gates if g.gate != "guard")}
    else:  # the approval names the figures: it goes too, the gate (checked first) stays
        changes = {"benchmark": None, "approvals": ()}
    bad = resign(root, k, rel, **changes)
    rc, out, err = verify(capsys, bad.id)
    assert rc == ReleaseError.exit_code == 62, err
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_dropped_suite_is_refused(repo: tuple[Path, Keys],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST, channel="validated")
    bad = resign(root, k, rel, evidence=tuple(e for e in rel.manifest.evidence
                                              if e.suite != "dsv4-topk-cpu"))
    rc, _, err = verify(capsys, bad.id)
    assert rc == 62 and "the 'evidence' gate is recorded as passed, but it records no " \
        "evidence of suite 'dsv4-topk-cpu'" in err, err


def _two_approvers(root: Path, k: Keys, tmp_path: Path, owners: tuple[str, str], *,
                   approvals: int = 2) -> Path:
    """Two approver keys (the fixture's and a second) with ``owners``; the channel needs
    ``approvals``."""
    second = make_key(tmp_path / "second")
    path = root / "manifests/trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["approver"]["owner"] = owners[0]
    pub = keys.load_private(second).public_key()
    doc["keys"]["second"] = {"keyid": keys.keyid_of(pub), "public_key": keys.public_pem(pub),
                             "roles": ["approver"], "owner": owners[1]}
    path.write_text(yaml.safe_dump(doc))
    pipe = yaml.safe_load((root / "pipeline.yaml").read_text())
    pipe["channels"]["sm89-stable"]["approvals"] = approvals
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))
    return second


def test_two_approvals_of_one_owner_count_once_and_k_is_the_pipelines(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    second = _two_approvers(root, k, tmp_path, ("Alice", " alice "), approvals=1)
    rel = make_release(root, k, DIGEST)  # k = 1: one approval is recorded
    other = _approval_of(root, sign_approval(root, second, IMAGE, DIGEST))
    bad = resign(root, k, rel, approvals=(*rel.manifest.approvals, other))
    rc, _, err = verify(capsys, bad.id)
    assert rc == 62 and "are by the same owner (alice)" in err, err
    # the pipeline now asks for two approvals: the honest release of one is refused
    pipe = yaml.safe_load((root / "pipeline.yaml").read_text())
    pipe["channels"]["sm89-stable"]["approvals"] = 2
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))
    rc, _, err = verify(capsys, rel.id)
    assert rc == 62 and "records 1 approval(s) for 'sm89-stable' by distinct keys and " \
        "owners; the channel requires 2" in err, err


def test_a_self_approval_is_refused(repo: tuple[Path, Keys], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The approver is the release manager under another spelling of their name: the policy
    is refused (3); and a release recorded while separation was off is refused by the
    recorded-approvals check once it is on (the release's own signer, a release key)."""
    root, k = repo
    path = root / "manifests/trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["approver"]["owner"] = " Tests"  # the release key's owner is "tests"
    doc["separation_of_duties"] = False
    path.write_text(yaml.safe_dump(doc))
    rel = make_release(root, k, DIGEST)
    rc, _, err = verify(capsys, rel.id)
    assert rc == 0, err  # separation of duties turned off deliberately
    pol = policy.load(path)
    entry = ledger.find(ledger.read(manifest.releases_dir(root)), "release", release=rel.id)[0]
    assert entry.signature is not None
    on = dataclasses.replace(pol, separation_of_duties=True)
    with pytest.raises(ReleaseError, match=r"owner 'Tests' signed the release with 'release': "
                                           r"a release manager approved their own release"):
        bundle.recorded_approvals(root, rel, on, entry.time, (entry.signature.keyid,))
    # an approval by a key that holds the release role
    doc["keys"]["approver"]["roles"] = ["approver", "release"]
    path.write_text(yaml.safe_dump(doc))
    on = dataclasses.replace(policy.load(path), separation_of_duties=True)
    with pytest.raises(ReleaseError, match="holds the 'release' role"):
        bundle.recorded_approvals(root, rel, on, entry.time)
    doc["separation_of_duties"] = True
    path.write_text(yaml.safe_dump(doc))
    rc, _, err = verify(capsys, rel.id)
    assert rc == 3 and "a release manager would approve their own release" in err, err


def test_a_bundle_is_judged_by_the_verifiers_pipeline_or_says_it_was_not(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    bad = resign(root, k, rel, **without_approval_gate(rel))
    out = tmp_path / "bundle"
    assert main(["release", "export", bad.id, "--to", str(out)]) == 0
    assert not (out / "pipeline.yaml").exists()  # a bundle carries no channel configuration
    rc, _, err = verify(capsys, bad.id, "--bundle", str(out))
    assert rc == 62 and "records no 'approval' gate" in err, err
    # outside a repository: the gates cannot be checked, and the verdict says so
    monkeypatch.delenv("PATCHBAKE_PIPELINE")
    monkeypatch.chdir(tmp_path)
    policy_copy = tmp_path / "policy.yaml"
    shutil.copy(root / "manifests/trust-policy.yaml", policy_copy)
    rc, said, err = verify(capsys, bad.id, "--bundle", str(out), "--trust-policy",
                           str(policy_copy))
    assert rc == 0, err
    said = " ".join(said.split())
    assert "NOT checked against the channel: no pipeline.yaml" in said
    assert "VERIFIED: release " in said and "-- its gates NOT checked against the channel" \
        in said
    capsys.readouterr()
    assert main(["--json", "release", "verify", bad.id, "--bundle", str(out),
                 "--trust-policy", str(policy_copy)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gates_checked"] is False and "no pipeline.yaml" in doc["unchecked"]
    # ... and a pipeline named with --pipeline is used
    rc = main(["--pipeline", str(root / "pipeline.yaml"), "release", "verify", bad.id,
               "--bundle", str(out), "--trust-policy", str(policy_copy)])
    assert rc == 62 and "records no 'approval' gate" in capsys.readouterr().err
    # with no pipeline, an approval gate recorded with no approval is still refused
    empty = resign(root, k, rel, approvals=())
    out2 = tmp_path / "bundle2"
    assert main(["--pipeline", str(root / "pipeline.yaml"), "release", "export", empty.id,
                 "--to", str(out2)]) == 0
    rc, _, err = verify(capsys, empty.id, "--bundle", str(out2), "--trust-policy",
                        str(policy_copy))
    assert rc == 62 and "the 'approval' gate as passed with no approval" in err, err


def test_a_release_of_another_pipeline_or_channel_is_not_judged_by_this_one(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    pipe = yaml.safe_load((root / "pipeline.yaml").read_text())
    pipe["channels"] = {c: CHANNELS[c] for c in ("candidate", "validated")}
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))
    rc, _, err = verify(capsys, rel.id)
    assert rc == 62 and "channel 'sm89-stable', which pipeline.yaml does not declare" in err


# Committed releases that today's channels refuse, and why: the first predates the
# cuda-code gate; the offline image's second cannot show the served suite (it has no
# Python to serve with) that 'validated' has required since the serving image's release.
REFUSED_TODAY = {"b3df6796ec1c0ed1": "records no 'cuda-code' gate",
                 "99a5f477ecf8e502": "records no evidence of suite 'dsv4-served-gpu'"}


def test_the_committed_releases_are_judged_against_todays_channels() -> None:
    """Every committed release verifies against today's channels, or is refused for the
    reason REFUSED_TODAY gives; the serving image's releases verify."""
    from patchbake import config

    pipe = config.load(REPO / "pipeline.yaml")
    pol_path = REPO / "manifests/trust-policy.yaml"
    seen = set()
    for e in ledger.find(ledger.read(manifest.releases_dir(REPO)), "release"):
        short = e.release[:16]
        seen.add(short)
        if short in REFUSED_TODAY:
            with pytest.raises(ReleaseError, match=REFUSED_TODAY[short]):
                bundle.verify(REPO, pol_path, e.release, pipeline=pipe)
        else:
            said = dict(bundle.verify(REPO, pol_path, e.release, pipeline=pipe).checks)
            assert "each recorded as passed" in said["gates"]
    assert set(REFUSED_TODAY) <= seen and len(seen) > len(REFUSED_TODAY)


# -- the report -----------------------------------------------------------------------
def test_report_refuses_a_release_without_its_approval_gate(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    bad = resign(root, k, rel, **without_approval_gate(rel))
    capsys.readouterr()
    assert main(["report", bad.id, "--out", str(tmp_path / "page")]) == 64
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "channel gates: the release records no " \
        "'approval' gate" in err, err


def _with_record(root: Path, k: Keys, tmp_path: Path) -> tuple[manifest.Release, Path]:
    """A release of the committed offline image naming its committed record."""
    latest = json.loads((REPO / "manifests/images" / IMAGE / "latest.json").read_text())
    digest = latest["digest"]
    shutil.copytree(REPO / "manifests/images" / IMAGE, root / "manifests/images" / IMAGE)
    rel = make_release(root, k, digest)
    name = f"manifests/images/{IMAGE}/{digest[7:]}.json"
    img = dataclasses.replace(rel.manifest.images[0], definition=IMAGE, record=name,
                              record_sha256=sha256_bytes((root / name).read_bytes()))
    return resign(root, k, rel, images=(img,)), root / name


@pytest.mark.parametrize("edit", ["intact", "edited", "not json"])
def test_report_shows_the_identity_chain_only_from_the_recorded_image_record(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: str) -> None:
    root, k = repo
    rel, record = _with_record(root, k, tmp_path)
    if edit == "edited":
        doc = json.loads(record.read_text())
        doc["patched_tree_digest"] = "sha256:" + "00" * 32
        record.write_text(json.dumps(doc))
    elif edit == "not json":
        record.write_text("{not json")
    out = tmp_path / "page"
    capsys.readouterr()
    rc = main(["report", rel.id, "--out", str(out)])
    err = capsys.readouterr().err
    page = (out / "index.html").read_text()
    if edit == "intact":
        assert rc == 0, err
        assert 'id="chain"' in page and "patched tree digest" in page
        assert "chain-broken" not in page
        return
    assert rc == 64 and len(err.splitlines()) == 1, err
    assert f"image record: the image record manifests/images/{IMAGE}/" in err
    assert "is not the one recorded" in err and "Traceback" not in err
    assert 'id="chain-broken"' in page and 'id="chain"' not in page
    assert "00" * 32 not in page
    if edit == "not json":
        assert "not an image record" in err
