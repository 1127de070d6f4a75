"""in-toto Statement v1 carrying the test-result predicate, built from a suite result.

The predicate is the in-toto test-result type (``result``, ``configuration``,
``passedTests``, ``warnedTests``, ``failedTests``) plus patchbake's own fields: the suite
and its content hash, counts, environment, runner, probes, and where each step ran.
``result`` is PASSED only when the suite passed AND its probes hold (a patch-sensitive
suite failed on pristine; repeats were bit-identical); passing tests with a flagged probe
is WARNED, which never counts as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..digest import Digest, is_hex
from .failures import fail

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RESULT_FORMAT = "patchbake-suite-result/v1"
RESULTS = ("PASSED", "WARNED", "FAILED")
COUNT_KEYS = ("tests", "passed", "failed", "skipped", "errors")


@dataclass(frozen=True)
class Statement:
    """A statement that passed the shape check; fields others read are typed here."""

    raw: dict[str, Any]
    subject_name: str
    subject_digest: str  # sha256:<hex>
    suite: str
    result: str
    counts: dict[str, int]
    environment: dict[str, Any]
    runner: str
    probes: dict[str, Any]

    @property
    def predicate(self) -> dict[str, Any]:
        return dict(self.raw["predicate"])


def probe_flags(probes: dict[str, Any], declared: dict[str, Any] | None = None) -> list[str]:
    """Why a passing run cannot count (empty when it can).

    With the suite's ``declared`` declaration, a probe it asks for that has no verdict
    (absent, not run) also counts: a result document missing its probe must not pass.
    """
    flags = []
    decl = declared or {}
    sens = probes.get("patch_sensitivity") or {}
    if sens.get("status") == "flagged":
        flags.append("passes on the pristine upstream tree (not patch-sensitive)")
    elif decl.get("patch_sensitive") is True and sens.get("status") != "ok":
        flags.append("declared patch-sensitive, but the pristine-tree probe has no verdict")
    det = probes.get("determinism") or {}
    if det.get("status") == "flagged":
        flags.append("repeats were not bit-identical")
    elif isinstance(decl.get("repeats"), int) and decl["repeats"] > 1 \
            and det.get("status") != "ok":
        flags.append(f"declared {decl['repeats']} repeats, but the determinism probe has no "
                     "verdict")
    return flags


def overall_result(result: dict[str, Any]) -> str:
    if result.get("result") != "PASSED":
        return "FAILED"
    suite = result.get("suite")
    return "WARNED" if probe_flags(result.get("probes") or {},
                                   suite if isinstance(suite, dict) else None) else "PASSED"


def build(result: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The statement for one suite result (the document `fixtures run` writes)."""
    if result.get("format") != RESULT_FORMAT:
        fail("malformed", f"not a suite result: format is {result.get('format')!r}, expected "
             f"{RESULT_FORMAT!r}", hint="produce it with `patchbake fixtures run --results-out`")
    try:
        return _build(result, steps)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # a truncated or hand-edited result: a named error, never a traceback
        fail("malformed", f"suite result is incomplete or mistyped ({type(exc).__name__}: "
             f"{exc})", hint="produce it with `patchbake fixtures run --results-out`")


def _build(result: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    image, suite = result["image"], result["suite"]
    predicate = {
        "result": overall_result(result),
        "configuration": [{"name": suite["path"],
                           "digest": {"sha256": suite["content_sha256"]}}],
        "passedTests": list(result["passed_tests"]),
        "warnedTests": list(result.get("skipped_tests", [])),
        "failedTests": list(result["failed_tests"]),
        "suite": suite["name"],
        "suiteContentSha256": suite["content_sha256"],
        "suiteDeclaration": suite,
        "counts": {k: int(result["counts"][k]) for k in COUNT_KEYS},
        "environment": result["environment"],
        "runner": result["runner"],
        "probes": result["probes"],
        "startedAt": result["started_at"],
        "durationSeconds": result["duration_s"],
        "junitSha256": result["junit_sha256"],
        "steps": steps,
        "producer": {"name": "patchbake", "format": 1},
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image["name"],
                     "digest": {"sha256": Digest(image["digest"]).hex}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def _need(obj: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, types) or isinstance(value, bool) and types is int:
        fail("bad-predicate", f"{where}: '{key}' is missing or not a {getattr(types, '__name__', types)}")
    return value


def check(obj: Any, where: str) -> Statement:
    """Shape-check a decoded statement; anything unexpected is ``bad-predicate``."""
    if not isinstance(obj, dict):
        fail("bad-predicate", f"{where}: the payload is not a JSON object")
    if obj.get("_type") != STATEMENT_TYPE:
        fail("bad-predicate", f"{where}: _type is {obj.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if obj.get("predicateType") != PREDICATE_TYPE:
        fail("bad-predicate", f"{where}: predicateType is {obj.get('predicateType')!r}, "
             f"expected {PREDICATE_TYPE!r}")
    subjects = obj.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        fail("bad-predicate", f"{where}: subject must list exactly one image")
    digest = (subjects[0].get("digest") or {}).get("sha256") if isinstance(
        subjects[0].get("digest"), dict) else None
    if not is_hex(digest):
        fail("bad-predicate", f"{where}: subject digest is not a sha256")
    name = _need(subjects[0], "name", str, where + " subject")
    pred = _need(obj, "predicate", dict, where)
    result = _need(pred, "result", str, where)
    if result not in RESULTS:
        fail("bad-predicate", f"{where}: result {result!r} is not one of {', '.join(RESULTS)}")
    for key in ("passedTests", "failedTests", "configuration"):
        _need(pred, key, list, where)
    suite = _need(pred, "suite", str, where)
    content = _need(pred, "suiteContentSha256", str, where)
    if not is_hex(content):
        fail("bad-predicate", f"{where}: suiteContentSha256 is not a sha256")
    counts = _need(pred, "counts", dict, where)
    for key in COUNT_KEYS:
        _need(counts, key, int, where + " counts")
    if counts["passed"] != len(pred["passedTests"]) or counts["tests"] != sum(
            counts[k] for k in COUNT_KEYS[1:]):
        fail("bad-predicate", f"{where}: counts do not add up with the listed tests")
    if result == "PASSED" and (counts["failed"] or counts["errors"] or not counts["passed"]):
        fail("bad-predicate", f"{where}: result PASSED with {counts['failed']} failed, "
             f"{counts['errors']} errors and {counts['passed']} passed tests")
    env = _need(pred, "environment", dict, where)
    runner = _need(pred, "runner", str, where)
    if runner not in ("host", "docker"):
        fail("bad-predicate", f"{where}: runner {runner!r} is not host or docker")
    probes = _need(pred, "probes", dict, where)
    decl = pred.get("suiteDeclaration")
    flags = probe_flags(probes, decl if isinstance(decl, dict) else None)
    if result == "PASSED" and flags:
        fail("bad-predicate", f"{where}: result PASSED although {flags[0]}")
    return Statement(obj, name, Digest.from_hex(digest), suite, result,
                     {k: int(counts[k]) for k in COUNT_KEYS}, env, runner, probes)
