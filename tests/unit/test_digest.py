"""Digest: parsed once at the edge, one canonical spelling everywhere after."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from patchbake.digest import Digest, expand, is_digest, is_hex, is_short
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


def test_expand_takes_a_full_digest_or_a_unique_prefix() -> None:
    """Ids as people see them: a table's 12 or 16 hex digits name the one digest that
    starts with them; sha256: is optional (release ids are shown bare)."""
    a, b = Digest.from_hex("ab" * 32), Digest.from_hex("abab" + "cd" * 30)
    known = [a, b, Digest.of(b"x")]
    assert expand(f"sha256:{HEX}", []) == Digest.from_hex(HEX)  # full: no lookup needed
    assert expand(HEX, []) == Digest.from_hex(HEX)
    assert expand(HEX[:12], known) == expand(f"sha256:{HEX[:16]}", known) == Digest.of(b"x")
    assert expand("abababababab", known) == a


@pytest.mark.parametrize("text, message", [
    ("ababab", "is not sha256:<hex> (64 lowercase hex digits, or a unique prefix of at "
               "least 12)"),
    ("sha256:ABABABABABAB", "is not sha256:<hex>"),
    ("sha512:" + "ab" * 12, "is not sha256:<hex>"),
    ("0123456789ab", "no image digest starts with 0123456789ab"),
    ("ababcdcdcdce", "no image digest starts with ababcdcdcdce"),
])
def test_expand_refuses_what_names_no_digest(text: str, message: str) -> None:
    known = [Digest.from_hex("ab" * 32), Digest.from_hex("abab" + "cd" * 30)]
    with pytest.raises(ImageError, match=re.escape(message)) as info:
        expand(text, known, "image digest", ImageError, missing_hint="list them")
    assert info.value.hint == "list them"


def test_expand_refuses_an_ambiguous_prefix_naming_the_candidates() -> None:
    known = [Digest.from_hex("abab" * 4 + f"{i:02x}" * 24) for i in range(6)]
    with pytest.raises(ImageError) as info:
        expand("abababababababab", known, "image digest", ImageError)
    assert info.value.message == (
        "image digest abababababababab is ambiguous: 6 start with it ("
        + ", ".join(str(d) for d in known[:4]) + " and 2 more)")
    assert info.value.hint == "give more hex digits"
    assert expand("abababababababab05", known, "image digest", ImageError) == known[5]
    assert is_short("sha256:abababababab") and not is_short("ababab")
