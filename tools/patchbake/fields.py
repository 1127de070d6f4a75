"""Reading one JSON object into a typed record: the one reader of every JSON document.

Every document patchbake reads back (a release manifest, ledger entry, gate decision, suite
result, in-toto statement, DSSE envelope, image record) is checked through ``Fields``: each
member present and of its type, no member it does not know (unless the document keeps
members it does not read), a digest parsed once into a ``Digest``. A refusal is one line
naming the file and the member (``release.json: field 'images[0].manifest_digest' ...``),
raised by the document's own ``error``: an error class (ReleaseError, LedgerError,
ImageError) or, for evidence, ``partial(EvidenceError, reason=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .digest import Digest, is_hex
from .errors import PatchbakeError, shown

Error = Callable[[str], PatchbakeError]


class Fields:
    """The members of one JSON object. ``required`` must be present (their value may still
    be null where the record allows it); ``optional`` may be absent; any other is refused,
    or kept unread when ``others`` (documents that carry members their reader passes on)."""

    def __init__(self, doc: object, where: str, error: Error, required: tuple[str, ...],
                 optional: tuple[str, ...] = (), at: str = "", *, others: bool = False):
        self.where, self.error, self.at = where, error, at
        if not isinstance(doc, dict):
            raise error(f"{where}: field {at!r} must be a JSON object, got {shown(doc)}" if at
                        else f"{where}: the document is not a JSON object")
        unknown = [] if others else sorted(
            str(k) for k in doc if k not in required and k not in optional)
        if unknown:
            raise error(f"{where}: unknown field {shown(self._name(unknown[0]))}")
        missing = [k for k in required if k not in doc]
        if missing:
            raise error(f"{where}: field {shown(self._name(missing[0]))} is missing")
        self.doc: dict[str, Any] = doc

    def _name(self, key: str) -> str:
        return f"{self.at}.{key}" if self.at and key else self.at or key

    def bad(self, key: str, want: str) -> PatchbakeError:
        """The refusal of member ``key``, which must be ``want`` (for checks of a value's
        meaning that only its reader knows)."""
        return self.error(f"{self.where}: field {shown(self._name(key))} must be {want}, got "
                          f"{shown(self.doc.get(key))}")

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def text(self, key: str) -> str:
        value = self.doc.get(key)
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        return self.text(key) if self.has(key) else None

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.doc.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.bad(key, "a JSON array of strings")
        return tuple(value)

    def one_of(self, key: str, choices: tuple[str, ...]) -> str:
        """A string naming one of ``choices`` (an outcome, a runner, a format)."""
        value = self.doc.get(key)
        if value not in choices:
            raise self.bad(key, " or ".join(repr(c) for c in choices))
        return str(value)

    def integer(self, key: str) -> int:
        value = self.doc.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(key, "an integer")
        return value

    def number(self, key: str) -> float:
        value = self.doc.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.bad(key, "a number")
        return value

    def boolean(self, key: str) -> bool:
        value = self.doc.get(key)
        if not isinstance(value, bool):
            raise self.bad(key, "true or false")
        return value

    def hex(self, key: str) -> str:
        """A bare sha256 (64 lowercase hex digits), the form file and envelope hashes take."""
        value = self.doc.get(key)
        if not is_hex(value):
            raise self.bad(key, "a sha256 (64 lowercase hex digits)")
        return value

    def opt_hex(self, key: str) -> str | None:
        return self.hex(key) if self.has(key) else None

    def digest(self, key: str) -> Digest:
        return Digest.parse(self.doc.get(key), f"{self.where}: field {shown(self._name(key))}",
                            self.error)

    def opt_digest(self, key: str) -> Digest | None:
        return self.digest(key) if self.has(key) else None

    def digests(self, key: str) -> tuple[Digest, ...]:
        value = self.doc.get(key)
        if not isinstance(value, list):
            raise self.bad(key, "a JSON array")
        return tuple(Digest.parse(d, f"{self.where}: field {shown(f'{self._name(key)}[{i}]')}",
                                  self.error)
                     for i, d in enumerate(value))

    def counts(self, key: str) -> dict[str, int]:
        """A JSON object of integers (test counts, drift counts)."""
        value = self.doc.get(key)
        if not isinstance(value, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
            raise self.bad(key, "an object of integers")
        return dict(value)

    def mapping(self, key: str) -> dict[str, Any]:
        """A JSON object kept as recorded (its shape is checked where it was signed)."""
        value = self.doc.get(key)
        if not isinstance(value, dict):
            raise self.bad(key, "a JSON object")
        return dict(value)

    def mappings(self, key: str) -> tuple[dict[str, Any], ...]:
        """A JSON array of objects, each kept as recorded."""
        return tuple(m.doc for m in self.members(key, (), others=True))

    def member(self, key: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
               *, others: bool = False) -> Fields:
        return Fields(self.doc.get(key), self.where, self.error, required, optional,
                      self._name(key), others=others)

    def members(self, key: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
                *, others: bool = False) -> list[Fields]:
        """A JSON array of objects, each with the members ``required``."""
        value = self.doc.get(key)
        if not isinstance(value, list):
            raise self.bad(key, "a JSON array")
        return [Fields(item, self.where, self.error, required, optional,
                       f"{self._name(key)}[{i}]", others=others)
                for i, item in enumerate(value)]
