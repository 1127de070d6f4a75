"""Release manifest, VSA, ledger and offline bundle, hermetic: a release made from signed
inputs verifies; each kind of tampering breaks it with its own message and exit code."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from patchbake import config
from patchbake.entry import main
from patchbake.errors import LedgerError, ReleaseError
from patchbake.evidence import dsse, keys, policy
from patchbake.fsutil import canonical_json
from patchbake.release import bundle, checkpoint, create, ledger, manifest, recheck, tlog, vsa
from patchbake.release.referrers import Attached
from release_support import FIGURES, Keys, make_release, make_repo, publish, write_policy

DIGEST = "sha256:" + "ab" * 32
IMAGE = "sm89-serving-offline"
ATTACHED = Attached("referrers", (), None, None)


@pytest.fixture
def released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[Path, Keys, manifest.Release]:
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    rel = make_release(root, k, DIGEST)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    return root, k, rel


def pol(root: Path) -> policy.Policy:
    return policy.load(root / "manifests" / "trust-policy.yaml")


def rdir(root: Path) -> Path:
    return manifest.releases_dir(root)


def test_release_manifest_is_canonical_and_its_hash_is_its_id(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    root, _, rel = released
    again = manifest.load(root, rel.id)
    assert again.manifest == rel.manifest and str(again.digest) == DIGEST
    assert again.path.read_bytes() == canonical_json(rel.manifest.dump())
    assert {e.suite for e in rel.manifest.evidence} == {"dsv4-topk-gpu", "dsv4-topk-cpu"}
    assert rel.manifest.benchmark is not None
    assert rel.manifest.benchmark.name == "dsv4-topk-gpu" and rel.manifest.approvals


def test_vsa_names_the_release_and_its_inputs(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    root, _, rel = released
    checked = vsa.verify((rel.path.parent / manifest.VSA_NAME).read_bytes(), rel, pol(root),
                         "vsa")
    pred = checked.statement.predicate
    assert checked.statement.predicate_type == "https://slsa.dev/verification_summary/v1"
    assert pred["policy"]["digest"]["sha256"] == rel.id
    assert pred["verificationResult"] == "PASSED"
    assert pred["verifiedLevels"] == ["PATCHBAKE_CHANNEL_SM89_STABLE"]
    assert len(pred["inputAttestations"]) == len(rel.envelopes()) == 4


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(extra=1), "VSA vsa: unknown field 'extra'"),
    (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"),
     "VSA vsa: field 'predicateType' must be 'https://slsa.dev/verification_summary/v1', "
     "got 'https://slsa.dev/provenance/v1'"),
    (lambda s: s["subject"][0]["digest"].update(sha256="cd" * 32),
     f"VSA vsa: its subject is sha256:{'cd' * 32}, the release's image {DIGEST}"),
])
def test_vsa_whose_statement_is_malformed_is_refused(
        released: tuple[Path, Keys, manifest.Release], edit: Callable[[dict[str, Any]], None],
        message: str) -> None:
    root, k, rel = released
    doc = vsa.build(rel).to_json()
    edit(doc)
    env = dsse.sign(canonical_json(doc), keys.load_private(k.release))
    with pytest.raises(ReleaseError) as info:
        vsa.verify(json.dumps(env.to_json()).encode(), rel, pol(root), "vsa")
    assert info.value.one_line() == message


def test_vsa_by_a_key_without_the_release_role_is_refused(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    root, k, rel = released
    forged = vsa.sign(rel, keys.load_private(k.evidence))
    with pytest.raises(ReleaseError, match="only a key whose trust-policy role is 'release'"):
        vsa.verify(forged, rel, pol(root), "vsa")


def test_altered_release_manifest_is_refused(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    root, _, rel = released
    rel.path.write_bytes(rel.path.read_bytes().replace(b'"sm89-stable"', b'"sm89-stablE"'))
    with pytest.raises(ReleaseError, match="the release manifest was altered"):
        manifest.load(root, rel.id)
    assert main(["ledger", "verify"]) == LedgerError.exit_code
    assert "the release manifest was altered" in capsys.readouterr().err


def _lines(root: Path) -> list[bytes]:
    return (rdir(root) / ledger.NAME).read_bytes().splitlines(keepends=True)


def _second_entry(root: Path, k: Keys, rel: manifest.Release) -> None:
    key = keys.load_private(k.release)
    entry = ledger.make_entry(ledger.read(rdir(root)), "promotion", rel, key,
                              to="127.0.0.1:5000/x:1", attached=ATTACHED)
    ledger.append(rdir(root), entry)
    _checkpoint(root, k)


def _checkpoint(root: Path, k: Keys) -> bytes:
    """Sign the ledger's checkpoint as promote does (the release key holder)."""
    name = config.load(root / "pipeline.yaml").name
    return tlog.publish(rdir(root), ledger.read(rdir(root)), tlog.origin_of(name),
                        keys.load_private(k.release), pol(root))


def test_ledger_verifies_and_cli_lists_it(released: tuple[Path, Keys, manifest.Release],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root, k, rel = released
    _second_entry(root, k, rel)
    assert len(ledger.verify(rdir(root), pol(root))) == 2
    assert main(["--json", "ledger", "verify"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in out["entries"]] == ["release", "promotion"]
    assert out["head"] == ledger.head(ledger.read(rdir(root)))


@pytest.mark.parametrize("tamper, message", [
    (lambda ls: [ls[0].replace(b'"seq":0', b'"seq": 0')], "not in canonical form"),
    (lambda ls: [ls[1]], "sequence number 1, expected 0"),
    (lambda ls: [ls[1], ls[0]], "sequence number 1, expected 0"),
    (lambda ls: [ls[0], ls[1].replace(b'"to":"127.0.0.1:5000/x:1"', b'"to":"127.0.0.1:5000/x:2"')],
     "the signature does not verify"),
    (lambda ls: [ls[0], ls[1][:-1]], "the last line is not terminated"),
    (lambda ls: [ls[0], b"{}\n"], "not a patchbake-ledger/1 entry"),
    (lambda ls: [x.replace(b"\n", b"\r\n") for x in ls], "not in canonical form"),
    (lambda ls: [ls[0][:-1] + b"\r" + ls[1]], "not a JSON line"),
])
def test_tampered_ledger_is_refused(released: tuple[Path, Keys, manifest.Release],
                                    capsys: pytest.CaptureFixture[str], tamper: object,
                                    message: str) -> None:
    root, k, rel = released
    _second_entry(root, k, rel)
    path = rdir(root) / ledger.NAME
    path.write_bytes(b"".join(tamper(_lines(root))))  # type: ignore[operator]
    with pytest.raises(LedgerError, match=message):
        ledger.verify(rdir(root), pol(root))
    assert main(["ledger", "verify"]) == 61
    assert message in capsys.readouterr().err


def test_ledger_signed_by_a_key_without_release_role_is_refused(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    root, k, rel = released
    ledger.append(rdir(root), ledger.make_entry(ledger.read(rdir(root)), "promotion", rel,
                                                keys.load_private(k.evidence), to="h:1/r:t",
                                                attached=ATTACHED))
    with pytest.raises(LedgerError, match="has no 'release' role"):
        ledger.verify(rdir(root), pol(root))


def test_ledger_entry_whose_release_is_not_committed_is_refused(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    root, _, rel = released
    rel.path.unlink()
    with pytest.raises(LedgerError, match="has no manifest"):
        ledger.verify(rdir(root), pol(root))


def test_stale_entry_cannot_be_appended(released: tuple[Path, Keys, manifest.Release]) -> None:
    root, k, rel = released
    stale = ledger.make_entry([], "release", rel, keys.load_private(k.release))
    with pytest.raises(LedgerError, match="moved on"):
        ledger.append(rdir(root), stale)


def test_bundle_exports_and_verifies_offline(released: tuple[Path, Keys, manifest.Release],
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rel = released
    out = tmp_path / "bundle"
    assert main(["release", "export", rel.id, "--to", str(out)]) == 0
    listing = json.loads((out / bundle.BUNDLE).read_text())
    assert listing["release"] == rel.id and "manifests/trust-policy.yaml" in listing["files"]
    capsys.readouterr()
    assert main(["--json", "release", "verify", DIGEST, "--bundle", str(out)]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["release"] == rel.id and verdict["ok"]
    assert [c["check"] for c in verdict["checks"]] == [
        "bundle", "ledger", "release manifest", "ledger entry", "transparency log", "digest",
        "VSA", "evidence", "sbom and provenance", "gates"]
    # no image record for this digest: the release carries none, and says so
    assert verdict["checks"][8]["detail"].startswith("none recorded")
    assert verdict["checks"][4]["detail"] == \
        "entry 0 is in the signed log of 1 (checkpoint, audit path)"


@pytest.mark.parametrize("what, code, message", [
    ("evidence", 62, "does not verify"),
    ("vsa", 62, "VSA"),
    ("ledger", 61, "chain is broken"),
    ("policy", 61, "which has no 'release' role"),
])
def test_tampered_bundle_is_refused(released: tuple[Path, Keys, manifest.Release],
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    what: str, code: int, message: str) -> None:
    root, k, rel = released
    out = tmp_path / "bundle"
    bundle.export(root, root / "manifests/trust-policy.yaml", rel.id, out)
    if what == "evidence":
        p = out / rel.manifest.evidence[0].path
        env = json.loads(p.read_text())
        sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        sig[5] ^= 1
        env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
        p.write_text(json.dumps(env))
    elif what == "vsa":
        p = out / manifest.RELEASES_DIR / rel.id / manifest.VSA_NAME
        p.write_bytes(vsa.sign(rel, keys.load_private(k.outsider)))
    elif what == "ledger":
        p = out / manifest.RELEASES_DIR / ledger.NAME
        line = p.read_bytes()
        p.write_bytes(line + line.replace(b'"seq":0', b'"seq":1'))
    else:
        write_policy(out, k, drop="release")
    named = ["--trust-policy", str(out / "manifests/trust-policy.yaml")] \
        if what == "policy" else []
    assert main(["release", "verify", rel.id, "--bundle", str(out), *named]) == 62
    assert "was changed after export" in capsys.readouterr().err  # bundle.json holds first
    _relist(out)  # an attacker rewrites the unsigned listing too: the signatures still hold
    assert main(["release", "verify", rel.id, "--bundle", str(out), *named]) == code
    assert message in capsys.readouterr().err


def _relist(out: Path) -> None:
    doc = json.loads((out / bundle.BUNDLE).read_text())
    doc["files"] = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in out.rglob("*") if p.is_file() and p.name != bundle.BUNDLE}
    (out / bundle.BUNDLE).write_text(json.dumps(doc))


@pytest.mark.parametrize("change, message", [
    ("add", "is not in bundle.json"),
    ("escape", "is not a file of the bundle"),
    ("absolute", "is not a file of the bundle"),
    ("other-release", "is the listing of release 0000000000000000, not of"),
    ("proof", "the inclusion proof does not verify"),
    ("checkpoint", "no trusted key signed this checkpoint"),
])
def test_bundle_listing_and_log_proof_are_checked(
        released: tuple[Path, Keys, manifest.Release], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], change: str, message: str) -> None:
    root, k, rel = released
    out = tmp_path / "bundle"
    bundle.export(root, root / "manifests/trust-policy.yaml", rel.id, out)
    doc = json.loads((out / bundle.BUNDLE).read_text())
    releases = out / manifest.RELEASES_DIR
    if change == "add":
        (out / "extra.sh").write_text("echo hi\n")
    elif change == "escape":
        doc["files"]["../outside"] = "0" * 64
        (out / bundle.BUNDLE).write_text(json.dumps(doc))
    elif change == "absolute":
        doc["files"][str(root / "pipeline.yaml")] = "0" * 64
        (out / bundle.BUNDLE).write_text(json.dumps(doc))
    elif change == "other-release":
        doc["release"] = "0" * 64
        (out / bundle.BUNDLE).write_text(json.dumps(doc))
    elif change == "proof":
        proof = json.loads((releases / bundle.INCLUSION).read_text())
        proof["proof"] = ["00" * 32]
        (releases / bundle.INCLUSION).write_text(json.dumps(proof))
        _relist(out)
    else:  # a checkpoint signed by a key the policy does not give the release role
        entries = ledger.read(releases)
        cp = tlog.head_of(entries, tlog.origin_of(config.load(root / "pipeline.yaml").name))
        (releases / tlog.NAME).write_bytes(
            checkpoint.sign(cp, "someone", keys.load_private(k.outsider)))
        _relist(out)
    assert main(["release", "verify", rel.id, "--bundle", str(out)]) in (61, 62)
    assert message in capsys.readouterr().err


def test_verify_of_an_unknown_digest_and_a_bad_id(released: tuple[Path, Keys, manifest.Release],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["release", "verify", "sha256:" + "0" * 64]) == 62
    assert "no release in the ledger names image" in capsys.readouterr().err
    assert main(["release", "verify", "not-an-id"]) == 62
    assert "is not a release id" in capsys.readouterr().err


def test_create_refuses_a_key_without_the_release_role(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    _, k, _ = released
    rc = main(["release", "create", "--channel", "sm89-stable", "--image",
               f"{IMAGE}@{DIGEST}", "--key", str(k.evidence)])
    assert rc == 62
    assert "has no 'release' role" in capsys.readouterr().err


def test_promote_refuses_a_key_without_the_release_role_before_any_effect(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    """The role is checked where the key is loaded: nothing is pushed or tagged, no journal
    is written and the ledger keeps its bytes (the registry named is never contacted)."""
    root, k, rel = released
    before = (rdir(root) / "ledger.jsonl").read_bytes()
    rc = main(["release", "promote", rel.id, "--to", "127.0.0.1:9/app:v1", "--key",
               str(k.evidence)])
    assert rc == 62
    assert "has no 'release' role" in capsys.readouterr().err
    assert (rdir(root) / "ledger.jsonl").read_bytes() == before
    assert not (rdir(root) / "promotion.pending.json").exists()


def test_promote_refuses_a_tag_less_destination(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    _, k, rel = released
    rc = main(["release", "promote", rel.id, "--to", "127.0.0.1:5000/app", "--key",
               str(k.release)])
    assert rc == 2
    assert "names neither a tag nor a digest" in capsys.readouterr().err


def test_the_repositorys_committed_ledger_and_releases_verify() -> None:
    """What is committed under manifests/releases/ verifies offline, as a user would."""
    from release_support import REPO

    policy_path = REPO / "manifests" / "trust-policy.yaml"
    entries = ledger.verify(manifest.releases_dir(REPO), policy.load(policy_path))
    for e in ledger.find(entries, "release"):
        verdict = bundle.verify(REPO, policy_path, e.release)
        assert verdict.digest == e.digest
        assert [c for c, _ in verdict.checks][-1] == "gates"


def test_bundle_signed_by_its_own_trust_policy_is_refused(
        released: tuple[Path, Keys, manifest.Release], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A bundle carries a copy of a trust policy; the copy is no trust anchor. A bundle made
    in another repository with the attacker's own keys (and own policy naming them) must not
    verify against this repository's policy, nor against a policy the user names."""
    root, _, _ = released
    evil_root = tmp_path / "evil"
    ek = make_repo(evil_root, tmp_path / "evil-keys")
    evil = make_release(evil_root, ek, DIGEST)
    out = tmp_path / "evil-bundle"
    bundle.export(evil_root, evil_root / "manifests/trust-policy.yaml", evil.id, out)
    assert main(["release", "verify", evil.id, "--bundle", str(out)]) == 61
    assert "which has no 'release' role" in capsys.readouterr().err
    mine = root / "manifests" / "trust-policy.yaml"
    assert main(["release", "verify", evil.id, "--bundle", str(out),
                 "--trust-policy", str(mine)]) == 61
    capsys.readouterr()
    # the bundle's own policy is used only when the user names it explicitly
    assert main(["release", "verify", evil.id, "--bundle", str(out), "--trust-policy",
                 str(out / "manifests" / "trust-policy.yaml")]) == 0


def test_a_forged_promotion_journal_is_not_rolled_into_the_ledger(
        released: tuple[Path, Keys, manifest.Release],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """promotion.pending.json is a file in the checkout: its entry rolls forward only when
    it is a canonical promotion entry signed by a release key, whatever the tag says."""
    from patchbake.release import promote

    root, k, rel = released
    entries = ledger.read(rdir(root))
    forged = {"format": ledger.FORMAT, "seq": len(entries), "prev": ledger.head(entries),
              "kind": "promotion", "release": rel.id, "channel": rel.channel,
              "image": rel.image, "digest": str(rel.digest), "time": "2026-12-01T00:00:00Z",
              "to": "127.0.0.1:5000/x:y", "attached": ATTACHED.dump()}
    signed = ledger.make_entry(entries, "promotion", rel, keys.load_private(k.outsider),
                               to="127.0.0.1:5000/x:y", attached=ATTACHED)
    monkeypatch.setattr(promote, "_tag_digest", lambda client, ref: rel.digest)
    from patchbake.oci.registry import RegistryClient

    monkeypatch.setattr(RegistryClient, "for_ref", staticmethod(lambda ref: None))
    before = ledger.path_of(rdir(root)).read_bytes()
    for entry in (json.dumps(forged, sort_keys=True, separators=(",", ":")),
                  signed.line.decode()):
        (rdir(root) / promote.JOURNAL).write_text(json.dumps({"entry": entry,
                                                              "to": "127.0.0.1:5000/x:y"}))
        with pytest.raises(LedgerError, match="promotion.pending.json"):
            promote.recover(rdir(root), pol(root))
        assert ledger.path_of(rdir(root)).read_bytes() == before


def test_inputs_nested_too_deeply_are_one_line_errors(
        released: tuple[Path, Keys, manifest.Release],
        capsys: pytest.CaptureFixture[str]) -> None:
    """json.loads raises RecursionError (not ValueError) on deep nesting: a crafted image
    config, envelope or ledger line is a one-line error, never a traceback."""
    from patchbake.errors import EvidenceError, ImageError
    from patchbake.evidence import dsse
    from patchbake.oci import gojson
    from patchbake.oci.image import parse_json

    root, _, _ = released
    deep = b'{"a":' * 100_000
    with pytest.raises(ImageError, match="nested too deeply"):
        parse_json(deep, "config", gojson.CONFIG)
    with pytest.raises(EvidenceError, match="nested too deeply"):
        dsse.parse(deep, "x.dsse.json")
    p = ledger.path_of(rdir(root))
    p.write_bytes(p.read_bytes() + deep + b"\n")
    assert main(["ledger", "verify"]) == 15
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err


def test_entries_cut_off_the_end_are_caught_by_the_releases_they_leave(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    """Dropping the last lines keeps the chain intact; the committed release whose entry
    went with them is what shows the cut."""
    root, k, rel = released
    _second_entry(root, k, rel)
    assert main(["ledger", "verify"]) == 0
    (rdir(root) / ledger.NAME).write_bytes(b"")  # both entries cut off
    capsys.readouterr()
    assert main(["ledger", "verify"]) == LedgerError.exit_code
    err = capsys.readouterr().err
    assert f"release {rel.id[:16]}… is committed but no ledger entry records it" in err


def test_a_known_head_must_stay_in_the_chain(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    """A reader who recorded a head catches a rollback to before it, even when the release
    directories were removed with the entries."""
    root, k, rel = released
    first = ledger.head(ledger.read(rdir(root)))
    _second_entry(root, k, rel)
    second = ledger.head(ledger.read(rdir(root)))
    assert main(["ledger", "verify", "--known-head", first, "--known-head", second]) == 0
    (rdir(root) / ledger.NAME).write_bytes(_lines(root)[0])  # the promotion is cut off
    _checkpoint(root, k)  # by someone who holds the release key: the checkpoint agrees
    assert main(["ledger", "verify", "--known-head", first]) == 0  # still a prefix
    capsys.readouterr()
    assert main(["ledger", "verify", "--known-head", f"sha256:{second}"]) == 61
    assert f"the head {second[:16]}… recorded earlier is not in the ledger" in \
        capsys.readouterr().err


def test_committed_release_manifests_and_ledger_entries_load_and_dump_to_their_bytes() -> None:
    """The typed records reproduce what is committed byte for byte: every release id and
    the ledger's hash chain are the sha256 of exactly these bytes."""
    from release_support import REPO

    rdir_ = manifest.releases_dir(REPO)
    paths = sorted(rdir_.glob(f"*/{manifest.MANIFEST_NAME}"))
    assert paths, "no committed release manifest to check"
    for path in paths:
        body = path.read_bytes()
        m = manifest.Manifest.load(body, str(path))
        assert canonical_json(m.dump()) == body
        assert m.release_id() == path.parent.name
    lines = ledger.path_of(rdir_).read_bytes().splitlines()
    assert lines, "no committed ledger entry to check"
    for n, line in enumerate(lines, 1):
        e = ledger.Entry.load(line, f"ledger.jsonl:{n}")
        assert e.line == line and canonical_json(e.dump()) == line
    assert [e.hash for e in ledger.read(rdir_)] == [
        hashlib.sha256(line).hexdigest() for line in lines]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d["images"][0].update(manifest_digest="sha256:AB"),
     "field 'images[0].manifest_digest' 'sha256:AB' is not sha256:<64 lowercase hex digits>"),
    (lambda d: d["evidence"][0].pop("signer"), "field 'evidence[0].signer' is missing"),
    (lambda d: d["evidence"][0]["counts"].update(passed="29"),
     "field 'evidence[0].counts' must be an object of integers"),
    (lambda d: d["gates"][0].update(status=None), "field 'gates[0].status' must be"),
    (lambda d: d["gates"][0].update(status="PASS"), "field 'gates[0].status' must be"),
    (lambda d: d.update(images=[]), "names no image"),
    (lambda d: d.update(format="patchbake-release/2"), "is not a patchbake-release/1 manifest"),
])
def test_a_malformed_release_manifest_is_one_line_naming_the_field(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str],
        edit: Callable[[dict[str, Any]], None], message: str) -> None:
    """A release.json whose bytes still hash to its directory's name (re-hashed after the
    edit) is refused by the typed load: one line naming the file and the member."""
    root, _, rel = released
    doc = json.loads(rel.path.read_bytes())
    edit(doc)
    body = canonical_json(doc)
    rid = hashlib.sha256(body).hexdigest()
    (rel.path.parent.parent / rid).mkdir()
    path = rel.path.parent.parent / rid / manifest.MANIFEST_NAME
    path.write_bytes(body)
    with pytest.raises(ReleaseError) as info:
        manifest.load(root, rid)
    line = info.value.one_line()
    assert line.startswith(str(path)) and message in line and "\n" not in line
    assert main(["release", "verify", rid]) == ReleaseError.exit_code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_release_manifest_in_another_spelling_is_refused(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    """The same members in non-canonical bytes (re-hashed so the id matches) are refused:
    an id names one spelling of a release, never a second one."""
    root, _, rel = released
    body = json.dumps(json.loads(rel.path.read_bytes()), indent=1).encode()
    rid = hashlib.sha256(body).hexdigest()
    (rel.path.parent.parent / rid).mkdir()
    (rel.path.parent.parent / rid / manifest.MANIFEST_NAME).write_bytes(body)
    with pytest.raises(ReleaseError, match="not in canonical form"):
        manifest.load(root, rid)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d.update(digest="sha256:" + "0" * 63),
     "field 'digest' 'sha256:" + "0" * 63 + "' is not sha256:<64 lowercase hex digits>"),
    (lambda d: d.update(seq="0"), "field 'seq' must be an integer"),
    (lambda d: d.pop("channel"), "field 'channel' is missing"),
    (lambda d: d.pop("signature"), "the entry is unsigned"),
    (lambda d: d.update(to="h:1/r:t"), "unknown field 'to'"),
])
def test_a_malformed_ledger_entry_is_one_line_naming_the_field(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str],
        edit: Callable[[dict[str, Any]], None], message: str) -> None:
    root, _, _ = released
    path = rdir(root) / ledger.NAME
    doc = json.loads(path.read_bytes())
    edit(doc)
    path.write_bytes(canonical_json(doc) + b"\n")
    with pytest.raises(LedgerError) as info:
        ledger.read(rdir(root))
    line = info.value.one_line()
    assert line.startswith(f"{path}:1: ") and message in line and "\n" not in line
    assert main(["ledger", "verify"]) == LedgerError.exit_code
    assert message in capsys.readouterr().err


def test_the_signed_checkpoint_catches_a_rollback(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """The ledger as a transparency log: the committed checkpoint refuses a cut ledger, a
    missing checkpoint is refused, and a reader's kept checkpoint (--since) catches a
    rollback even when the release key's holder signed a new checkpoint for it."""
    root, k, rel = released
    _second_entry(root, k, rel)
    kept = tmp_path / "kept-checkpoint"
    kept.write_bytes((rdir(root) / tlog.NAME).read_bytes())
    assert main(["ledger", "verify", "--since", str(kept)]) == 0
    (rdir(root) / ledger.NAME).write_bytes(_lines(root)[0])  # the promotion is cut off
    capsys.readouterr()
    assert main(["ledger", "verify"]) == 61
    assert "signed a ledger of 2 entries; the ledger now has 1: entries were removed" in \
        capsys.readouterr().err
    (rdir(root) / tlog.NAME).unlink()
    assert main(["ledger", "verify"]) == 61
    assert "checkpoint is missing: a ledger of 1 entries has no signed checkpoint" in \
        capsys.readouterr().err
    _checkpoint(root, k)  # re-signed by the key's holder: only the kept checkpoint knows
    assert main(["ledger", "verify"]) == 0
    capsys.readouterr()
    assert main(["ledger", "verify", "--since", str(kept)]) == 61
    assert "entries were removed (a rollback)" in capsys.readouterr().err


def test_a_rewritten_history_has_no_consistency_proof(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    root, k, rel = released
    kept = tmp_path / "kept-checkpoint"
    kept.write_bytes((rdir(root) / tlog.NAME).read_bytes())
    # a new history of the same length and more: the first entry signed again, later
    key = keys.load_private(k.release)
    first = ledger.make_entry([], "release", rel, key, when=0)
    ledger.write(rdir(root), [first])
    _second_entry(root, k, rel)
    assert main(["ledger", "verify"]) == 0
    capsys.readouterr()
    assert main(["ledger", "verify", "--since", str(kept)]) == 61
    assert "are not the ones this checkpoint signed: the history was rewritten" in \
        capsys.readouterr().err
    forged = (rdir(root) / tlog.NAME).read_bytes().replace(b"\n2\n", b"\n3\n")
    (rdir(root) / tlog.NAME).write_bytes(forged)
    assert main(["ledger", "verify"]) == 61
    assert "does not verify: the checkpoint was altered" in capsys.readouterr().err


def test_ledger_checkpoint_signs_only_with_a_release_key(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    root, k, _ = released
    (rdir(root) / tlog.NAME).unlink()
    assert main(["ledger", "checkpoint", "--key", str(k.evidence)]) == ReleaseError.exit_code
    assert "has no 'release' role" in capsys.readouterr().err
    assert not (rdir(root) / tlog.NAME).exists()
    assert main(["ledger", "checkpoint", "--key", str(k.release)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "1"  # the tree size
    assert main(["ledger", "verify"]) == 0


def test_a_release_is_named_by_the_prefix_people_see(
        released: tuple[Path, Keys, manifest.Release], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger verify` shows 16 hex digits of a release id: verify, export and the image
    digest's prefix all take them; an ambiguous prefix names the candidates."""
    root, _, rel = released
    assert main(["--json", "release", "verify", rel.id[:16]]) == 0
    assert json.loads(capsys.readouterr().out)["release"] == rel.id
    assert main(["--json", "release", "verify", "sha256:" + DIGEST.removeprefix("sha256:")[:12]]) == 0
    assert json.loads(capsys.readouterr().out)["release"] == rel.id
    assert main(["release", "export", rel.id[:12], "--to", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / bundle.BUNDLE).read_text())["release"] == rel.id
    capsys.readouterr()
    assert main(["release", "verify", "0123456789abcdef"]) == 62
    err = capsys.readouterr().err
    assert "no release id starts with 0123456789abcdef" in err and "ledger verify" in err
    twin = rel.id[:12] + ("0" if rel.id[12] != "0" else "1") + rel.id[13:]
    (rdir(root) / twin).mkdir()
    assert main(["release", "verify", rel.id[:12]]) == 62
    err = capsys.readouterr().err
    assert f"release id {rel.id[:12]} is ambiguous: 2 start with it" in err
    assert rel.id in err and twin in err and "give more hex digits" in err
    assert main(["release", "verify", rel.id[:11]]) == 62
    assert "is not a release id" in capsys.readouterr().err


def test_approve_names_an_unknown_channel_before_any_key(
        released: tuple[Path, Keys, manifest.Release], capsys: pytest.CaptureFixture[str]
        ) -> None:
    _, k, _ = released
    assert main(["release", "approve", "--channel", "sm89-stabel", "--image", DIGEST,
                 "--key", str(k.approver)]) == 3
    err = capsys.readouterr().err
    assert "no channel 'sm89-stabel'; did you mean 'sm89-stable'?" in err
    assert "approver role" not in err


def test_a_checkpoint_left_short_of_the_ledger_is_caught_up(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    """Killed between the ledger's append and its checkpoint: the next create signs a
    checkpoint of the whole ledger (tlog.catch_up), and one that covers it is left alone."""
    root, k, rel = released
    short = (rdir(root) / tlog.NAME).read_bytes()
    _second_entry(root, k, rel)
    (rdir(root) / tlog.NAME).write_bytes(short)  # the crash: ledger of 2, checkpoint of 1
    origin = tlog.origin_of(config.load(root / "pipeline.yaml").name)
    entries = ledger.verify(rdir(root), pol(root))
    key = keys.load_private(k.release)
    before = tlog.check_committed(rdir(root), entries, pol(root), origin)
    assert before is not None and before.size == 1
    assert tlog.catch_up(rdir(root), entries, origin, key, pol(root)) is not None
    after = tlog.check_committed(rdir(root), entries, pol(root), origin)
    assert after is not None and after.size == 2
    assert tlog.catch_up(rdir(root), entries, origin, key, pol(root)) is None


def test_the_baseline_is_the_last_release_measured_on_the_same_gpu(
        released: tuple[Path, Keys, manifest.Release]) -> None:
    """The benchmark record goes through release.json and the ledger: it names where the
    figures were measured, and only a release measured on the same GPU is a baseline."""
    root, _, rel = released
    assert rel.manifest.benchmark is not None
    assert (rel.manifest.benchmark.gpu, rel.manifest.benchmark.capability) == \
        ("NVIDIA L40S", "8.9")
    lookup = create.previous_benchmark(root, root / "manifests" / "trust-policy.yaml")
    got = lookup("sm89-stable", "dsv4-topk-gpu", ("NVIDIA L40S", "8.9"))
    assert got is not None and got.figures == FIGURES
    assert lookup("sm89-stable", "dsv4-topk-gpu", ("NVIDIA L20", "8.9")) is None
    assert lookup("validated", "dsv4-topk-gpu", ("NVIDIA L40S", "8.9")) is None


@pytest.mark.parametrize("edit, says", [
    (lambda b: dataclasses.replace(b, figures={**b.figures, "speedup[15x512]": {
        "value": 99.0, "unit": "x", "better": "higher"}}), "its figures differ"),
    (lambda b: dataclasses.replace(b, gpu="NVIDIA L20"), "the GPU and capability it records"),
])
def test_a_benchmark_record_other_than_the_signed_one_is_refused(
        released: tuple[Path, Keys, manifest.Release], edit: Any, says: str) -> None:
    """A release key holder publishes a release whose benchmark record is not what the
    envelope signed: verify refuses it, and it is never anyone's baseline."""
    root, k, rel = released
    assert rel.manifest.benchmark is not None
    bad = edit(rel.manifest.benchmark)
    forged = publish(root, k.release, dataclasses.replace(rel.manifest, benchmark=bad))
    with pytest.raises(ReleaseError, match=says):
        recheck._benchmark(root, pol(root), forged)
    lookup = create.previous_benchmark(root, root / "manifests" / "trust-policy.yaml")
    with pytest.raises(ReleaseError, match=says):
        lookup("sm89-stable", "dsv4-topk-gpu", (bad.gpu, bad.capability))
