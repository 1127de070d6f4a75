"""Signing suite results into stored evidence, and verifying stored evidence.

Layout: ``<evidence_dir>/<image-digest-hex>/<suite>.dsse.json``. A file is written once:
signing the same result with the same key reproduces the same bytes (Ed25519 signatures
are deterministic), anything else for the same image and suite is refused.
"""

from __future__ import annotations

import base64
import platform
import re
from functools import partial
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .. import __version__
from ..digest import Digest
from ..errors import EvidenceError, shown
from ..fsutil import pretty_json, read_input, sha256_bytes, write_once
from ..suites.machine import platform_line
from ..suites.result import SuiteResult
from . import dsse, statement
from ..errors import refuse_evidence
from .policy import Policy
from .statement import SuiteStatement

_unreadable = partial(EvidenceError, reason="unreadable")

SUFFIX = ".dsse.json"
JUNIT_SUFFIX = ".junit.xml"  # the JUnit bytes a statement's junitSha256 names, beside it
NOT_SHOWN = "not shown to test the patch"
_SUITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Verified:
    """Evidence whose signature, key, subject and predicate all checked out."""

    path: Path
    keyid: str
    signer: str
    statement: SuiteStatement
    envelope_sha256: str

    junit: str = "not committed"  # "matches" when <suite>.junit.xml sits beside it

    @property
    def patch_shown(self) -> bool:
        """The suite proved it can fail: it failed on the pristine upstream tree."""
        sens = self.statement.probes.get("patch_sensitivity") or {}
        return sens.get("status") == "ok"

    @property
    def counts_as_evidence(self) -> bool:
        """Only a passing run of a suite shown to fail without the patch counts: a suite
        that never proved it can fail says nothing about the patch."""
        return self.statement.result == "PASSED" and self.patch_shown

    @property
    def standing(self) -> str:
        if self.statement.result != "PASSED":
            return self.statement.result
        return "counts" if self.patch_shown else NOT_SHOWN


def evidence_path(evidence_dir: Path, image_digest: Digest, suite: str) -> Path:
    if not _SUITE_NAME.match(suite):
        raise EvidenceError(f"suite name {shown(suite)} cannot name an evidence file")
    return evidence_dir / image_digest.hex / f"{suite}{SUFFIX}"


def check_pristine_probe(result: SuiteResult, pinned_vllm_digest: Digest) -> None:
    """Fail closed unless a patch-sensitivity probe ran on the pinned upstream's vLLM tree.

    The probe may run where the upstream cannot be fetched (a GPU box given
    ``--pristine-image``/``--pristine-tree``); it records the digest of the ``vllm/`` tree it
    ran on, and signing (where the pin can be fetched) compares it with the pin's.
    """
    if not result.probed_pristine:
        return
    suite = result.suite_name
    got = result.probes["patch_sensitivity"].get("vllm_tree_digest")
    if not got:
        refuse_evidence("foreign-pristine", f"suite '{suite}': the result does not record which vLLM tree "
             "its patch-sensitivity probe ran on, so it cannot show the suite fails on the "
             "pinned upstream", hint="re-run `patchbake suites run` with this version")
    if got != str(pinned_vllm_digest):
        refuse_evidence("foreign-pristine", f"suite '{suite}': the patch-sensitivity probe ran on a vLLM "
             f"tree {got}, not the pinned upstream's {pinned_vllm_digest}",
             hint="probe on the pinned upstream (default) or on the unpatched base image")


def sign_result(result: SuiteResult, key: Ed25519PrivateKey, evidence_dir: Path,
                ) -> tuple[Path, bool, SuiteStatement]:
    """Sign one suite result; store it; return (path, newly written, statement)."""
    steps = [dict(s) for s in result.steps]
    # Where signing happened, without a time: re-signing the same result on the same
    # machine must give the same bytes, so the write-once store accepts it.
    steps.append({"step": "sign", "host": platform.node(), "platform": platform_line(),
                  "tool": f"patchbake {__version__}"})
    stmt = SuiteStatement.of(statement.build(result, steps), "the statement about to be signed")
    env = dsse.sign(stmt.dump(), key)
    data = pretty_json(env.to_json())
    path = evidence_path(evidence_dir, result.image.digest, result.suite_name)
    junit = _junit_bytes(result)
    jp = junit_path(path)
    if junit is not None and jp.exists() and read_input(jp, "JUnit report", _unreadable) != junit:
        refuse_evidence("exists", f"{jp} already holds another JUnit report for this image and suite; "
             "evidence is never overwritten")
    try:
        written = write_once(path, data)
        if junit is not None:
            write_once(jp, junit)
    except FileExistsError:
        refuse_evidence("exists", f"{path} already holds different evidence for this image and suite; "
             "evidence is never overwritten", hint="a new run of the suite needs a new image "
             "or the old file removed deliberately in review")
    return path, written, stmt


def junit_path(envelope: Path) -> Path:
    return envelope.with_name(envelope.name.removesuffix(SUFFIX) + JUNIT_SUFFIX)


def _junit_bytes(result: SuiteResult) -> bytes | None:
    """The JUnit XML the result carries, checked against the sha256 it names."""
    if result.junit_b64 is None:
        return None
    try:
        data = base64.b64decode(result.junit_b64, validate=True)
    except ValueError:
        refuse_evidence("malformed", "the suite result's junit_b64 is not base64")
    if sha256_bytes(data) != result.junit_sha256:
        refuse_evidence("junit-mismatch", f"the suite result's JUnit XML hashes to {sha256_bytes(data)}, "
             f"its junit_sha256 says {result.junit_sha256}")
    return data


def _check_junit(path: Path, stmt: SuiteStatement) -> str:
    """``<suite>.junit.xml`` beside the envelope, when present, must be the signed one."""
    jp = junit_path(path)
    if not jp.exists() and not jp.is_symlink():
        return "not committed"
    data = read_input(jp, "JUnit report", _unreadable)
    want = stmt.junit_sha256
    if sha256_bytes(data) != want:
        refuse_evidence("junit-mismatch", f"{jp} hashes to {sha256_bytes(data)}; the signed statement "
             f"names JUnit sha256 {want}: it is not the report of the signed run")
    return "matches"


def verify_bytes(data: bytes, where: str, image_digest: Digest, policy: Policy,
                 suite: str | None = None) -> tuple[str, SuiteStatement]:
    env = dsse.parse(data, where)
    keyid = dsse.verify(env, policy.public_keys(), where)
    stmt = SuiteStatement.load(env.payload, where)
    policy.check_allowed(keyid, statement.PREDICATE_TYPE, stmt.suite, where)
    if stmt.subject_digest != image_digest:
        refuse_evidence("wrong-subject", f"{where}: evidence is about image {stmt.subject_digest}, not "
             f"{image_digest}: it does not carry over to another image")
    if suite is not None and stmt.suite != suite:
        refuse_evidence("wrong-suite", f"{where}: the statement is about suite '{stmt.suite}', but "
             f"the file is stored as suite '{suite}'")
    return keyid, stmt


def verify_file(path: Path, image_digest: Digest, policy: Policy,
                suite: str | None = None) -> Verified:
    """Verify one envelope file against an image digest; raise EvidenceError otherwise.

    The suite a file stands for is its name, ``<suite>.dsse.json``: a statement about
    another suite stored under that name is refused, as is a file not named so."""
    data = read_input(path, "evidence", _unreadable, missing=partial(
        EvidenceError, reason="missing",
        hint="run the suite and sign its result (`patchbake evidence sign`)"))
    if suite is None:
        if not path.name.endswith(SUFFIX) or not _SUITE_NAME.match(path.name[:-len(SUFFIX)]):
            refuse_evidence("wrong-suite", f"evidence {path} is not named <suite>{SUFFIX}: which suite "
                 "it stands for cannot be told")
        suite = path.name[:-len(SUFFIX)]
    keyid, stmt = verify_bytes(data, str(path), image_digest, policy, suite)
    junit = _check_junit(path, stmt)
    return Verified(path, keyid, policy.keys[keyid].name, stmt, sha256_bytes(data), junit)


def verify_suites(evidence_dir: Path, image_digest: Digest, policy: Policy,
                  suites: list[str]) -> dict[str, Verified | EvidenceError]:
    """Each declared suite's evidence for one image: verified, or the reason it is not."""
    out: dict[str, Verified | EvidenceError] = {}
    for name in suites:
        try:
            out[name] = verify_file(evidence_path(evidence_dir, image_digest, name),
                                    image_digest, policy, name)
        except EvidenceError as exc:
            out[name] = exc
    return out


def describe_failure(exc: EvidenceError) -> dict[str, str]:
    return {"reason": exc.reason, "message": exc.one_line()}
