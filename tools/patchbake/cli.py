"""Command line: argv -> settings -> one library call -> table or JSON.

The one parser is click. Each stage's commands live in ``patchbake.commands.<stage>``;
:data:`COMMANDS` says where, and :class:`LazyGroup` imports a command's module only when
that command runs or is listed, so ``patchbake push`` does not import every stage.
The process starts in ``patchbake.entry``, which calls :func:`run` and turns what it
raises into one line on stderr and an exit code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

import click

from . import __version__
from .config import Lineage, Pipeline, load
from .config.pipeline import find_pipeline
from .errors import PatchbakeError, UsageError
from .store import Store, write_failure


class Ctx:
    """What the global options say, and the pipeline and store, opened on first use."""

    def __init__(self, pipeline_path: str | None, lineage_key: str | None, as_json: bool,
                 debug: bool) -> None:
        self.pipeline_path = pipeline_path
        self.lineage_key = lineage_key
        self.as_json = as_json
        self.debug = debug
        self._pipeline: Pipeline | None = None
        self._store: Store | None = None

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

    def has_pipeline(self) -> bool:
        """Whether there is a pipeline.yaml to act on (--pipeline, or one above the working
        directory): commands that can do without one say what they need instead."""
        return Path(self.pipeline_path).exists() if self.pipeline_path \
            else find_pipeline().exists()

    def lineage(self) -> Lineage:
        return self.pipeline.lineage(self.lineage_key)


pass_ctx = click.make_pass_decorator(Ctx)


def _completion_pipeline(ctx: click.Context) -> Pipeline | None:
    """The pipeline a command line names, for completing names (never an error: a shell
    completing a word must not print one)."""
    try:
        return load(ctx.find_root().params.get("pipeline_path"))
    except (PatchbakeError, OSError):
        return None


def _matching(names: list[str], incomplete: str) -> list[str]:
    return sorted(n for n in names if n.startswith(incomplete))


def complete_lineages(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    p = _completion_pipeline(ctx)
    return _matching(list(p.lineages) if p else [], incomplete)


def complete_channels(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    p = _completion_pipeline(ctx)
    return _matching(list(p.channels) if p else [], incomplete)


def complete_suites(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    p = _completion_pipeline(ctx)
    return _matching(list(p.suites) if p else [], incomplete)


def complete_images(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Image definitions, and the names the store's index.json gives its images."""
    from .oci import layout

    p = _completion_pipeline(ctx)
    names = list(p.images) if p else []
    try:
        names += layout.refs(Store.open(sweep=False))
    except (PatchbakeError, OSError):
        pass  # no store yet: the definitions alone
    return _matching(sorted(set(names)), incomplete)
JSON_HELP = "print results as JSON on stdout (errors as JSON on stderr)"

# command name -> "module:attribute" in patchbake.commands
COMMANDS = {
    "bake": "image:bake_cmd", "doctor": "setup:doctor_cmd", "evidence": "evidence:evidence_group",
    "fetch": "fetch:fetch_cmd", "image": "image:image_group", "init": "setup:init_cmd",
    "keys": "evidence:keys_group", "ledger": "release:ledger_group",
    "lock": "lock:lock_cmd",
    "patch": "patch:patch_group", "port": "port:port_cmd", "pull": "registry:pull_cmd",
    "push": "registry:push_cmd", "release": "release:release_group",
    "report": "release:report_cmd", "run": "run:run_cmd", "series": "patch:series_group",
    "store": "store:store_group", "suites": "suites:suites_group", "tags": "registry:tags_cmd",
    "verify": "image:verify_cmd",
}
# other name -> command name: accepted, not listed (the command's help names them)
ALIASES = {"fixtures": "suites"}


LINEAGE_HELP = ("lineage (upstream pin) to act on; default: pipeline.yaml's default_lineage, "
                "else the newest")


def _set_lineage(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--lineage`` after the command name (``patch check --lineage v0.33.0``) means what
    it means before it; naming two different lineages is refused."""
    if value is None:
        return
    obj = ctx.find_object(Ctx)
    if obj is None:  # --help of a command reached without the group (completion)
        return
    if obj.lineage_key is not None and obj.lineage_key != value:
        raise click.BadParameter(f"--lineage {obj.lineage_key} was given before the "
                                 f"command and --lineage {value} after it; give one")
    obj.lineage_key = value


def _has(cmd: click.Command, opt: str) -> bool:
    return any(opt in getattr(p, "opts", ()) for p in cmd.params)


def _global_options(cmd: click.Command) -> None:
    """Options people put after the command name. ``--json`` is read once, globally
    (``entry.hoist_json`` moves it before the command name), so the option added here only
    documents it. ``--lineage`` sets the global choice, on every command that has no
    ``--lineage`` of its own (``port``'s names the new lineage)."""
    if not _has(cmd, "--json"):
        cmd.params.append(click.Option(["--json"], is_flag=True, expose_value=False,
                                       help=JSON_HELP))
    if not _has(cmd, "--lineage"):
        cmd.params.append(click.Option(["--lineage"], metavar="KEY", expose_value=False,
                                       callback=_set_lineage, is_eager=True,
                                       shell_complete=complete_lineages, help=LINEAGE_HELP))
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _global_options(sub)


class LazyGroup(click.Group):
    """A group whose subcommands are imported when asked for (click's documented lazy
    loading): ``lazy_subcommands`` maps a name to ``"module:attribute"`` in
    ``patchbake.commands``, ``aliases`` a second name to one of those."""

    def __init__(self, *args: object, lazy_subcommands: Mapping[str, str],
                 aliases: Mapping[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # click's own arguments
        self.lazy_subcommands = dict(lazy_subcommands)
        self.aliases = dict(aliases)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        name = self.aliases.get(cmd_name, cmd_name)
        if name not in self.lazy_subcommands:
            return super().get_command(ctx, name)
        module, _, attr = self.lazy_subcommands[name].partition(":")
        cmd = getattr(importlib.import_module(f"{__package__}.commands.{module}"), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"patchbake.commands.{module}:{attr} is not a click command")
        _global_options(cmd)
        return cmd


@click.group(cls=LazyGroup, lazy_subcommands=COMMANDS, aliases=ALIASES,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pipeline", "pipeline_path", envvar="PATCHBAKE_PIPELINE", default=None,
              help="pipeline.yaml to use (default: nearest one above the working directory)")
@click.option("--lineage", "lineage_key", default=None, metavar="KEY", help=LINEAGE_HELP,
              shell_complete=complete_lineages)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.option("--debug", is_flag=True, help="show tracebacks for expected failures")
@click.version_option(__version__, prog_name="patchbake")
@click.pass_context
def main_group(ctx: click.Context, pipeline_path: str | None, lineage_key: str | None,
               as_json: bool, debug: bool) -> None:
    """patchbake: canonical patch -> pinned vLLM -> reproducible images -> signed evidence."""
    ctx.obj = Ctx(pipeline_path, lineage_key, as_json, debug)


def run(args: list[str]) -> int:
    """Parse ``args`` (``--json`` first if given, see ``entry.hoist_json``) and run the
    command; its exit code, 0 for success. A failure is raised for ``entry.main`` to
    report: a PatchbakeError (a usage error and a write the file system refused become
    one) or KeyboardInterrupt."""
    try:
        rc = main_group.main(args=args, prog_name="patchbake", standalone_mode=False)
    except click.exceptions.Abort as exc:  # click's word for Ctrl-C (or SIGTERM) in a command
        raise KeyboardInterrupt from exc
    except click.exceptions.NoArgsIsHelpError as exc:
        # a bare group (`patchbake`, `patchbake patch`) asks what it can do: its help, as
        # --help prints it, and success (click 8.2+ raises this where 8.1 printed the help)
        click.echo(exc.ctx.get_help())
        return 0
    except click.ClickException as exc:
        hint = None
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f"see `{exc.ctx.command_path} --help`"
        raise UsageError(exc.format_message(), hint=hint) from exc
    except BrokenPipeError:
        raise
    except OSError as exc:
        err = write_failure(exc, "a file")
        if err is None:
            raise
        raise err from exc
    return rc if isinstance(rc, int) else 0  # --help and --version end with click's Exit(0)
