"""The only place that starts processes. Never ``shell=True``; tools resolved first."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import ProcessError, ToolMissingError
from .records import Record


class Result(Record):
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def which(tool: str) -> str:
    found = shutil.which(tool)
    if not found:
        raise ToolMissingError(
            f"'{tool}' is not installed or not on PATH", hint=f"install {tool} and retry"
        )
    return found


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
    replace_env: bool = False,
) -> Result:
    """Run a program and capture its output.

    ``env`` is merged over ``os.environ`` unless ``replace_env`` is set. On failure with
    ``check`` the error carries the last lines of stderr so the user sees why.
    """
    args = [str(a) for a in argv]
    args[0] = which(args[0]) if os.sep not in args[0] else args[0]
    full_env = dict(env or {}) if replace_env else {**os.environ, **(env or {})}
    try:
        cp = subprocess.run(
            args,
            cwd=str(cwd) if cwd else None,
            env=full_env,
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,  # the exit code is examined below, with stderr in the message
        )
    except subprocess.TimeoutExpired as exc:
        raise ProcessError(f"{Path(args[0]).name} timed out after {timeout}s") from exc
    result = Result(tuple(args), cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        tail = cp.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise ProcessError(
            f"{Path(args[0]).name} {' '.join(args[1:3])} exited {cp.returncode}: "
            + " | ".join(tail)
        )
    return result

