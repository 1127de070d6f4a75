from __future__ import annotations

from pathlib import Path

import pytest
from patchbake import config
from patchbake.errors import ConfigError, PatchbakeError, all_error_classes

REPO = Path(__file__).resolve().parents[2]


def test_exit_codes_are_distinct() -> None:
    codes = [c.exit_code for c in all_error_classes()]
    assert len(codes) == len(set(codes)), sorted(codes)
    assert PatchbakeError.exit_code not in (0, 2) or PatchbakeError.exit_code == 1


def test_repository_pipeline_loads() -> None:
    p = config.load(REPO / "pipeline.yaml")
    lin = p.lineage()
    assert lin.upstream.version == "0.25.1"
    assert lin.upstream.sha256 == "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(text)
    return p


BASE = """
version: 1
name: t
lineages:
  v0.24.0:
    name: fix
    upstream: {kind: index, version: 0.24.0, filename: a.tar.gz, sha256: SHA_A}
    patch: patch/a.patch
    files: patch/v0.24.0/FILES.txt
    source_record: patch/v0.24.0/SOURCE
  v0.25.1:
    name: fix
    upstream: {kind: index, version: 0.25.1, filename: b.tar.gz, sha256: SHA_B}
    patch: patch/b.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
""".replace("SHA_A", "a" * 64).replace("SHA_B", "b" * 64)


def test_default_lineage_is_newest(tmp_path: Path) -> None:
    p = config.load(_write(tmp_path, BASE))
    assert p.lineage().key == "v0.25.1"
    assert p.lineage("v0.24.0").upstream.version == "0.24.0"
    assert p.path == (tmp_path / "pipeline.yaml").resolve() and p.root == tmp_path.resolve()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.replace("lineages:", "lineage:"), "unknown key 'lineage'; did you mean 'lineages'?"),
        (lambda t: t.replace("version: 1", "version: one"), "'version' must be of type integer"),
        (lambda t: t.replace("    patch: patch/b.patch\n", ""), "missing required key 'lineages.v0.25.1.patch'"),
        (lambda t: t.replace("sha256: " + "b" * 64, "sha256: xyz"), "must be 64 lowercase hex digits"),
        (lambda t: t.replace("kind: index, version: 0.25.1", "kind: idx, version: 0.25.1"), "did you mean 'index'"),
        (lambda t: t.replace("name: t\n", "name: t\nchanels: {}\n"), "did you mean 'channels'"),
        (lambda t: t.replace("files: patch/v0.24.0/FILES.txt", "files: patch/FILES.txt"),
         ("'lineages.v0.25.1.files' names patch/FILES.txt, which 'lineages.v0.24.0.files' "
          "names too: each lineage needs its own patch, FILES.txt, SOURCE, series and lock")),
    ],
)
def test_bad_pipeline_is_one_line_error(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as ei:
        config.load(_write(tmp_path, mutate(BASE)))
    assert message in ei.value.one_line()
    assert "pipeline.yaml" in ei.value.one_line()
    assert "\n" not in ei.value.one_line()
    assert ei.value.exit_code == 3


def test_unknown_lineage_suggests(tmp_path: Path) -> None:
    p = config.load(_write(tmp_path, BASE))
    with pytest.raises(ConfigError, match="did you mean 'v0.25.1'"):
        p.lineage("v0.25.2")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_pipeline_says_so_and_how_to_write_one(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as ei:
        config.load(_write(tmp_path, text))
    assert ei.value.message.endswith("pipeline.yaml is empty (no YAML document, or only comments)")
    assert ei.value.hint is not None and "`patchbake init --vllm VERSION`" in ei.value.hint
    assert "NoneType" not in ei.value.one_line()


def test_an_empty_value_is_called_empty_not_nonetype(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        config.load(_write(tmp_path, BASE.replace("name: t\n", "name:\n")))
    assert "'name' must be of type string, got nothing (the value is empty)" in ei.value.message
    with pytest.raises(ConfigError) as ei:
        config.load(_write(tmp_path, "version: 1\nname: t\nlineages:\n  v1:\n"))
    assert "lineages.v1 must be a mapping, got nothing (the value is empty)" \
        in ei.value.message


def test_an_error_line_keeps_the_spaces_it_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    """One line: line breaks go, runs of spaces in quoted text stay (they can be the very
    difference the message reports)."""
    from patchbake import entry

    assert entry.fail(False, "GuardError", 21, "expected 'a  b',\n  found 'a b'",
                      hint="fix\n it") == 21
    assert capsys.readouterr().err == ("patchbake: error: expected 'a  b', found 'a b' "
                                       "(fix it)\n")
    err = PatchbakeError("expected '\tx  '\r\nfound 'x'", hint="h")
    assert err.one_line() == "expected '\tx  ' found 'x' (h)"


def test_shortened_hashes_in_a_mismatch_differ() -> None:
    from patchbake.digest import differing

    a, b = "ab" * 32, "ab" * 10 + "cd" * 22
    assert differing(a, b) == (a[:21], b[:21]) and a[:21] != b[:21]
    assert differing("1" * 64, "2" * 64) == ("1" * 12, "2" * 12)
    assert differing(a, b, 16) == (a[:21], b[:21])
    assert differing(a, a) == (a, a)
