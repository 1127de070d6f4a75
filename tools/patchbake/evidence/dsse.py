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
from functools import partial
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import EvidenceError, refuse_evidence, shown
from ..fields import Fields
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


def _b64(f: Fields, key: str) -> bytes:
    """DSSE allows standard or URL-safe base64, padded or not (we write standard, padded);
    one alphabet per value, nothing else tolerated."""
    value = f.text(key)
    if _STD_B64.fullmatch(value):
        altchars = None
    elif _URL_B64.fullmatch(value):
        altchars = b"-_"
    else:
        raise f.bad(key, "valid base64")
    bare = value.rstrip("=")
    try:
        return base64.b64decode(bare + "=" * (-len(bare) % 4), altchars, validate=True)
    except (binascii.Error, ValueError):
        raise f.bad(key, "valid base64") from None


def parse(data: bytes, where: str) -> Envelope:
    """Strictly parse an envelope's JSON; every deviation is a named EvidenceError."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        refuse_evidence("malformed", f"{where}: not a JSON document ({exc})")
    except RecursionError:
        refuse_evidence("malformed", f"{where}: a JSON document nested too deeply to read")
    f = Fields(obj, where, partial(EvidenceError, reason="malformed"),
               ("payloadType", "payload"), ("signatures",))
    ptype = f.text("payloadType")
    if ptype != PAYLOAD_TYPE:
        refuse_evidence("payload-type", f"{where}: payloadType is {shown(ptype)}, expected {PAYLOAD_TYPE!r}")
    payload = _b64(f, "payload")
    if not f.doc.get("signatures"):
        refuse_evidence("unsigned", f"{where}: the envelope carries no signature",
             hint="sign it with `patchbake evidence sign`")
    sigs = [Signature(s.opt_text("keyid") or None, _b64(s, "sig"))
            for s in f.members("signatures", ("sig",), ("keyid",), others=True)]
    return Envelope(ptype, payload, tuple(sigs))


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
