"""Approvals, hermetic: bound to one release, expiring, counted once per key and owner,
never by the release manager; and every signing command refuses a key without its role
before any effect (exit code, one line, nothing written)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from patchbake import config
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.errors import ConfigError, UsageError
from patchbake.evidence import dsse, keys, policy
from patchbake.release import attest, create, gates, manifest
from release_support import (
    FIGURES,
    Keys,
    cli_repo,
    make_key,
    make_release,
    sign_all,
    sign_approval,
    sign_result,
    suite_result,
    write_policy,
)

DIGEST = "sha256:" + "ab" * 32
IMAGE = "sm89-serving-offline"
NOW = datetime(2026, 12, 10, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Keys]:
    return cli_repo(tmp_path, monkeypatch)


def approval(root: Path, *, at: datetime = NOW, channel: str = "sm89-stable"
             ) -> tuple[str, str]:
    """The approval gate's decision for ``channel``, judged at ``at`` (the injected clock)."""
    p = config.load(root / "pipeline.yaml")
    ev = create.evaluation(p, None, f"{IMAGE}@{DIGEST}")
    ev.clock = lambda: at
    g = next(g for g in p.channels[channel].gates if g.kind == "approval")
    return gates.gate_approval(ev, g)


def signed_inputs(root: Path, k: Keys) -> None:
    """Evidence and figures, no approval."""
    sign_all(root, k, IMAGE, DIGEST)
    for p in (root / "manifests" / "evidence" / DIGEST[7:]).glob("approval-*"):
        p.unlink()


def forge(root: Path, key: Path, predicate: dict[str, Any], digest: str = DIGEST,
          name: str = "approval-sm89-stable-forged.dsse.json") -> Path:
    """An approval signed by ``key`` with exactly ``predicate`` (what an old or hostile
    signer could write)."""
    payload = attest._statement(IMAGE, Digest.parse(digest), attest.APPROVAL_TYPE, predicate)
    path = root / "manifests" / "evidence" / digest[7:] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dsse.sign(payload, keys.load_private(key)).to_json()))
    return path


def good_predicate(root: Path) -> dict[str, Any]:
    p = config.load(root / "pipeline.yaml")
    basis, _ = gates.approval_basis(create.evaluation(p, None, f"{IMAGE}@{DIGEST}"),
                                    "sm89-stable")
    return {"channel": "sm89-stable", "approver": "approver", "note": "", "release":
            basis.dump(), "issued": attest.rfc3339(NOW), "expires":
            attest.rfc3339(NOW + timedelta(days=7))}


# -- what an approval says ------------------------------------------------------------
def test_an_approval_names_the_release_and_expires(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    path = sign_approval(root, k.approver, IMAGE, DIGEST, now=NOW)
    pred = json.loads(dsse.parse(path.read_bytes(), "a").payload)["predicate"]
    assert pred["channel"] == "sm89-stable" and pred["release"]["lineage"] == "v0.25.1"
    named = {i["path"].rsplit("/", 1)[-1] for i in pred["release"]["inputs"]}
    assert named == {"dsv4-topk-gpu.dsse.json", "dsv4-topk-cpu.dsse.json",
                     "benchmark-dsv4-topk-gpu.dsse.json"}
    assert (pred["issued"], pred["expires"]) == ("2026-12-10T12:00:00Z", "2026-12-17T12:00:00Z")
    assert approval(root) == ("pass", "approved by approver")


def test_an_expired_approval_does_not_count(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    sign_approval(root, k.approver, IMAGE, DIGEST, now=NOW, lifetime=timedelta(hours=1))
    assert approval(root, at=NOW + timedelta(minutes=59))[0] == "pass"
    st, reason = approval(root, at=NOW + timedelta(hours=1))
    assert st == "fail" and "0 of 1 signed approval(s)" in reason
    assert "expired at 2026-12-10T13:00:00Z (now 2026-12-10T13:00:00Z)" in reason


def test_an_approval_without_expiry_does_not_count(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    pred = good_predicate(root)
    del pred["expires"]
    forge(root, k.approver, pred)
    st, reason = approval(root)
    assert st == "fail" and "has no expiry" in reason and "never expires" in reason


@pytest.mark.parametrize("issued, expires, message", [
    (NOW, NOW + timedelta(days=3650), "expires 2036-12-07T12:00:00Z, beyond the 30-day cap"),
    (NOW - timedelta(days=40), NOW + timedelta(days=1), "beyond the 30-day cap"),
    (NOW + timedelta(days=2), NOW + timedelta(days=3), "not a lifetime around"),
])
def test_an_approval_beyond_the_cap_or_from_the_future_does_not_count(
        repo: tuple[Path, Keys], issued: datetime, expires: datetime, message: str) -> None:
    root, k = repo
    signed_inputs(root, k)
    forge(root, k.approver, {**good_predicate(root), "issued": attest.rfc3339(issued),
                             "expires": attest.rfc3339(expires)})
    st, reason = approval(root)
    assert st == "fail" and message in reason, reason


def test_signing_refuses_a_lifetime_beyond_the_cap(repo: tuple[Path, Keys],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    signed_inputs(root, k)
    with pytest.raises(UsageError, match="at most 30 days"):
        sign_approval(root, k.approver, IMAGE, DIGEST, lifetime=timedelta(days=31))
    assert main(["release", "approve", "--channel", "sm89-stable", "--image",
                 f"{IMAGE}@{DIGEST}", "--key", str(k.approver), "--expires-in", "31d"]) == 2
    assert main(["release", "approve", "--channel", "sm89-stable", "--image",
                 f"{IMAGE}@{DIGEST}", "--key", str(k.approver), "--expires-in", "soon"]) == 2
    assert "give a number of days" in capsys.readouterr().err
    assert not list((root / "manifests/evidence" / DIGEST[7:]).glob("approval-*"))


# -- bound to one release -------------------------------------------------------------
def test_an_approval_of_another_lineage_does_not_count(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    pred = good_predicate(root)
    forge(root, k.approver, {**pred, "release": {**pred["release"], "lineage": "v0.33.0"}})
    st, reason = approval(root)
    assert st == "fail" and "is for another release: it approves lineage 'v0.33.0', not " \
        "'v0.25.1'" in reason


def test_an_approval_of_other_signed_inputs_does_not_count(repo: tuple[Path, Keys]) -> None:
    """Approved with one set of figures; the figures were re-signed since (another release
    of the same image): the approval is not carried over."""
    root, k = repo
    signed_inputs(root, k)
    sign_approval(root, k.approver, IMAGE, DIGEST, now=NOW)
    bench = root / "manifests/evidence" / DIGEST[7:] / "benchmark-dsv4-topk-gpu.dsse.json"
    bench.unlink()
    attest.sign_benchmark(root / "manifests/evidence", "dsv4-topk-gpu", IMAGE,
                          Digest.parse(DIGEST), {"fused_us[15x512]": {
                              "value": 4.0, "unit": "us", "better": "lower"}},
                          {"gpu": "NVIDIA L40S", "capability": "8.9"}, keys.load_private(k.other))
    st, reason = approval(root)
    assert st == "fail" and "is for another release: it approves manifests/evidence/" in reason
    assert "benchmark-dsv4-topk-gpu.dsse.json sha256" in reason


def test_an_approval_of_another_image_does_not_count(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    other = "sha256:" + "cd" * 32
    path = forge(root, k.approver, good_predicate(root), digest=other)
    path.rename(root / "manifests/evidence" / DIGEST[7:] / path.name)
    st, reason = approval(root)
    assert st == "fail" and "wrong-subject" not in reason and f"about {other}" in reason


def test_an_approval_for_another_channel_does_not_count(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    forge(root, k.approver, {**good_predicate(root), "channel": "validated"})
    st, reason = approval(root)
    assert st == "fail" and "approves channel 'validated', not 'sm89-stable'" in reason


# -- k of n ---------------------------------------------------------------------------
def _two_approvals(root: Path) -> None:
    pipe = yaml.safe_load((root / "pipeline.yaml").read_text())
    pipe["channels"]["sm89-stable"]["approvals"] = 2
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))


def _policy_with(root: Path, k: Keys, **approvers: tuple[Path, str]) -> None:
    write_policy(root, k)
    path = root / "manifests" / "trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    for name, (key, owner) in approvers.items():
        pub = keys.load_private(key).public_key()
        doc["keys"][name] = {"keyid": keys.keyid_of(pub), "public_key": keys.public_pem(pub),
                             "roles": ["approver"], "owner": owner}
    path.write_text(yaml.safe_dump(doc))


def test_one_key_counts_once(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    _two_approvals(root)
    signed_inputs(root, k)
    sign_approval(root, k.approver, IMAGE, DIGEST, now=NOW - timedelta(hours=2))
    sign_approval(root, k.approver, IMAGE, DIGEST, now=NOW - timedelta(hours=1))
    st, reason = approval(root)
    assert st == "fail" and "1 of 2 signed approval(s)" in reason
    assert "counted once" in reason and "is by the same key" in reason


def test_one_owner_counts_once_and_two_people_pass(repo: tuple[Path, Keys],
                                                   tmp_path: Path) -> None:
    root, k = repo
    _two_approvals(root)
    bob, carol = make_key(tmp_path / "bob"), make_key(tmp_path / "carol")
    _policy_with(root, k, bob=(bob, "bob"), bob2=(carol, "bob"))
    signed_inputs(root, k)
    sign_approval(root, bob, IMAGE, DIGEST, now=NOW, name="bob")
    sign_approval(root, carol, IMAGE, DIGEST, now=NOW, name="bob2")
    st, reason = approval(root)
    assert st == "fail" and "1 of 2" in reason and "by the same owner (bob)" in reason
    _policy_with(root, k, bob=(bob, "bob"), carol=(carol, "carol"))
    st, reason = approval(root)
    assert st == "pass" and reason in ("approved by bob, carol", "approved by carol, bob")


# -- separation of duties -------------------------------------------------------------
def _release_key_approves(root: Path, k: Keys, *, separation: bool | None) -> None:
    path = root / "manifests" / "trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["release"]["roles"] = ["release", "approver"]
    if separation is not None:
        doc["separation_of_duties"] = separation
    path.write_text(yaml.safe_dump(doc))


def test_a_key_that_releases_and_approves_is_refused_before_any_effect(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    signed_inputs(root, k)
    _release_key_approves(root, k, separation=None)
    with pytest.raises(ConfigError, match="key 'release' holds both the 'release' and the "
                       "'approver' role: a release manager would approve their own release"):
        policy.load(root / "manifests" / "trust-policy.yaml")
    for argv in (["release", "approve", "--channel", "sm89-stable", "--image",
                  f"{IMAGE}@{DIGEST}", "--key", str(k.release)],
                 ["release", "create", "--channel", "sm89-stable", "--image",
                  f"{IMAGE}@{DIGEST}", "--key", str(k.release)]):
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "approve their own release" in err
    assert not list((root / "manifests/evidence" / DIGEST[7:]).glob("approval-*"))
    assert not manifest.releases_dir(root).exists()


def test_one_owner_holding_both_roles_is_refused(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    path = root / "manifests" / "trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["approver"]["owner"] = "tests"  # the release key's owner
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="owner 'tests' holds 'release' \\(release\\) and "
                       "'approver' both"):
        policy.load(path)


def test_separation_of_duties_can_be_turned_off_deliberately(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    signed_inputs(root, k)
    _release_key_approves(root, k, separation=False)
    assert not policy.load(root / "manifests" / "trust-policy.yaml").separation_of_duties
    sign_approval(root, k.release, IMAGE, DIGEST, now=NOW, name="release")
    assert approval(root) == ("pass", "approved by release")


# -- every signing command checks its key's role first --------------------------------
def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in (root / "manifests").rglob("*") if p.is_file()}


def test_approve_signs_when_the_signed_gates_pass_and_refuses_when_one_does_not(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-gpu", IMAGE, DIGEST,
                                               capability="8.9"))
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-cpu", IMAGE, DIGEST))
    before = _tree(root)
    argv = ["release", "approve", "--channel", "sm89-stable", "--image", f"{IMAGE}@{DIGEST}",
            "--key", str(k.approver)]
    assert main(argv) == 60  # no benchmark figures yet
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "gate benchmark does not pass" in err
    assert _tree(root) == before
    signed_inputs(root, k)
    assert main([*argv, "--expires-in", "36h"]) == 0
    assert approval(root, at=datetime.now(timezone.utc))[0] == "pass"


@pytest.mark.parametrize("command, code", [
    ("evidence sign", 50), ("benchmark", 50), ("approve", 50),
    ("create", 62), ("promote", 62), ("ledger checkpoint", 62),
])
def test_each_signing_command_refuses_a_key_without_its_role_first(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        command: str, code: int) -> None:
    root, k = repo
    rel = make_release(root, k, DIGEST)
    result = tmp_path / "result.json"
    result.write_bytes(suite_result(root, "dsv4-topk-gpu", IMAGE, "sha256:" + "cd" * 32,
                                    capability="8.9").dump())
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps({"figures": {"x": {"value": 1, "unit": "us",
                                                     "better": "lower"}}}))
    image = ["--image", f"{IMAGE}@{DIGEST}"]
    argv, wrong = {
        "evidence sign": (["evidence", "sign", str(result)], k.approver),
        "benchmark": (["release", "benchmark", str(figures), "--name", "other", *image],
                      k.release),
        "approve": (["release", "approve", "--channel", "sm89-stable", *image], k.evidence),
        "create": (["release", "create", "--channel", "sm89-stable", *image], k.approver),
        "promote": (["release", "promote", rel.id, "--to", "127.0.0.1:9/app:v1"], k.approver),
        "ledger checkpoint": (["ledger", "checkpoint"], k.evidence),
    }[command]
    before = _tree(root)
    capsys.readouterr()
    assert main([*argv, "--key", str(wrong)]) == code
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1, captured.err
    assert ("not-allowed" in captured.err or "may not sign" in captured.err
            or "not allowed to sign" in captured.err or "has no 'release' role" in
            captured.err), captured.err
    assert captured.out == ""
    assert _tree(root) == before


@pytest.mark.parametrize("doc, code, says", [
    (["figures"], 2, "is not a JSON object with 'figures' and 'environment'"),
    ({"figures": FIGURES}, 50, "must name the 'gpu' and the compute 'capability'"),
    ({"figures": FIGURES, "environment": ["NVIDIA L40S", "8.9"]}, 50, "must name the 'gpu'"),
    ({"figures": FIGURES, "environment": {"gpu": "NVIDIA H200", "capability": "8.9"}}, 50,
     "is an H200, compute capability 9.0"),
])
def test_release_benchmark_refuses_figures_that_do_not_say_where_they_ran(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        doc: object, code: int, says: str) -> None:
    root, k = repo
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps(doc))
    before = _tree(root)
    capsys.readouterr()
    assert main(["release", "benchmark", str(figures), "--name", "dsv4-topk-gpu", "--image",
                 f"{IMAGE}@{DIGEST}", "--key", str(k.evidence)]) == code
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert _tree(root) == before


# -- owners are people: compared normalised; one key has one entry ---------------------
def test_owners_are_compared_normalised(repo: tuple[Path, Keys], tmp_path: Path) -> None:
    root, k = repo
    _two_approvals(root)
    bob, carol = make_key(tmp_path / "bob"), make_key(tmp_path / "carol")
    _policy_with(root, k, bob=(bob, "Bob"), bob2=(carol, " bob "))
    signed_inputs(root, k)
    sign_approval(root, bob, IMAGE, DIGEST, now=NOW, name="bob")
    sign_approval(root, carol, IMAGE, DIGEST, now=NOW, name="bob2")
    st, reason = approval(root)
    assert st == "fail" and "1 of 2" in reason and "by the same owner (" in reason
    # the release manager under another spelling of their name is still them
    path = root / "manifests" / "trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["approver"]["owner"] = " TESTS "  # the release key's owner is "tests"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="holds 'release' \\(release\\) and 'approver' both"):
        policy.load(path)


def test_two_entries_with_one_keyid_are_refused(repo: tuple[Path, Keys],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """One key listed twice (say once as an evidence signer, once as an approver) would
    hold whichever entry was read last: refused at load, one line, exit 3."""
    root, k = repo
    path = root / "manifests" / "trust-policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["keys"]["approver-too"] = {**doc["keys"]["evidence"], "roles": ["approver"]}
    doc["keys"]["approver-too"].pop("allow")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="'keys.(evidence|approver-too)' has keyid "
                                          "[0-9a-f]{16}\\.\\.\\., which "
                                          "'keys.(approver-too|evidence)' already has"):
        policy.load(path)
    capsys.readouterr()
    assert main(["ledger", "verify"]) == ConfigError.exit_code == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "already has: one key, one entry" in err, err
