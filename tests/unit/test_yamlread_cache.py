"""pipeline.yaml's parse cache: same bytes and caps -> the same document without PyYAML;
anything refused, or anything JSON cannot hold exactly, is parsed every time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from patchbake import yamlread
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


def _cached(home: Path) -> list[Path]:
    d = home / "cache" / "yaml"
    return sorted(d.glob("*.json")) if d.is_dir() else []


def _forget_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlread, "_yaml", None)
    for name in [m for m in sys.modules if m == "yaml" or m.startswith(("yaml.", "_yaml"))]:
        monkeypatch.delitem(sys.modules, name)


def test_second_load_reads_the_cache_without_yaml(home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    first = load(p)
    assert len(_cached(home)) == 1
    _forget_yaml(monkeypatch)
    second = load(p)
    assert "yaml" not in sys.modules
    assert second == first
    assert second.images == {"serve": {"weights": [1, 2.5, True, None]}}
    assert isinstance(second.images["serve"]["weights"][1], float)


def test_an_edit_is_a_new_key(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    load(p)
    p.write_text(PIPELINE.replace("name: cached", "name: edited"))
    assert load(p).name == "edited"
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
            load(p)
    assert _cached(home) == []


def test_a_lower_depth_cap_is_not_bypassed(home: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    load(p)
    monkeypatch.setenv("PATCHBAKE_YAML_DEPTH", "2")
    with pytest.raises(InputLimitError, match="nesting deeper than 2"):
        load(p)


def test_a_corrupt_entry_is_parsed_again_and_replaced(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    first = load(p)
    (kept,) = _cached(home)
    kept.write_bytes(b'{"version": 1, "name": "cut')
    assert load(p) == first
    assert kept.read_bytes().startswith(b'{"version": 1, "name": "cached"')


def test_a_full_store_still_loads(home: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("patchbake.fsutil.atomic_write", full)
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    assert load(p).name == "cached"
    assert _cached(home) == []


def test_another_parser_is_another_key(home: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    load(p)
    monkeypatch.setattr(yamlread, "_parser_id", lambda: "/elsewhere/yaml/__init__.py:1:2")
    load(p)
    assert len(_cached(home)) == 2


def test_the_parser_id_names_pyyaml_without_importing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    _forget_yaml(monkeypatch)
    ident = yamlread._parser_id()
    assert ident.startswith(str(Path(yaml.__file__))) and "yaml" not in sys.modules
