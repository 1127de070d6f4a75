from __future__ import annotations

from patchbake.entry import hoist_json


def test_json_anywhere_becomes_the_global_flag() -> None:
    assert hoist_json(["series", "verify", "--json"]) == ["--json", "series", "verify"]
    assert hoist_json(["--json", "fetch"]) == ["--json", "fetch"]
    assert hoist_json(["fetch"]) == ["fetch"]


def test_json_after_double_dash_is_left_alone() -> None:
    assert hoist_json(["patch", "check", "--", "--json"]) == ["patch", "check", "--", "--json"]
