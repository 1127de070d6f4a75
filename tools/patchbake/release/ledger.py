"""The release ledger: ``manifests/releases/ledger.jsonl``, append-only, hash-chained, signed.

Each line is one entry in canonical JSON (format ``patchbake-ledger/1``)::

    {"format": "patchbake-ledger/1", "seq": 0, "prev": "<64 zeros or sha256 of the
     previous line>", "kind": "release" | "promotion", "release": "<release id>",
     "channel": "validated", "image": "sm89-serving-offline", "digest": "sha256:…",
     "time": "…Z", "to": "host:port/repo:tag" (promotion only),
     "attached": {...} (promotion only),
     "signature": {"keyid": "…", "sig": "<base64 Ed25519 over the DSSE PAE of the entry
                   without its signature, type application/vnd.patchbake.ledger-entry+json>"}}

The file is rewritten whole (temp file, fsync, rename, directory fsync) under a lock, so
a reader sees the old ledger or the new one, never half a line. ``verify`` checks every
line: canonical bytes, sequence, chain, a signature by a key whose trust-policy role is
``release``, and that the release each entry names is committed beside it (its
manifest's bytes hash to its id). ``Entry`` is the typed line: one ``load`` (every member
present and of its type, none unknown, the line canonical) and one ``dump``.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..digest import Digest
from ..errors import LedgerError, ReleaseError
from ..evidence.dsse import pae
from ..evidence.keys import keyid_of
from ..evidence.policy import Policy
from ..fsutil import atomic_write, canonical_json, open_lock, read_optional, sha256_bytes
from . import manifest
from ..fields import Fields
from .referrers import Attached

FORMAT = "patchbake-ledger/1"
NAME = "ledger.jsonl"
PAYLOAD_TYPE = "application/vnd.patchbake.ledger-entry+json"
GENESIS = "0" * 64
KINDS = ("release", "promotion")


KEYS = ("format", "seq", "prev", "kind", "release", "channel", "image", "digest", "time",
        "signature")
PROMOTION_KEYS = ("to", "attached")


@dataclass(frozen=True, slots=True)
class Signature:
    keyid: str
    sig: str  # base64 Ed25519 over the DSSE PAE of the entry without its signature

    KEYS = ("keyid", "sig")


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    prev: str  # sha256 hex of the previous line, GENESIS for the first
    kind: str  # release | promotion
    release: str  # release id
    channel: str
    image: str
    digest: Digest
    time: str
    to: str | None = None  # promotion only: where the image went
    attached: Attached | None = None  # promotion only: what went with it
    signature: Signature | None = None  # None only while the entry is being made

    @classmethod
    def load(cls, line: bytes, where: str) -> Entry:
        """The one edge: one ledger line (canonical JSON) as an Entry, or a LedgerError
        naming ``where`` and the member at fault."""
        try:
            doc = json.loads(line)
        except ValueError:
            raise LedgerError(f"{where}: not a JSON line") from None
        if not isinstance(doc, dict):
            raise LedgerError(f"{where}: not a JSON object")
        if doc.get("format") != FORMAT or doc.get("kind") not in KINDS:
            raise LedgerError(f"{where}: not a {FORMAT} entry (format or kind)")
        if not isinstance(doc.get("signature"), dict):
            raise LedgerError(f"{where}: the entry is unsigned")
        promotion = doc["kind"] == "promotion"
        f = Fields(doc, where, LedgerError, KEYS + PROMOTION_KEYS if promotion else KEYS)
        sig = f.member("signature", Signature.KEYS)
        entry = cls(f.integer("seq"), f.hex("prev"), f.text("kind"), f.hex("release"),
                    f.text("channel"), f.text("image"), f.digest("digest"), f.text("time"),
                    f.text("to") if promotion else None,
                    Attached.load(f.member("attached", Attached.KEYS, Attached.OPTIONAL))
                    if promotion else None,
                    Signature(sig.text("keyid"), sig.text("sig")))
        if entry.line != line:
            raise LedgerError(f"{where}: not in canonical form (the line was edited)")
        return entry

    def dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT, "seq": self.seq, "prev": self.prev, "kind": self.kind,
            "release": self.release, "channel": self.channel, "image": self.image,
            "digest": str(self.digest), "time": self.time}
        if self.to is not None:
            out["to"] = self.to
        if self.attached is not None:
            out["attached"] = self.attached.dump()
        if self.signature is not None:
            out["signature"] = {"keyid": self.signature.keyid, "sig": self.signature.sig}
        return out

    @property
    def line(self) -> bytes:
        """The entry as the ledger stores it (canonical JSON, no newline)."""
        return canonical_json(self.dump())

    @property
    def hash(self) -> str:
        return sha256_bytes(self.line)

    def signed_bytes(self) -> bytes:
        """What the signature covers: the entry without its signature, in DSSE's PAE."""
        return pae(PAYLOAD_TYPE, replace(self, signature=None).line)


def path_of(releases_dir: Path) -> Path:
    return releases_dir / NAME


@contextmanager
def locked(releases_dir: Path) -> Iterator[None]:
    """One writer at a time (the lock file is ignored by git)."""
    releases_dir.mkdir(parents=True, exist_ok=True)
    with open_lock(releases_dir / ".lock", LedgerError) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read(releases_dir: Path) -> list[Entry]:
    """The entries as stored, each loaded (typed, canonical; chain and signatures are
    ``verify``'s); a missing ledger is empty."""
    p = path_of(releases_dir)
    raw = read_optional(p, "the ledger", LedgerError)
    if raw is None:
        return []
    if raw and not raw.endswith(b"\n"):
        raise LedgerError(f"{p}: the last line is not terminated (a torn or edited write)")
    # lines end at "\n" alone: a "\r" (a CRLF ledger) or any other line break is part of
    # the line, which then is not its entry's canonical bytes and is refused
    return [Entry.load(line, f"{p}:{n}") for n, line in enumerate(raw.split(b"\n")[:-1], 1)]


def head(entries: list[Entry]) -> str:
    return entries[-1].hash if entries else GENESIS


def make_entry(entries: list[Entry], kind: str, release: manifest.Release,
               key: Ed25519PrivateKey, *, to: str | None = None,
               attached: Attached | None = None, when: float | None = None) -> Entry:
    """The next entry after ``entries`` about ``release`` (signed), not yet written."""
    unsigned = Entry(len(entries), head(entries), kind, release.id, release.channel,
                     release.image, release.digest,
                     time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                   time.gmtime(time.time() if when is None else when)),
                     to, attached)
    sig = key.sign(unsigned.signed_bytes())
    return replace(unsigned, signature=Signature(keyid_of(key.public_key()),
                                                 base64.b64encode(sig).decode("ascii")))


def write(releases_dir: Path, entries: list[Entry]) -> None:
    atomic_write(path_of(releases_dir), b"".join(e.line + b"\n" for e in entries))


def append(releases_dir: Path, entry: Entry) -> None:
    """Append ``entry`` (made against the current head) under the caller's lock."""
    entries = read(releases_dir)
    if entry.prev != head(entries) or entry.seq != len(entries):
        raise LedgerError(f"{path_of(releases_dir)} moved on while the entry was made "
                          "(its previous hash is no longer the head)", hint="run it again")
    write(releases_dir, [*entries, entry])


def check_signature(e: Entry, policy: Policy, where: str) -> None:
    sig = e.signature
    if sig is None:
        raise LedgerError(f"{where}: the entry is unsigned")
    key = policy.with_role("release").get(sig.keyid)
    if key is None:
        raise LedgerError(f"{where}: signed by key {sig.keyid[:16]}, which has no "
                          "'release' role in the trust policy")
    try:
        key.verify(base64.b64decode(sig.sig, validate=True), e.signed_bytes())
    except (InvalidSignature, binascii.Error, ValueError):
        raise LedgerError(f"{where}: the signature does not verify: the entry was altered "
                          "after signing") from None


def verify(releases_dir: Path, policy: Policy, *, check_releases: bool = True) -> list[Entry]:
    """Check the whole ledger; return its entries. Raises LedgerError at the first break."""
    entries = read(releases_dir)
    prev, released = GENESIS, set()
    p = path_of(releases_dir)
    for n, e in enumerate(entries):
        where = f"{p.name}:{n + 1}"
        if e.seq != n:
            raise LedgerError(f"{where}: sequence number {e.seq}, expected {n} "
                              "(an entry was removed or reordered)")
        if e.prev != prev:
            raise LedgerError(f"{where}: its previous-entry hash does not match line {n} "
                              "(the chain is broken: a line was altered, removed or inserted)")
        check_signature(e, policy, where)
        if e.kind == "promotion" and e.release not in released:
            raise LedgerError(f"{where}: promotes release {e.release[:16]}, which no earlier "
                              "entry released")
        if check_releases:
            try:
                rel = manifest.load_from(releases_dir, e.release)
            except ReleaseError as exc:
                raise LedgerError(f"{where}: {exc.message}") from None
            if rel.digest != e.digest or rel.channel != e.channel:
                raise LedgerError(f"{where}: names {e.digest} in '{e.channel}', "
                                  f"its release manifest says {rel.digest} in '{rel.channel}'")
        released.add(e.release)
        prev = e.hash
    return entries


def unrecorded(releases_dir: Path, entries: list[Entry]) -> list[str]:
    """Release ids committed beside the ledger that no entry records: what is left when
    entries are cut off its end (or a release was interrupted before its entry)."""
    recorded = {e.release for e in entries if e.kind == "release"}
    try:
        found = [p.parent.name for p in releases_dir.glob(f"*/{manifest.MANIFEST_NAME}")]
    except OSError:
        return []
    return sorted(r for r in found if r not in recorded)


def check_known(entries: list[Entry], known: tuple[str, ...], where: Path) -> None:
    """Every head a reader recorded earlier must still be an entry of the chain: an
    append-only ledger only grows, so a missing one means entries were removed or rewritten
    (a rollback that the chain alone cannot show)."""
    hashes = {e.hash for e in entries}
    for h in known:
        want = h.removeprefix("sha256:").lower()
        if want not in hashes:
            raise LedgerError(f"{where}: the head {want[:16]}… recorded earlier is not in the "
                              f"ledger ({len(entries)} entries): entries were removed or "
                              "rewritten since", hint="compare with the ledger you recorded it "
                              "from; a ledger only grows")


def find(entries: list[Entry], kind: str, release: str | None = None,
         channel: str | None = None) -> list[Entry]:
    return [e for e in entries if e.kind == kind
            and (release is None or e.release == release)
            and (channel is None or e.channel == channel)]
