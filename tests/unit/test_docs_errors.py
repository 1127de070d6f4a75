from __future__ import annotations

import re
from pathlib import Path

from patchbake.errors import all_error_classes

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def test_every_error_class_is_documented_with_its_code() -> None:
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", DOC.read_text(), re.MULTILINE))
    documented = {name: int(code) for code, name in rows.items()}
    actual = {c.__name__: c.exit_code for c in all_error_classes()}
    assert documented == actual
