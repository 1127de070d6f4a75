"""The process entry point (``patchbake``, ``python -m patchbake``): argv -> exit code.

``patchbake push``, ``pull``, ``patch check`` and ``patch export`` with plain arguments
(the positional arguments and the options those commands take, nothing else) run without
importing click: the parse below reads exactly what click's declarations accept (a unit
test holds the two together), because those processes are timed against ``skopeo copy``,
``git apply --check`` and ``git diff``, and click's import was a quarter of their start-up. Anything else (another
command, ``--help``, ``--version``, an option or argument it does not know, a missing
argument) goes to the click CLI in ``cli.py``, which owns usage messages and help.

Either way an expected failure is one line on stderr (JSON under ``--json``) and the
exit code of its error class; SIGTERM unwinds like Ctrl-C (exit 143).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType

from .errors import PatchbakeError
from .records import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .config import Lineage, Pipeline
    from .store import Store


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
        # pipeline.yaml's parse may be read back from the store (config.load's cache): set
        # for commands that take the store's content as given anyway (see PlainCommand)
        self.cached_pipeline = False

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


PIPELINE_ENV = "PATCHBAKE_PIPELINE"  # what --pipeline defaults to (click's envvar=)


def hoist_json(args: list[str]) -> list[str]:
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


# -- the plain parse -----------------------------------------------------------------------

class PlainCommand(Record):
    """A command's click declaration, as far as the plain parse needs it."""

    module: str  # in patchbake.commands: the module holding the function
    function: str  # f(ctx, **arguments)
    arguments: tuple[str, ...]  # positional, all required
    options: dict[str, tuple[str, bool]]  # --name VALUE -> (parameter, repeatable)
    flags: Mapping[str, str] = MappingProxyType({})  # --name -> parameter (a boolean flag)
    # pipeline.yaml's parse may come from the store's cache: only for commands that take
    # the store's trees as given (the guard reads the pristine tree from it unhashed); a
    # command that checks the store (fetch --verify, verify) must not read its pins there
    cached_pipeline: bool = False


# command words -> declaration: the commands timed against other tools' processes
PLAIN_COMMANDS: dict[tuple[str, ...], PlainCommand] = {
    ("push",): PlainCommand("registry", "push", ("source", "dest"),
                            {"--mount-from": ("mount_from", True)}),
    ("pull",): PlainCommand("registry", "pull", ("ref",), {"--platform": ("platform", False)}),
    ("patch", "check"): PlainCommand("patchrun", "check", (), {}, {"--no-tree": "no_tree"},
                                     cached_pipeline=True),
    ("patch", "export"): PlainCommand("patchrun", "export", (),
                                      {"--from": ("from_spec", False),
                                       "--reason": ("reason", False)},
                                      {"--force": "force"}, cached_pipeline=True),
}
_GLOBAL_VALUES = {"--pipeline": "pipeline_path", "--lineage": "lineage_key"}
_GLOBAL_FLAGS = {"--json": "as_json", "--debug": "debug"}


def _option(token: str, rest: list[str], known: dict[str, Any]) -> tuple[str, str] | None:
    """(name, value) of a ``--name value`` / ``--name=value`` option in ``known``."""
    name, eq, value = token.partition("=")
    if name not in known:
        return None
    if not eq:
        if not rest:
            return None
        value = rest.pop(0)
    return name, value


def _parse_globals(args: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    settings: dict[str, Any] = {"pipeline_path": None, "lineage_key": None,
                                "as_json": False, "debug": False}
    while args and args[0].startswith("-"):
        token = args.pop(0)
        if token in _GLOBAL_FLAGS:
            settings[_GLOBAL_FLAGS[token]] = True
            continue
        got = _option(token, args, _GLOBAL_VALUES)
        if got is None or settings[_GLOBAL_VALUES[got[0]]] is not None:
            return None  # --help, --version, unknown, repeated: click answers
        settings[_GLOBAL_VALUES[got[0]]] = got[1]
    if settings["pipeline_path"] is None:
        settings["pipeline_path"] = os.environ.get(PIPELINE_ENV) or None
    return settings, args


def _parse_command(spec: PlainCommand, args: list[str]) -> dict[str, Any] | None:
    values: dict[str, Any] = {}
    positional: list[str] = []
    while args:
        token = args.pop(0)
        if token == "--":
            positional += args
            break
        if not token.startswith("-") or token == "-":
            positional.append(token)
            continue
        if token in spec.flags:
            if spec.flags[token] in values:
                return None  # repeated: click answers
            values[spec.flags[token]] = True
            continue
        got = _option(token, args, spec.options)
        if got is None:
            return None
        param, repeatable = spec.options[got[0]]
        if not repeatable and param in values:
            return None
        values[param] = (*values.get(param, ()), got[1]) if repeatable else got[1]
    if len(positional) != len(spec.arguments):
        return None
    return {**dict(zip(spec.arguments, positional, strict=True)), **values}


def plain_call(args: list[str]) -> tuple[Ctx, PlainCommand, dict[str, Any]] | None:
    """(context, declaration, arguments) when ``args`` (after hoist_json) is a plain call
    of one of ``PLAIN_COMMANDS``; None for anything the click CLI must read."""
    parsed = _parse_globals(list(args))
    if parsed is None:
        return None
    settings, rest = parsed
    for words, spec in PLAIN_COMMANDS.items():
        if tuple(rest[:len(words)]) == words:
            arguments = _parse_command(spec, rest[len(words):])
            if arguments is None:
                return None
            ctx = Ctx(**settings)
            ctx.cached_pipeline = spec.cached_pipeline
            return ctx, spec, arguments
    return None


# -- running, and what a failure prints ----------------------------------------------------

class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, CI cancellation): unwinds like Ctrl-C, so every ``finally``
    and context manager removes its staging; the exit status is 143."""


_terminated: list[int] = []


def terminated() -> bool:
    """A SIGTERM arrived (the interrupt unwinding now is that one)."""
    return bool(_terminated)


def _on_sigterm(signum: int, _frame: Any) -> None:
    if not _terminated:  # a second TERM during clean-up does not cut the clean-up short
        _terminated.append(signum)
        raise Terminated()


def fail(exc: PatchbakeError | None, as_json: bool, *, cls: str = "", code: int = 1,
         message: str = "") -> int:
    """One line on stderr for people; under --json the error as JSON on stderr."""
    if exc is not None:
        cls, code, message = type(exc).__name__, exc.exit_code, exc.message
    hint = exc.hint if exc is not None else None
    if as_json:
        import json

        from .ui import FORMAT_VERSION

        doc = {"format_version": FORMAT_VERSION, "error": {
            "class": cls, "code": code, "message": " ".join(message.split()), "hint": hint}}
        sys.stderr.write(json.dumps(doc, sort_keys=True) + "\n")
    else:
        line = exc.one_line() if exc is not None else " ".join(message.split())
        print(f"patchbake: error: {line}", file=sys.stderr)
    return code


def interrupted(as_json: bool) -> int:
    """Ctrl-C (130) or SIGTERM (143): one line, after the clean-up has run."""
    if _terminated:
        return fail(None, as_json, cls="Terminated", code=143,
                    message="terminated (SIGTERM); partial work removed")
    return fail(None, as_json, cls="Aborted", code=130, message="aborted")


def guarded(call: Callable[[], object], debug: bool, as_json: bool) -> int:
    """Run a command; an expected failure becomes its one line and exit code."""
    try:
        call()
        return 0
    except PatchbakeError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return fail(exc, as_json)
    except RecursionError:  # json.loads of a crafted input; readers that know it say which
        from .errors import InputLimitError

        return fail(InputLimitError("an input (JSON or YAML) is nested too deeply to read; "
                                    "refusing it"), as_json)


def _run_plain(found: tuple[Ctx, PlainCommand, dict[str, Any]], debug: bool,
               as_json: bool) -> int:
    ctx, spec, arguments = found
    from importlib import import_module

    module = import_module(f"{__package__}.commands.{spec.module}")
    command: Callable[..., None] = getattr(module, spec.function)
    try:
        return guarded(lambda: command(ctx, **arguments), debug, as_json)
    except KeyboardInterrupt:
        print(file=sys.stderr)  # ends the terminal's ^C echo (as click does)
        return interrupted(as_json)
    except BrokenPipeError:  # the reader of stdout went away (`| head`): as click does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _exit_now(rc: int) -> None:
    """End the process without the interpreter's teardown (a tenth of a short push's
    time): the plain path has joined its threads and closed its files, so only stdout
    and stderr need flushing. Not under a tracer or profiler (coverage, cProfile), which
    write their results at teardown."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return
    gitrun = sys.modules.get(f"{__package__}.gitrun")
    if gitrun is not None:
        gitrun.remove_home()  # what its atexit function would have done
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    args = hoist_json(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
    as_json = bool(args) and args[0] == "--json"
    import signal

    if argv is None:  # the real process, not a test calling main() in-process
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        found = plain_call(args)
        if found is not None:
            rc = _run_plain(found, debug, as_json)
            if argv is None:
                _exit_now(rc)
            return rc
        from .cli import run_click

        return run_click(args, debug, as_json)
    except OSError as exc:
        from .store import write_failure

        err = write_failure(exc, "a file")
        if err is None:
            raise
        if debug:
            import traceback

            traceback.print_exc()
        return fail(err, as_json)
