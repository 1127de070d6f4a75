"""The release decision, signed: an in-toto Statement v1 with the SLSA
verification-summary predicate (VSA v1), in a DSSE envelope (evidence/dsse.py).

Subject: the image (name + manifest digest). Predicate (SLSA VSA v1 fields only)::

    {"verifier": {"id": "urn:patchbake:release-gates", "version": {"patchbake": "0.1.0"}},
     "timeVerified": "2026-12-01T05:40:00Z",
     "resourceUri": "oci:sm89-serving-offline@sha256:…",
     "policy": {"uri": "pipeline.yaml#channels.validated",
                "digest": {"sha256": "<release manifest sha256 = release id>"}},
     "inputAttestations": [{"uri": "manifests/evidence/…/dsv4-topk-gpu.dsse.json",
                            "digest": {"sha256": "<envelope sha256>"}}, …],
     "verificationResult": "PASSED",
     "verifiedLevels": ["PATCHBAKE_CHANNEL_VALIDATED"],
     "slsaVersion": "1.0"}

The policy digest is the release manifest's sha256 (the release id): that file holds the
gate decisions, so the signature covers every decision. Only keys whose trust-policy role
is ``release`` may sign it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .. import __version__
from ..errors import EvidenceError, ReleaseError
from ..evidence import dsse
from ..evidence.intoto import Statement
from ..evidence.policy import Policy
from .manifest import Release

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "urn:patchbake:release-gates"


@dataclass(frozen=True)
class CheckedVsa:
    keyid: str
    signer: str
    statement: Statement


def level(channel: str) -> str:
    return "PATCHBAKE_CHANNEL_" + channel.upper().replace("-", "_").replace(".", "_")


def build(release: Release, when: float | None = None) -> Statement:
    inputs = [{"uri": e.path, "digest": {"sha256": e.envelope_sha256}}
              for e in release.envelopes()]
    return Statement(release.image, release.digest, PREDICATE_TYPE, {
        "verifier": {"id": VERIFIER_ID, "version": {"patchbake": __version__}},
        "timeVerified": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                      time.gmtime(time.time() if when is None else when)),
        "resourceUri": f"oci:{release.image}@{release.digest}",
        "policy": {"uri": f"pipeline.yaml#channels.{release.channel}",
                   "digest": {"sha256": release.id}},
        "inputAttestations": inputs,
        "verificationResult": "PASSED",
        "verifiedLevels": [level(release.channel)],
        "slsaVersion": "1.0",
    })


def sign(release: Release, key: Ed25519PrivateKey, when: float | None = None) -> bytes:
    env = dsse.sign(build(release, when).dump(), key)
    return json.dumps(env.to_json(), indent=2, sort_keys=True).encode() + b"\n"


def verify(data: bytes, release: Release, policy: Policy, where: str) -> CheckedVsa:
    """Signature by a key with role ``release``; subject, policy digest and inputs must be
    exactly the release's. Any deviation is a ReleaseError naming it."""
    try:
        env = dsse.parse(data, where)
        keyid = dsse.verify(env, policy.with_role("release"), where)
    except EvidenceError as exc:
        raise ReleaseError(f"VSA {exc.message}; only a key whose trust-policy role is "
                           "'release' signs VSAs") from None
    try:
        st = Statement.load(env.payload, where, PREDICATE_TYPE)
    except EvidenceError as exc:
        raise ReleaseError(f"VSA {exc.message}") from None
    want = build(release, 0).predicate
    problems = []
    if st.subject_digest != release.digest:
        problems.append(f"its subject is {st.subject_digest}, the release's image "
                        f"{release.digest}")
    for key in ("policy", "inputAttestations", "verificationResult", "verifiedLevels"):
        if st.predicate.get(key) != want[key]:
            problems.append(f"its {key} differs from the release manifest's")
    if problems:
        raise ReleaseError(f"VSA {where}: {problems[0]}")
    return CheckedVsa(keyid, policy.keys[keyid].name, st)
