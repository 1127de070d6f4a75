"""``patchbake patch workspace DIR``: a git work tree where people edit the patch.

Commit 1 is the pristine upstream, commit 2 the current canonical patch applied strictly.
Both have a fixed author, committer and date (1970-01-01T00:00:00Z), so the same pin and
the same patch give the same commit ids on every machine. Refs ``refs/patchbake/pristine``
and ``refs/patchbake/base`` mark them for export and ``series split``.

A directory that already holds a workspace is, as the caller asks, refused, reused (it is
exactly what would be made: same pin, same patch, nothing committed or changed since) or
replaced -- the last only when nothing in it would be lost: no uncommitted change, and
no commit whose tree the current patch does not reproduce.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
    reused: bool = False


# what to do when the destination already holds something (see the module's docstring)
Existing = Literal["refuse", "reuse", "replace"]


@dataclass(frozen=True, slots=True)
class _Found:
    """An existing workspace as its refs and work tree say."""
    pristine: str
    base: str
    head: str
    base_message: str
    dirty: list[str]


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


def _is_empty_dir(dest: Path) -> bool:
    return not dest.exists() or (dest.is_dir() and not dest.is_symlink()
                                 and not any(dest.iterdir()))


def _check_dest(dest: Path) -> None:
    if not _is_empty_dir(dest):
        raise ExportError(f"{dest} exists and is not an empty directory",
                          hint="give a new directory for the workspace")


def _rev(gd: Path, ref: str) -> str | None:
    r = git(["rev-parse", "-q", "--verify", f"{ref}^{{commit}}"], git_dir=gd, check=False)
    return r.text.strip() if r.returncode == 0 else None


def _find(dest: Path) -> _Found:
    """``dest`` as a workspace this module made, or a refusal that says what it is."""
    gd = dest / ".git"
    pristine = _rev(gd, PRISTINE_REF) if gd.is_dir() and not gd.is_symlink() else None
    base = _rev(gd, BASE_REF) if pristine else None
    head = _rev(gd, "HEAD") if base else None
    if pristine is None or base is None or head is None:
        raise ExportError(f"{dest} exists, is not an empty directory and not a patchbake "
                          "workspace",
                          hint="give a new directory for the workspace, or move it away")
    status = git(["status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd=dest)
    dirty = [e[3:].decode("utf-8", "replace") for e in status.stdout.split(b"\0") if e]
    message = git(["cat-file", "commit", base], git_dir=gd).text.partition("\n\n")[2]
    return _Found(pristine, base, head, message, dirty)


def _why_not_reused(found: _Found, expected_message: str) -> str | None:
    if found.dirty:
        return f"it has uncommitted changes ({', '.join(found.dirty[:3])})"
    if found.head != found.base:
        return "it holds commits after the patch's"
    if found.base_message != expected_message:
        return "it was made for another pin or patch"
    return None


def _refuse_replace(dest: Path, found: _Found, new_tree: str | None) -> None:
    """Replacing must lose nothing: no uncommitted change; HEAD is the old base (no work
    of the user's) or its tree is the one the current patch makes (the work is exported)."""
    keep = "; export it (`patchbake patch export --from DIR`) or move the directory away"
    if found.dirty:
        raise ExportError(f"{dest} has uncommitted changes ({', '.join(found.dirty[:3])}); "
                          "--force does not discard them", hint="commit them" + keep)
    if new_tree is not None and found.head != found.base and git(["rev-parse", f"{found.head}^{{tree}}"],
                                        git_dir=dest / ".git").text.strip() != new_tree:
        raise ExportError(f"{dest} holds commits the canonical patch does not reproduce; "
                          "--force does not discard them", hint="they would be lost" + keep)


def create_workspace(lineage: Any, store: Store, dest: Path, *, with_patch: bool = True,
                     existing: Existing = "refuse") -> Workspace:
    """Build the workspace in a sibling staging directory, then rename it into place.

    ``with_patch=False``: the pristine tree only, even if the lineage has a patch (port
    writes its own result on top). ``existing``: what to do with a workspace already at
    ``dest`` (the module's docstring)."""
    dest = Path(dest).absolute()
    found = None
    if existing == "refuse" or _is_empty_dir(dest):
        _check_dest(dest)
    else:
        found = _find(dest)
    fetched = fetch(lineage, store)
    lp = read_lineage_patch(lineage.patch, lineage.files) \
        if with_patch and lineage.patch.exists() else None
    sha = lp.patch_sha256 if lp is not None else None
    message = base_message(lineage.patch.name, sha, lineage.upstream.pin)
    if found is not None:
        why = _why_not_reused(found, message)
        if why is None:
            return Workspace(dest, found.pristine, found.base, sha,
                             len(lp.patch.files) if lp else 0, reused=True)
        if existing == "reuse":
            raise ExportError(f"{dest} holds a workspace that is not the current one: {why}",
                              hint="`--force` replaces it (never losing work), or give a "
                                   "new directory")
        _refuse_replace(dest, found, None)  # before the work of building a new one
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
        base = commit_all(ws, message, pristine)
        gd = ws / ".git"
        git(["update-ref", PRISTINE_REF, pristine], git_dir=gd)
        git(["update-ref", BASE_REF, base], git_dir=gd)
        git(["update-ref", "refs/heads/main", base], git_dir=gd)
        git(["symbolic-ref", "HEAD", "refs/heads/main"], git_dir=gd)
        if found is not None:
            _refuse_replace(dest, found, git(["rev-parse", f"{base}^{{tree}}"],
                                             git_dir=gd).text.strip())
            old = staging / "old"  # removed with the staging directory
            os.replace(dest, old)
            try:
                os.replace(ws, dest)
            except OSError:
                os.replace(old, dest)
                raise
        else:
            if dest.exists():
                dest.rmdir()
            os.replace(ws, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Workspace(dest, pristine, base, sha, len(lp.patch.files) if lp else 0)
