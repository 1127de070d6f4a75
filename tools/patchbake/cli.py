"""Command line: argv -> settings -> one library call -> table or JSON, and an exit code.

Each stage's commands live in ``patchbake.commands.<stage>`` and register themselves here.
The process starts in ``patchbake.entry``, which runs plain ``push``/``pull`` itself and
hands everything else to :func:`run_click`.
"""

from __future__ import annotations

import click

from . import __version__
from .entry import Ctx as Ctx
from .entry import fail, guarded, interrupted, terminated
from .entry import hoist_json
from .entry import main as main
from .errors import UsageError

_hoist_json = hoist_json  # the name tests and callers use
pass_ctx = click.make_pass_decorator(Ctx)
_JSON_HELP = "print results as JSON on stdout (errors as JSON on stderr)"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pipeline", "pipeline_path", envvar="PATCHBAKE_PIPELINE", default=None,
              help="pipeline.yaml to use (default: nearest one above the working directory)")
@click.option("--lineage", "lineage_key", default=None,
              help="lineage (upstream pin) to act on; default: the newest")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.option("--debug", is_flag=True, help="show tracebacks for expected failures")
@click.version_option(__version__, prog_name="patchbake")
@click.pass_context
def main_group(ctx: click.Context, pipeline_path: str | None, lineage_key: str | None,
               as_json: bool, debug: bool) -> None:
    """patchbake: canonical patch -> pinned vLLM -> reproducible images -> signed evidence."""
    ctx.obj = Ctx(pipeline_path, lineage_key, as_json, debug)


# Which module registers each top-level command. Resolving one command imports only its
# module, so `patchbake push` does not pay for importing every stage (start-up time is
# part of the benchmarks). A name missing here falls back to importing every module.
COMMAND_MODULES = {
    "fetch": "fetch", "patch": "patch", "series": "patch", "bake": "image",
    "verify": "image", "image": "image", "push": "registry", "pull": "registry",
    "run": "run", "keys": "evidence", "evidence": "evidence", "fixtures": "fixtures",
    "store": "store", "release": "release", "ledger": "release", "report": "release",
    "port": "port",
}
_loaded: set[str] = set()


def _load(module: str) -> None:
    import importlib

    from . import commands

    if module in _loaded:
        return
    _loaded.add(module)
    reg = getattr(importlib.import_module(f"{commands.__name__}.{module}"), "register", None)
    if reg:
        reg(main_group)
        for cmd in main_group.commands.values():
            _show_json_option(cmd)



def _show_json_option(cmd: click.Command) -> None:
    """Every command's --help lists --json. The flag itself is read once, globally
    (``_hoist_json`` moves it before the command name), so the option added here only
    documents it and passes nothing to the command."""
    if not any("--json" in getattr(p, "opts", ()) for p in cmd.params):
        cmd.params.append(click.Option(["--json"], is_flag=True, expose_value=False,
                                       help=_JSON_HELP))
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _show_json_option(sub)


def _load_all() -> None:
    import pkgutil

    from . import commands

    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        _load(mod)


class _LazyGroup(click.Group):
    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = COMMAND_MODULES.get(cmd_name)
            _load(module) if module else _load_all()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _load_all()
        return super().list_commands(ctx)


main_group.__class__ = _LazyGroup


def _register() -> None:
    """Import every command module (tests and docs use this to see all commands)."""
    _load_all()


def run_click(args: list[str], debug: bool, as_json: bool) -> int:
    """Parse and run ``args`` with click; usage errors and aborts as one line."""
    try:
        return guarded(lambda: main_group.main(args=args, prog_name="patchbake",
                                               standalone_mode=False), debug, as_json)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        hint = None
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f"see `{exc.ctx.command_path} --help`"
        return fail(UsageError(exc.format_message(), hint=hint), as_json)
    except click.exceptions.Abort:
        return interrupted(as_json)
    except KeyboardInterrupt:
        return 143 if terminated() else 130


if __name__ == "__main__":
    import sys

    sys.exit(main())
