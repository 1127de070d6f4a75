"""The suite result (``patchbake-suite-result/v1``): what ``fixtures run`` writes with
``--results-out`` and ``evidence sign`` turns into a signed statement.

``SuiteResult`` is that document typed. ``SuiteResult.load`` is its one reader: format and
version, every field's presence and type, the digests, counts and outcome words are
checked at the edge, and anything else (an unknown field included) is refused with one
line; ``dump`` is its one writer (pretty canonical JSON, the bytes ``--results-out`` has
always written). A result is read only to be signed, so a bad one is refused as evidence
that cannot count: ``EvidenceError``, reason ``missing``, ``unreadable`` or ``malformed``.

Parts the runner records as it found them stay JSON objects: the suite's declaration
(past its name, path and content hash), the environment, the probes' details and the
steps. ``junit_b64`` joined v1 later: a result written before it reads as null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import EvidenceError, refuse_evidence
from ..fields import Fields
from ..fsutil import pretty_json, read_input
from .image import SuiteImage

RESULT_FORMAT = "patchbake-suite-result/v1"
COUNT_KEYS = ("tests", "passed", "failed", "skipped", "errors")
OUTCOMES = ("PASSED", "FAILED")
RUNNERS = ("host", "docker")
_HINT = "produce it with `patchbake suites run SUITE --results-out FILE`"

_KEYS = ("format", "suite", "image", "runner", "result", "problems", "counts", "passed_tests",
         "failed_tests", "skipped_tests", "junit_sha256", "environment", "started_at",
         "duration_s", "probes", "steps")
_MALFORMED = partial(EvidenceError, reason="malformed", hint=_HINT)


@dataclass(frozen=True)
class SuiteResult:
    """One run of a declared suite against one exact image."""

    suite: Mapping[str, Any]  # the declaration it ran under, with its content_sha256
    image: SuiteImage  # digest and config_digest are Digests
    runner: str  # host | docker
    result: str  # PASSED | FAILED (the run; probes are judged when it is signed)
    problems: tuple[str, ...]
    counts: Mapping[str, int]  # exactly COUNT_KEYS
    passed_tests: tuple[str, ...]
    failed_tests: tuple[str, ...]
    skipped_tests: tuple[str, ...]
    junit_sha256: str  # hex of the JUnit XML of the first run
    junit_b64: str | None  # those bytes, base64 (kept beside the signed evidence)
    environment: Mapping[str, Any]
    started_at: str
    duration_s: float
    probes: Mapping[str, Mapping[str, Any]]  # patch_sensitivity, determinism
    steps: tuple[Mapping[str, Any], ...]

    @property
    def suite_name(self) -> str:
        return str(self.suite["name"])

    @property
    def suite_path(self) -> str:
        return str(self.suite["path"])

    @property
    def content_sha256(self) -> str:
        return str(self.suite["content_sha256"])

    @property
    def probed_pristine(self) -> bool:
        """Whether a patch-sensitivity probe ran (its tree must then be the pinned one)."""
        status = (self.probes.get("patch_sensitivity") or {}).get("status")
        return status not in (None, "not-declared")

    @classmethod
    def from_json(cls, doc: object, where: str) -> SuiteResult:
        """The edge: a parsed document checked once, or ``malformed`` naming the field."""
        # the format first: a later version's members are not "unknown" but another format
        Fields(doc, where, _MALFORMED, ("format",), others=True).one_of("format",
                                                                       (RESULT_FORMAT,))
        f = Fields(doc, where, _MALFORMED, _KEYS, ("junit_b64",))
        image = f.member("image", ("name", "digest", "config_digest"))
        suite = f.member("suite", ("name", "path", "content_sha256"), others=True)
        for key in ("name", "path"):
            suite.text(key)
        suite.hex("content_sha256")
        counts = f.member("counts", COUNT_KEYS)
        probes = f.member("probes", (), others=True)
        return cls(
            suite=f.mapping("suite"),
            image=SuiteImage(image.text("name"), image.digest("digest"),
                             image.opt_digest("config_digest")),
            runner=f.one_of("runner", RUNNERS), result=f.one_of("result", OUTCOMES),
            problems=f.texts("problems"), counts={k: counts.integer(k) for k in COUNT_KEYS},
            passed_tests=f.texts("passed_tests"), failed_tests=f.texts("failed_tests"),
            skipped_tests=f.texts("skipped_tests"), junit_sha256=f.hex("junit_sha256"),
            junit_b64=f.opt_text("junit_b64"), environment=f.mapping("environment"),
            started_at=f.text("started_at"), duration_s=f.number("duration_s"),
            probes={k: probes.mapping(k) for k in probes.doc}, steps=f.mappings("steps"))

    @classmethod
    def load(cls, path: Path) -> SuiteResult:
        data = read_input(path, "suite result", partial(EvidenceError, reason="unreadable"),
                          missing=partial(EvidenceError, reason="missing", hint=_HINT))
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            refuse_evidence("malformed", f"suite result {path} is not JSON: {exc}")
        return cls.from_json(doc, f"suite result {path}")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RESULT_FORMAT,
            "suite": dict(self.suite),
            "image": {"name": self.image.name, "digest": str(self.image.digest),
                      "config_digest": None if self.image.config_digest is None
                      else str(self.image.config_digest)},
            "runner": self.runner,
            "result": self.result,
            "problems": list(self.problems),
            "counts": dict(self.counts),
            "passed_tests": list(self.passed_tests),
            "failed_tests": list(self.failed_tests),
            "skipped_tests": list(self.skipped_tests),
            "junit_sha256": self.junit_sha256,
            "junit_b64": self.junit_b64,
            "environment": dict(self.environment),
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "probes": {k: dict(v) for k, v in self.probes.items()},
            "steps": [dict(s) for s in self.steps],
        }

    def dump(self) -> bytes:
        """The result's bytes (pretty canonical JSON): what ``--results-out`` writes."""
        return pretty_json(self.to_json())


__all__ = ["COUNT_KEYS", "RESULT_FORMAT", "SuiteResult"]
