"""``patchbake patch workspace DIR``: a git work tree where people edit the patch.

Commit 1 is the pristine upstream, commit 2 the current canonical patch applied strictly.
Both have a fixed author, committer and date (1970-01-01T00:00:00Z), so the same pin and
the same patch give the same commit ids on every machine. Refs ``refs/patchbake/pristine``
and ``refs/patchbake/base`` mark them for export and ``series split``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import ExportError
from ..sources import fetch
from ..store import Store
from .gitcmd import ATTRIBUTES, git
from .patched import read_lineage_patch
from .strict import apply_in_memory
from .treeio import copy_tree, write_outcomes


PRISTINE_REF = "refs/patchbake/pristine"
BASE_REF = "refs/patchbake/base"
PRISTINE_SUBJECT = "patchbake: pristine "


@dataclass(frozen=True, slots=True)
class Workspace:
    path: Path
    pristine_commit: str
    base_commit: str
    patch_sha256: str | None
    files: int


def pristine_message(pin: str, tree_digest: Digest) -> str:
    return f"{PRISTINE_SUBJECT}{pin}\n\ntree-digest: {tree_digest}\n"


def base_message(patch_name: str, patch_sha: str | None, pin: str) -> str:
    what = f"apply {patch_name}" if patch_sha else "no patch yet"
    return (f"patchbake: {what}\n\nupstream: {pin}\n"
            f"patch-sha256: {patch_sha or 'none'}\n")


def commit_all(ws: Path, message: str, parent: str | None) -> str:
    """Stage everything (ignored files too: the sdist ships files its .gitignore names)."""
    git(["add", "-A", "-f", "--", "."], work_tree=ws, git_dir=ws / ".git")
    tree = git(["write-tree"], git_dir=ws / ".git").text.strip()
    args = ["commit-tree", tree, "-F", "-"] + (["-p", parent] if parent else [])
    return git(args, git_dir=ws / ".git", input=message.encode()).text.strip()


def _check_dest(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise ExportError(f"{dest} exists and is not an empty directory",
                          hint="give a new directory for the workspace")


def create_workspace(lineage: Any, store: Store, dest: Path, *,
                     with_patch: bool = True) -> Workspace:
    """Build the workspace in a sibling staging directory, then rename it into place.

    ``with_patch=False``: the pristine tree only, even if the lineage has a patch (port
    writes its own result on top)."""
    dest = Path(dest).absolute()
    _check_dest(dest)
    fetched = fetch(lineage, store)
    lp = read_lineage_patch(lineage.patch, lineage.files) \
        if with_patch and lineage.patch.exists() else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging.", dir=dest.parent))
    try:
        ws = staging / "ws"
        copy_tree(fetched.root, ws)
        git(["init", "-q", "--template=", str(ws)], cwd=staging)
        (ws / ".git" / "info").mkdir(exist_ok=True)
        (ws / ".git" / "info" / "attributes").write_bytes(ATTRIBUTES)
        pristine = commit_all(ws, pristine_message(lineage.upstream.pin, fetched.tree_digest),
                              None)
        if lp is not None and lp.patch.files:
            outcomes = apply_in_memory(lp.patch, fetched.root, filelist=lp.filelist)
            write_outcomes(ws, outcomes.values())
        sha = lp.patch_sha256 if lp is not None else None
        base = commit_all(ws, base_message(lineage.patch.name, sha, lineage.upstream.pin),
                          pristine)
        gd = ws / ".git"
        git(["update-ref", PRISTINE_REF, pristine], git_dir=gd)
        git(["update-ref", BASE_REF, base], git_dir=gd)
        git(["update-ref", "refs/heads/main", base], git_dir=gd)
        git(["symbolic-ref", "HEAD", "refs/heads/main"], git_dir=gd)
        if dest.exists():
            dest.rmdir()
        os.replace(ws, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Workspace(dest, pristine, base, sha, len(lp.patch.files) if lp else 0)
