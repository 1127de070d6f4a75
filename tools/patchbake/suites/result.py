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
from functools import partial
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest, is_digest, is_hex
from ..errors import EvidenceError, refuse_evidence, shown
from ..fsutil import pretty_json, read_input
from .image import SuiteImage

RESULT_FORMAT = "patchbake-suite-result/v1"
COUNT_KEYS = ("tests", "passed", "failed", "skipped", "errors")
OUTCOMES = ("PASSED", "FAILED")
RUNNERS = ("host", "docker")
_HINT = "produce it with `patchbake suites run SUITE --results-out FILE`"

# field -> the JSON types it must have (bool is never an int or a number here)
_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (str,), "suite": (dict,), "image": (dict,), "runner": (str,),
    "result": (str,), "problems": (list,), "counts": (dict,), "passed_tests": (list,),
    "failed_tests": (list,), "skipped_tests": (list,), "junit_sha256": (str,),
    "junit_b64": (str, type(None)), "environment": (dict,), "started_at": (str,),
    "duration_s": (int, float), "probes": (dict,), "steps": (list,),
}
_OPTIONAL = ("junit_b64",)
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", int: "a number",
               float: "a number", type(None): "null"}


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
        if not isinstance(doc, dict):
            refuse_evidence("malformed", f"{where} is not a JSON object", hint=_HINT)
        if doc.get("format") != RESULT_FORMAT:
            refuse_evidence("malformed", f"{where} is not a suite result of format {RESULT_FORMAT} "
                 f"(found {shown(doc.get('format'))})", hint=_HINT)
        _check_fields(doc, where)
        image = _image(doc["image"], where)
        _check_values(doc, where)
        return cls(
            suite=doc["suite"], image=image, runner=doc["runner"], result=doc["result"],
            problems=tuple(doc["problems"]), counts=doc["counts"],
            passed_tests=tuple(doc["passed_tests"]), failed_tests=tuple(doc["failed_tests"]),
            skipped_tests=tuple(doc["skipped_tests"]), junit_sha256=doc["junit_sha256"],
            junit_b64=doc.get("junit_b64"), environment=doc["environment"],
            started_at=doc["started_at"], duration_s=doc["duration_s"],
            probes=doc["probes"], steps=tuple(doc["steps"]))

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


def _kind(value: object, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _check_fields(doc: dict[str, Any], where: str) -> None:
    unknown = sorted(set(doc) - set(_FIELDS))
    if unknown:
        refuse_evidence("malformed", f"{where}: unknown field(s) {', '.join(unknown)}", hint=_HINT)
    for key, types in _FIELDS.items():
        if key not in doc and key not in _OPTIONAL:
            refuse_evidence("malformed", f"{where}: '{key}' is missing", hint=_HINT)
        if key in doc and not _kind(doc[key], types):
            refuse_evidence("malformed", f"{where}: '{key}' must be {_TYPE_NAMES[types[0]]}, got "
                 f"{type(doc[key]).__name__}", hint=_HINT)


def _image(image: dict[str, Any], where: str) -> SuiteImage:
    if not isinstance(image.get("name"), str):
        refuse_evidence("malformed", f"{where}: 'image.name' must be a string")
    for key in ("digest", "config_digest"):
        value = image.get(key)
        if not is_digest(value) and not (key == "config_digest" and value is None):
            refuse_evidence("malformed", f"{where}: 'image.{key}' {shown(value)} is not sha256:<64 hex>")
    extra = sorted(set(image) - {"name", "digest", "config_digest"})
    if extra or "config_digest" not in image:
        refuse_evidence("malformed", f"{where}: 'image' must hold exactly name, digest and "
             "config_digest")
    config = image["config_digest"]
    return SuiteImage(image["name"], Digest.parse(image["digest"]),
                      None if config is None else Digest.parse(config))


def _check_values(doc: dict[str, Any], where: str) -> None:
    suite = doc["suite"]
    if not isinstance(suite.get("name"), str) or not isinstance(suite.get("path"), str) \
            or not is_hex(suite.get("content_sha256")):
        refuse_evidence("malformed", f"{where}: 'suite' must name the suite, its path and its "
             "content_sha256 (64 hex digits)")
    if doc["runner"] not in RUNNERS or doc["result"] not in OUTCOMES:
        refuse_evidence("malformed", f"{where}: runner {shown(doc['runner'])} / result {shown(doc['result'])} is "
             f"not one of {', '.join(RUNNERS)} / {', '.join(OUTCOMES)}")
    counts = doc["counts"]
    if set(counts) != set(COUNT_KEYS) or not all(_kind(v, (int,)) for v in counts.values()):
        refuse_evidence("malformed", f"{where}: 'counts' must hold the integers {', '.join(COUNT_KEYS)}")
    for key in ("problems", "passed_tests", "failed_tests", "skipped_tests"):
        if not all(isinstance(x, str) for x in doc[key]):
            refuse_evidence("malformed", f"{where}: '{key}' must list strings")
    if not is_hex(doc["junit_sha256"]):
        refuse_evidence("malformed", f"{where}: 'junit_sha256' is not 64 hex digits")
    if not all(isinstance(v, dict) for v in doc["probes"].values()) \
            or not all(isinstance(s, dict) for s in doc["steps"]):
        refuse_evidence("malformed", f"{where}: every probe and every step must be an object")


__all__ = ["COUNT_KEYS", "RESULT_FORMAT", "SuiteResult"]
