"""The typed formats of the evidence chain: ``SuiteResult`` (what `fixtures run` writes and
`evidence sign` reads), ``Statement`` (every signed payload) and ``SuiteStatement`` (its
test-result predicate). Each has one load and one dump: the committed files round-trip
byte for byte, a committed result rebuilds its committed signed statement byte for byte,
and each malformed shape is refused with its one-line message."""

from __future__ import annotations

import base64
import calendar
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import EvidenceError
from patchbake.evidence import statement
from patchbake.evidence.intoto import STATEMENT_TYPE, Statement
from patchbake.evidence.statement import PREDICATE_TYPE, SuiteStatement
from patchbake.fsutil import canonical_json
from patchbake.release import manifest, vsa
from patchbake.suites.result import RESULT_FORMAT, SuiteResult
from test_evidence_sign_verify import make_result, result_doc

REPO = Path(__file__).resolve().parents[2]
RESULTS = sorted(p for p in (REPO / "manifests" / "gpu").glob("*/*.json")
                 if json.loads(p.read_bytes()).get("format") == RESULT_FORMAT)
ENVELOPES = sorted((REPO / "manifests" / "evidence").glob("*/*.dsse.json"))
VSAS = sorted((REPO / "manifests" / "releases").glob("*/vsa.dsse.json"))
Doc = dict[str, Any]


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name[:12]}/{p.name}" for p in paths]


def _payload(envelope: Path) -> bytes:
    return base64.b64decode(json.loads(envelope.read_bytes())["payload"])


def refused(reason: str, message: str, fn: Callable[..., object], *a: Any) -> None:
    with pytest.raises(EvidenceError) as info:
        fn(*a)
    line = info.value.one_line()
    assert info.value.reason == reason and message in line, line
    assert "\n" not in info.value.message and info.value.exit_code == 50


# -- round trips on the committed files ----------------------------------------------------
def test_there_are_committed_results_envelopes_and_vsas() -> None:
    assert len(RESULTS) >= 4 and len(ENVELOPES) >= 6 and VSAS


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_committed_suite_result_round_trips_byte_for_byte(path: Path) -> None:
    result = SuiteResult.load(path)
    assert result.dump() == path.read_bytes()
    assert SuiteResult.from_json(json.loads(path.read_bytes()), "r") == result


@pytest.mark.parametrize("path", ENVELOPES, ids=_ids(ENVELOPES))
def test_committed_statement_round_trips_byte_for_byte(path: Path) -> None:
    """Every committed envelope (suite results, and the SBOM and provenance a release
    signs) loads as the statement type it claims and dumps to the signed bytes."""
    payload = _payload(path)
    claimed = json.loads(payload)["predicateType"]
    stmt = Statement.load(payload, str(path), claimed)
    assert stmt.dump() == payload == canonical_json(json.loads(payload))
    assert stmt.subject_digest == Digest.from_hex(path.parent.name)
    if claimed == PREDICATE_TYPE:
        assert SuiteStatement.load(payload, str(path)).dump() == payload


@pytest.mark.parametrize("path", VSAS, ids=_ids(VSAS))
def test_committed_vsa_statement_round_trips_byte_for_byte(path: Path) -> None:
    payload = _payload(path)
    assert Statement.load(payload, str(path), vsa.PREDICATE_TYPE).dump() == payload


@pytest.mark.parametrize("path", VSAS, ids=_ids(VSAS))
def test_committed_release_rebuilds_its_signed_vsa_byte_for_byte(path: Path) -> None:
    payload = _payload(path)
    when = json.loads(payload)["predicate"]["timeVerified"]
    epoch = calendar.timegm(time.strptime(when, "%Y-%m-%dT%H:%M:%SZ"))
    assert vsa.build(manifest.load(REPO, path.parent.name), epoch).dump() == payload


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_committed_result_rebuilds_its_signed_statement_byte_for_byte(path: Path) -> None:
    """The signatures are over these bytes: building the statement from the committed
    result (with the steps the signer added) gives exactly the signed payload."""
    result = SuiteResult.load(path)
    envelope = (REPO / "manifests" / "evidence" / result.image.digest.hex
                / f"{result.suite_name}.dsse.json")
    payload = _payload(envelope)
    steps = json.loads(payload)["predicate"]["steps"]
    assert statement.build(result, steps).dump() == payload


def test_a_result_written_before_junit_b64_reads_as_null() -> None:
    doc = result_doc()
    assert "junit_b64" not in doc
    result = SuiteResult.from_json(doc, "r")
    assert result.junit_b64 is None
    assert result.to_json() == {**doc, "junit_b64": None}


# -- SuiteResult refusals --------------------------------------------------------------------
def _set(path: str, value: Any) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        *parents, last = path.split(".")
        for p in parents:
            doc = doc[p]
        doc[last] = value
    return edit


def _drop(key: str) -> Callable[[Doc], None]:
    return lambda doc: doc.pop(key)


@pytest.mark.parametrize("edit, message", [
    (_set("format", "patchbake-suite-result/v2"),
     "field 'format' must be 'patchbake-suite-result/v1', got 'patchbake-suite-result/v2'"),
    (_drop("format"), "field 'format' is missing"),
    (_set("extra", 1), "unknown field 'extra'"),
    (_drop("environment"), "'environment' is missing"),
    (_drop("steps"), "'steps' is missing"),
    (_set("counts", []), "field 'counts' must be a JSON object, got []"),
    (_set("duration_s", True), "field 'duration_s' must be a number, got True"),
    (_set("junit_b64", 5), "field 'junit_b64' must be a string, got 5"),
    (_set("image.digest", "sha256:AB"), "field 'image.digest' 'sha256:AB' is not sha256:<64 lowercase hex digits>"),
    (_set("image.config_digest", "ab" * 32), "'image.config_digest'"),
    (_set("image.name", None), "'image.name' must be a string"),
    (_set("image.tag", "x"), "unknown field 'image.tag'"),
    (_set("suite.content_sha256", "x"), "field 'suite.content_sha256' must be a sha256 (64 "
     "lowercase hex digits), got 'x'"),
    (_set("runner", "ssh"), "field 'runner' must be 'host' or 'docker', got 'ssh'"),
    (_set("result", "WARNED"), "field 'result' must be 'PASSED' or 'FAILED', got 'WARNED'"),
    (_set("counts.passed", "3"), "field 'counts.passed' must be an integer, got '3'"),
    (_set("counts.extra", 0), "unknown field 'counts.extra'"),
    (_set("passed_tests", ["a", 1]), "field 'passed_tests' must be a JSON array of strings, got ['a', 1]"),
    (_set("junit_sha256", "22"), "field 'junit_sha256' must be a sha256 (64 lowercase hex digits), got '22'"),
    (_set("probes.determinism", "ok"), "field 'probes.determinism' must be a JSON object, got "
     "'ok'"),
    (_set("steps", ["run"]), "field 'steps[0]' must be a JSON object, got 'run'"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_suite_result_is_refused(tmp_path: Path, edit: Callable[[Doc], None],
                                           message: str) -> None:
    doc = result_doc()
    edit(doc)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    refused("malformed", f"suite result {path}", SuiteResult.load, path)
    refused("malformed", message, SuiteResult.load, path)


@pytest.mark.parametrize("data, reason, message", [
    (b"[1]", "malformed", "is not a JSON object"),
    (b"{not json", "malformed", "is not JSON"),
    (None, "missing", "does not exist"),
])
def test_unreadable_suite_result_is_refused(tmp_path: Path, data: bytes | None, reason: str,
                                            message: str) -> None:
    path = tmp_path / "r.json"
    if data is not None:
        path.write_bytes(data)
    refused(reason, message, SuiteResult.load, path)


def test_what_a_run_dumps_loads_back_the_same() -> None:
    result = make_result(junit_b64="PGEvPg==")
    assert SuiteResult.from_json(json.loads(result.dump()), "r") == result


# -- Statement refusals --------------------------------------------------------------------
def _statement() -> Doc:
    return statement.build(make_result(), []).to_json()


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"),
     "field '_type' must be 'https://in-toto.io/Statement/v1', got "
     "'https://in-toto.io/Statement/v0.1'"),
    (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"),
     f"field 'predicateType' must be {PREDICATE_TYPE!r}, got 'https://slsa.dev/provenance/v1'"),
    (lambda s: s.update(note="x"), "unknown field 'note'"),
    (lambda s: s["subject"].append(s["subject"][0]),
     "field 'subject' must be a list of exactly one image"),
    (lambda s: s.update(subject={}), "field 'subject' must be a JSON array, got {}"),
    (lambda s: s["subject"][0]["digest"].update(sha256="AB"),
     "field 'subject[0].digest.sha256' must be a sha256 (64 lowercase hex digits), got 'AB'"),
    (lambda s: s["subject"][0]["digest"].update(sha512="ab"),
     "unknown field 'subject[0].digest.sha512'"),
    (lambda s: s["subject"][0].pop("name"), "field 'subject[0].name' is missing"),
    (lambda s: s["subject"][0].update(uri="oci://x"),
     "unknown field 'subject[0].uri'"),
    (lambda s: s.update(predicate=[]), "field 'predicate' must be a JSON object, got []"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_statement_is_refused(edit: Callable[[Doc], None], message: str) -> None:
    doc = _statement()
    edit(doc)
    refused("bad-predicate", message, Statement.load, canonical_json(doc), "s", PREDICATE_TYPE)


@pytest.mark.parametrize("payload, message", [
    (b"\xff not json", "the signed payload is not JSON"),
    (b"[]", "s: the document is not a JSON object"),
    (b"[" * 100000, "nested too deeply"),
])
def test_payload_that_is_no_statement_is_refused(payload: bytes, message: str) -> None:
    refused("bad-predicate", message, Statement.load, payload, "s", PREDICATE_TYPE)


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.pop("suiteDeclaration"), "field 'predicate.suiteDeclaration' is missing"),
    (lambda p: p.pop("junitSha256"), "field 'predicate.junitSha256' is missing"),
    (lambda p: p.update(junitSha256="x"), "field 'predicate.junitSha256' must be a sha256 (64 "
     "lowercase hex digits), got 'x'"),
    (lambda p: p["probes"].update(determinism="ok"), "field 'predicate.probes.determinism' must "
     "be a JSON object, got 'ok'"),
    (lambda p: p["configuration"][0]["digest"].update(sha256="00" * 32),
     "field 'predicate.configuration' must be the one suite directory, with the suite's "
     "content sha256"),
    (lambda p: p["configuration"].append({}),
     "field 'predicate.configuration' must be the one suite directory"),
    (lambda p: p.update(runner="ssh"), "field 'predicate.runner' must be 'host' or 'docker', got 'ssh'"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_test_result_predicate_is_refused(edit: Callable[[Doc], None],
                                                    message: str) -> None:
    doc = _statement()
    edit(doc["predicate"])
    refused("bad-predicate", message, SuiteStatement.load, canonical_json(doc), "s")


def test_statement_dump_is_canonical_whatever_the_order() -> None:
    doc = _statement()
    shuffled = {k: doc[k] for k in reversed(list(doc))}
    st = Statement.from_json(copy.deepcopy(shuffled), "s", PREDICATE_TYPE)
    assert st.dump() == canonical_json(doc)
    assert st.to_json()["_type"] == STATEMENT_TYPE
