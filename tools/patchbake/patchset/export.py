"""``patchbake patch export``: regenerate the canonical patch, FILES.txt and SOURCE.

From a workspace (its HEAD, which must be clean) or a fork repository at a revision; in
both cases the diff is pristine commit -> that commit, written by git in a scratch
repository with every output-affecting setting pinned (see :mod:`gitcmd`).

Lost work is refused, not written: the export goes ahead only when it provably contains
the committed patch's work -- the workspace was made from the committed patch, or the
commit recorded in SOURCE is an ancestor of the new one (SOURCE moves only forward).
``--force`` with a stated reason overrides, and the reason is recorded in SOURCE.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..digest import Digest, differing
from ..errors import ExportError
from ..fsutil import atomic_write, read_optional
from ..sources import fetch
from ..store import Store
from .diffparse import Patch, parse_patch
from .exportdiff import export_diff
from .filelist import Entry, render
from .gitcmd import cat_file, git, held_scratch_repo
from .sourcerec import SourceRecord, read_source, render_source
from .workspace import BASE_REF, PRISTINE_REF, PRISTINE_SUBJECT


_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class Exported:
    patch_path: Path
    files_path: Path
    source_path: Path
    patch_sha256: str
    files: int
    added: int
    removed: int
    commit: str
    changed: bool


@dataclass(frozen=True, slots=True)
class _Origin:
    repo: Path
    commit: str
    kind: str  # workspace | repo
    spec: str
    objects: Path


def _resolve(spec: str) -> _Origin:
    p = Path(spec)
    if p.is_dir():
        repo, rev, kind = p, "HEAD", "workspace"
    elif "@" in spec:
        left, rev = spec.rsplit("@", 1)
        repo, kind = Path(left), "repo"
        if not repo.is_dir():
            raise ExportError(f"--from {spec}: {left} is not a directory")
    else:
        raise ExportError(f"--from {spec}: not a workspace directory or REPO@REV",
                          hint="create one with `patchbake patch workspace DIR`")
    r = git(["rev-parse", "--git-path", "objects", "--verify", "--quiet", f"{rev}^{{commit}}"],
            cwd=repo, check=False)
    lines = r.text.split()
    if r.returncode != 0 or len(lines) != 2:
        raise ExportError(f"--from {spec}: '{rev}' is not a commit in {repo}")
    objects = Path(lines[0]) if Path(lines[0]).is_absolute() else repo / lines[0]
    return _Origin(repo.resolve(), lines[1], kind, spec, objects.resolve())


def _message(obj: tuple[str, str, bytes] | None) -> str | None:
    if obj is None or obj[1] != "commit":
        return None
    return obj[2].partition(b"\n\n")[2].decode("utf-8", "replace")


def _require_clean(o: _Origin) -> None:
    r = git(["status", "--porcelain=v1", "-z", "--untracked-files=all",
             "--ignore-submodules=none"], cwd=o.repo)
    dirty = [e[3:].decode("utf-8", "replace") for e in r.stdout.split(b"\0") if e]
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise ExportError(f"workspace {o.repo} has uncommitted changes ({shown}); export "
                          "reads commits only",
                          hint="commit them (git add -A && git commit) or discard them, "
                               "then export again")


def _is_ancestor(repo: Path, old: str, new: str) -> bool:
    return git(["merge-base", "--is-ancestor", old, new], cwd=repo,
               check=False).returncode == 0


@dataclass(frozen=True, slots=True)
class _Refs:
    pristine: str
    pristine_tree_digest: Digest | None  # what the pristine commit's message records
    base_patch_sha: str | None  # what the workspace's base commit applied
    base_commit: str | None  # the workspace's base commit (refs/patchbake/base)
    source_commit_known: bool  # SOURCE's commit is an object of this repository


def _read_refs(o: _Origin, pin: str, src: SourceRecord | None) -> _Refs:
    """One ``cat-file --batch``: the pristine and base refs, and SOURCE's commit."""
    want = f"{PRISTINE_SUBJECT}{pin}\n"
    src_commit = src.commit if src and src.commit and _HEX40.match(src.commit) else None
    got = cat_file([PRISTINE_REF, BASE_REF] + ([src_commit] if src_commit else []), cwd=o.repo)
    candidates: list[tuple[str, str | None]] = []
    ref = got[PRISTINE_REF]
    if ref is not None:
        candidates.append((ref[0], _message(ref)))
    else:  # a fork: its root commit should be the workspace's pristine commit
        roots = git(["rev-list", "--max-parents=0", o.commit], cwd=o.repo).text.split()
        objs = cat_file(roots, cwd=o.repo)
        candidates += [(c, _message(objs[c])) for c in roots]
    pristine, message = next(((c, m) for c, m in candidates
                              if m is not None and m.startswith(want)), ("", ""))
    if not pristine:
        raise ExportError(f"{o.spec}: no pristine commit of {pin} under {o.commit[:12]}",
                          hint="start edits from `patchbake patch workspace DIR` (its first "
                               "commit is the pristine upstream) or rebase the fork onto it")
    m = re.search(r"^patch-sha256: ([0-9a-f]{64})$", _message(got[BASE_REF]) or "", re.MULTILINE)
    known = src_commit is not None and (got.get(src_commit) or ("", "", b""))[1] == "commit"
    td = re.search(r"^tree-digest: (\S+)$", message or "", re.MULTILINE)
    tree = Digest.parse(td.group(1), f"{o.spec}: the pristine commit's tree-digest",
                        ExportError) if td else None
    base_obj = got[BASE_REF]
    base = base_obj[0] if base_obj is not None else None
    return _Refs(pristine, tree, m.group(1) if m else None, base,
                 known)


def _guard_forward(o: _Origin, refs: _Refs, current: str | None,
                   src: SourceRecord | None) -> None:
    """Raise unless the export provably contains the committed patch's work."""
    if current is None:
        return
    if o.kind == "workspace" and refs.base_patch_sha == current:
        return
    if src is None:
        raise ExportError("the committed patch has no SOURCE record, so nothing proves "
                          f"{o.spec} contains its work",
                          hint="export from a workspace made from the committed patch, or "
                               "pass --force --reason '...'")
    if src.patch_sha256 != current:
        recorded, now = differing(str(src.patch_sha256), current, 16)
        raise ExportError("the committed patch was changed after the last export (SOURCE "
                          f"records sha256 {recorded}..., the file is "
                          f"{now}...); exporting would erase that change",
                          hint="make a fresh workspace from the committed patch and redo the "
                               "edit there, or pass --force --reason '...'")
    if not refs.source_commit_known:
        raise ExportError(f"SOURCE records commit {src.commit}, which is not in {o.repo}: "
                          "cannot prove the new source descends from it",
                          hint="fetch that commit into the repository, or pass --force "
                               "--reason '...'")
    if not _is_ancestor(o.repo, str(src.commit), o.commit):
        raise ExportError(f"refusing to move SOURCE backwards: the recorded commit "
                          f"{str(src.commit)[:12]} is not an ancestor of {o.commit[:12]}",
                          hint="export from a descendant of the recorded commit, or pass "
                               "--force --reason '...'")


def _guard_rewritten(o: _Origin, refs: _Refs, current: str | None,
                     current_bytes: bytes | None, new: Patch) -> None:
    """A workspace made from the committed patch passes :func:`_guard_forward` on that
    alone; if its history was then rewritten past the base commit (a reset to the
    pristine commit, or a rebase that splits the patch into a series), refuse an export
    that no longer touches a path the committed patch touches: that work was dropped."""
    if o.kind != "workspace" or current is None or current_bytes is None \
            or refs.base_patch_sha != current or refs.base_commit is None \
            or _is_ancestor(o.repo, refs.base_commit, o.commit):
        return
    old = parse_patch(current_bytes, "committed patch").by_path()
    dropped = sorted(set(old) - set(new.by_path()))
    if dropped:
        shown = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more"
                                          if len(dropped) > 3 else "")
        raise ExportError(f"{o.spec}: its history no longer contains the base commit "
                          f"{refs.base_commit[:12]} and the export drops work the committed "
                          f"patch has ({shown}); refusing to erase it",
                          hint="restore those changes in the workspace, or pass --force "
                               "--reason '...'")


def export(  # noqa: C901 - the refusal threads and the diff they run beside, kept together
        lineage: Any, store: Store, from_spec: str, *, force: bool = False,
        reason: str | None = None) -> Exported:
    if force and not (reason or "").strip():
        raise ExportError("--force needs --reason '...' saying why work may be dropped")
    o = _resolve(from_spec)
    pin = lineage.upstream.pin
    current_bytes = read_optional(lineage.patch, "patch", ExportError)
    current = hashlib.sha256(current_bytes).hexdigest() if current_bytes is not None else None
    src = read_source(lineage.source_record)

    # The refusal checks (status of a 6,000-file work tree, ancestry) and the diff are
    # independent: run them side by side; nothing is written unless every check passed.
    # The status needs only the work tree, so it starts first, beside reading the refs.
    refused: list[tuple[int, BaseException]] = []  # (the check's place, its error)

    def beside(check: Callable[[], None], slot: int) -> threading.Thread:
        def run() -> None:
            try:
                check()
            except BaseException as exc:  # noqa: BLE001 - raised below, in this thread
                refused.append((slot, exc))
        t = threading.Thread(target=run, name="export-refusals", daemon=True)
        t.start()
        return t

    side = [beside(lambda: _require_clean(o), 0)] if o.kind == "workspace" else []
    try:
        refs = _read_refs(o, pin, src)
    except BaseException:  # what the refs say comes first, as when the checks followed
        for t in side:
            t.join()
        raise

    def refusals() -> None:
        if not _is_ancestor(o.repo, refs.pristine, o.commit):
            raise ExportError(f"{o.spec}: {o.commit[:12]} does not descend from the pristine "
                              f"commit {refs.pristine[:12]}",
                              hint="start edits from `patchbake patch workspace DIR`")
        if not force:
            _guard_forward(o, refs, current, src)

    try:
        side.append(beside(refusals, 1))
        fetched = fetch(lineage, store)
        with held_scratch_repo(store.root / "tmp", [o.objects]) as scratch:
            data, patch, post = export_diff(scratch, refs.pristine, o.commit,
                                            lineage.patch.name,
                                            o.repo if o.kind == "workspace" else None)
    finally:
        for t in side:
            t.join()
        if refused:  # a refusal says more than a failed diff: it comes first
            raise min(refused, key=lambda r: r[0])[1]
    if refs.pristine_tree_digest and refs.pristine_tree_digest != fetched.tree_digest:
        raise ExportError(f"{o.spec}: its pristine commit records the tree "
                          f"{refs.pristine_tree_digest}, but the pinned upstream is "
                          f"{fetched.tree_digest}",
                          hint="make a fresh workspace with `patchbake patch workspace`")
    if not force:
        _guard_rewritten(o, refs, current, current_bytes, patch)
    sha = hashlib.sha256(data).hexdigest()
    entries = [Entry(f.path, f.status, f.added, f.removed,
                     post.get(f.path)) for f in patch.files]
    files_bytes = render(entries, generator=f"patchbake {__version__}", upstream=pin,
                         patch_name=lineage.patch.name, patch_sha256=sha)
    record: dict[str, Any] = {
        "lineage": lineage.key, "upstream": pin, "tree_digest": str(fetched.tree_digest),
        "patch": lineage.patch.name, "patch_sha256": sha,
        "files_sha256": hashlib.sha256(files_bytes).hexdigest(),
        "source": {"kind": o.kind, "repo": o.spec.rsplit("@", 1)[0] if o.kind == "repo"
                   else None, "commit": o.commit, "pristine_commit": refs.pristine},
        "forced": None if not force else {
            "reason": (reason or "").strip(), "previous_commit": src.commit if src else None,
            "previous_patch_sha256": current},
    }
    outputs = [(lineage.patch, data), (lineage.files, files_bytes)]
    # A workspace's commit ids are local; re-exporting the same patch from another
    # workspace changes nothing, so SOURCE keeps pointing at where the work was made.
    # (A fork's new commit is kept: it moves the "only forward" mark.)
    unchanged = current == sha and not force and o.kind == "workspace" and src is not None \
        and src.patch_sha256 == sha
    if not unchanged:
        outputs.append((lineage.source_record, render_source(record)))
    for path, content in outputs:
        if current_bytes is None or not path.exists() or path.read_bytes() != content:
            atomic_write(path, content)
    return Exported(lineage.patch, lineage.files, lineage.source_record, sha,
                    len(patch.files), patch.added, patch.removed, o.commit, sha != current)
