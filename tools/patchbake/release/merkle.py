"""The release ledger as a Merkle tree (RFC 6962, section 2.1; RFC 9162, section 2.1).

Each ledger line (its bytes without the final newline) is a leaf. The tree head of the first
``n`` lines is ``MTH``; an inclusion proof shows one line is in a tree of a given size; a
consistency proof shows a tree of size ``m`` is a prefix of a tree of size ``n`` -- so a
reader who kept only an old checkpoint catches a rolled-back or rewritten ledger.

Hashes are domain-separated as RFC 6962 requires (0x00 before a leaf, 0x01 before two
children), so a leaf can never pass for an inner node. The verification functions are
RFC 9162's algorithms (2.1.3.2 and 2.1.4.2), which take nothing from the prover but the
proof's hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes ``leaves``; the empty tree's is SHA-256 of nothing."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node_hash(root(leaves[:k]), root(leaves[k:]))


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]): the audit path of leaf ``index`` in the tree of ``leaves``."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return inclusion_proof(index, leaves[:k]) + [root(leaves[k:])]
    return inclusion_proof(index - k, leaves[k:]) + [root(leaves[:k])]


def consistency_proof(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]): that the first ``m`` leaves are a prefix of ``leaves``."""
    if not 0 < m <= len(leaves):
        raise ValueError(f"no consistency proof from size {m} to {len(leaves)}")
    return _subproof(m, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root(leaves)]
    k = _split(n)
    if m <= k:
        return _subproof(m, leaves[:k], complete) + [root(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [root(leaves[:k])]


def _to_right_child(fn: int, sn: int) -> tuple[int, int]:
    """Shift both until ``fn``'s lowest bit is set or it is 0 (RFC 9162's "if LSB(fn) is not
    set, right-shift both fn and sn equally until ...")."""
    while fn % 2 == 0 and fn != 0:
        fn >>= 1
        sn >>= 1
    return fn, sn


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes],
                     expected_root: bytes) -> bool:
    """RFC 9162 2.1.3.2: whether ``proof`` shows ``leaf`` at ``index`` under ``expected_root``."""
    if not 0 <= index < size:
        return False
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            fn, sn = _to_right_child(fn, sn)
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == expected_root


def verify_consistency(m: int, n: int, first_root: bytes, second_root: bytes,
                       proof: Sequence[bytes]) -> bool:
    """RFC 9162 2.1.4.2: whether ``proof`` shows the tree of size ``m`` (``first_root``) is a
    prefix of the tree of size ``n`` (``second_root``)."""
    if not 0 < m <= n:
        return False
    if m == n:
        return not proof and first_root == second_root
    if not proof:
        return False
    path = list(proof)
    if m & (m - 1) == 0:  # m is a power of two: the first root is the proof's first node
        path.insert(0, first_root)
    fn, sn = m - 1, n - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            fn, sn = _to_right_child(fn, sn)
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root
