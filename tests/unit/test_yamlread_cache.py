"""pipeline.yaml's parse cache: same bytes and caps -> the same document without PyYAML;
anything refused, or anything JSON cannot hold exactly, is parsed every time; only the
commands that take the store as given read it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from patchbake.config import yamlread
from patchbake.config import load
from patchbake.errors import ConfigError, InputLimitError

PIPELINE = """\
version: 1
name: cached
lineages:
  v1:
    name: demo
    upstream: {kind: path, version: "1.0", path: up, pins: {torch: "2.11"}}
    patch: patch/demo.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
images: {serve: {weights: [1, 2.5, true, null]}}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store"
    monkeypatch.setenv("PATCHBAKE_HOME", str(store))
    return store


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    return p


def _cached(home: Path) -> list[Path]:
    d = home / "cache" / "yaml"
    return sorted(d.glob("*.json")) if d.is_dir() else []


def _forget_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlread, "_yaml", None)
    for name in [m for m in sys.modules if m == "yaml" or m.startswith(("yaml.", "_yaml"))]:
        monkeypatch.delitem(sys.modules, name)


def test_second_load_reads_the_cache_without_yaml(pipeline: Path, home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline
    first = load(p, cache=True)
    assert len(_cached(home)) == 1
    _forget_yaml(monkeypatch)
    second = load(p, cache=True)
    assert "yaml" not in sys.modules
    assert second == first
    assert second.images == {"serve": {"weights": [1, 2.5, True, None]}}
    assert isinstance(second.images["serve"]["weights"][1], float)


def test_an_edit_is_a_new_key(pipeline: Path, home: Path) -> None:
    p = pipeline
    load(p, cache=True)
    p.write_text(PIPELINE.replace("name: cached", "name: edited"))
    assert load(p, cache=True).name == "edited"
    assert len(_cached(home)) == 2


@pytest.mark.parametrize("extra", [
    "images: {when: 2026-12-01}",      # a date
    "images: {1: one}",                # a non-string key
    "images: {x: .nan}",               # not JSON
    "images: {x: !!binary aGk=}",      # bytes
    "images: {x: !!set {a, b}}",       # a set
])
def test_what_json_cannot_hold_is_not_cached(home: Path, tmp_path: Path, extra: str) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE.replace("images: {serve: {weights: [1, 2.5, true, null]}}", extra))
    doc = yamlread.load_file(p, "pipeline", cache=True)
    assert doc["images"] == yamlread.parse_text(p.read_bytes(), p.name)["images"]
    assert _cached(home) == []


def test_a_refused_document_is_refused_every_time(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE + "name: twice\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="appears twice"):
            load(p, cache=True)
    assert _cached(home) == []


def test_a_lower_depth_cap_is_not_bypassed(pipeline: Path, home: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline
    load(p, cache=True)
    monkeypatch.setenv("PATCHBAKE_YAML_DEPTH", "2")
    with pytest.raises(InputLimitError, match="nesting deeper than 2"):
        load(p, cache=True)


def test_a_corrupt_entry_is_parsed_again_and_replaced(pipeline: Path, home: Path) -> None:
    p = pipeline
    first = load(p, cache=True)
    (kept,) = _cached(home)
    kept.write_bytes(b'{"version": 1, "name": "cut')
    assert load(p, cache=True) == first
    assert kept.read_bytes().startswith(b'{"version": 1, "name": "cached"')


def test_a_full_store_still_loads(pipeline: Path, home: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("patchbake.fsutil.atomic_write", full)
    p = pipeline
    assert load(p, cache=True).name == "cached"
    assert _cached(home) == []


def test_another_parser_is_another_key(pipeline: Path, home: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline
    load(p, cache=True)
    monkeypatch.setattr(yamlread, "_parser_id", lambda: "/elsewhere/yaml/__init__.py:1:2")
    load(p, cache=True)
    assert len(_cached(home)) == 2


def test_the_parser_id_names_pyyaml_without_importing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    _forget_yaml(monkeypatch)
    ident = yamlread._parser_id()
    assert ident.startswith(str(Path(yaml.__file__))) and "yaml" not in sys.modules


@pytest.mark.parametrize("images", [
    # a few hundred bytes naming one list 10**7 times: written out it would be gigabytes
    "images: {a: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n" + "".join(
        f"x{n}: &l{n} [*l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, "
        f"*l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}]\n" for n in range(1, 8)),
    "images: {x: &a [*a]}\n",  # a list that holds itself
    # one 64 KiB scalar named 2,000 times: 128 MB of JSON from a 70 KB file
    "images: {s: &s " + "x" * (64 << 10) + "}\nrepeat: [" + ", ".join(["*s"] * 2000) + "]\n",
])
def test_shared_nodes_are_not_cached(home: Path, tmp_path: Path, images: str) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE.replace("images: {serve: {weights: [1, 2.5, true, null]}}\n", "")
                 + images)
    doc = yamlread.load_file(p, "pipeline", cache=True)
    assert "images" in doc and _cached(home) == []


def test_no_usable_store_location_parses_without_the_cache(pipeline: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHBAKE_HOME", "~no-such-user-patchbake/x")
    p = pipeline
    assert load(p, cache=True).name == "cached"


def test_a_poisoned_entry_is_read_only_by_callers_that_ask(pipeline: Path, home: Path) -> None:
    """fetch --verify and verify check the store: their pins never come from it."""
    import json

    p = pipeline
    load(p, cache=True)
    (kept,) = _cached(home)
    doc = json.loads(kept.read_bytes())
    doc["name"] = "poisoned"
    kept.write_text(json.dumps(doc))
    assert load(p).name == "cached"  # the default: parsed from the file
    assert load(p, cache=True).name == "poisoned"  # what "trusts the store" means


def test_only_the_guard_commands_read_the_cache() -> None:
    from patchbake.entry import PLAIN_COMMANDS, plain_call

    trusting = {words for words, spec in PLAIN_COMMANDS.items() if spec.cached_pipeline}
    assert trusting == {("patch", "check"), ("patch", "export")}
    found = plain_call(["patch", "check"])
    assert found is not None and found[0].cached_pipeline
    found = plain_call(["pull", "127.0.0.1:5000/r:t"])
    assert found is not None and not found[0].cached_pipeline
