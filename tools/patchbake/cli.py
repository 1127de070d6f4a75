"""Command line: argv -> settings -> one library call -> table or JSON, and an exit code.

Each stage's commands live in ``patchbake.commands.<stage>`` and register themselves here.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import click

from . import __version__
from .config import Pipeline, load
from .errors import PatchbakeError, UsageError
from .store import Store


@dataclass
class Ctx:
    pipeline_path: str | None
    lineage_key: str | None
    as_json: bool
    debug: bool
    _pipeline: Pipeline | None = field(default=None, repr=False)
    _store: Store | None = field(default=None, repr=False)

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            self._pipeline = load(self.pipeline_path)
        return self._pipeline

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.open()
        return self._store

    def lineage(self) -> Any:
        return self.pipeline.lineage(self.lineage_key)


pass_ctx = click.make_pass_decorator(Ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pipeline", "pipeline_path", envvar="PATCHBAKE_PIPELINE", default=None,
              help="pipeline.yaml to use (default: nearest one above the working directory)")
@click.option("--lineage", "lineage_key", default=None,
              help="lineage (upstream pin) to act on; default: the newest")
@click.option("--json", "as_json", is_flag=True, help="print results as JSON on stdout")
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


def _hoist_json(args: list[str]) -> list[str]:
    """``--json`` is accepted anywhere (``patchbake series verify --json`` as well as
    ``patchbake --json series verify``): it becomes the global flag every command reads."""
    if "--" in args:
        cut = args.index("--")
        head, tail = args[:cut], args[cut:]
    else:
        head, tail = args, []
    if "--json" not in head:
        return args
    return ["--json", *[a for a in head if a != "--json"], *tail]


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, CI cancellation): unwinds like Ctrl-C, so every ``finally``
    and context manager removes its staging; the exit status is 143."""


_terminated: list[int] = []


def _on_sigterm(signum: int, _frame: Any) -> None:
    if not _terminated:  # a second TERM during clean-up does not cut the clean-up short
        _terminated.append(signum)
        raise Terminated()


def main(argv: list[str] | None = None) -> int:
    args = _hoist_json(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
    import signal

    if argv is None:  # the real process, not a test calling main() in-process
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(args, debug)
    except OSError as exc:
        from .store import write_failure

        err = write_failure(exc, "a file")
        if err is None:
            raise
        if debug:
            traceback.print_exc()
        print(f"patchbake: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code


def _main(args: list[str], debug: bool) -> int:
    try:
        main_group.main(args=args, prog_name="patchbake", standalone_mode=False)
        return 0
    except PatchbakeError as exc:
        if debug:
            traceback.print_exc()
        print(f"patchbake: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        print(f"patchbake: error: {exc.format_message()}", file=sys.stderr)
        return UsageError.exit_code
    except click.exceptions.Abort:
        if _terminated:
            print("patchbake: error: terminated (SIGTERM); partial work removed", file=sys.stderr)
            return 143
        print("patchbake: error: aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 143 if _terminated else 130


if __name__ == "__main__":
    sys.exit(main())
