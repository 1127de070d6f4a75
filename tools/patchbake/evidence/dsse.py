"""DSSE envelopes (Dead Simple Signing Envelope, v1) signed with Ed25519.

The signature covers the pre-authentication encoding (PAE), never the JSON envelope, so
re-serialising the envelope cannot change what was signed, and the payload type is bound
into the signature (a statement cannot be replayed as another kind of document).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import refuse_evidence, shown
from .keys import keyid_of

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`` with ASCII decimal lengths."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


@dataclass(frozen=True)
class Signature:
    keyid: str | None  # optional in DSSE: None means "try every trusted key"
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "payloadType": self.payload_type,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "signatures": [{"keyid": s.keyid or "", "sig": base64.b64encode(s.sig).decode("ascii")}
                           for s in self.signatures],
        }


def sign(payload: bytes, key: Ed25519PrivateKey, payload_type: str = PAYLOAD_TYPE) -> Envelope:
    sig = key.sign(pae(payload_type, payload))
    return Envelope(payload_type, payload, (Signature(keyid_of(key.public_key()), sig),))


_STD_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_URL_B64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _b64(value: Any, what: str, where: str) -> bytes:
    """DSSE allows standard or URL-safe base64, padded or not (we write standard, padded);
    one alphabet per value, nothing else tolerated."""
    if not isinstance(value, str):
        refuse_evidence("malformed", f"{where}: {what} must be a base64 string")
    if _STD_B64.fullmatch(value):
        altchars = None
    elif _URL_B64.fullmatch(value):
        altchars = b"-_"
    else:
        refuse_evidence("malformed", f"{where}: {what} is not valid base64")
    bare = value.rstrip("=")
    try:
        return base64.b64decode(bare + "=" * (-len(bare) % 4), altchars, validate=True)
    except (binascii.Error, ValueError):
        refuse_evidence("malformed", f"{where}: {what} is not valid base64")


def parse(data: bytes, where: str) -> Envelope:  # noqa: C901 - one check per envelope field
    """Strictly parse an envelope's JSON; every deviation is a named EvidenceError."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        refuse_evidence("malformed", f"{where}: not a JSON document ({exc})")
    except RecursionError:
        refuse_evidence("malformed", f"{where}: a JSON document nested too deeply to read")
    if not isinstance(obj, dict):
        refuse_evidence("malformed", f"{where}: a DSSE envelope must be a JSON object")
    extra = set(obj) - {"payloadType", "payload", "signatures"}
    if extra:
        refuse_evidence("malformed", f"{where}: unknown envelope field(s) {', '.join(sorted(extra))}")
    ptype = obj.get("payloadType")
    if not isinstance(ptype, str):
        refuse_evidence("malformed", f"{where}: payloadType is missing")
    if ptype != PAYLOAD_TYPE:
        refuse_evidence("payload-type", f"{where}: payloadType is {shown(ptype)}, expected {PAYLOAD_TYPE!r}")
    payload = _b64(obj.get("payload"), "payload", where)
    sigs = obj.get("signatures")
    if not sigs:
        refuse_evidence("unsigned", f"{where}: the envelope carries no signature",
             hint="sign it with `patchbake evidence sign`")
    if not isinstance(sigs, list):
        refuse_evidence("malformed", f"{where}: signatures must be a list")
    parsed = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict):
            refuse_evidence("malformed", f"{where}: signature {i} is not an object")
        keyid = s.get("keyid")
        if keyid is not None and not isinstance(keyid, str):
            refuse_evidence("malformed", f"{where}: signature {i}'s keyid must be a string")
        parsed.append(Signature(keyid or None, _b64(s.get("sig"), f"signature {i}", where)))
    return Envelope(ptype, payload, tuple(parsed))


def verify(env: Envelope, trusted: dict[str, Ed25519PublicKey], where: str) -> str:
    """Return the keyid of the first signature made by a trusted key.

    A signature whose keyid is not trusted is skipped; a trusted keyid whose signature
    does not verify fails at once (a tampered payload or signature must not be masked
    by another signature). A signature without keyid (optional in DSSE) is tried against
    every trusted key; one that none of them verifies is skipped, as it cannot be told
    apart from another signer's. No trusted signature at all fails as untrusted.
    """
    message = pae(env.payload_type, env.payload)
    for s in env.signatures:
        if s.keyid is None:
            for keyid, candidate in sorted(trusted.items()):
                try:
                    candidate.verify(s.sig, message)
                except InvalidSignature:
                    continue
                return keyid
            continue
        key = trusted.get(s.keyid)
        if key is None:
            continue
        try:
            key.verify(s.sig, message)
        except InvalidSignature:
            refuse_evidence("bad-signature", f"{where}: the signature by key {s.keyid[:16]} does not "
                 "verify: the payload or the signature was altered after signing")
        return s.keyid
    ids = ", ".join((s.keyid or "(no keyid)")[:16] for s in env.signatures)
    refuse_evidence("untrusted-key", f"{where}: signed by key(s) {ids}, none of which the trust "
         "policy allows (a signature without keyid verified with none of its keys)"
         if any(s.keyid is None for s in env.signatures) else
         f"{where}: signed by key(s) {ids}, none of which the trust policy allows",
         hint="add the public key to the trust policy only if you trust it")
