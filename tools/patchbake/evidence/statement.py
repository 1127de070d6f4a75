"""The test-result statement: an in-toto Statement v1 (``intoto.Statement``) whose
predicate is the in-toto test-result type, built from a suite result.

The predicate is the in-toto test-result type (``result``, ``configuration``,
``passedTests``, ``warnedTests``, ``failedTests``) plus patchbake's own fields: the suite
and its content hash, counts, environment, runner, probes, and where each step ran.
``result`` is PASSED only when the suite passed AND its probes hold (a patch-sensitive
suite failed on pristine; repeats were bit-identical); passing tests with a flagged probe
is WARNED, which never counts as evidence.

``SuiteStatement`` is such a statement typed: ``SuiteStatement.load`` reads a signed
payload (through ``Statement.load``) and checks the predicate once; ``dump`` is the
statement's canonical JSON, the bytes that are signed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..digest import Digest, is_hex
from ..suites.result import COUNT_KEYS, SuiteResult
from ..errors import refuse_evidence, shown
from .intoto import Statement

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RESULTS = ("PASSED", "WARNED", "FAILED")
RUNNERS = ("host", "docker")


@dataclass(frozen=True)
class SuiteStatement:
    """A test-result statement that passed the shape check: the statement as signed, and
    the predicate's fields its readers use, typed."""

    statement: Statement
    suite: str
    result: str  # PASSED | WARNED | FAILED
    counts: Mapping[str, int]  # exactly COUNT_KEYS
    environment: Mapping[str, Any]
    runner: str  # host | docker
    probes: Mapping[str, Mapping[str, Any]]
    declaration: Mapping[str, Any]  # the suite's declaration as it ran
    suite_path: str  # the suite's directory, as the pipeline declares it
    content_sha256: str  # the suite's files, as a tree digest (hex)
    junit_sha256: str  # the JUnit XML of the signed run (hex)

    @property
    def subject_name(self) -> str:
        return self.statement.subject_name

    @property
    def subject_digest(self) -> Digest:
        return self.statement.subject_digest

    @property
    def predicate(self) -> Mapping[str, Any]:
        return self.statement.predicate

    @property
    def needs_gpu(self) -> bool:
        """The suite was declared to need a CUDA GPU."""
        requires = self.declaration.get("requires")
        return isinstance(requires, dict) and bool(requires.get("gpu"))

    @property
    def flags(self) -> list[str]:
        """Why a passing run of this suite cannot count (empty when it can)."""
        return probe_flags(self.probes, self.declaration)

    @classmethod
    def of(cls, st: Statement, where: str) -> SuiteStatement:
        """Shape-check a statement's test-result predicate; anything unexpected is
        ``bad-predicate``."""
        if st.predicate_type != PREDICATE_TYPE:
            refuse_evidence("bad-predicate", f"{where}: predicateType is {shown(st.predicate_type)}, "
                 f"expected {PREDICATE_TYPE!r}")
        pred = st.predicate
        result = _need(pred, "result", str, where)
        if result not in RESULTS:
            refuse_evidence("bad-predicate", f"{where}: result {shown(result)} is not one of "
                 f"{', '.join(RESULTS)}")
        for key in ("passedTests", "failedTests", "configuration"):
            _need(pred, key, list, where)
        suite = _need(pred, "suite", str, where)
        content = _need(pred, "suiteContentSha256", str, where)
        if not is_hex(content):
            refuse_evidence("bad-predicate", f"{where}: suiteContentSha256 is not a sha256")
        counts = _counts(pred, result, where)
        env = _need(pred, "environment", dict, where)
        runner = _need(pred, "runner", str, where)
        if runner not in RUNNERS:
            refuse_evidence("bad-predicate", f"{where}: runner {shown(runner)} is not host or docker")
        probes = _probes(pred, where)
        decl = _need(pred, "suiteDeclaration", dict, where)
        flags = probe_flags(probes, decl)
        if result == "PASSED" and flags:
            refuse_evidence("bad-predicate", f"{where}: result PASSED although {flags[0]}")
        junit = _need(pred, "junitSha256", str, where)
        if not is_hex(junit):
            refuse_evidence("bad-predicate", f"{where}: junitSha256 is not a sha256")
        return cls(st, suite, result, counts, env, runner, probes, decl,
                   _configuration(pred, content, where), content, junit)

    @classmethod
    def load(cls, payload: bytes, where: str) -> SuiteStatement:
        return cls.of(Statement.load(payload, where, PREDICATE_TYPE), where)

    def dump(self) -> bytes:
        return self.statement.dump()


def probe_flags(probes: Mapping[str, Any], declared: Mapping[str, Any] | None = None
                ) -> list[str]:
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


def overall_result(result: SuiteResult) -> str:
    if result.result != "PASSED":
        return "FAILED"
    return "WARNED" if probe_flags(result.probes, result.suite) else "PASSED"


def build(result: SuiteResult, steps: list[dict[str, Any]]) -> Statement:
    """The statement for one suite result (the document `fixtures run` writes)."""
    predicate = {
        "result": overall_result(result),
        "configuration": [{"name": result.suite_path,
                           "digest": {"sha256": result.content_sha256}}],
        "passedTests": list(result.passed_tests),
        "warnedTests": list(result.skipped_tests),
        "failedTests": list(result.failed_tests),
        "suite": result.suite_name,
        "suiteContentSha256": result.content_sha256,
        "suiteDeclaration": dict(result.suite),
        "counts": {k: result.counts[k] for k in COUNT_KEYS},
        "environment": dict(result.environment),
        "runner": result.runner,
        "probes": {k: dict(v) for k, v in result.probes.items()},
        "startedAt": result.started_at,
        "durationSeconds": result.duration_s,
        "junitSha256": result.junit_sha256,
        "steps": steps,
        "producer": {"name": "patchbake", "format": 1},
    }
    return Statement(result.image.name, result.image.digest, PREDICATE_TYPE,
                     predicate)


def _need(obj: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, types) or isinstance(value, bool) and types is int:
        refuse_evidence("bad-predicate", f"{where}: '{key}' is missing or not a {getattr(types, '__name__', types)}")
    return value


def _counts(pred: Mapping[str, Any], result: str, where: str) -> dict[str, int]:
    counts = _need(pred, "counts", dict, where)
    for key in COUNT_KEYS:
        _need(counts, key, int, where + " counts")
    if counts["passed"] != len(pred["passedTests"]) or counts["tests"] != sum(
            counts[k] for k in COUNT_KEYS[1:]):
        refuse_evidence("bad-predicate", f"{where}: counts do not add up with the listed tests")
    if result == "PASSED" and (counts["failed"] or counts["errors"] or not counts["passed"]):
        refuse_evidence("bad-predicate", f"{where}: result PASSED with {counts['failed']} failed, "
             f"{counts['errors']} errors and {counts['passed']} passed tests")
    return {k: int(counts[k]) for k in COUNT_KEYS}


def _probes(pred: Mapping[str, Any], where: str) -> dict[str, Any]:
    probes = _need(pred, "probes", dict, where)
    for name, probe in probes.items():
        if not isinstance(probe, dict):
            refuse_evidence("bad-predicate", f"{where}: probe {shown(name)} is not an object")
    return dict(probes)


def _configuration(pred: Mapping[str, Any], content: str, where: str) -> str:
    """The suite's path: the one configuration entry, naming the suite's content hash."""
    conf = pred["configuration"]
    entry = conf[0] if len(conf) == 1 and isinstance(conf[0], dict) else {}
    if not isinstance(entry.get("name"), str) or entry.get("digest") != {"sha256": content}:
        refuse_evidence("bad-predicate", f"{where}: configuration must be the one suite directory, "
             "with the suite's content sha256")
    return str(entry["name"])


__all__ = ["PREDICATE_TYPE", "SuiteStatement", "build", "overall_result", "probe_flags"]
