"""Strict apply of a whole patch to a tree: staging copy, verified post-state, atomic move.

Standard library only (the guard and ``tools/check_patch_files.py`` use it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ApplyError, OutputPathError
from .apply import Outcome, apply_patch
from .diffparse import Patch
from .filelist import FileList
from .treeio import TreeReader, copy_tree, hash_touched, write_outcomes


@dataclass(frozen=True)
class Applied:
    """What a strict apply produced: the touched files' post-image hashes and deletions."""

    files: dict[str, str]  # path -> sha256 of the post-image (touched, not deleted)
    deleted: frozenset[str]
    outcomes: dict[str, Outcome]


def _err(reason: str, msg: str, hint: str | None = None) -> ApplyError:
    return ApplyError(msg, reason=reason, hint=hint)


def expected_hashes(outcomes: dict[str, Outcome]) -> dict[str, str | None]:
    return {p: None if o.post is None else hashlib.sha256(o.post).hexdigest()
            for p, o in outcomes.items()}


def check_against_filelist(outcomes: dict[str, Outcome], filelist: FileList | None) -> None:
    """The post-images must hash to what FILES.txt records (format 2), path for path."""
    if filelist is None:
        return
    want = filelist.by_path()
    got = expected_hashes(outcomes)
    if set(want) != set(got):
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        raise _err("files", "FILES.txt and the patch name different paths"
                   + (f"; only in FILES.txt: {', '.join(missing[:3])}" if missing else "")
                   + (f"; only in the patch: {', '.join(extra[:3])}" if extra else ""),
                   "run `patchbake patch check` to see which work is missing")
    if filelist.legacy:
        return
    for path, h in sorted(got.items()):
        if want[path].sha256 != h:
            raise _err("hash", f"post-image of {path} hashes to {h or 'deleted'}, FILES.txt "
                       f"records {want[path].sha256 or 'deleted'}",
                       "run `patchbake patch check`")


def apply_in_memory(patch: Patch, base_root: Path, *, pristine: bool = True,
                    filelist: FileList | None = None) -> dict[str, Outcome]:
    """Apply to the touched files of ``base_root`` without writing anything."""
    outcomes = apply_patch(patch, TreeReader(base_root), pristine=pristine)
    check_against_filelist(outcomes, filelist)
    return outcomes


def _verify_on_disk(root: Path, outcomes: dict[str, Outcome]) -> None:
    want = expected_hashes(outcomes)
    have = hash_touched(root, want)
    for path in sorted(want):
        if have[path] != want[path]:
            raise _err("verify", f"after writing, {path} on disk hashes to "
                       f"{have[path] or 'absent'}, expected {want[path] or 'absent'}",
                       "the staging directory was modified during the apply; retry")


def build_tree(patch: Patch, pristine_root: Path, staging: Path, *,
               filelist: FileList | None = None, link: bool = False) -> Applied:
    """Copy ``pristine_root`` to ``staging`` (which must not exist) and apply there.

    ``link``: hard-link the untouched files (see :func:`treeio.copy_tree`); only for a
    staging tree that will be published read-only in the store beside the pristine one.
    """
    outcomes = apply_in_memory(patch, pristine_root, filelist=filelist)
    copy_tree(pristine_root, staging, link=link)
    write_outcomes(staging, outcomes.values())
    _verify_on_disk(staging, outcomes)
    files = {p: h for p, h in expected_hashes(outcomes).items() if h is not None}
    deleted = frozenset(p for p, o in outcomes.items() if o.post is None)
    return Applied(files, deleted, outcomes)


def apply_to_dir(patch: Patch, pristine_root: Path, dest: Path, *,
                 filelist: FileList | None = None) -> Applied:
    """Strict apply into ``dest``: it must not exist or be an empty directory.

    The tree is built in a sibling staging directory and renamed into place, so ``dest``
    holds either nothing or the complete, verified patched tree.
    """
    dest = Path(dest)
    if dest.is_symlink():
        raise _err("path", f"{dest} is a symbolic link; give a real directory")
    if dest.exists():
        if not dest.is_dir():
            raise _err("dest", f"{dest} exists and is not a directory")
        if any(dest.iterdir()):
            raise _err("dest", f"{dest} is not empty; strict apply writes only into a new "
                       "or empty directory", "pass a new directory with --to")
    made = _make_parents(dest)
    ok = False
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging.", dir=dest.parent))
    except OSError as exc:
        _unmake(made)
        raise _unwritable(dest, exc) from None
    try:
        tree = staging / "tree"
        applied = build_tree(patch, pristine_root, tree, filelist=filelist)
        # rename(2) replaces an empty directory atomically.
        os.replace(tree, dest)
        ok = True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not ok:
            _unmake(made)
    return applied


def _unwritable(dest: Path, exc: OSError) -> Exception:
    return OutputPathError(f"{dest} cannot be written: {exc.strerror or exc}",
                           hint="pass --to a new directory on a writable file system")


def _make_parents(dest: Path) -> list[Path]:
    """Create ``dest``'s missing parents; return them (deepest last) so a failure can
    remove exactly what it made."""
    missing = []
    p = dest.parent
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    made: list[Path] = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            _unmake(made)
            raise _unwritable(dest, exc) from None
        made.append(d)
    if not dest.parent.is_dir():
        raise _unwritable(dest, NotADirectoryError(20, f"{dest.parent} is not a directory"))
    return made


def _unmake(made: list[Path]) -> None:
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            pass
