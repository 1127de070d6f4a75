"""The ledger as a transparency log: its lines are the leaves of a Merkle tree (merkle.py),
and ``manifests/releases/checkpoint`` is the latest signed checkpoint of that tree
(checkpoint.py), written with every entry by the key that signed the entry.

What it adds to the hash chain:

- **rollback**: a ledger shorter than its checkpoint, or whose first entries no longer hash to
  the checkpoint's root, is refused by ``ledger verify`` and by every command that appends;
- **a reader who kept one checkpoint** (``--since FILE``) learns whether today's ledger
  extends the ledger that checkpoint signed -- a deleted and restarted ledger, or a rewritten
  history, has no consistency proof;
- **a release bundle** carries the checkpoint and its entry's inclusion proof, so a
  downstream user checks offline that the release is in the log the release key signed.

Key names in the signed notes are the trust policy's names of keys with the ``release``
role; only those keys are believed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import LedgerError
from ..evidence.keys import keyid_of
from ..evidence.policy import Policy
from ..fsutil import atomic_write, read_optional
from . import checkpoint, merkle
from .checkpoint import Checkpoint
from .ledger import Entry

NAME = "checkpoint"


def origin_of(pipeline_name: str) -> str:
    return f"patchbake/{pipeline_name}/release-ledger"


def leaves(entries: list[Entry]) -> list[bytes]:
    return [merkle.leaf_hash(e.line) for e in entries]


def head_of(entries: list[Entry], origin: str) -> Checkpoint:
    return Checkpoint(origin, len(entries), merkle.root(leaves(entries)))


def note_keys(policy: Policy) -> dict[str, Ed25519PublicKey]:
    """Key name -> public key of every key with the ``release`` role."""
    return {t.name: t.key for t in policy.keys.values() if "release" in t.roles}


def publish(releases_dir: Path, entries: list[Entry], origin: str, key: Ed25519PrivateKey,
            policy: Policy) -> bytes:
    """Sign the checkpoint of ``entries`` with ``key`` (a release key of ``policy``) and write
    it beside the ledger; returns the signed note."""
    keyid = keyid_of(key.public_key())
    trusted = policy.keys.get(keyid)
    if trusted is None or "release" not in trusted.roles:
        raise LedgerError(f"key {keyid[:16]} has no 'release' role: it cannot sign the "
                          "ledger's checkpoint")
    note = checkpoint.sign(head_of(entries, origin), trusted.name, key)
    atomic_write(releases_dir / NAME, note)
    return note


def catch_up(releases_dir: Path, entries: list[Entry], origin: str, key: Ed25519PrivateKey,
             policy: Policy) -> bytes | None:
    """Sign a checkpoint of ``entries`` when the committed one covers fewer (or there is
    none): a process killed between the ledger's append and its checkpoint, or a journal
    rolled forward, leaves the log signed short of the ledger. Returns the new note, or
    None when the committed checkpoint already covers every entry. The caller has checked
    the committed checkpoint before appending (``check_committed``): one absent here is the
    first release's."""
    if (releases_dir / NAME).exists():
        signed = check_committed(releases_dir, entries, policy, origin)
        if signed is not None and signed.size == len(entries):
            return None
    return publish(releases_dir, entries, origin, key, policy)


def read_note(note: bytes, policy: Policy, origin: str, where: str) -> Checkpoint:
    cp, _ = checkpoint.verify(note, note_keys(policy), where)
    if cp.origin != origin:
        raise LedgerError(f"{where}: a checkpoint of log {cp.origin!r}, not of {origin!r}")
    return cp


def check_extends(old: Checkpoint, entries: list[Entry], where: str) -> None:
    """``entries`` must extend the tree ``old`` signed: RFC 9162 consistency, proven from
    the ledger and checked with nothing but the old checkpoint."""
    if old.size > len(entries):
        raise LedgerError(f"{where}: signed a ledger of {old.size} entries; the ledger now has "
                          f"{len(entries)}: entries were removed (a rollback)")
    if old.size == 0:
        return
    lv = leaves(entries)
    proof = merkle.consistency_proof(old.size, lv)
    if not merkle.verify_consistency(old.size, len(lv), old.root, merkle.root(lv), proof):
        raise LedgerError(f"{where}: the ledger's first {old.size} entries are not the ones "
                          "this checkpoint signed: the history was rewritten")


def check_committed(releases_dir: Path, entries: list[Entry], policy: Policy,
                    origin: str) -> Checkpoint | None:
    """The committed checkpoint, verified and consistent with ``entries``; None for an empty
    ledger without one. A ledger with entries and no checkpoint is refused: deleting the
    checkpoint with a rolled-back ledger must not pass."""
    raw = read_optional(releases_dir / NAME, "the ledger's checkpoint", LedgerError)
    if raw is None:
        if entries:
            raise LedgerError(f"{releases_dir.name}/{NAME} is missing: a ledger of "
                              f"{len(entries)} entries has no signed checkpoint",
                              hint="restore it from git; `patchbake ledger checkpoint` signs "
                                   "one for a ledger that verifies")
        return None
    where = f"{releases_dir.name}/{NAME}"
    cp = read_note(raw, policy, origin, where)
    check_extends(cp, entries, where)
    return cp


@dataclass(frozen=True, slots=True)
class Inclusion:
    """What a bundle carries to prove its release's entry is in the signed log."""

    index: int
    size: int
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "size": self.size, "proof": [p.hex() for p in self.proof]}


def inclusion(entries: list[Entry], index: int) -> Inclusion:
    lv = leaves(entries)
    return Inclusion(index, len(lv), tuple(merkle.inclusion_proof(index, lv)))


def check_inclusion(entry: Entry, proof: Inclusion, cp: Checkpoint, where: str) -> None:
    if proof.size != cp.size:
        raise LedgerError(f"{where}: the inclusion proof is for a log of {proof.size} entries, "
                          f"the checkpoint signs {cp.size}")
    if not merkle.verify_inclusion(proof.index, proof.size, merkle.leaf_hash(entry.line),
                                   proof.proof, cp.root):
        raise LedgerError(f"{where}: the release's ledger entry is not in the log the "
                          "checkpoint signs (the inclusion proof does not verify)")
