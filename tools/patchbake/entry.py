"""The process entry point (``patchbake``, ``python -m patchbake``): argv -> exit code.

``cli.run`` parses and runs the command; here an expected failure becomes one line on
stderr (a JSON object under ``--json``) and the exit code of its error class, and SIGTERM
unwinds like Ctrl-C (exit 143).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from types import FrameType

from .errors import InputLimitError, PatchbakeError, single_line
from .ui import FORMAT_VERSION


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
    message = single_line(message)
    if as_json:
        doc = {"format_version": FORMAT_VERSION,
               "error": {"class": cls, "code": code, "message": message, "hint": hint}}
        sys.stderr.write(json.dumps(doc, sort_keys=True) + "\n")
    else:
        line = f"{message} ({single_line(hint)})" if hint else message
        print(f"patchbake: error: {line}", file=sys.stderr)
    return code


def _failed(exc: PatchbakeError, as_json: bool) -> int:
    return fail(as_json, type(exc).__name__, exc.exit_code, exc.message, exc.hint)


def _interrupted(as_json: bool) -> int:
    """Ctrl-C (130) or SIGTERM (143): one line, after the clean-up has run."""
    if _terminated:
        return fail(as_json, "Terminated", 143, "terminated (SIGTERM); partial work removed")
    return fail(as_json, "Aborted", 130, "aborted")


def _run(args: list[str]) -> int:
    # Imported once main() has installed the SIGTERM handler: a TERM that arrives while
    # click and the command's stage load unwinds like one that arrives later.
    from . import cli

    return cli.run(args)


def main(argv: list[str] | None = None) -> int:
    args = hoist_json(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or bool(os.environ.get("PATCHBAKE_DEBUG"))
    as_json = bool(args) and args[0] == "--json"
    if argv is None:  # the real process, not a test calling main() in-process
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _run(args)
    except PatchbakeError as exc:
        if debug:
            traceback.print_exc()
        return _failed(exc, as_json)
    except RecursionError:  # json.loads of a crafted input; readers that know it say which
        return _failed(InputLimitError("an input (JSON or YAML) is nested too deeply to "
                                       "read; refusing it"), as_json)
    except KeyboardInterrupt:
        return _interrupted(as_json)
    except BrokenPipeError:  # the reader of stdout went away (`| head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 1
