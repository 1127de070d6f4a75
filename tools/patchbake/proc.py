"""The only place that starts processes. Never ``shell=True``; tools resolved first."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import ProcessError, ToolMissingError


@dataclass(frozen=True, slots=True)
class Result:
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


def _prepare(argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None,
             replace_env: bool) -> tuple[list[str], dict[str, str]]:
    """The argument list with the program resolved on PATH, and the environment."""
    args = [str(a) for a in argv]
    args[0] = which(args[0]) if os.sep not in args[0] else args[0]
    return args, dict(env or {}) if replace_env else {**os.environ, **(env or {})}


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
    args, full_env = _prepare(argv, env, replace_env)
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


class Running:
    """A program started by :func:`start`: the caller feeds its standard input, then
    :meth:`finish` es it (or :meth:`stop` s it)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._p = popen

    def send(self, data: bytes) -> bool:
        """Write ``data`` to its standard input; False when it has gone away."""
        assert self._p.stdin is not None
        try:
            self._p.stdin.write(data)
            self._p.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def finish(self) -> int:
        """Close its standard input and wait for it to exit; its exit code."""
        self._close_stdin()
        return self._p.wait()

    def stop(self) -> None:
        """End it now if it still runs (the caller no longer wants its work)."""
        if self._p.poll() is None:
            self._p.kill()
            self._p.wait()
        self._close_stdin()

    def _close_stdin(self) -> None:
        assert self._p.stdin is not None
        try:
            self._p.stdin.close()
        except BrokenPipeError:  # it exited before reading everything: its exit code says why
            pass


def start(argv: Sequence[str | os.PathLike[str]], *, stdout: IO[bytes], stderr: IO[bytes],
          cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
          replace_env: bool = False) -> Running:
    """Start a program that reads its standard input from the caller (a pipe) while the
    caller works, and writes its output and errors into the files ``stdout`` and
    ``stderr`` (files, not pipes: nothing has to drain them while it runs)."""
    args, full_env = _prepare(argv, env, replace_env)
    return Running(subprocess.Popen(args, cwd=str(cwd) if cwd else None, env=full_env,
                                    stdin=subprocess.PIPE, stdout=stdout, stderr=stderr))
