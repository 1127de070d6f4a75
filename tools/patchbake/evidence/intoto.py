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
from typing import Any

from ..digest import Digest, is_hex
from ..fsutil import canonical_json
from ..errors import refuse_evidence, shown

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
_FIELDS = {"_type", "subject", "predicateType", "predicate"}


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
        if not isinstance(obj, dict):
            refuse_evidence("bad-predicate", f"{where}: the payload is not a JSON object")
        if obj.get("_type") != STATEMENT_TYPE:
            refuse_evidence("bad-predicate", f"{where}: _type is {shown(obj.get('_type'))}, expected "
                 f"{STATEMENT_TYPE!r}")
        if obj.get("predicateType") != predicate_type:
            refuse_evidence("bad-predicate", f"{where}: predicateType is {shown(obj.get('predicateType'))}, "
                 f"expected {predicate_type!r}")
        unknown = sorted(set(obj) - _FIELDS)
        if unknown:
            refuse_evidence("bad-predicate", f"{where}: unknown statement field(s) {', '.join(unknown)}")
        name, digest = _subject(obj.get("subject"), where)
        predicate = obj.get("predicate")
        if not isinstance(predicate, dict):
            refuse_evidence("bad-predicate", f"{where}: 'predicate' is missing or not an object")
        return cls(name, digest, predicate_type, predicate)

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


def _subject(subjects: object, where: str) -> tuple[str, Digest]:
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0],
                                                                              dict):
        refuse_evidence("bad-predicate", f"{where}: subject must list exactly one image")
    subject = subjects[0]
    digest = subject.get("digest")
    if not isinstance(digest, dict) or not is_hex(digest.get("sha256")):
        refuse_evidence("bad-predicate", f"{where}: subject digest is not a sha256")
    if set(digest) != {"sha256"}:
        refuse_evidence("bad-predicate", f"{where}: subject digest names algorithms besides sha256")
    if not isinstance(subject.get("name"), str):
        refuse_evidence("bad-predicate", f"{where} subject: 'name' is missing or not a str")
    if set(subject) != {"name", "digest"}:
        refuse_evidence("bad-predicate", f"{where}: the subject holds more than a name and a digest")
    return subject["name"], Digest.from_hex(digest["sha256"])


__all__ = ["STATEMENT_TYPE", "Statement"]
