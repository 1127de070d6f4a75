"""How the one CLI parser reads `patchbake push`/`pull`/`patch check`/`patch export`: the
arguments and options each accepts, what it refuses (exit 2, one line naming what), and
--json anywhere. Also: `suites` and its alias `fixtures` are one command group, and an
interrupt ends the process with 130 (Ctrl-C) or 143 (SIGTERM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from patchbake import cli, entry

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "a" * 64
NO_GLOBALS = {"pipeline_path": None, "lineage_key": None, "as_json": False, "debug": False}


def _with(**kw: Any) -> dict[str, Any]:
    return {**NO_GLOBALS, **kw}


# argv -> (global options, command words, the command's parameters), as click must read them
ACCEPTED: list[tuple[list[str], dict[str, Any], tuple[str, ...], dict[str, Any]]] = [
    (["push", DIGEST, "127.0.0.1:5000/app:v1"], NO_GLOBALS, ("push",),
     {"source": DIGEST, "dest": "127.0.0.1:5000/app:v1", "mount_from": ()}),
    (["push", "demo", "h.example/r:t", "--mount-from", "x", "--mount-from=y/z"], NO_GLOBALS,
     ("push",), {"source": "demo", "dest": "h.example/r:t", "mount_from": ("x", "y/z")}),
    (["push", "--mount-from", "x", "demo", "h.example/r:t"], NO_GLOBALS, ("push",),
     {"source": "demo", "dest": "h.example/r:t", "mount_from": ("x",)}),
    (["--json", "push", "demo", "h.example/r:t"], _with(as_json=True), ("push",),
     {"source": "demo", "dest": "h.example/r:t", "mount_from": ()}),
    (["push", "demo", "h.example/r:t", "--json"], _with(as_json=True), ("push",),
     {"source": "demo", "dest": "h.example/r:t", "mount_from": ()}),
    (["--debug", "--pipeline", "p.yaml", "--lineage", "0.25.1", "pull", "h.example/r:t",
      "--platform", "linux/arm64"],
     _with(pipeline_path="p.yaml", lineage_key="0.25.1", debug=True), ("pull",),
     {"ref": "h.example/r:t", "platform": "linux/arm64"}),
    (["pull", "--platform=linux/arm64/v8", "h.example/r:t"], NO_GLOBALS, ("pull",),
     {"ref": "h.example/r:t", "platform": "linux/arm64/v8"}),
    (["pull", "--", "h.example/r:t"], NO_GLOBALS, ("pull",),
     {"ref": "h.example/r:t", "platform": "linux/amd64"}),
    (["push", "demo", "--", "-odd"], NO_GLOBALS, ("push",),
     {"source": "demo", "dest": "-odd", "mount_from": ()}),
    (["--pipeline=x.yaml", "pull", "-"], _with(pipeline_path="x.yaml"), ("pull",),
     {"ref": "-", "platform": "linux/amd64"}),
    (["push", "demo", "h.example/r:t", "--mount-from="], NO_GLOBALS, ("push",),
     {"source": "demo", "dest": "h.example/r:t", "mount_from": ("",)}),
    (["patch", "check"], NO_GLOBALS, ("patch", "check"), {"no_tree": False}),
    (["patch", "check", "--no-tree"], NO_GLOBALS, ("patch", "check"), {"no_tree": True}),
    (["--json", "--lineage", "v0.33.0", "patch", "check", "--no-tree"],
     _with(as_json=True, lineage_key="v0.33.0"), ("patch", "check"), {"no_tree": True}),
    (["patch", "check", "--json"], _with(as_json=True), ("patch", "check"), {"no_tree": False}),
    (["patch", "--json", "check"], _with(as_json=True), ("patch", "check"), {"no_tree": False}),
    (["patch", "export"], NO_GLOBALS, ("patch", "export"),
     {"from_spec": None, "force": False, "reason": None}),
    (["patch", "export", "--from", "ws", "--force", "--reason", "re-pin"], NO_GLOBALS,
     ("patch", "export"), {"from_spec": "ws", "force": True, "reason": "re-pin"}),
    (["patch", "export", "--from=repo@abc", "--reason=x", "--force"], NO_GLOBALS,
     ("patch", "export"), {"from_spec": "repo@abc", "force": True, "reason": "x"}),
    (["--pipeline", "p.yaml", "patch", "export", "--force"], _with(pipeline_path="p.yaml"),
     ("patch", "export"), {"from_spec": None, "force": True, "reason": None}),
    # click keeps the last of a repeated single-valued option, and a repeated flag is set
    (["pull", "a", "--platform", "x", "--platform", "y"], NO_GLOBALS, ("pull",),
     {"ref": "a", "platform": "y"}),
    (["--pipeline", "a", "--pipeline", "b", "pull", "r"], _with(pipeline_path="b"), ("pull",),
     {"ref": "r", "platform": "linux/amd64"}),
    (["patch", "check", "--no-tree", "--no-tree"], NO_GLOBALS, ("patch", "check"),
     {"no_tree": True}),
]


def _click_reading(args: list[str]) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
    """(group params, command words, command params) as click parses ``args``."""
    group = cli.main_group.make_context("patchbake", list(args))
    words: list[str] = []
    command: click.Command = cli.main_group
    ctx = group
    while isinstance(command, click.Group):
        protected = getattr(ctx, "_protected_args", None)  # click >= 8.2; before: public
        if protected is None:
            protected = ctx.protected_args
        name, cmd, rest = command.resolve_command(ctx, [*protected, *ctx.args])
        assert cmd is not None and name is not None
        words.append(name)
        ctx = cmd.make_context(name, rest, parent=ctx)
        command = cmd
    return group.params, tuple(words), ctx.params


@pytest.mark.parametrize("argv,globals_,words,params",
                         ACCEPTED, ids=lambda a: repr(a))
@pytest.mark.parametrize("env_pipeline", [None, "from-env.yaml"])
def test_the_timed_commands_read_their_arguments(
        argv: list[str], globals_: dict[str, Any], words: tuple[str, ...],
        params: dict[str, Any], env_pipeline: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if env_pipeline:
        monkeypatch.setenv("PATCHBAKE_PIPELINE", env_pipeline)
        globals_ = {**globals_, "pipeline_path": globals_["pipeline_path"] or env_pipeline}
    else:
        monkeypatch.delenv("PATCHBAKE_PIPELINE", raising=False)
    assert _click_reading(entry.hoist_json(argv)) == (globals_, words, params)


def test_their_declarations() -> None:
    """The arguments, options and flags of the commands timed against other tools."""
    ctx = click.Context(cli.main_group)
    want = {
        ("push",): (["source", "dest"], {"--mount-from": ("mount_from", True)}, {}),
        ("pull",): (["ref"], {"--platform": ("platform", False)}, {}),
        ("patch", "check"): ([], {}, {"--no-tree": "no_tree"}),
        ("patch", "export"): ([], {"--from": ("from_spec", False), "--reason": ("reason", False)},
                              {"--force": "force"}),
    }
    for words, (arguments, options, flags) in want.items():
        cmd: click.Command | None = cli.main_group
        for w in words:
            assert isinstance(cmd, click.Group)
            cmd = cmd.get_command(ctx, w)
        assert cmd is not None
        assert [p.name for p in cmd.params if isinstance(p, click.Argument)] == arguments
        exposed = [p for p in cmd.params if isinstance(p, click.Option) and p.expose_value]
        assert {o: (p.name, bool(p.multiple)) for p in exposed if not p.is_flag
                for o in p.opts} == options
        assert {o: p.name for p in exposed if p.is_flag for o in p.opts} == flags


REFUSED = [
    (["push", "a"], "Missing argument 'DEST'.", "patchbake push"),
    (["push", "a", "b", "c"], "Got unexpected extra argument (c)", "patchbake push"),
    (["pull"], "Missing argument 'REF'.", "patchbake pull"),
    (["pull", "a", "--bogus"], "No such option '--bogus'.", "patchbake pull"),
    (["push", "a", "b", "--mount-from"], "Option '--mount-from' requires an argument.", None),
    (["pull", "-x", "r"], "No such option '-x'.", "patchbake pull"),
    (["--lineage"], "Option '--lineage' requires an argument.", None),
    (["push", "a", "b", "--json=1"], "Option '--json' does not take a value.", None),
    (["patch", "check", "x"], "Got unexpected extra argument (x)", "patchbake patch check"),
    (["patch", "check", "--", "--json"], "Got unexpected extra argument (--json)",
     "patchbake patch check"),
    (["patch", "check", "--no-tree=1"], "Option '--no-tree' does not take a value.", None),
    (["patch", "export", "--from"], "Option '--from' requires an argument.", None),
    (["patch", "export", "-f"], "No such option '-f'.", "patchbake patch export"),
    (["check"], "No such command 'check'.", "patchbake"),
    (["export"], "No such command 'export'.", "patchbake"),
    (["--json"], "Missing command.", "patchbake"),
    (["patch", "export", "--reason", "x"], "--reason goes with --force", None),
]


@pytest.mark.parametrize("argv,message,help_of", REFUSED, ids=lambda a: repr(a))
def test_refusals_are_one_line_and_exit_2(argv: list[str], message: str, help_of: str | None,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main(argv) == 2
    out, err = capsys.readouterr()
    hint = f" (see `{help_of} --help`)" if help_of else ""
    if "--json" in argv and "--json=1" not in argv and "--" not in argv:
        assert json.loads(err)["error"] == {"class": "UsageError", "code": 2,
                                            "message": message,
                                            "hint": hint[2:-1] if hint else None}
    else:
        assert err == f"patchbake: error: {message}{hint}\n"
    assert out == ""


def test_global_options_after_the_command_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Only --json moves (see hoist_json): --debug and --pipeline go before the command."""
    assert entry.main(["pull", "--debug", "r"]) == 2
    assert "No such option '--debug'." in capsys.readouterr().err
    assert entry.main(["pull", "r", "--pipeline", "p.yaml"]) == 2
    assert "No such option '--pipeline'." in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--version"], ["push", "--help"], ["push", "-h", "a", "b"],
                                  ["pull", "--help"], ["patch", "check", "--help"],
                                  ["--help"]])
def test_help_and_version_exit_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main(argv) == 0
    out, err = capsys.readouterr()
    assert out and err == ""


def test_suites_and_its_alias_fixtures_are_one_group(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = click.Context(cli.main_group)
    suites = cli.main_group.get_command(ctx, "suites")
    assert suites is not None and cli.main_group.get_command(ctx, "fixtures") is suites
    listed = cli.main_group.list_commands(ctx)
    assert "suites" in listed and "fixtures" not in listed
    assert entry.main(["--help"]) == 0
    assert "suites    Fixture suites run against an exact image (alias: fixtures)." \
        in capsys.readouterr().out
    runs = []
    for name in ("suites", "fixtures"):
        rc = entry.main(["--pipeline", str(REPO / "pipeline.yaml"), "--json", name, "list"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        runs.append(json.loads(out))
    assert runs[0] == runs[1] and "dsv4-topk-cpu" in runs[0]


@pytest.mark.parametrize("terminated,code,line", [
    (False, 130, "patchbake: error: aborted\n"),
    (True, 143, "patchbake: error: terminated (SIGTERM); partial work removed\n")])
def test_an_interrupt_exits_130_and_sigterm_143(terminated: bool, code: int, line: str,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: list[str]) -> int:
        if terminated:
            with pytest.raises(entry.Terminated):
                entry._on_sigterm(15, None)
            entry._on_sigterm(15, None)  # a second TERM does not cut the clean-up short
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "_terminated", [])
    monkeypatch.setattr(cli, "run", interrupted)
    assert entry.main(["fetch"]) == code
    assert capsys.readouterr().err == line


def test_a_command_interrupted_inside_click_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """click turns Ctrl-C inside a command into its Abort; that is still exit 130."""
    def ctrl_c(self: cli.Ctx) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "_terminated", [])
    monkeypatch.setattr(cli.Ctx, "pipeline", property(ctrl_c))
    assert entry.main(["--json", "fetch"]) == 130
    doc = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert doc["error"] == {"class": "Aborted", "code": 130, "message": "aborted", "hint": None}


@pytest.mark.parametrize("argv", [[], ["patch"], ["store"], ["release"]])
def test_a_bare_group_prints_its_help_and_exits_0(argv: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`patchbake`, `patchbake patch`: the help as --help prints it (usage, options, the
    commands one per line), on stdout, and success, not a one-line error."""
    assert entry.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"Usage: patchbake {' '.join(argv)}".rstrip() + " [OPTIONS] COMMAND")
    assert "\nCommands:\n" in out and "patchbake: error" not in out
    assert entry.main([*argv, "--help"]) == 0
    assert capsys.readouterr().out == out
