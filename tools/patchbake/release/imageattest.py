"""The image's SBOM and SLSA provenance as signed statements of a release.

``make`` (``release create``) builds both from the image's committed record
(evidence/bakefacts.py), signs each as an in-toto Statement v1 in a DSSE envelope with the
key that signs the release (trust-policy role ``release``), and writes them once beside
the image's evidence::

    <evidence_dir>/<image hex>/sbom-<keyid16>.dsse.json        (predicate: the CycloneDX BOM)
    <evidence_dir>/<image hex>/provenance-<keyid16>.dsse.json  (predicate: SLSA provenance v1)

Both are functions of the bake (no time) and Ed25519 signatures are deterministic, so
re-creating a release writes the same bytes. The release manifest records each with its
sha256, so the VSA covers them, promotion attaches them beside it and the bundle carries
them. ``verify`` reads one back, fail-closed: the bytes the release recorded, a signature
by a ``release`` key (EvidenceError otherwise), and a statement whose subject is the
released digest and whose document is valid (AttestationError, exit 53, otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..config import Pipeline
from ..digest import Digest
from ..errors import AttestationError, EvidenceError, ReleaseError
from ..evidence import bakefacts, dsse, provenance, sbom
from ..evidence.intoto import Statement
from ..evidence.keys import keyid_of
from ..evidence.policy import Policy
from ..fsutil import pretty_json, read_input, sha256_bytes, write_once
from ..images.record import find, record_path
from .facts import Attestation

PREDICATES = {"sbom": sbom.PREDICATE_TYPE, "provenance": provenance.PREDICATE_TYPE}


@dataclass(frozen=True)
class Documents:
    """An image's SBOM and provenance statements, unsigned (what `image sbom|provenance`
    print)."""

    facts: bakefacts.BakeFacts
    record: str  # the image record's repository-relative path
    sbom: Statement
    provenance: Statement


def documents(pipeline: Pipeline, digest: Digest) -> Documents | None:
    """Both statements about ``digest``, from its committed record (None: no record)."""
    rec = find(pipeline.root, digest)
    if rec is None:
        return None
    path = record_path(pipeline.root, rec.definition, digest).relative_to(pipeline.root)
    b = bakefacts.gather(pipeline, rec)
    return Documents(b, path.as_posix(),
                     Statement(b.definition, b.digest, sbom.PREDICATE_TYPE, sbom.build(b)),
                     provenance.build(b, path.as_posix()))


def make(pipeline: Pipeline, digest: Digest, key: Ed25519PrivateKey, policy: Policy
         ) -> tuple[Attestation, ...]:
    """Sign and write the image's SBOM and provenance; () when the image has no record."""
    docs = documents(pipeline, digest)
    if docs is None:
        return ()
    keyid = keyid_of(key.public_key())
    out = []
    for kind, st in (("sbom", docs.sbom), ("provenance", docs.provenance)):
        path = pipeline.signing.evidence_dir / digest.hex / f"{kind}-{keyid[:16]}.dsse.json"
        data = pretty_json(dsse.sign(st.dump(), key).to_json())
        try:
            write_once(path, data)
        except FileExistsError:
            raise AttestationError(f"{path} already holds another {kind} of this image; it "
                                   "is never overwritten",
                                   hint="the bake's record or the lineage changed since it "
                                        "was signed: inspect the difference") from None
        out.append(Attestation(kind, path.relative_to(pipeline.root).as_posix(),
                               st.predicate_type, sha256_bytes(data), keyid,
                               policy.keys[keyid].name))
    return tuple(out)


def _check(kind: str, pred: Mapping[str, Any], digest: Digest, where: str) -> int:
    return sbom.check(pred, digest, where) if kind == "sbom" else provenance.check(pred, where)


def open_statement(data: bytes, kind: str, digest: Digest, policy: Policy, where: str
                   ) -> tuple[str, Statement, int]:
    """(keyid, statement, items) of a signed SBOM or provenance about ``digest``; items:
    its components or resolved dependencies."""
    env = dsse.parse(data, where)
    keyid = dsse.verify(env, policy.with_role("release"), where)
    try:
        st = Statement.load(env.payload, where, PREDICATES[kind])
    except EvidenceError as exc:
        raise AttestationError(exc.message) from None
    provenance.subject_check(st, digest, where)
    return keyid, st, _check(kind, st.predicate, digest, where)


def verify(root: Path, att: Attestation, digest: Digest, policy: Policy) -> str:
    """One recorded attestation, checked; a line saying what it holds."""
    data = read_input(root / att.path, f"the release's {att.kind}", ReleaseError)
    if sha256_bytes(data) != att.envelope_sha256:
        raise ReleaseError(f"{att.path} is not the {att.kind} the release recorded "
                           "(re-signed or altered)")
    if att.predicate_type != PREDICATES.get(att.kind):
        raise AttestationError(f"{att.path}: predicate type {att.predicate_type} is not "
                               f"the {att.kind} type {PREDICATES.get(att.kind)}")
    keyid, _, n = open_statement(data, att.kind, digest, policy, att.path)
    what = "components" if att.kind == "sbom" else "resolved dependencies"
    return f"{att.kind}: {n} {what}, signed by {policy.keys[keyid].name}"


__all__ = ["PREDICATES", "Documents", "documents", "make", "open_statement", "verify"]
