"""Git, isolated: the only way the patchset stage runs git. Standard library only.

Two exports of the same trees must give the same bytes on any machine, whatever the
user's git configuration. So git runs with a replaced environment (no system or global
config, an empty temporary HOME, ``LC_ALL=C``, no ``GIT_*`` variables from the caller),
every output-affecting setting is pinned with ``-c``, and every diff is asked for with
explicit flags. Diffs run in a throw-away bare repository that borrows the objects of
the real one through ``objects/info/alternates``, so neither that repository's config nor
its in-tree ``.gitattributes`` (diff drivers, textconv, eol filters) can change the
output; its own ``info/attributes`` unsets every attribute that could.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import proc

AUTHOR = ("patchbake", "patchbake@localhost")
FIXED_DATE = "@0 +0000"  # 1970-01-01T00:00:00Z: commits of the same trees get the same id

# Attributes that change what git writes into a diff or a commit; "!x" makes x
# unspecified, overriding lower-precedence .gitattributes files in the tree.
ATTRIBUTES = b"* !diff !text !eol !crlf !filter !ident !working-tree-encoding !merge\n"

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
)

# The canonical diff. Renames: off (a rename is a deletion plus an addition, so every
# path's effect is explicit in FILES.txt and the applier needs no rename logic).
DIFF_FLAGS: tuple[str, ...] = (
    "-r", "-p", "--no-ext-diff", "--no-textconv", "--no-color", "--src-prefix=a/",
    "--dst-prefix=b/", "-U3", "--inter-hunk-context=0", "--diff-algorithm=myers",
    "--indent-heuristic", "--no-renames", "--full-index", "--binary", "--no-relative",
    "-O/dev/null",
)

_HOME: list[str] = []


def _home() -> str:
    if not _HOME:
        d = tempfile.mkdtemp(prefix="patchbake-git-home.")
        atexit.register(shutil.rmtree, d, True)
        _HOME.append(d)
    return _HOME[0]


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


def git(args: Sequence[str | os.PathLike[str]], *, git_dir: Path | None = None,
        work_tree: Path | None = None, cwd: Path | None = None, input: bytes | None = None,
        check: bool = True) -> proc.Result:
    argv: list[str | os.PathLike[str]] = ["git"]
    for c in CONFIG:
        argv += ["-c", c]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    argv += list(args)
    return proc.run(argv, cwd=cwd or work_tree or git_dir, env=git_env(), input=input,
                    check=check, replace_env=True)


def scratch_repo(parent: Path, alternates: Sequence[Path] = ()) -> Path:
    """A minimal bare repository (no hooks, no config of anyone else's) borrowing objects."""
    d = Path(tempfile.mkdtemp(prefix="patchbake-diff.", dir=parent))
    (d / "objects" / "info").mkdir(parents=True)
    (d / "refs" / "heads").mkdir(parents=True)
    (d / "info").mkdir()
    (d / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (d / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    (d / "info" / "attributes").write_bytes(ATTRIBUTES)
    if alternates:
        text = "".join(f"{Path(a).resolve()}\n" for a in alternates)
        (d / "objects" / "info" / "alternates").write_text(text)
    return d


def objects_dir(repo: Path) -> Path:
    """The object directory of a repository (work tree or bare)."""
    out = git(["rev-parse", "--git-path", "objects"], cwd=repo).text.strip()
    p = Path(out)
    return p if p.is_absolute() else (repo / p).resolve()


def canonical_diff(git_dir: Path, old: str, new: str) -> bytes:
    """The canonical patch between two commits or trees of ``git_dir``."""
    return git(["diff-tree", *DIFF_FLAGS, old, new, "--"], git_dir=git_dir).stdout
