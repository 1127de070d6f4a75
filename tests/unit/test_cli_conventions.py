"""What every command shares: --json in --help, JSON errors under --json, a format version
in every JSON document, "did you mean" for image names, NO_COLOR, progress lines off a
terminal, one version source."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click
import pytest
from patchbake import __version__, cli, entry, ui

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = entry.main(["--pipeline", str(REPO / "pipeline.yaml"), *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _commands() -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    ctx = click.Context(cli.main_group)

    def walk(prefix: str, cmd: click.Command) -> None:
        found.append((prefix, cmd))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(f"{prefix} {name}".strip(), sub)

    walk("", cli.main_group)
    return found


def test_every_commands_help_shows_json(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands()
    assert len(commands) > 20
    for path, _ in commands:
        rc, out, err = run(capsys, *path.split(), "--help")
        assert rc == 0, (path, err)
        assert "--json" in out, f"`patchbake {path} --help` does not show --json"


def test_json_errors_are_json_on_stderr(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "verify", "no-such-image", "--json")
    assert rc == 30 and out == ""
    doc = json.loads(err)
    assert doc["format_version"] == ui.FORMAT_VERSION
    assert doc["error"]["class"] == "ImageError" and doc["error"]["code"] == 30
    assert "no-such-image" in doc["error"]["message"]
    assert set(doc["error"]) == {"class", "code", "message", "hint"}


def test_usage_errors_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "--json", "fetch", "--no-such-option")
    assert rc == 2 and out == ""
    error = json.loads(err)["error"]
    assert error["class"] == "UsageError" and "--no-such-option" in error["message"]
    assert error["hint"] == "see `patchbake fetch --help`"


def test_errors_without_json_stay_one_line(home: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "verify", "no-such-image")
    assert rc == 30 and out == "" and err.count("\n") == 1
    assert err.startswith("patchbake: error: cannot resolve image reference 'no-such-image': "
                          "no image definition or store image has that name "
                          "(`patchbake image ls` lists")


@pytest.mark.parametrize("argv", [
    ["verify", "sm89-serving-ofline"],
    ["push", "sm89-serving-ofline", "127.0.0.1:1/x:y"],
    ["fixtures", "run", "dsv4-topk-cpu", "--image", "sm89-serving-ofline"],
    ["image", "materialise", "sm89-serving-ofline", "out"],
    ["image", "export", "sm89-serving-ofline", "out.tar"],
    ["evidence", "summary", "--image", "sm89-serving-ofline"],
])
def test_mistyped_image_names_get_did_you_mean(argv: list[str], home: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 30, err
    assert err.rstrip().endswith("(did you mean 'sm89-serving-offline'?)"), err


def test_a_name_with_nothing_close_gets_no_guess(home: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "verify", "zzzz")
    assert rc == 30 and "did you mean" not in err


def test_json_documents_carry_the_format_version(capsys: pytest.CaptureFixture[str]) -> None:
    ui.emit_json({"a": 1})
    assert json.loads(capsys.readouterr().out) == {"a": 1, "format_version": ui.FORMAT_VERSION}
    ui.emit_json([1, 2])
    assert json.loads(capsys.readouterr().out) == {"items": [1, 2],
                                                   "format_version": ui.FORMAT_VERSION}


def test_version_has_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"patchbake, version {__version__}"
    text = (REPO / "pyproject.toml").read_text()
    assert 'version = { attr = "patchbake.__version__" }' in text
    assert "\nversion =" not in text.split("[tool.setuptools.dynamic]")[0]


@pytest.mark.parametrize("value,disabled", [(None, False), ("", False), ("1", True),
                                            ("0", True)])
def test_no_color_as_no_color_org_defines_it(value: str | None, disabled: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    assert ui.no_color() is disabled


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_prints_a_line_every_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(ui.time, "monotonic", clock)
    monkeypatch.delenv("PATCHBAKE_NO_PROGRESS", raising=False)
    monkeypatch.setenv("PATCHBAKE_PROGRESS_INTERVAL", "5")
    err = io.StringIO()
    monkeypatch.setattr(ui.sys, "stderr", err)
    with ui.progress("push", 10_000_000) as p:
        p.advance(1_000_000)          # t=0: nothing yet
        clock.now += 6
        p.advance(2_000_000)          # t=6: a line
        clock.now += 1
        p.advance(1_000_000)          # t=7: too soon
        clock.now += 5
        p.advance(6_000_000)          # t=12: a line
    lines = err.getvalue().splitlines()
    assert lines == ["push: 3.0 MB of 10.0 MB (30%), 500.0 kB/s, 6 s …",
                     "push: 10.0 MB of 10.0 MB (100%), 833.3 kB/s, 12 s …",
                     "push: 10.0 MB of 10.0 MB (100%), 833.3 kB/s, 12 s done"]


def test_short_steps_print_nothing_and_no_progress_silences(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(ui.time, "monotonic", clock)
    err = io.StringIO()
    monkeypatch.setattr(ui.sys, "stderr", err)
    monkeypatch.delenv("PATCHBAKE_NO_PROGRESS", raising=False)
    with ui.progress("hash", None) as p:
        p.advance(5)
    monkeypatch.setenv("PATCHBAKE_NO_PROGRESS", "1")
    with ui.progress("hash", None) as p:
        clock.now += 60
        p.advance(5)
    assert err.getvalue() == ""


def test_evidence_verify_by_suite_finds_the_images_own_file(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = sorted((REPO / "manifests" / "evidence").glob("*/dsv4-topk-gpu.dsse.json"))
    assert committed, "the repository commits GPU evidence"
    digest = "sha256:" + committed[0].parent.name
    rc, out, err = run(capsys, "evidence", "verify", "--suite", "dsv4-topk-gpu",
                       "--image", f"sm89-serving-offline@{digest}", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["path"].endswith(f"{digest[7:]}/dsv4-topk-gpu.dsse.json") and doc["verified"]
    other = "sha256:" + "0" * 64
    rc, _, err = run(capsys, "evidence", "verify", "--suite", "dsv4-topk-gpu",
                     "--image", f"sm89-serving-offline@{other}")
    assert rc == 50 and "does not exist" in err


def test_evidence_verify_takes_the_digest_prefix_people_see(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Evidence is verified with no store: a short digest expands against the committed
    records and evidence directories; one that names nothing there is refused."""
    committed = sorted((REPO / "manifests" / "evidence").glob("*/dsv4-topk-gpu.dsse.json"))
    hex_ = committed[0].parent.name
    for short in (f"sha256:{hex_[:12]}", hex_[:16]):
        rc, out, err = run(capsys, "--json", "evidence", "verify", "--suite", "dsv4-topk-gpu",
                           "--image", f"sm89-serving-offline@{short}")
        assert rc == 0, err
        assert json.loads(out)["subject"]["digest"] == f"sha256:{hex_}"
    rc, _, err = run(capsys, "evidence", "verify", "--suite", "dsv4-topk-gpu",
                     "--image", "sm89-serving-offline@sha256:0123456789ab")
    assert rc == 30 and "no image digest starts with 0123456789ab" in err


def test_evidence_verify_needs_file_or_suite(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "evidence", "verify", "--image", "sm89-serving-offline")
    assert rc == 2 and "give the evidence FILE or --suite SUITE" in err


def test_lineage_goes_where_people_put_it(capsys: pytest.CaptureFixture[str]) -> None:
    """`--lineage` after the command name means what it means before it; two different
    ones are refused; the help says default_lineage wins over "the newest"."""
    rc, out, err = run(capsys, "patch", "check", "--lineage", "v0.33.0", "--no-tree", "--json")
    assert rc == 0, err
    after = json.loads(out)
    rc, out, err = run(capsys, "--lineage", "v0.33.0", "patch", "check", "--no-tree", "--json")
    assert rc == 0, err
    assert json.loads(out) == after
    rc, out, _ = run(capsys, "patch", "check", "--no-tree", "--json")
    assert json.loads(out)["patch_sha256"] != after["patch_sha256"]
    rc, _, err = run(capsys, "--lineage", "v0.25.1", "patch", "check", "--lineage", "v0.33.0")
    assert rc == 2 and "--lineage v0.25.1 was given before the command and --lineage " \
                       "v0.33.0 after it" in err
    rc, out, _ = run(capsys, "patch", "check", "--help")
    assert "default_lineage" in " ".join(out.split())
    rc, out, _ = run(capsys, "--help")
    assert "default_lineage" in " ".join(out.split())
    rc, out, _ = run(capsys, "port", "--help")  # port's own --lineage (the new lineage) stays
    assert "default_lineage" not in " ".join(out.split())


def test_the_default_image_is_the_requested_lineages() -> None:
    """`--lineage v0.33.0 run` bakes the image of that lineage, not the default one."""
    from patchbake import config
    from patchbake.images.definition import default_name

    p = config.load(REPO / "pipeline.yaml")
    assert default_name(p) == default_name(p, "v0.25.1") == "sm89-serving-offline"
    assert default_name(p, "v0.33.0") == "sm89-serving-offline-v0.33.0"


@pytest.mark.parametrize("args, incomplete, want", [
    (["release", "gates", "--channel"], "", ["candidate", "sm89-stable", "validated"]),
    (["patch", "check", "--lineage"], "v0.3", ["v0.33.0"]),
    (["--lineage"], "", ["v0.25.1", "v0.33.0"]),
    (["verify"], "sm89-serving-off", ["sm89-serving-offline", "sm89-serving-offline-v0.33.0"]),
    (["suites", "run"], "dsv4-topk-c", ["dsv4-topk-cpu"]),
    (["suites", "run", "dsv4-topk-cpu", "--image"], "sm89-serving-o",
     ["sm89-serving-offline", "sm89-serving-offline-v0.33.0"]),
])
def test_completion_offers_the_pipelines_names(home: Path, args: list[str], incomplete: str,
                                              want: list[str]) -> None:
    """Shell completion (click's) of lineage, channel, image and suite names, read from the
    pipeline.yaml the command line names."""
    from click.shell_completion import BashComplete

    comp = BashComplete(cli.main_group, {}, "patchbake", "_PATCHBAKE_COMPLETE")
    got = comp.get_completions(["--pipeline", str(REPO / "pipeline.yaml"), *args], incomplete)
    assert [c.value for c in got] == want
