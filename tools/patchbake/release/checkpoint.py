"""Signed checkpoints of the release ledger, in the C2SP formats Go's checksum database and
Sigstore's logs use.

A checkpoint (C2SP tlog-checkpoint) is a note whose text is three lines -- the log's origin,
the tree size in decimal, the root hash in standard base64 -- each ending in a newline. It is
signed as a C2SP signed-note: a blank line after the text, then one line per signature,
``— <key name> <base64(key hash || Ed25519 signature)>``, where the key hash is the first
four bytes of SHA-256(key name, a newline, the algorithm byte 0x01, the 32-byte public key).
The signature covers the text's bytes exactly.

A reader who keeps one checkpoint can later ask for a consistency proof from it to the
ledger of today (``patchbake ledger verify --since FILE``): a ledger that was rolled back or
rewritten since cannot produce one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import LedgerError, PatchbakeError

_DASH = "\u2014 "
_ED25519 = b"\x01"
Error = Callable[[str], PatchbakeError]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes  # 32 bytes

    def text(self) -> bytes:
        return (f"{self.origin}\n{self.size}\n"
                f"{base64.b64encode(self.root).decode()}\n").encode()


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_hash(name: str, public: Ed25519PublicKey) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + _raw(public)).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() for c in name) or "+" in name:
        raise ValueError(f"a note key name has no spaces or '+': {name!r}")


def sign(cp: Checkpoint, name: str, private: Ed25519PrivateKey) -> bytes:
    """The signed note of ``cp``, signed by key ``name``."""
    _check_name(name)
    text = cp.text()
    blob = key_hash(name, private.public_key()) + private.sign(text)
    return text + b"\n" + f"{_DASH}{name} {base64.b64encode(blob).decode()}\n".encode()


def _parse_text(text: bytes, where: str, error: Error) -> Checkpoint:
    try:
        lines = text.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise error(f"{where}: a checkpoint is UTF-8 text") from None
    if len(lines) < 4 or lines[-1] != "" or not lines[1].isdigit() \
            or lines[1] != str(int(lines[1])):
        raise error(f"{where}: not a checkpoint (origin, tree size, root hash lines)")
    try:
        root = base64.b64decode(lines[2], validate=True)
    except binascii.Error:
        root = b""
    if len(root) != 32:
        raise error(f"{where}: the root hash is not 32 bytes of base64")
    return Checkpoint(lines[0], int(lines[1]), root)


def verify(note: bytes, keys: dict[str, Ed25519PublicKey], where: str,
           error: Error = LedgerError) -> tuple[Checkpoint, str]:
    """The checkpoint in ``note`` and the name of the trusted key that signed it. ``keys``:
    key name -> public key. A note no trusted key signed is refused; signatures by keys not
    in ``keys`` are ignored, as the signed-note format asks."""
    text, sep, sigs = note.partition(b"\n\n")
    if not sep or not sigs.endswith(b"\n"):
        raise error(f"{where}: not a signed note (text, a blank line, signature lines)")
    cp = _parse_text(text + b"\n", where, error)
    for line in sigs[:-1].split(b"\n"):
        decoded = line.decode("utf-8", "replace")
        if not decoded.startswith(_DASH):
            raise error(f"{where}: a signature line must start with an em dash and a space")
        name, _, b64 = decoded[len(_DASH):].rpartition(" ")
        public = keys.get(name)
        if public is None:
            continue
        try:
            blob = base64.b64decode(b64, validate=True)
        except binascii.Error:
            continue
        if blob[:4] != key_hash(name, public):
            continue
        try:
            public.verify(blob[4:], text + b"\n")
        except InvalidSignature:
            raise error(f"{where}: the signature of {name} does not verify: the checkpoint "
                        "was altered") from None
        return cp, name
    raise error(f"{where}: no trusted key signed this checkpoint "
                f"(trusted: {', '.join(sorted(keys)) or 'none'})")
