"""The process entry point (``patchbake``, ``python -m patchbake``): argv -> exit code.

``cli.run`` parses and runs the command; here an expected failure becomes one line on
stderr (a JSON object under ``--json``) and the exit code of its error class.

Signals at any instant: :func:`main` installs the SIGTERM handler as its first
instruction, and everything after it (the rest of the package, click, the command)
is imported inside its ``try``, so a SIGTERM or Ctrl-C that lands while the CLI is still
loading unwinds like one that lands later: exit 143 or 130 with one line. That is why
this module imports nothing at its top but what the interpreter has loaded before any
code of ours runs (os, signal, sys). Once the exit code is known and the output flushed,
further SIGINT/SIGTERM are ignored: the command is done, its code is the truth.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # the type checker's constant without importing typing (see above)
if TYPE_CHECKING:
    from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, CI cancellation): unwinds like Ctrl-C, so every ``finally``
    and context manager removes its staging; the exit status is 143."""


_terminated: list[int] = []


def _on_sigterm(signum: int, _frame: FrameType | None) -> None:
    if not _terminated:  # a second TERM during clean-up does not cut the clean-up short
        _terminated.append(signum)
        raise Terminated()


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


def fail(as_json: bool, cls: str, code: int, message: str, hint: str | None = None) -> int:
    """One line on stderr for people; under --json the error as JSON on stderr."""
    from .errors import single_line

    message = single_line(message)
    if as_json:
        import json

        from .ui import FORMAT_VERSION

        doc = {"format_version": FORMAT_VERSION,
               "error": {"class": cls, "code": code, "message": message, "hint": hint}}
        sys.stderr.write(json.dumps(doc, sort_keys=True) + "\n")
    else:
        line = f"{message} ({single_line(hint)})" if hint else message
        print(f"patchbake: error: {line}", file=sys.stderr)
    return code


def _interrupted(as_json: bool) -> int:
    """Ctrl-C (130) or SIGTERM (143): one line, after the clean-up has run."""
    if _terminated:
        return fail(as_json, "Terminated", 143, "terminated (SIGTERM); partial work removed")
    return fail(as_json, "Aborted", 130, "aborted")


def _run(args: list[str], as_json: bool, debug: bool) -> int:
    """The command, with expected failures turned into their line and code. Imported
    here, once main() has installed the SIGTERM handler (see the module docstring)."""
    from . import cli
    from .errors import InputLimitError, PatchbakeError

    try:
        return cli.run(args)
    except PatchbakeError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return fail(as_json, type(exc).__name__, exc.exit_code, exc.message, exc.hint)
    except RecursionError:  # json.loads of a crafted input; readers that know it say which
        deep = InputLimitError("an input (JSON or YAML) is nested too deeply to read; "
                               "refusing it")
        return fail(as_json, type(deep).__name__, deep.exit_code, deep.message, deep.hint)


def main(argv: list[str] | None = None) -> int:
    real = argv is None  # the real process, not a test calling main() in-process
    if real:
        signal.signal(signal.SIGTERM, _on_sigterm)
    as_json = False
    try:
        args = hoist_json(list(sys.argv[1:] if argv is None else argv))
        debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
        as_json = bool(args) and args[0] == "--json"
        code = _run(args, as_json, debug)
        if real:
            sys.stdout.flush()  # a signal during the last write still gets its line
    except KeyboardInterrupt:
        code = _interrupted(as_json)
    except BrokenPipeError:  # the reader of stdout went away (`| head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        code = 1
    if real:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code
