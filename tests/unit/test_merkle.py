"""The ledger's Merkle tree (RFC 6962) and its signed checkpoints (C2SP signed-note)."""

from __future__ import annotations

import random

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pymerkle import InmemoryTree  # type: ignore[import-untyped]

from patchbake.errors import LedgerError
from patchbake.release import checkpoint, merkle

# The tree heads of the certificate-transparency test leaves (RFC 6962's reference tests)
CT_LEAVES = [b"", b"\x00", b"\x10", b"\x20\x21", b"\x30\x31", b"\x40\x41\x42\x43",
             bytes(range(0x50, 0x58)), bytes(range(0x60, 0x70))]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_tree_heads_of_the_ct_test_leaves() -> None:
    leaves = [merkle.leaf_hash(d) for d in CT_LEAVES]
    assert [merkle.root(leaves[:n]).hex() for n in range(1, 9)] == CT_ROOTS
    assert merkle.root([]).hex() == \
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _data(n: int) -> list[bytes]:
    rng = random.Random(n)
    return [rng.randbytes(rng.randint(0, 40)) for _ in range(n)]


def test_heads_and_audit_paths_agree_with_an_independent_implementation() -> None:
    data = _data(40)
    theirs = InmemoryTree(algorithm="sha256")
    for d in data:
        theirs.append_entry(d)
    leaves = [merkle.leaf_hash(d) for d in data]
    for n in range(1, len(data) + 1):
        assert merkle.root(leaves[:n]) == theirs.get_root(n)
        for i in range(n):
            path = [p if isinstance(p, bytes) else bytes.fromhex(p)
                    for p in theirs.prove_inclusion(i + 1, n).path]
            assert merkle.inclusion_proof(i, leaves[:n]) == path[1:]  # theirs starts at the leaf


def test_every_proof_verifies_and_every_tampering_fails() -> None:
    leaves = [merkle.leaf_hash(d) for d in _data(19)]
    for n in range(1, len(leaves) + 1):
        head = merkle.root(leaves[:n])
        for i in range(n):
            proof = merkle.inclusion_proof(i, leaves[:n])
            assert merkle.verify_inclusion(i, n, leaves[i], proof, head)
            other = leaves[(i + 1) % n] if n > 1 else merkle.leaf_hash(b"x")
            assert not merkle.verify_inclusion(i, n, other, proof, head) or other == leaves[i]
            if proof:
                bad = [bytes(32)] + proof[1:]
                assert not merkle.verify_inclusion(i, n, leaves[i], bad, head)
        for m in range(1, n + 1):
            proof = merkle.consistency_proof(m, leaves[:n])
            old = merkle.root(leaves[:m])
            assert merkle.verify_consistency(m, n, old, head, proof)
            if m < n:  # a forked history: the first m leaves rewritten
                forked = merkle.root([merkle.leaf_hash(b"fork")] + leaves[1:m])
                assert not merkle.verify_consistency(m, n, forked, head, proof)
                assert not merkle.verify_consistency(m, n, old, head, proof[:-1])


def test_checkpoint_signed_note_round_trip_and_refusals() -> None:
    key = Ed25519PrivateKey.generate()
    cp = checkpoint.Checkpoint("patchbake/vllm-sm89", 7, bytes(range(32)))
    note = checkpoint.sign(cp, "release-key", key)
    text, _, sig = note.partition(b"\n\n")
    assert text.split(b"\n") == [b"patchbake/vllm-sm89", b"7",
                                 b"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]
    assert sig.startswith("\u2014 release-key ".encode())
    assert checkpoint.verify(note, {"release-key": key.public_key()}, "cp") == \
        (cp, "release-key")
    altered = note.replace(b"\n7\n", b"\n8\n")
    with pytest.raises(LedgerError, match="does not verify"):
        checkpoint.verify(altered, {"release-key": key.public_key()}, "cp")
    stranger = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(LedgerError, match="no trusted key signed"):
        checkpoint.verify(note, {"release-key": stranger}, "cp")
    with pytest.raises(LedgerError, match="not a signed note"):
        checkpoint.verify(text, {"release-key": key.public_key()}, "cp")
