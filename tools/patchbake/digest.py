"""``Digest``: a content digest parsed once, at the edge (go-containerregistry's ``v1.Hash``).

``Digest.parse("sha256:<hex>")`` is the one place text becomes a digest: it validates the
algorithm and the hex and names what was being read when it refuses. ``str(d)`` is the
canonical ``sha256:<hex>`` that JSON documents, records and labels write, ``d.hex`` the bare
hex a blob's file name uses. A ``Digest`` is deliberately not a ``str``: code that holds text
must parse it before mypy lets it pass the value on as an identity, and code that writes one
must say ``str(d)``. :func:`expand` is the same edge for what people type: a unique prefix
(at least 12 hex digits, as tables show ids) of one of the digests the caller knows. Only sha256 is accepted: the only algorithm the formats we read and
write use (OCI allows others; we refuse them rather than guess).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeGuard

from .errors import PatchbakeError, shown


ALGORITHM = "sha256"
_HEX = re.compile(r"[0-9a-f]{64}")
_PREFIX = f"{ALGORITHM}:"
MIN_PREFIX = 12  # what tables print (Digest.short); shorter ones collide in real stores
_SHORT = re.compile(rf"(?:{_PREFIX})?([0-9a-f]{{{MIN_PREFIX},64}})")


def is_hex(text: object) -> TypeGuard[str]:
    """Whether ``text`` is a bare sha256 hex digest (64 lowercase hex digits): the check for
    the per-file ``sha256`` fields of indexes, which hold no algorithm."""
    return isinstance(text, str) and _HEX.fullmatch(text) is not None


@dataclass(frozen=True, slots=True, order=True)
class Digest:
    """A sha256 digest: the algorithm and 64 lowercase hex digits, checked on construction."""

    algorithm: str
    hex: str

    def __post_init__(self) -> None:
        if self.algorithm != ALGORITHM or not is_hex(self.hex):
            raise ValueError(f"{self.algorithm}:{shown(self.hex)} is not sha256:<64 lowercase hex "
                             "digits>")

    @classmethod
    def parse(cls, text: object, what: str = "digest",
              error: Callable[[str], PatchbakeError] = PatchbakeError) -> Digest:
        """The edge: ``text`` (``sha256:<hex>``) as a Digest, or ``error`` naming ``what``
        and why."""
        if not isinstance(text, str) or not text.startswith(_PREFIX) \
                or not is_hex(text[len(_PREFIX):]):
            raise error(f"{what} {shown(text, 80)} is not sha256:<64 lowercase hex digits>")
        return cls(ALGORITHM, text[len(_PREFIX):])

    @classmethod
    def from_hex(cls, hex_digest: str) -> Digest:
        """A bare hex digest (``hashlib``'s ``hexdigest()``, a blob's file name) as a Digest."""
        return cls(ALGORITHM, hex_digest)

    @classmethod
    def of(cls, data: bytes) -> Digest:
        """The digest of ``data``."""
        return cls(ALGORITHM, hashlib.sha256(data).hexdigest())

    def short(self, n: int = 12) -> str:
        """The first ``n`` hex digits, for names and tables (never an identity)."""
        return self.hex[:n]

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"


def is_short(text: object) -> bool:
    """Whether ``text`` may be a digest as people write it: ``sha256:`` optional, at least
    :data:`MIN_PREFIX` lowercase hex digits (a full digest is one too)."""
    return isinstance(text, str) and _SHORT.fullmatch(text) is not None


def expand(text: object, candidates: Iterable[Digest], what: str = "digest",
           error: Callable[..., PatchbakeError] = PatchbakeError,
           missing_hint: str | None = None) -> Digest:
    """The digest ``text`` names: in full (``sha256:`` optional: release ids are shown
    bare), or a prefix of at least 12 hex digits that exactly one of ``candidates`` starts
    with. A prefix none or several start with is refused, naming the candidates."""
    m = _SHORT.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise error(f"{what} {shown(text, 80)} is not sha256:<hex> (64 lowercase hex digits, "
                    f"or a unique prefix of at least {MIN_PREFIX})", hint=missing_hint)
    prefix = m.group(1)
    if len(prefix) == 64:
        return Digest(ALGORITHM, prefix)
    found = sorted({c for c in candidates if c.hex.startswith(prefix)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise error(f"no {what} starts with {prefix}", hint=missing_hint)
    named = ", ".join(str(d) for d in found[:4]) + (f" and {len(found) - 4} more"
                                                     if len(found) > 4 else "")
    raise error(f"{what} {prefix} is ambiguous: {len(found)} start with it ({named})",
                hint="give more hex digits")


def differing(a: str, b: str, n: int = MIN_PREFIX) -> tuple[str, str]:
    """Prefixes of two hashes (or any two texts) long enough to tell apart: at least ``n``
    characters, and past the first that differs. A mismatch message that shortens both
    to the same text tells its reader nothing."""
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    cut = max(n, first + 1)
    return a[:cut], b[:cut]


def is_digest(text: object) -> bool:
    """Whether ``text`` is ``sha256:<64 lowercase hex>`` (for checks that report a list of
    problems rather than stop at the first)."""
    try:
        Digest.parse(text)
    except PatchbakeError:
        return False
    return True


__all__ = ["ALGORITHM", "MIN_PREFIX", "Digest", "differing", "expand", "is_digest", "is_hex",
           "is_short"]
