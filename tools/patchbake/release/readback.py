"""Reading back what a promotion attached: the statements beside an image in a registry,
verified against the trust policy and the release that recorded them.

Each statement found (discover.py) must be a DSSE envelope signed by a key whose role
fits its predicate type (evidence and benchmark: a trust-policy grant for it; approval:
an approver of its channel; VSA, SBOM and provenance: ``release``), about the image's
digest (the artifact manifest's ``subject`` and the statement's subject both), and
annotated with the predicate type it carries. Then every envelope the release records
(evidence, benchmark, approvals, SBOM, provenance: their sha256 in release.json; the VSA
beside it) must be among them. A statement signed by a trusted key that the release does
not record (another release of the same image, an approval given later) is listed as
``extra`` and does not fail: the referrers list is shared and only grows. Anything else
that is not a statement (a signature of another tool) is listed as ``ignored``.

Every refusal is an AttachedError (exit 63) whose message starts with what kind it is:
``none found``, ``missing``, ``untrusted``, ``subject mismatch``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import AttachedError, AttestationError, EvidenceError, shown
from ..evidence import dsse, records
from ..evidence.intoto import Statement
from ..evidence.policy import Policy
from ..evidence.statement import PREDICATE_TYPE as EVIDENCE_TYPE
from ..fsutil import read_input, sha256_bytes
from ..oci.registry import RegistryClient
from ..oci.registry_ref import RegistryRef
from . import discover, imageattest, manifest, vsa
from .referrers import DSSE_MEDIA, referrers_tag
from .attest import APPROVAL_TYPE, BENCHMARK_TYPE, check_figures

RELEASE_SIGNED = {vsa.PREDICATE_TYPE: "VSA", **{t: k for k, t in imageattest.PREDICATES.items()}}


@dataclass(frozen=True, slots=True)
class Row:
    statement: str  # "evidence dsv4-topk-gpu", "VSA", "sbom", "(not a statement)"
    envelope: Digest | None
    manifest: Digest
    signer: str
    status: str  # "recorded", "extra", "ignored"
    detail: str  # the recorded path, or why it is extra or ignored

    def dump(self) -> dict[str, Any]:
        return {"statement": self.statement, "status": self.status, "signer": self.signer,
                "envelope": None if self.envelope is None else str(self.envelope),
                "manifest": str(self.manifest), "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ReadBack:
    ref: str
    source: str
    rows: tuple[Row, ...]

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "source": self.source, "ok": True,
                "recorded": self.count("recorded"), "extra": self.count("extra"),
                "statements": [r.dump() for r in self.rows]}


def _keys(pol: Policy, ptype: str, predicate: Any, where: str) -> dict[str, Any]:
    """The keys that may sign a statement of ``ptype`` (grants are checked after)."""
    if ptype in RELEASE_SIGNED:
        return pol.with_role("release")
    if ptype == APPROVAL_TYPE:
        channel = predicate.get("channel") if isinstance(predicate, dict) else None
        return {k: t.key for k, t in pol.keys.items()
                if isinstance(channel, str) and t.approves(channel)}
    if ptype in (EVIDENCE_TYPE, BENCHMARK_TYPE):
        return pol.public_keys()
    raise EvidenceError(f"{where}: predicate type {shown(ptype)} is not one that any "
                        "trust-policy role signs",
                        reason="not-allowed")


def _claimed(payload: bytes, where: str) -> tuple[str, Any]:
    """(predicate type, predicate) as the payload states them, before anything checks it."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("predicateType"), str):
        raise EvidenceError(f"{where}: the payload is not an in-toto statement",
                            reason="malformed")
    return doc["predicateType"], doc.get("predicate")


def _label(ptype: str, st: Statement) -> str:
    pred = st.predicate
    if ptype == EVIDENCE_TYPE:
        return f"evidence {pred.get('suite', '?') if isinstance(pred, dict) else '?'}"
    if ptype == BENCHMARK_TYPE:
        return f"benchmark {pred.get('name')}"
    if ptype == APPROVAL_TYPE:
        return f"approval {pred.get('channel')}"
    return RELEASE_SIGNED[ptype]


def _role_checks(data: bytes, ptype: str, st: Statement, keyid: str, digest: Digest,
                 pol: Policy, where: str) -> None:
    """What each kind asks beyond a trusted signature about the image."""
    if ptype == EVIDENCE_TYPE:
        records.verify_bytes(data, where, digest, pol)  # the grant for its suite, its shape
    elif ptype == BENCHMARK_TYPE:
        pol.check_allowed(keyid, BENCHMARK_TYPE, str(st.predicate.get("name")), where)
        check_figures(st.predicate.get("figures"), where)
    elif ptype in imageattest.PREDICATES.values():
        try:
            imageattest.open_statement(data, RELEASE_SIGNED[ptype], digest, pol, where)
        except AttestationError as exc:
            raise EvidenceError(exc.message, reason="bad-predicate") from None


def check(found: discover.Found, digest: Digest, pol: Policy, where: str) -> tuple[str, str]:
    """(label, signer) of one attached statement, or the AttachedError that refuses it."""
    assert found.data is not None
    if found.subject is not None and found.subject != digest:
        raise AttachedError(f"subject mismatch: {where} is attached with subject "
                            f"{found.subject}, not the image {digest}")
    try:
        if found.media_type != DSSE_MEDIA:
            raise EvidenceError(f"{where}: its layer is {shown(found.media_type)}, not a "
                                "DSSE envelope", reason="unsigned")
        env = dsse.parse(found.data, where)
        ptype, predicate = _claimed(env.payload, where)
        keyid = dsse.verify(env, _keys(pol, ptype, predicate, where), where)
        st = Statement.load(env.payload, where, ptype)
    except EvidenceError as exc:
        raise AttachedError(f"untrusted: {exc.message}",
                            hint="only statements signed by the trust policy's keys, each "
                                 "in its role, may sit beside a released image") from None
    if st.subject_digest != digest:
        raise AttachedError(f"subject mismatch: {where}: the signed statement is about "
                            f"{st.subject_digest}, not the image {digest}")
    if found.annotated and found.annotated != ptype:
        raise AttachedError(f"untrusted: {where} is annotated as {shown(found.annotated)} "
                            f"but carries a {ptype} statement")
    try:
        _role_checks(found.data, ptype, st, keyid, digest, pol, where)
    except EvidenceError as exc:
        raise AttachedError(f"untrusted: {exc.message}") from None
    return _label(ptype, st), pol.keys[keyid].name


def recorded(rel: manifest.Release) -> dict[str, str]:
    """sha256 -> path of every envelope the release records, and of its VSA."""
    vpath = rel.path.parent / manifest.VSA_NAME
    out = {e.envelope_sha256: e.path for e in rel.envelopes()}
    out[sha256_bytes(read_input(vpath, "the release's VSA", AttachedError))] = \
        f"{manifest.RELEASES_DIR.as_posix()}/{rel.id}/{manifest.VSA_NAME}"
    return out


def verify(client: RegistryClient, ref: RegistryRef, rel: manifest.Release,
           pol: Policy) -> ReadBack:
    """The statements attached to ``ref`` (a repository at the release's digest)."""
    digest = rel.digest
    got = discover.discover(client, ref.repo, digest)
    image = f"{ref.host}/{ref.repo}@{digest}"
    if got.via is None or not any(f.data is not None for f in got.found):
        raise AttachedError(
            f"none found: no statements are attached to {image} ("
            + (f"the {got.source} lists none" if got.via else
               f"no referrers API answer, no tag {referrers_tag(digest)}[.att]") + ")",
            hint=f"`patchbake release promote {rel.id[:16]} --to {ref.host}/{ref.repo}:TAG` "
                 "attaches them")
    want = recorded(rel)
    rows: list[Row] = []
    seen: set[str] = set()
    for f in got.found:
        if f.data is None or f.envelope is None:
            rows.append(Row("(not a statement)", None, f.manifest, "-", "ignored",
                            f"artifactType {f.artifact_type or '(none)'}"))
            continue
        where = f"statement {f.envelope.hex[:16]} (artifact {f.manifest.hex[:16]}, {got.via})"
        label, signer = check(f, digest, pol, where)
        sha = f.envelope.hex
        status = "recorded" if sha in want else "extra"
        detail = want.get(sha, "signed by a trusted key; this release does not record it")
        rows.append(Row(label, f.envelope, f.manifest, signer, status, detail))
        seen.add(sha)
    missing = sorted(p for sha, p in want.items() if sha not in seen)
    if missing:
        raise AttachedError(f"missing: {Path(missing[0]).name}, which release "
                            f"{rel.id[:16]} records, is not attached to {image} ("
                            f"{len(missing)} missing of {len(want)}; read from {got.source})",
                            hint="promoting the release under a new tag attaches its "
                                 "statements again")
    return ReadBack(image, got.source, tuple(rows))
