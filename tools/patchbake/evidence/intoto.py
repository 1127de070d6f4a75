"""``Statement``: an in-toto Statement v1 about one image, the payload of every envelope
patchbake signs (test results, benchmark figures, approvals, release VSAs).

``Statement.load`` is the one reader of a signed payload: JSON, ``_type``, the predicate
type the reader expects, exactly one subject (name and sha256 digest, nothing else) and
an object predicate, checked at the edge; any other field is refused. ``dump`` is the one
writer: canonical JSON (sorted keys, compact separators, UTF-8), the bytes a DSSE
signature covers. What loads dumps to the same bytes when they were canonical, as every
payload patchbake signs is. The predicate stays a JSON object here: each predicate
type's reader types the fields it uses (``statement.SuiteStatement`` for test results).
A refusal is an ``EvidenceError`` with reason ``bad-predicate``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..digest import Digest
from ..errors import EvidenceError, refuse_evidence
from ..fields import Fields
from ..fsutil import canonical_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
_BAD = partial(EvidenceError, reason="bad-predicate")


@dataclass(frozen=True)
class Statement:
    """What a signed payload says, about which image."""

    subject_name: str
    subject_digest: Digest  # the image's manifest digest
    predicate_type: str
    predicate: Mapping[str, Any]

    @classmethod
    def from_json(cls, obj: object, where: str, predicate_type: str) -> Statement:
        """The edge: a decoded payload checked once against the expected predicate type."""
        f = Fields(obj, where, _BAD, ("_type", "subject", "predicateType", "predicate"))
        f.one_of("_type", (STATEMENT_TYPE,))
        f.one_of("predicateType", (predicate_type,))
        subjects = f.members("subject", ("name", "digest"))
        if len(subjects) != 1:
            raise f.bad("subject", "a list of exactly one image")
        digest = subjects[0].member("digest", ("sha256",))
        return cls(subjects[0].text("name"), Digest.from_hex(digest.hex("sha256")),
                   predicate_type, f.mapping("predicate"))

    @classmethod
    def load(cls, payload: bytes, where: str, predicate_type: str) -> Statement:
        try:
            obj = json.loads(payload)
        except (UnicodeDecodeError, ValueError) as exc:
            refuse_evidence("bad-predicate", f"{where}: the signed payload is not JSON ({exc})")
        except RecursionError:
            refuse_evidence("bad-predicate", f"{where}: the signed payload is nested too deeply to read")
        return cls.from_json(obj, where, predicate_type)

    def to_json(self) -> dict[str, Any]:
        return {"_type": STATEMENT_TYPE,
                "subject": [{"name": self.subject_name,
                             "digest": {"sha256": self.subject_digest.hex}}],
                "predicateType": self.predicate_type,
                "predicate": dict(self.predicate)}

    def dump(self) -> bytes:
        """Canonical JSON: the payload a DSSE envelope signs."""
        return canonical_json(self.to_json())


__all__ = ["STATEMENT_TYPE", "Statement"]
