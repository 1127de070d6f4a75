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
from functools import partial
from typing import Any

from ..digest import Digest
from ..errors import EvidenceError, refuse_evidence, shown
from ..fields import Fields
from ..suites.result import COUNT_KEYS, SuiteResult
from .intoto import Statement

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RESULTS = ("PASSED", "WARNED", "FAILED")
RUNNERS = ("host", "docker")
_KEYS = ("result", "configuration", "passedTests", "failedTests", "suite", "suiteContentSha256",
         "suiteDeclaration", "counts", "environment", "runner", "probes", "junitSha256")
_BAD = partial(EvidenceError, reason="bad-predicate")


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
        # the test-result type is open to producers' members: those not read here are kept
        f = Fields(st.predicate, where, _BAD, _KEYS, at="predicate", others=True)
        result = f.one_of("result", RESULTS)
        for key in ("passedTests", "failedTests"):
            f.texts(key)
        content = f.hex("suiteContentSha256")
        counts = _counts(f, result, where)
        p = f.member("probes", (), others=True)
        probes = {k: p.mapping(k) for k in p.doc}
        decl = f.mapping("suiteDeclaration")
        flags = probe_flags(probes, decl)
        if result == "PASSED" and flags:
            refuse_evidence("bad-predicate", f"{where}: result PASSED although {flags[0]}")
        return cls(st, f.text("suite"), result, counts, f.mapping("environment"),
                   f.one_of("runner", RUNNERS), probes, decl, _configuration(f, content),
                   content, f.hex("junitSha256"))

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


def _counts(f: Fields, result: str, where: str) -> dict[str, int]:
    c = f.member("counts", COUNT_KEYS, others=True)
    counts = {k: c.integer(k) for k in COUNT_KEYS}
    if counts["passed"] != len(f.doc["passedTests"]) or counts["tests"] != sum(
            counts[k] for k in COUNT_KEYS[1:]):
        refuse_evidence("bad-predicate", f"{where}: counts do not add up with the listed tests")
    if result == "PASSED" and (counts["failed"] or counts["errors"] or not counts["passed"]):
        refuse_evidence("bad-predicate", f"{where}: result PASSED with {counts['failed']} failed, "
             f"{counts['errors']} errors and {counts['passed']} passed tests")
    return counts


def _configuration(f: Fields, content: str) -> str:
    """The suite's path: the one configuration entry, naming the suite's content hash."""
    conf = f.members("configuration", (), others=True)
    if len(conf) != 1 or conf[0].doc.get("digest") != {"sha256": content}:
        raise f.bad("configuration", "the one suite directory, with the suite's content sha256")
    return conf[0].text("name")


__all__ = ["PREDICATE_TYPE", "SuiteStatement", "build", "overall_result", "probe_flags"]
