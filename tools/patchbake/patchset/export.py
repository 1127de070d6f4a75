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
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import ExportError, ProcessError
from ..fsutil import atomic_write
from ..store import Store
from .diffparse import Patch, parse_patch
from .filelist import Entry, render
from .gitbinary import blob_id
from .gitcmd import canonical_diff, git, objects_dir, scratch_repo
from .sourcerec import SourceRecord, read_source, render_source
from .workspace import BASE_REF, PRISTINE_REF, PRISTINE_SUBJECT

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class _Origin:
    repo: Path
    commit: str
    kind: str  # workspace | repo
    spec: str


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
    r = git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo, check=False)
    if r.returncode != 0:
        raise ExportError(f"--from {spec}: '{rev}' is not a commit in {repo}")
    return _Origin(repo.resolve(), r.text.strip(), kind, spec)


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


def _message(repo: Path, rev: str) -> str:
    return git(["log", "-1", "--format=%B", rev], cwd=repo).text


def _pristine_commit(o: _Origin, pin: str) -> str:
    r = git(["log", "-1", "--format=%H%n%B", PRISTINE_REF, "--"], cwd=o.repo, check=False)
    found = [r.text] if r.returncode == 0 else [
        git(["log", "-1", "--format=%H%n%B", c, "--"], cwd=o.repo).text
        for c in git(["rev-list", "--max-parents=0", o.commit], cwd=o.repo).text.split()]
    for text in found:
        commit, _, message = text.partition("\n")
        if message.startswith(PRISTINE_SUBJECT + pin + "\n") and git(
                ["merge-base", "--is-ancestor", commit, o.commit], cwd=o.repo,
                check=False).returncode == 0:
            return commit
    raise ExportError(f"{o.spec}: no pristine commit of {pin} under {o.commit[:12]}",
                      hint="start edits from `patchbake patch workspace DIR` (its first "
                           "commit is the pristine upstream) or rebase the fork onto it")


def _is_ancestor(repo: Path, old: str, new: str) -> bool | None:
    """True/False, or None when ``old`` is not in ``repo`` at all."""
    if not _HEX40.match(old):
        return None
    if git(["cat-file", "-e", f"{old}^{{commit}}"], cwd=repo, check=False).returncode != 0:
        return None
    return git(["merge-base", "--is-ancestor", old, new], cwd=repo,
               check=False).returncode == 0


def _base_patch_sha(o: _Origin) -> str | None:
    r = git(["rev-parse", "--verify", "--quiet", BASE_REF], cwd=o.repo, check=False)
    if r.returncode != 0:
        return None
    m = re.search(r"^patch-sha256: ([0-9a-f]{64})$", _message(o.repo, r.text.strip()), re.MULTILINE)
    return m.group(1) if m else None


def _guard_forward(o: _Origin, current: str | None, src: SourceRecord | None) -> None:
    """Raise unless the export provably contains the committed patch's work."""
    if current is None:
        return
    if o.kind == "workspace" and _base_patch_sha(o) == current:
        return
    if src is None:
        raise ExportError("the committed patch has no SOURCE record, so nothing proves "
                          f"{o.spec} contains its work",
                          hint="export from a workspace made from the committed patch, or "
                               "pass --force --reason '...'")
    if src.patch_sha256 != current:
        raise ExportError("the committed patch was changed after the last export (SOURCE "
                          f"records sha256 {str(src.patch_sha256)[:16]}..., the file is "
                          f"{current[:16]}...); exporting would erase that change",
                          hint="make a fresh workspace from the committed patch and redo the "
                               "edit there, or pass --force --reason '...'")
    anc = _is_ancestor(o.repo, src.commit or "", o.commit)
    if anc is None:
        raise ExportError(f"SOURCE records commit {src.commit}, which is not in {o.repo}: "
                          "cannot prove the new source descends from it",
                          hint="fetch that commit into the repository, or pass --force "
                               "--reason '...'")
    if not anc:
        raise ExportError(f"refusing to move SOURCE backwards: the recorded commit "
                          f"{str(src.commit)[:12]} is not an ancestor of {o.commit[:12]}",
                          hint="export from a descendant of the recorded commit, or pass "
                               "--force --reason '...'")


def _post_hashes(git_dir: Path, ids: list[str]) -> dict[str, str]:
    if not ids:
        return {}
    out = git(["cat-file", "--batch"], git_dir=git_dir, input="".join(
        f"{i}\n" for i in ids).encode()).stdout
    hashes: dict[str, str] = {}
    pos = 0
    for i in ids:
        nl = out.index(b"\n", pos)
        head = out[pos:nl].split()
        if len(head) != 3 or head[1] != b"blob":
            raise ProcessError(f"git cat-file could not read blob {i}")
        size = int(head[2])
        hashes[i] = hashlib.sha256(out[nl + 1:nl + 1 + size]).hexdigest()
        pos = nl + 1 + size + 1
    return hashes


def _diff(o: _Origin, pristine: str, scratch_parent: Path,
          name: str) -> tuple[bytes, Patch, dict[str, str]]:
    """The canonical diff pristine -> commit, parsed, with post-image sha256 per path."""
    scratch = scratch_repo(scratch_parent, [objects_dir(o.repo)])
    try:
        data = canonical_diff(scratch, pristine, o.commit)
        patch = parse_patch(data, name)
        post: dict[str, str] = {}
        if o.kind == "workspace":
            # Reading the (clean) work tree is faster than inflating objects; a file whose
            # git blob id is not the index line's is read from the objects instead.
            for f in patch.files:
                if f.status != "D" and f.new_id:
                    try:
                        data_f = (o.repo / f.path).read_bytes()
                    except OSError:
                        continue
                    if blob_id(data_f) == f.new_id:
                        post[f.path] = hashlib.sha256(data_f).hexdigest()
        # A mode-only change has no index line: name its blob by commit and path.
        want = {f.path: f.new_id or f"{o.commit}:{f.path}" for f in patch.files
                if f.status != "D" and f.path not in post}
        hashes = _post_hashes(scratch, list(want.values()))
        post.update({p: hashes[w] for p, w in want.items()})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return data, patch, post


def export(lineage: Any, store: Store, from_spec: str, *, force: bool = False,
           reason: str | None = None) -> Exported:
    from ..sources import fetch

    if force and not (reason or "").strip():
        raise ExportError("--force needs --reason '...' saying why work may be dropped")
    o = _resolve(from_spec)
    pin = lineage.upstream.pin
    current_bytes = lineage.patch.read_bytes() if lineage.patch.exists() else None
    current = hashlib.sha256(current_bytes).hexdigest() if current_bytes is not None else None
    src = read_source(lineage.source_record)

    def clean() -> None:
        if o.kind == "workspace":
            _require_clean(o)

    # The status of a 6,000-file work tree and the diff are independent: run them side
    # by side; nothing is written unless every refusal check passed.
    with ThreadPoolExecutor(max_workers=1) as pool:
        status = pool.submit(clean)
        try:
            pristine = _pristine_commit(o, pin)
            fetched = fetch(lineage, store)
            data, patch, post = _diff(o, pristine, store.root / "tmp", lineage.patch.name)
            if not force:
                _guard_forward(o, current, src)
        finally:
            status.result()
    sha = hashlib.sha256(data).hexdigest()
    entries = [Entry(f.path, f.status, f.added, f.removed,
                     post.get(f.path)) for f in patch.files]
    files_bytes = render(entries, generator=f"patchbake {__version__}", upstream=pin,
                         patch_name=lineage.patch.name, patch_sha256=sha)
    record: dict[str, Any] = {
        "lineage": lineage.key, "upstream": pin, "tree_digest": fetched.tree_digest,
        "patch": lineage.patch.name, "patch_sha256": sha,
        "files_sha256": hashlib.sha256(files_bytes).hexdigest(),
        "source": {"kind": o.kind, "repo": o.spec.rsplit("@", 1)[0] if o.kind == "repo"
                   else None, "commit": o.commit, "pristine_commit": pristine},
        "forced": None if not force else {
            "reason": (reason or "").strip(), "previous_commit": src.commit if src else None,
            "previous_patch_sha256": current},
    }
    for path, content in ((lineage.patch, data), (lineage.files, files_bytes),
                          (lineage.source_record, render_source(record))):
        if current_bytes is None or not path.exists() or path.read_bytes() != content:
            atomic_write(path, content)
    return Exported(lineage.patch, lineage.files, lineage.source_record, sha,
                    len(patch.files), patch.added, patch.removed, o.commit, sha != current)
