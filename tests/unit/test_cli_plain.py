"""A plain `patchbake push`/`pull`/`patch check`/`patch export` is parsed without click
(entry.plain_call): whatever it accepts, click's declarations read the same way; whatever
else, click gets."""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest
from patchbake import cli, entry
from importlib import import_module

PLAIN = [
    ["push", "sha256:" + "a" * 64, "127.0.0.1:5000/app:v1"],
    ["push", "demo", "h.example/r:t", "--mount-from", "x", "--mount-from=y/z"],
    ["push", "--mount-from", "x", "demo", "h.example/r:t"],
    ["--json", "push", "demo", "h.example/r:t"],
    ["push", "demo", "h.example/r:t", "--json"],
    ["--debug", "--pipeline", "p.yaml", "--lineage", "0.25.1", "pull", "h.example/r:t",
     "--platform", "linux/arm64"],
    ["pull", "--platform=linux/arm64/v8", "h.example/r:t"],
    ["pull", "--", "h.example/r:t"],
    ["push", "demo", "--", "-odd"],
    ["--pipeline=x.yaml", "pull", "-"],
    ["push", "demo", "h.example/r:t", "--mount-from="],
    ["patch", "check"],
    ["patch", "check", "--no-tree"],
    ["--json", "--lineage", "v0.33.0", "patch", "check", "--no-tree"],
    ["patch", "check", "--json"],
    ["patch", "--json", "check"],
    ["patch", "export"],
    ["patch", "export", "--from", "ws", "--force", "--reason", "re-pin"],
    ["patch", "export", "--from=repo@abc", "--reason=x", "--force"],
    ["--pipeline", "p.yaml", "patch", "export", "--force"],
]

NOT_PLAIN = [
    [], ["fetch"], ["--version"], ["push", "--help"], ["push", "-h", "a", "b"],
    ["pull", "--help"], ["push", "a"], ["push", "a", "b", "c"], ["pull", "a", "--bogus"],
    ["pull", "a", "--platform", "x", "--platform", "y"], ["push", "a", "b", "--mount-from"],
    ["--pipeline", "a", "--pipeline", "b", "pull", "r"], ["pull", "--debug", "r"],
    ["pull", "-x", "r"], ["--lineage"], ["--json"], ["push", "a", "b", "--json=1"],
    ["patch"], ["patch", "apply", "--to", "d"], ["patch", "check", "x"],
    ["patch", "check", "--help"], ["patch", "check", "--no-tree", "--no-tree"],
    ["patch", "check", "--no-tree=1"], ["patch", "export", "--from"],
    ["patch", "export", "--from", "a", "--from", "b"], ["patch", "export", "--force", "--force"],
    ["patch", "export", "-f"], ["check"], ["export"],
]


def _click_reading(args: list[str]) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
    """(group params, command words, command params) as click parses ``args``."""
    cli._register()
    group = cli.main_group.make_context("patchbake", list(args))
    params = group.params
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
    return params, tuple(words), ctx.params


def _defaults(spec: entry.PlainCommand) -> dict[str, Any]:
    function = getattr(import_module(f"patchbake.commands.{spec.module}"), spec.function)
    sig = inspect.signature(function)
    return {n: p.default for n, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
@pytest.mark.parametrize("env_pipeline", [None, "from-env.yaml"])
def test_plain_arguments_read_as_click_reads_them(argv: list[str], env_pipeline: str | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if env_pipeline:
        monkeypatch.setenv("PATCHBAKE_PIPELINE", env_pipeline)
    else:
        monkeypatch.delenv("PATCHBAKE_PIPELINE", raising=False)
    args = entry.hoist_json(argv)
    found = entry.plain_call(args)
    assert found is not None, "a plain call must not need click"
    ctx, spec, arguments = found
    group_params, words, params = _click_reading(args)
    assert (ctx.pipeline_path, ctx.lineage_key, ctx.as_json, ctx.debug) == (
        group_params["pipeline_path"], group_params["lineage_key"],
        group_params["as_json"], group_params["debug"])
    assert entry.PLAIN_COMMANDS[words] is spec
    assert {**_defaults(spec), **arguments} == params


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=lambda a: " ".join(a) or "(none)")
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert entry.plain_call(entry.hoist_json(argv)) is None


def test_the_plain_options_are_the_commands_options() -> None:
    """An option added to a click declaration of a plain command must be added to the
    plain parse too (or the plain parse would hand that option to click: slower, not
    wrong)."""
    cli._register()
    for words, spec in entry.PLAIN_COMMANDS.items():
        cmd: click.Command = cli.main_group
        for w in words:
            assert isinstance(cmd, click.Group)
            cmd = cmd.commands[w]
        args = [p.name for p in cmd.params if isinstance(p, click.Argument)]
        options = {o: (p.name, bool(p.multiple)) for p in cmd.params
                   if isinstance(p, click.Option) and p.expose_value and not p.is_flag
                   for o in p.opts}
        flags = {o: p.name for p in cmd.params
                 if isinstance(p, click.Option) and p.expose_value and p.is_flag
                 for o in p.opts}
        assert tuple(args) == spec.arguments
        assert options == spec.options
        assert flags == spec.flags
        function = getattr(import_module(f"patchbake.commands.{spec.module}"), spec.function)
        assert set(inspect.signature(function).parameters) == {
            "ctx", *spec.arguments, *(p for p, _ in spec.options.values()),
            *spec.flags.values()}
