"""The one YAML reader: a duplicate key and nesting past the cap are refused, each with
one line and its exit code; anchors that name one node many times are read without
copying it. And pipeline.yaml is read into typed, read-only sections."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.config import load, yamlread
from patchbake.config.channels import Channel
from patchbake.config.signing import Signing
from patchbake.config.suites import Suite
from patchbake.errors import ConfigError, InputLimitError

PIPELINE = """\
version: 1
name: demo
lineages:
  v1:
    name: demo
    upstream: {kind: path, version: "1.0", path: up, pins: {torch: "2.11"}}
    patch: patch/demo.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
"""

SECTIONS = """\
images: {serve: images/serve.yaml}
suites:
  toy: {path: tests/toy, command: [pytest, "--junitxml={junit}"]}
channels:
  candidate: {gates: [guard]}
  validated: {gates: [evidence], suites: [toy]}
signing: {key: /keys/signing.key}
"""


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE)
    return p


def test_a_duplicate_key_is_refused(pipeline: Path) -> None:
    pipeline.write_text(PIPELINE + "name: twice\n")
    with pytest.raises(ConfigError, match=r"key 'name' appears twice in one mapping \(line "
                                          r"10\); YAML would silently keep the last") as e:
        load(pipeline)
    assert e.value.exit_code == 3


def test_a_lower_depth_cap_is_honoured(pipeline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load(pipeline)
    monkeypatch.setenv("PATCHBAKE_YAML_DEPTH", "2")
    with pytest.raises(InputLimitError, match="nesting deeper than 2") as e:
        load(pipeline)
    assert e.value.exit_code == 15


@pytest.mark.parametrize("images", [
    # a few hundred bytes naming one list 10**7 times: PyYAML builds the list once
    "images: {a: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n" + "".join(
        f"x{n}: &l{n} [*l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}, "
        f"*l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}]\n" for n in range(1, 8)),
    "images: {x: &a [*a]}\n",  # a list that holds itself
    # one 64 KiB scalar named 2,000 times
    "images: {s: &s " + "x" * (64 << 10) + "}\nrepeat: [" + ", ".join(["*s"] * 2000) + "]\n",
])
def test_shared_nodes_are_read_once(tmp_path: Path, images: str) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE + images)
    doc = yamlread.load_file(p, "pipeline")
    assert "images" in doc
    with pytest.raises(ConfigError):  # and pipeline.yaml's schema refuses them
        load(p)


def test_sections_are_typed_and_read_only(pipeline: Path) -> None:
    pipeline.write_text(PIPELINE + SECTIONS)
    p = load(pipeline)
    root = pipeline.parent.resolve()
    assert dict(p.images) == {"serve": root / "images/serve.yaml"}
    assert isinstance(p.suites["toy"], Suite) and p.suites["toy"].path == root / "tests/toy"
    assert all(isinstance(c, Channel) for c in p.channels.values())
    assert [g.kind for g in p.channels["validated"].gates] == ["guard", "evidence"]
    assert isinstance(p.signing, Signing) and p.signing.private_key() == Path("/keys/signing.key")
    for section in (p.lineages, p.images, p.suites, p.channels):
        with pytest.raises(TypeError):
            section["x"] = None  # type: ignore[index]


def test_absent_sections_are_empty_and_signing_has_its_defaults(
        pipeline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = load(pipeline)
    assert (dict(p.images), dict(p.suites), dict(p.channels)) == ({}, {}, {})
    assert p.signing.trust_policy == pipeline.parent.resolve() / "manifests/trust-policy.yaml"
    monkeypatch.setenv("PATCHBAKE_SIGNING_KEY", "/keys/k")
    assert p.signing.key is None and p.signing.private_key() == Path("/keys/k")


def test_an_image_entry_must_name_a_file(pipeline: Path) -> None:
    pipeline.write_text(PIPELINE + "images: {serve: {base: x}}\n")
    with pytest.raises(ConfigError, match="'images.serve' must be the path of a definition "
                                          "file, got dict") as e:
        load(pipeline)
    assert e.value.exit_code == 3
