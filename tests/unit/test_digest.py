"""Digest: parsed once at the edge, one canonical spelling everywhere after."""

from __future__ import annotations

import hashlib
import json

import pytest

from patchbake.digest import Digest, hex_of, is_digest, is_hex
from patchbake.errors import ImageError, PatchbakeError

HEX = hashlib.sha256(b"x").hexdigest()


def test_parse_gives_algorithm_hex_and_canonical_text() -> None:
    d = Digest.parse(f"sha256:{HEX}")
    assert (d.algorithm, d.hex, str(d), d.short()) == ("sha256", HEX, f"sha256:{HEX}", HEX[:12])
    assert d == Digest.from_hex(HEX) == Digest.of(b"x")
    assert json.dumps({"digest": d}) == json.dumps({"digest": f"sha256:{HEX}"})  # same bytes


@pytest.mark.parametrize("bad", [HEX, f"sha256:{HEX.upper()}", f"sha512:{HEX}",
                                 f"sha256:{HEX[:-1]}", f"sha256:{HEX}\n", "", None, 42])
def test_anything_else_is_refused_with_the_callers_error(bad: object) -> None:
    assert not is_digest(bad)
    with pytest.raises(ImageError, match="base digest .* is not sha256:<64 lowercase hex"):
        Digest.parse(bad, "base digest", ImageError)
    if isinstance(bad, str):
        with pytest.raises(ValueError):
            Digest(bad)


def test_hex_of_takes_both_spellings_and_nothing_else() -> None:
    assert hex_of(HEX) == hex_of(f"sha256:{HEX}") == HEX
    assert is_hex(HEX) and not is_hex(f"sha256:{HEX}")
    with pytest.raises(PatchbakeError):
        hex_of("sha256:abc")
