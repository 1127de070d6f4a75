"""Ed25519 signing keys: generate, load, and name them.

A key's id is the sha256 of its raw 32-byte public key, so the same key has the same id
wherever it is stored or however its PEM is wrapped. The private key never enters the
repository: it lives under the user's config dir (or wherever ``--out`` puts it) with mode
0600; the public key and the trust policy are committed.
"""

from __future__ import annotations

import hashlib
from functools import partial
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import EvidenceError, UsageError
from ..fsutil import atomic_write, read_input
from ..config.signing import ENV_KEY, PRIVATE_NAME, default_key_dir, default_private_key

PUBLIC_NAME = "signing.pub"
__all__ = ["ENV_KEY", "default_key_dir", "default_private_key", "generate", "keyid_of",
           "load_private", "parse_public", "public_pem"]


@dataclass(frozen=True)
class GeneratedKey:
    keyid: str
    private_path: Path
    public_path: Path
    public_pem: str


def keyid_of(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def generate(out_dir: Path) -> GeneratedKey:
    """Write a new key pair into ``out_dir``; never overwrite an existing key."""
    priv_path, pub_path = out_dir / PRIVATE_NAME, out_dir / PUBLIC_NAME
    for p in (priv_path, pub_path):
        if p.exists():
            raise UsageError(f"{p} already exists; refusing to overwrite a signing key",
                             hint="choose another --out directory or move the old key away")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(priv_path, pem, mode=0o600)
    pub = public_pem(key.public_key())
    atomic_write(pub_path, pub.encode("ascii"), mode=0o644)
    return GeneratedKey(keyid_of(key.public_key()), priv_path, pub_path, pub)


def load_private(path: Path) -> Ed25519PrivateKey:
    data = read_input(path, "signing key", EvidenceError, missing=partial(
        EvidenceError, hint=f"run `patchbake keys generate` or set {ENV_KEY}"))
    if path.stat().st_mode & 0o077:
        raise EvidenceError(f"signing key {path} is readable by others (mode "
                            f"{path.stat().st_mode & 0o777:o})", hint=f"chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise EvidenceError(f"signing key {path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise EvidenceError(f"signing key {path} is not an Ed25519 key")
    return key


def parse_public(pem: str, where: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnsupportedAlgorithm, UnicodeEncodeError) as exc:
        raise EvidenceError(f"{where}: not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{where}: not an Ed25519 public key")
    return key
