"""Command line: argv -> settings -> one library call -> table or JSON, and an exit code.

Each stage's commands live in ``patchbake.commands.<stage>`` and register themselves here.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import PatchbakeError, UsageError

if TYPE_CHECKING:  # imported on first use: --help, --version and push need neither yaml
    from .config import Lineage, Pipeline
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
            from .config import load

            self._pipeline = load(self.pipeline_path)
        return self._pipeline

    @property
    def store(self) -> Store:
        if self._store is None:
            from .store import Store

            self._store = Store.open()
        return self._store

    def lineage(self) -> Lineage:
        return self.pipeline.lineage(self.lineage_key)


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


def _fail(exc: PatchbakeError | None, as_json: bool, *, cls: str = "", code: int = 1,
          message: str = "") -> int:
    """One line on stderr for people; under --json the error as JSON on stderr."""
    if exc is not None:
        cls, code, message = type(exc).__name__, exc.exit_code, exc.message
    hint = exc.hint if exc is not None else None
    if as_json:
        from .ui import FORMAT_VERSION

        doc = {"format_version": FORMAT_VERSION, "error": {
            "class": cls, "code": code, "message": " ".join(message.split()), "hint": hint}}
        sys.stderr.write(json.dumps(doc, sort_keys=True) + "\n")
    else:
        line = exc.one_line() if exc is not None else " ".join(message.split())
        print(f"patchbake: error: {line}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = _hoist_json(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
    as_json = bool(args) and args[0] == "--json"
    import signal

    if argv is None:  # the real process, not a test calling main() in-process
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(args, debug, as_json)
    except OSError as exc:
        from .store import write_failure

        err = write_failure(exc, "a file")
        if err is None:
            raise
        if debug:
            import traceback

            traceback.print_exc()
        return _fail(err, as_json)


def _main(args: list[str], debug: bool, as_json: bool) -> int:
    try:
        main_group.main(args=args, prog_name="patchbake", standalone_mode=False)
        return 0
    except PatchbakeError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return _fail(exc, as_json)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        hint = None
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f"see `{exc.ctx.command_path} --help`"
        return _fail(UsageError(exc.format_message(), hint=hint), as_json)
    except click.exceptions.Abort:
        if _terminated:
            return _fail(None, as_json, cls="Terminated", code=143,
                         message="terminated (SIGTERM); partial work removed")
        return _fail(None, as_json, cls="Aborted", code=130, message="aborted")
    except KeyboardInterrupt:
        return 143 if _terminated else 130
    except RecursionError:  # json.loads of a crafted input; readers that know it say which
        from .errors import InputLimitError

        return _fail(InputLimitError("an input (JSON or YAML) is nested too deeply to read; "
                                     "refusing it"), as_json)


if __name__ == "__main__":
    sys.exit(main())
