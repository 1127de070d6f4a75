"""Digest: parsed once at the edge, one canonical spelling everywhere after."""

from __future__ import annotations

import hashlib
import json

import pytest

from patchbake.digest import Digest, is_digest, is_hex
from patchbake.errors import ImageError

HEX = hashlib.sha256(b"x").hexdigest()


def test_parse_gives_algorithm_hex_and_canonical_text() -> None:
    d = Digest.parse(f"sha256:{HEX}")
    assert (d.algorithm, d.hex, str(d), d.short()) == ("sha256", HEX, f"sha256:{HEX}", HEX[:12])
    assert d == Digest.from_hex(HEX) == Digest.of(b"x")
    assert f"{d}" == f"sha256:{HEX}"  # f-strings (URLs, messages) write the canonical text
    assert json.dumps({"digest": str(d)}) == json.dumps({"digest": f"sha256:{HEX}"})


def test_a_digest_is_not_text() -> None:
    """Not a str: code that holds text must parse it, and JSON must be given str(d)."""
    d = Digest.from_hex(HEX)
    assert not isinstance(d, str)
    assert d != f"sha256:{HEX}"  # type: ignore[comparison-overlap]
    with pytest.raises(TypeError):
        json.dumps({"digest": d})
    assert {d: 1}[Digest.parse(f"sha256:{HEX}")] == 1  # hashable, equal by value
    with pytest.raises(AttributeError):
        d.hex = "0" * 64  # type: ignore[misc]


@pytest.mark.parametrize("bad", [HEX, f"sha256:{HEX.upper()}", f"sha512:{HEX}",
                                 f"sha256:{HEX[:-1]}", f"sha256:{HEX}\n", "", None, 42])
def test_anything_else_is_refused_with_the_callers_error(bad: object) -> None:
    assert not is_digest(bad)
    with pytest.raises(ImageError, match="base digest .* is not sha256:<64 lowercase hex"):
        Digest.parse(bad, "base digest", ImageError)


@pytest.mark.parametrize("algorithm, hexd", [("sha512", HEX), ("sha256", HEX.upper()),
                                             ("sha256", HEX[:-1]), ("sha256", "")])
def test_construction_checks_the_fields(algorithm: str, hexd: str) -> None:
    with pytest.raises(ValueError):
        Digest(algorithm, hexd)


def test_is_hex_is_the_bare_form_only() -> None:
    assert is_hex(HEX) and not is_hex(f"sha256:{HEX}") and not is_hex(HEX.upper())
