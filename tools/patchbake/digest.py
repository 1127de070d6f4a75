"""``Digest``: a content digest parsed once, at the edge (go-containerregistry's ``v1.Hash``).

``Digest.parse("sha256:<hex>")`` validates the algorithm and the hex; ``str(d)`` is
``sha256:<hex>``, ``d.hex`` the bare hex, ``d.algorithm`` the algorithm. A ``Digest`` is
an immutable ``str`` of its canonical form, so records, JSON documents and labels that hold
digests write exactly the same bytes as before; what changes is that code past the edge
receives a value that is known good instead of re-validating, adding or stripping
``sha256:`` by hand. Only sha256 is accepted: the only algorithm the formats we read and
write use (OCI allows others; we refuse them rather than guess).
"""

from __future__ import annotations

import hashlib
import re

from .errors import PatchbakeError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeGuard

ALGORITHM = "sha256"
_HEX = re.compile(r"[0-9a-f]{64}")
_PREFIX = f"{ALGORITHM}:"


def is_hex(text: object) -> TypeGuard[str]:
    """Whether ``text`` is a bare sha256 hex digest (64 lowercase hex digits)."""
    return isinstance(text, str) and _HEX.fullmatch(text) is not None


def is_digest(text: object) -> TypeGuard[str]:
    """Whether ``text`` is ``sha256:<64 lowercase hex>``."""
    return isinstance(text, str) and text.startswith(_PREFIX) and is_hex(text[len(_PREFIX):])


class Digest(str):
    """``sha256:<hex>``, validated on construction."""

    __slots__ = ()

    def __new__(cls, text: str) -> Digest:
        if isinstance(text, Digest):
            return text
        if not is_digest(text):
            raise ValueError(f"{text!r} is not sha256:<64 lowercase hex digits>")
        return super().__new__(cls, text)

    @classmethod
    def parse(cls, text: object, what: str = "digest",
              error: type[PatchbakeError] = PatchbakeError) -> Digest:
        """The edge: ``text`` as a Digest, or ``error`` naming ``what`` and why."""
        if not is_digest(text):
            raise error(f"{what} {text!r} is not sha256:<64 lowercase hex digits>")
        return cls(text)

    @classmethod
    def from_hex(cls, hex_digest: str) -> Digest:
        """A bare hex digest (``sha256sum``'s output, a blob's file name) as a Digest."""
        return cls(_PREFIX + hex_digest)

    @classmethod
    def of(cls, data: bytes) -> Digest:
        """The digest of ``data``."""
        return cls.from_hex(hashlib.sha256(data).hexdigest())

    @property
    def algorithm(self) -> str:
        return ALGORITHM

    @property
    def hex(self) -> str:
        return self[len(_PREFIX):]

    def short(self, n: int = 12) -> str:
        """The first ``n`` hex digits, for names and tables (never an identity)."""
        return self.hex[:n]

    def __repr__(self) -> str:
        return f"Digest({str.__repr__(self)})"


def hex_of(text: str) -> str:
    """The hex of a digest that may or may not carry ``sha256:`` (records written before
    the field was a Digest); refuses anything else."""
    if is_hex(text):
        return text
    return Digest.parse(text).hex


__all__ = ["ALGORITHM", "Digest", "hex_of", "is_digest", "is_hex"]
