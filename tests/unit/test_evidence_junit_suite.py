"""Evidence says exactly what happened: the JUnit file a statement hashes is kept beside
it and checked; a suite that never proved it can fail counts toward nothing; a file stands
for the suite its name says."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Any

import test_evidence_sign_verify as sv
from patchbake.errors import EvidenceError
from patchbake.evidence import records, summary
from patchbake.suites.result import SuiteResult
from test_evidence_sign_verify import SUBJECT, expect, make_result

signer = sv.signer  # the shared fixture: real Ed25519 key and trust policy

JUNIT = b'<?xml version="1.0"?><testsuites><testsuite tests="3"/></testsuites>\n'


def _with_junit(data: bytes = JUNIT, **over: Any) -> SuiteResult:
    return make_result(junit_sha256=hashlib.sha256(data).hexdigest(),
                       junit_b64=base64.b64encode(data).decode(), **over)


def test_signing_keeps_the_junit_beside_the_envelope(signer: dict[str, Any]) -> None:
    path, written, stmt = records.sign_result(_with_junit(), signer["key"], signer["evidence"])
    assert written and path.name == "toy-gpu.dsse.json"
    junit = path.with_name("toy-gpu.junit.xml")
    assert junit.read_bytes() == JUNIT
    assert stmt.junit_sha256 == hashlib.sha256(JUNIT).hexdigest()
    v = records.verify_file(path, SUBJECT, signer["policy"])
    assert v.junit == "matches" and v.counts_as_evidence
    junit.chmod(0o644)
    junit.write_bytes(JUNIT.replace(b'tests="3"', b'tests="4"'))
    err = expect("junit-mismatch", "it is not the report of the signed run",
                 records.verify_file, path, SUBJECT, signer["policy"])
    assert err.exit_code == EvidenceError.exit_code
    junit.unlink()  # absent: the signature still stands; said so
    assert records.verify_file(path, SUBJECT, signer["policy"]).junit == "not committed"


def test_a_result_whose_junit_is_not_what_it_hashes_is_not_signed(
        signer: dict[str, Any]) -> None:
    bad = dataclasses.replace(_with_junit(), junit_sha256="33" * 32)
    expect("junit-mismatch", "its junit_sha256 says", records.sign_result, bad,
           signer["key"], signer["evidence"])
    assert not (signer["evidence"] / SUBJECT.hex).exists()  # nothing half-written


def test_a_file_stands_for_the_suite_its_name_says(signer: dict[str, Any],
                                                   tmp_path: Path) -> None:
    path, _, _ = records.sign_result(_with_junit(), signer["key"], signer["evidence"])
    moved = path.with_name("other-suite.dsse.json")
    shutil.copy(path, moved)
    expect("wrong-suite", "the statement is about suite 'toy-gpu', but the file is stored "
           "as suite 'other-suite'", records.verify_file, moved, SUBJECT, signer["policy"])
    loose = tmp_path / "evidence.json"
    shutil.copy(path, loose)
    expect("wrong-suite", "is not named <suite>.dsse.json", records.verify_file, loose,
           SUBJECT, signer["policy"])


def test_a_suite_not_shown_to_fail_counts_toward_nothing(signer: dict[str, Any]) -> None:
    decl = {"name": "toy-gpu", "path": "tests/toy", "content_sha256": "11" * 32,
            "requires": {"gpu": True}, "patch_sensitive": False, "repeats": 3}
    path, _, stmt = records.sign_result(
        _with_junit(suite=decl, probes={"patch_sensitivity": {"status": "not-declared"},
                                        "determinism": {"status": "ok", "repeats": 3}}),
        signer["key"], signer["evidence"])
    assert stmt.result == "PASSED"  # the run itself passed
    v = records.verify_file(path, SUBJECT, signer["policy"])
    assert not v.patch_shown and not v.counts_as_evidence
    assert v.standing == "not shown to test the patch"
    facts = summary.ImageFacts("sm89-serving-offline", SUBJECT, "ee" * 32, 4, 4)
    text = summary.paragraph(facts, {"toy-gpu": v})
    assert "The exact image passed" not in text
    assert "`toy-gpu` (passed 3 tests, but not shown to test the patch" in text


def test_a_run_keeps_the_junit_bytes_it_hashes(tmp_path: Path) -> None:
    from patchbake.suites.execution import collect

    xml = (b'<?xml version="1.0"?><testsuites><testsuite name="t" tests="1">'
           b'<testcase classname="c" name="n"/></testsuite></testsuites>')
    (tmp_path / "junit.xml").write_bytes(xml)
    ex = collect(tmp_path / "junit.xml", 0, 0.1, "")
    assert ex.junit_xml == xml and ex.junit_sha256 == hashlib.sha256(xml).hexdigest()
