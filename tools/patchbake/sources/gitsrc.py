"""The ``git`` source kind: a local repository at a full commit id, exported with
``git archive`` (never a branch or tag: those move).

Git runs under the one isolation policy (``patchbake.gitrun``) so a user's settings
cannot change the exported bytes. The repository's own ``.gitattributes`` (export-ignore,
export-subst, eol) still apply, as they would for anyone exporting that commit.
"""

from __future__ import annotations

from pathlib import Path

from .. import proc
from ..errors import FetchError, ProcessError
from ..gitrun import git


def _git(repo: Path, *args: str) -> proc.Result:
    return git(["-C", str(repo), *args], cwd=repo, check=False)


def export(repo_spec: str, commit: str, out_tar: Path, *, root: Path | None = None) -> None:
    """Write the tree of ``commit`` in ``repo_spec`` as an uncompressed tar to ``out_tar``."""
    repo = Path(repo_spec).expanduser()
    if not repo.is_absolute() and root is not None:
        repo = root / repo
    if not repo.is_dir():
        raise FetchError(f"git source: repository {repo} does not exist",
                         hint="upstream.repo must be a local git repository path")
    r = _git(repo, "rev-parse", "--git-dir")
    if r.returncode != 0:
        raise FetchError(f"git source: {repo} is not a git repository")
    r = _git(repo, "cat-file", "-t", commit)
    if r.returncode != 0 or r.text.strip() != "commit":
        kind = r.text.strip()
        raise FetchError(
            f"git source: {commit} is " + (f"a {kind}, not a commit" if kind and
                                           r.returncode == 0 else "not a commit")
            + f" in {repo}", hint="pin a full commit id that exists in the repository "
            "(git fetch it first)")
    r = _git(repo, "archive", "--format=tar", "-o", str(out_tar), commit)
    if r.returncode != 0:
        tail = r.stderr.decode("utf-8", "replace").strip().splitlines()[-2:]
        raise ProcessError(f"git archive {commit} in {repo} failed: {' | '.join(tail)}")
