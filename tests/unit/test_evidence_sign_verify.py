"""DSSE + in-toto evidence: real Ed25519 keys, every fail-closed path has its message."""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import ConfigError, EvidenceError, UsageError
from patchbake.evidence import dsse, keys, policy, records, statement
from patchbake.suites.result import RESULT_FORMAT, SuiteResult

DIGEST = "sha256:" + "ab" * 32
SUBJECT = Digest.parse(DIGEST)
OTHER = "sha256:" + "cd" * 32


def result_doc(**over: Any) -> dict[str, Any]:
    """A suite result document as `fixtures run --results-out` writes it."""
    r: dict[str, Any] = {
        "format": RESULT_FORMAT,
        "suite": {"name": "toy-gpu", "path": "tests/toy", "content_sha256": "11" * 32,
                  "requires": {"gpu": True}, "patch_sensitive": True, "repeats": 3},
        "image": {"name": "sm89-serving-offline", "digest": DIGEST, "config_digest": None},
        "runner": "host", "result": "PASSED", "problems": [],
        "counts": {"tests": 3, "passed": 3, "failed": 0, "skipped": 0, "errors": 0},
        "passed_tests": ["a", "b", "c"], "failed_tests": [], "skipped_tests": [],
        "junit_sha256": "22" * 32,
        "environment": {"gpu_name": "NVIDIA H200", "compute_capability": "9.0",
                        "driver": "570.1", "cuda": "12.8", "torch": "2.11", "triton": "3.6"},
        "started_at": "2026-11-30T00:00:00Z", "duration_s": 1.5,
        "probes": {"patch_sensitivity": {"status": "ok", "tests": 3, "failed": 3},
                   "determinism": {"status": "ok", "repeats": 3, "digests": 1}},
        "steps": [{"step": "run", "runner": "host", "host": "gpu-box"}],
    }
    r.update(over)
    return r


def make_result(**over: Any) -> SuiteResult:
    return SuiteResult.from_json(result_doc(**over), "the test's suite result")


def write_policy(path: Path, pub: Path, keyid: str, suites: str = '["*"]') -> Path:
    pem = "".join(f"      {line}\n" for line in pub.read_text().strip().splitlines())
    path.write_text(f"""version: 1
keys:
  release:
    keyid: "{keyid}"
    owner: tests
    public_key: |
{pem}    allow:
      - predicate_type: {statement.PREDICATE_TYPE}
        suites: {suites}
""")
    return path


@pytest.fixture
def signer(tmp_path: Path) -> dict[str, Any]:
    k = keys.generate(tmp_path / "keys")
    pol = policy.load(write_policy(tmp_path / "policy.yaml", k.public_path, k.keyid))
    return {"key": keys.load_private(k.private_path), "keyid": k.keyid, "policy": pol,
            "evidence": tmp_path / "evidence", "gen": k}


def signed(signer: dict[str, Any], **over: Any) -> Path:
    path, written, _ = records.sign_result(make_result(**over), signer["key"], signer["evidence"])
    assert written
    return path


def expect(reason: str, fragment: str, fn: Any, *a: Any, **k: Any) -> EvidenceError:
    with pytest.raises(EvidenceError) as info:
        fn(*a, **k)
    assert info.value.reason == reason, info.value.one_line()
    assert fragment in info.value.one_line()
    assert info.value.exit_code == 50
    return info.value


def test_pae_matches_the_dsse_spec_example() -> None:
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


def test_key_generation_modes_and_keyid(tmp_path: Path) -> None:
    k = keys.generate(tmp_path / "k")
    assert os.stat(k.private_path).st_mode & 0o777 == 0o600
    pub = keys.parse_public(k.public_path.read_text(), "pub")
    assert keys.keyid_of(pub) == k.keyid and len(k.keyid) == 64
    with pytest.raises(UsageError, match="refusing to overwrite"):
        keys.generate(tmp_path / "k")


def test_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    k = keys.generate(tmp_path / "k")
    os.chmod(k.private_path, 0o644)
    with pytest.raises(EvidenceError, match="readable by others"):
        keys.load_private(k.private_path)


def test_sign_then_verify_round_trip(signer: dict[str, Any]) -> None:
    path = signed(signer)
    assert path == signer["evidence"] / ("ab" * 32) / "toy-gpu.dsse.json"
    v = records.verify_file(path, SUBJECT, signer["policy"], "toy-gpu")
    assert v.counts_as_evidence and v.keyid == signer["keyid"] and v.signer == "release"
    env = json.loads(path.read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["subject"] == [{"name": "sm89-serving-offline", "digest": {"sha256": "ab" * 32}}]
    assert stmt["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert stmt["predicate"]["result"] == "PASSED"
    assert [s["step"] for s in stmt["predicate"]["steps"]] == ["run", "sign"]


def test_signing_twice_is_idempotent_and_never_overwrites(signer: dict[str, Any]) -> None:
    path = signed(signer)
    again, written, _ = records.sign_result(make_result(), signer["key"], signer["evidence"])
    assert again == path and not written
    expect("exists", "never overwritten", records.sign_result,
           make_result(duration_s=2.0), signer["key"], signer["evidence"])


def _tamper(path: Path, fn: Any) -> None:
    env = json.loads(path.read_text())
    fn(env)
    path.write_text(json.dumps(env))


def _flip_payload(env: dict[str, Any]) -> None:
    raw = bytearray(base64.b64decode(env["payload"]))
    raw[raw.index(b"PASSED")] ^= 0x01  # one bit of the result field
    env["payload"] = base64.b64encode(bytes(raw)).decode()


def _flip_sig(env: dict[str, Any]) -> None:
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[0] ^= 0x80
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


@pytest.mark.parametrize("mutate, reason, fragment", [
    (_flip_payload, "bad-signature", "does not verify"),
    (_flip_sig, "bad-signature", "does not verify"),
    (lambda e: e["signatures"][0].update(keyid="ee" * 32), "untrusted-key",
     "none of which the trust policy allows"),
    (lambda e: e.update(payloadType="application/json"), "payload-type",
     "expected 'application/vnd.in-toto+json'"),
    (lambda e: e.update(signatures=[]), "unsigned", "carries no signature"),
    (lambda e: e.pop("signatures"), "unsigned", "carries no signature"),
    (lambda e: e.update(payload="***"), "malformed", "field 'payload' must be valid base64"),
    (lambda e: e.update(extra=1), "malformed", "unknown field 'extra'"),
])
def test_tampered_envelopes_fail_closed(signer: dict[str, Any], mutate: Any, reason: str,
                                        fragment: str) -> None:
    path = signed(signer)
    _tamper(path, mutate)
    expect(reason, fragment, records.verify_file, path, SUBJECT, signer["policy"])


def test_swapped_keyid_to_another_trusted_key_is_a_bad_signature(
        signer: dict[str, Any], tmp_path: Path) -> None:
    other = keys.generate(tmp_path / "other")
    path = signed(signer)
    # trust both keys; the envelope claims the other key made the signature
    text = write_policy(tmp_path / "p2.yaml", other.public_path, other.keyid).read_text()
    both = policy.parse({"version": 1, "keys": {
        **__import__("yaml").safe_load(text)["keys"],
        "mine": {"keyid": signer["keyid"], "public_key": signer["gen"].public_pem,
                 "allow": [{"predicate_type": statement.PREDICATE_TYPE}]}}}, tmp_path / "b.yaml")
    _tamper(path, lambda e: e["signatures"][0].update(keyid=other.keyid))
    expect("bad-signature", "does not verify", records.verify_file, path, SUBJECT, both)


def test_untrusted_signer(signer: dict[str, Any], tmp_path: Path) -> None:
    stranger = keys.generate(tmp_path / "stranger")
    path, _, _ = records.sign_result(make_result(), keys.load_private(stranger.private_path),
                                     tmp_path / "ev2")
    expect("untrusted-key", stranger.keyid[:16], records.verify_file, path, SUBJECT,
           signer["policy"])


def test_trusted_key_not_allowed_for_suite(signer: dict[str, Any], tmp_path: Path) -> None:
    narrow = policy.load(write_policy(tmp_path / "narrow.yaml", signer["gen"].public_path,
                                      signer["keyid"], '["cpu-*"]'))
    path = signed(signer)
    expect("not-allowed", "not allowed to sign suite 'toy-gpu'", records.verify_file, path,
           SUBJECT, narrow)


def test_wrong_subject_digest(signer: dict[str, Any]) -> None:
    path = signed(signer)
    expect("wrong-subject", f"not {OTHER}", records.verify_file, path, OTHER, signer["policy"])


def test_missing_and_unreadable_files(signer: dict[str, Any], tmp_path: Path) -> None:
    expect("missing", "does not exist", records.verify_file, tmp_path / "nope.dsse.json",
           SUBJECT, signer["policy"])
    expect("unreadable", "is a directory", records.verify_file, tmp_path, SUBJECT,
           signer["policy"])
    path = signed(signer)
    if os.geteuid() != 0:  # root reads through mode bits
        os.chmod(path, 0)
        expect("unreadable", "unreadable", records.verify_file, path, SUBJECT, signer["policy"])
    path.write_bytes(b"\xff\xfe not json")
    expect("malformed", "not a JSON document", records.verify_file, path, SUBJECT,
           signer["policy"])


def test_signed_but_wrong_predicate_shape(signer: dict[str, Any]) -> None:
    stmt = statement.build(make_result(), []).to_json()
    bad = copy.deepcopy(stmt)
    bad["predicate"]["counts"]["passed"] = 99
    env = dsse.sign(json.dumps(bad).encode(), signer["key"])
    expect("bad-predicate", "counts do not add up", records.verify_bytes,
           json.dumps(env.to_json()).encode(), "x", SUBJECT, signer["policy"])
    bad = copy.deepcopy(stmt)
    bad["predicateType"] = "https://slsa.dev/provenance/v1"
    env = dsse.sign(json.dumps(bad).encode(), signer["key"])
    expect("bad-predicate", "predicateType", records.verify_bytes,
           json.dumps(env.to_json()).encode(), "x", SUBJECT, signer["policy"])


def test_flagged_probe_is_warned_and_does_not_count(signer: dict[str, Any]) -> None:
    probes = {"patch_sensitivity": {"status": "flagged"}, "determinism": {"status": "ok"}}
    path = signed(signer, probes=probes)
    v = records.verify_file(path, SUBJECT, signer["policy"])
    assert v.statement.result == "WARNED" and not v.counts_as_evidence


def test_failed_result_is_recorded_as_failed(signer: dict[str, Any]) -> None:
    path = signed(signer, result="FAILED", failed_tests=["c"], passed_tests=["a", "b"],
                  counts={"tests": 3, "passed": 2, "failed": 1, "skipped": 0, "errors": 0})
    v = records.verify_file(path, SUBJECT, signer["policy"])
    assert v.statement.result == "FAILED" and not v.counts_as_evidence


def test_policy_errors(tmp_path: Path, signer: dict[str, Any]) -> None:
    expect("policy", "does not exist", policy.load, tmp_path / "absent.yaml")
    text = (tmp_path / "policy.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(text.replace(signer["keyid"], "0" * 64))
    with pytest.raises(ConfigError, match="but the public key's id is"):
        policy.load(tmp_path / "bad.yaml")
    (tmp_path / "bad2.yaml").write_text(text.replace("allow:", "alow:"))
    with pytest.raises(ConfigError, match="did you mean 'allow'"):
        policy.load(tmp_path / "bad2.yaml")


def test_verify_suites_reports_each_reason(signer: dict[str, Any]) -> None:
    signed(signer)
    found = records.verify_suites(signer["evidence"], SUBJECT, signer["policy"],
                                  ["toy-gpu", "toy-cpu"])
    assert isinstance(found["toy-gpu"], records.Verified)
    assert isinstance(found["toy-cpu"], EvidenceError)
    assert found["toy-cpu"].reason == "missing"


@pytest.mark.parametrize("probes, flag", [
    ({"determinism": {"status": "ok", "repeats": 3}}, "pristine-tree probe has no verdict"),
    ({"patch_sensitivity": {"status": "not-declared"}, "determinism": {"status": "ok"}},
     "pristine-tree probe has no verdict"),
    ({"patch_sensitivity": {"status": "ok"}, "determinism": {"status": "not-run"}},
     "declared 3 repeats, but the determinism probe has no verdict"),
])
def test_declared_probe_without_a_verdict_does_not_count(signer: dict[str, Any],
                                                         probes: dict[str, Any],
                                                         flag: str) -> None:
    # the suite declares patch_sensitive and 3 repeats: a result missing either probe's
    # verdict is signed as WARNED, and a statement claiming PASSED anyway is refused
    path = signed(signer, probes=probes)
    v = records.verify_file(path, SUBJECT, signer["policy"])
    assert v.statement.result == "WARNED" and not v.counts_as_evidence
    stmt = statement.build(make_result(probes=probes), []).to_json()
    stmt["predicate"]["result"] = "PASSED"
    env = dsse.sign(json.dumps(stmt).encode(), signer["key"])
    expect("bad-predicate", flag, records.verify_bytes, json.dumps(env.to_json()).encode(),
           "x", SUBJECT, signer["policy"])


@pytest.mark.parametrize("drop", ["image", "counts", "suite", "passed_tests"])
def test_incomplete_result_is_refused_by_name(tmp_path: Path, drop: str) -> None:
    doc = result_doc()
    del doc[drop]
    (tmp_path / "r.json").write_text(json.dumps(doc))
    expect("malformed", f"suite result {tmp_path / 'r.json'}: field '{drop}' is missing",
           SuiteResult.load, tmp_path / "r.json")


def _with_probe(**sens: object) -> SuiteResult:
    return make_result(probes={"patch_sensitivity": dict(sens)})


def test_pristine_probe_must_have_run_on_the_pinned_tree() -> None:
    pinned = Digest.from_hex("1" * 64)
    records.check_pristine_probe(_with_probe(status="ok", vllm_tree_digest=str(pinned)), pinned)
    records.check_pristine_probe(_with_probe(status="not-declared"), pinned)
    expect("foreign-pristine", "not the pinned upstream's", records.check_pristine_probe,
           _with_probe(status="ok", vllm_tree_digest="sha256:" + "2" * 64), pinned)
    expect("foreign-pristine", "does not record which vLLM tree", records.check_pristine_probe,
           _with_probe(status="ok"), pinned)


def _urlsafe_unpadded(text: str) -> str:
    return base64.urlsafe_b64encode(base64.b64decode(text)).decode().rstrip("=")


@pytest.mark.parametrize("mutate", [
    lambda e: e["signatures"][0].pop("keyid"),
    lambda e: e["signatures"][0].update(keyid=""),
    lambda e: e.update(payload=_urlsafe_unpadded(e["payload"])),
    lambda e: e["signatures"][0].update(sig=_urlsafe_unpadded(e["signatures"][0]["sig"])),
], ids=["no-keyid", "empty-keyid", "urlsafe-payload", "urlsafe-sig"])
def test_dsse_forms_the_spec_allows_are_accepted(signer: dict[str, Any], mutate: Any) -> None:
    """DSSE: keyid is optional (the policy's keys are tried) and base64 may be URL-safe
    and unpadded; what we write stays standard, padded and keyed."""
    path = signed(signer)
    written = json.loads(path.read_text())
    assert written["signatures"][0]["keyid"] == signer["keyid"]
    assert "=" in written["payload"] or len(written["payload"]) % 4 == 0
    _tamper(path, mutate)
    v = records.verify_file(path, SUBJECT, signer["policy"], "toy-gpu")
    assert v.keyid == signer["keyid"] and v.counts_as_evidence


def test_keyless_signature_that_no_trusted_key_verifies_fails_closed(
        signer: dict[str, Any]) -> None:
    path = signed(signer)

    def drop_keyid_and_flip(e: dict[str, Any]) -> None:
        e["signatures"][0].pop("keyid")
        _flip_payload(e)

    _tamper(path, drop_keyid_and_flip)
    expect("untrusted-key", "without keyid verified with none", records.verify_file, path,
           SUBJECT, signer["policy"])


@pytest.mark.parametrize("value", ["ab+_", "a b=", "abc==="])
def test_mixed_or_broken_base64_is_malformed(signer: dict[str, Any], value: str) -> None:
    path = signed(signer)
    _tamper(path, lambda e: e.update(payload=value))
    expect("malformed", "field 'payload' must be valid base64", records.verify_file, path, SUBJECT, signer["policy"])
