"""The one git isolation policy: every git that patchbake runs (the patchset stage's
diffs and commits, the sources stage's ``git archive``) runs through ``git()`` here.

Two runs over the same objects must give the same bytes on any machine, whatever the
user's git configuration. So git runs with a replaced environment (no system or global
config, an empty temporary HOME, ``LC_ALL=C``, no ``GIT_*`` variables from the caller) and
every output-affecting setting is pinned with ``-c``.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from . import proc
from .scratch import Scratch


AUTHOR = ("patchbake", "patchbake@localhost")
FIXED_DATE = "@0 +0000"  # 1970-01-01T00:00:00Z: commits of the same trees get the same id

CONFIG: tuple[str, ...] = (
    "core.quotePath=true", "core.abbrev=40", "core.autocrlf=false", "core.safecrlf=false",
    "core.eol=lf", "core.fileMode=true", "core.symlinks=true", "core.ignoreCase=false",
    "core.precomposeUnicode=false", "core.bigFileThreshold=512m", "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null", "core.excludesFile=/dev/null", "core.commentChar=#",
    "diff.noprefix=false", "diff.mnemonicPrefix=false", "diff.relative=false",
    "diff.renames=false", "diff.algorithm=myers", "diff.context=3",
    "diff.interHunkContext=0", "diff.indentHeuristic=true", "diff.suppressBlankEmpty=false",
    "diff.ignoreSubmodules=none", "color.ui=never", "commit.gpgSign=false",
    "gc.auto=0", "maintenance.auto=false", "init.defaultBranch=main", "advice.detachedHead=false",
    "tar.umask=0022",
)

_HOME: list[Scratch] = []


def _home() -> str:
    """git's empty HOME, one per process: a :class:`scratch.Scratch` in the temporary
    directory, removed at exit (:func:`remove_home`), or by a later process if this one
    is killed."""
    if not _HOME:
        _HOME.append(Scratch("patchbake-git-home.", Path(tempfile.gettempdir())))
        atexit.register(remove_home)
    return str(_HOME[0].path)


def remove_home() -> None:
    """Remove git's HOME of this process (at exit: :func:`_home` registers it)."""
    while _HOME:
        _HOME.pop().remove()


def git_env() -> dict[str, str]:
    home = _home()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home, "XDG_CONFIG_HOME": home, "LC_ALL": "C", "LANG": "C", "TZ": "UTC",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
        "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE,
    }


def _argv(args: Sequence[str | os.PathLike[str]], git_dir: Path | None,
          work_tree: Path | None) -> list[str | os.PathLike[str]]:
    argv: list[str | os.PathLike[str]] = ["git"]
    for c in CONFIG:
        argv += ["-c", c]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    argv += list(args)
    return argv


def git(args: Sequence[str | os.PathLike[str]], *, git_dir: Path | None = None,
        work_tree: Path | None = None, cwd: Path | None = None, input: bytes | None = None,
        check: bool = True) -> proc.Result:
    return proc.run(_argv(args, git_dir, work_tree), cwd=cwd or work_tree or git_dir,
                    env=git_env(), input=input, check=check, replace_env=True)


def git_start(args: Sequence[str | os.PathLike[str]], *, git_dir: Path, stdout: IO[bytes],
              stderr: IO[bytes]) -> proc.Running:
    """:func:`git` as a process that reads its standard input from the caller while the
    caller works (``proc.start``), under the same isolation."""
    return proc.start(_argv(args, git_dir, None), stdout=stdout, stderr=stderr, cwd=git_dir,
                      env=git_env(), replace_env=True)
