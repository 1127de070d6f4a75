"""Command line: argv -> settings -> one library call -> table or JSON, and an exit code.

Each stage's commands live in ``patchbake.commands.<stage>`` and register themselves here.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
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


def _register() -> None:
    import importlib
    import pkgutil

    from . import commands

    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        module = importlib.import_module(f"{commands.__name__}.{mod}")
        reg = getattr(module, "register", None)
        if reg:
            reg(main_group)


def main(argv: list[str] | None = None) -> int:
    _register()
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
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
        print("patchbake: error: aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
