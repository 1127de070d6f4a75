"""Reading one JSON object of a release document into a typed record.

Every record the release stage writes (release manifest, gate decision, ledger entry) is
read back through ``Fields``: each member present and of its type, no member it does not
know, a digest parsed once into a ``Digest``. A refusal is one line naming the file and
the member (``release.json: 'images[0].manifest_digest' ...``), raised as the document's
own error class (ReleaseError for a manifest, LedgerError for the ledger).
"""

from __future__ import annotations

from typing import Any

from ..digest import Digest, is_hex
from ..errors import PatchbakeError


class Fields:
    """The members of one JSON object. ``required`` must be present (their value may still
    be null where the record allows it); ``optional`` may be absent; any other is refused."""

    def __init__(self, doc: object, where: str, error: type[PatchbakeError],
                 required: tuple[str, ...], optional: tuple[str, ...] = (), at: str = ""):
        self.where, self.error, self.at = where, error, at
        if not isinstance(doc, dict):
            raise error(f"{where}: {self._name('') or 'the document'} is not a JSON object")
        unknown = sorted(str(k) for k in doc if k not in required and k not in optional)
        if unknown:
            raise error(f"{where}: unknown field {self._name(unknown[0])!r}")
        missing = [k for k in required if k not in doc]
        if missing:
            raise error(f"{where}: field {self._name(missing[0])!r} is missing")
        self.doc: dict[str, Any] = doc

    def _name(self, key: str) -> str:
        return f"{self.at}.{key}" if self.at and key else self.at or key

    def _bad(self, key: str, want: str) -> PatchbakeError:
        return self.error(f"{self.where}: field {self._name(key)!r} must be {want}, got "
                          f"{self.doc.get(key)!r:.60}")

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def text(self, key: str) -> str:
        value = self.doc.get(key)
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        return self.text(key) if self.has(key) else None

    def integer(self, key: str) -> int:
        value = self.doc.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._bad(key, "an integer")
        return value

    def hex(self, key: str) -> str:
        """A bare sha256 (64 lowercase hex digits), the form file and envelope hashes take."""
        value = self.doc.get(key)
        if not is_hex(value):
            raise self._bad(key, "a sha256 (64 lowercase hex digits)")
        return value

    def opt_hex(self, key: str) -> str | None:
        return self.hex(key) if self.has(key) else None

    def digest(self, key: str) -> Digest:
        return Digest.parse(self.doc.get(key), f"{self.where}: field {self._name(key)!r}",
                            self.error)

    def opt_digest(self, key: str) -> Digest | None:
        return self.digest(key) if self.has(key) else None

    def digests(self, key: str) -> tuple[Digest, ...]:
        value = self.doc.get(key)
        if not isinstance(value, list):
            raise self._bad(key, "a JSON array")
        return tuple(Digest.parse(d, f"{self.where}: field '{self._name(key)}[{i}]'", self.error)
                     for i, d in enumerate(value))

    def counts(self, key: str) -> dict[str, int]:
        """A JSON object of integers (test counts, drift counts)."""
        value = self.doc.get(key)
        if not isinstance(value, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
            raise self._bad(key, "an object of integers")
        return dict(value)

    def mapping(self, key: str) -> dict[str, Any]:
        """A JSON object kept as recorded (its shape is checked where it was signed)."""
        value = self.doc.get(key)
        if not isinstance(value, dict):
            raise self._bad(key, "a JSON object")
        return dict(value)

    def member(self, key: str, required: tuple[str, ...],
               optional: tuple[str, ...] = ()) -> Fields:
        return Fields(self.doc.get(key), self.where, self.error, required, optional,
                      self._name(key))

    def members(self, key: str, required: tuple[str, ...]) -> list[Fields]:
        """A JSON array of objects, each with the members ``required``."""
        value = self.doc.get(key)
        if not isinstance(value, list):
            raise self._bad(key, "a JSON array")
        return [Fields(item, self.where, self.error, required, (), f"{self._name(key)}[{i}]")
                for i, item in enumerate(value)]
