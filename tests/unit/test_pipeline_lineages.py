"""The repository's own pipeline.yaml: two lineages, an explicit default, every command loads."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from patchbake import config
from patchbake.cli import main_group

REPO = Path(__file__).resolve().parents[2]


def test_repository_lineages_and_explicit_default() -> None:
    p = config.load(REPO / "pipeline.yaml")
    assert set(p.lineages) == {"v0.25.1", "v0.33.0"}
    # newest is v0.33.0, but the signed GPU evidence is for v0.25.1: the default is explicit
    assert p.default_lineage == "v0.25.1"
    assert p.lineage().key == "v0.25.1"
    new = p.lineage("v0.33.0")
    assert new.upstream.version == "0.33.0"
    assert new.upstream.sha256 == \
        "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
    for path in (new.patch, new.files, new.source_record, new.series):
        assert path is not None
        assert Path(path).resolve().is_relative_to(REPO / "patch" / "v0.33.0"), path
        assert Path(path).exists(), path


def test_every_command_module_loads() -> None:
    result = CliRunner().invoke(main_group, ["--help"])
    assert result.exit_code == 0, result.output
    for name in ("suites", "patch", "series", "bake", "verify", "evidence"):
        assert f"  {name} " in result.output, name
