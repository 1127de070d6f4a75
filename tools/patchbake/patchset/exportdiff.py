"""The export's diff: pristine -> commit with the canonical flags, parsed, and the sha256
of every post-image (FILES.txt's last column).

git's diff is most of an export's time, and it runs on one core. So the touched paths
are listed first (``diff-tree --raw``: trees only, no file contents), the diff is asked
for in two halves of that list (literal pathspecs) by two git processes at once, and the
post-images are hashed while they run. With renames off git writes each file's section
from that file's two versions alone, in path order: the first half's diff followed by
the second's is the one diff of them all. The halves are cut where no path of the first
is a directory of the second (a file that became a directory), and the parsed result
must name the listed paths in their order; otherwise, or for anything the listing does
not plainly describe (symbolic links, submodules, type changes), git's one diff is taken
and the post-images are found from its sections, as before the listing.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from ..errors import ProcessError
from ..scratch import Scratch
from .diffparse import Patch, parse_patch
from .gitbinary import blob_id
from .gitcmd import DiffInFile, canonical_diff, cat_file, git
from .paths import to_str

# Fewer touched files than this: one git process is as quick as two halves.
SPLIT_MIN = 16
_MODES = {b"000000", b"100644", b"100755"}


def _changes(git_dir: Path, old: str, new: str) -> list[tuple[str, str, str]] | None:
    """(path, status, new blob id) of each touched path in git's order, or None when one
    is not a plain A/M/D of a regular file (the listing would not describe the diff's
    sections one for one)."""
    raw = git(["diff-tree", "-r", "-z", "--raw", "--no-renames", "--no-abbrev", old, new,
               "--"], git_dir=git_dir).stdout.split(b"\0")
    out: list[tuple[str, str, str]] = []
    for meta, path in zip(raw[0:-1:2], raw[1::2], strict=True):
        fields = meta[1:].split(b" ")
        if len(fields) != 5 or fields[4] not in (b"A", b"M", b"D") \
                or not {fields[0], fields[1]} <= _MODES:
            return None
        out.append((to_str(path), fields[4].decode(), fields[3].decode()))
    return out


def _halves(paths: list[str]) -> list[list[str]]:
    """The pathspecs of the diffs to run: two halves, or one list of all when the patch
    is small or a first-half path is a directory in the second half."""
    cut = len(paths) // 2
    if len(paths) < SPLIT_MIN:
        return [[]]
    dirs = {p[:i] for p in paths[cut:] for i, c in enumerate(p) if c == "/"}
    if any(p in dirs for p in paths[:cut]):
        return [[]]
    return [paths[:cut], paths[cut:]]


def _sha256_of_blobs(git_dir: Path, ids: list[str]) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for i, obj in cat_file(ids, git_dir=git_dir).items():
        if obj is None or obj[1] != "blob":
            raise ProcessError(f"git cat-file could not read blob {i}")
        hashes[i] = hashlib.sha256(obj[2]).hexdigest()
    return hashes


def _post_hashes(git_dir: Path, work_tree: Path | None,
                 want: dict[str, str]) -> dict[str, str]:
    """sha256 of each path's post-image (path -> blob id, or commit:path).

    Reading a (clean) work tree is faster than inflating objects; a file whose git blob
    id is not the wanted one is read from the objects instead.
    """
    post: dict[str, str] = {}
    if work_tree is not None:
        for path, oid in want.items():
            if ":" in oid:
                continue
            try:
                data = (work_tree / path).read_bytes()
            except OSError:
                continue
            if blob_id(data) == oid:
                post[path] = hashlib.sha256(data).hexdigest()
    rest = {p: oid for p, oid in want.items() if p not in post}
    hashes = _sha256_of_blobs(git_dir, list(rest.values()))
    post.update({p: hashes[oid] for p, oid in rest.items()})
    return post


def _one_diff(git_dir: Path, old: str, new: str, name: str,
              work_tree: Path | None) -> tuple[bytes, Patch, dict[str, str]]:
    data = canonical_diff(git_dir, old, new)
    patch = parse_patch(data, name)
    # A mode-only change has no index line: name its blob by commit and path.
    want = {f.path: f.new_id or f"{new}:{f.path}" for f in patch.files if f.status != "D"}
    return data, patch, _post_hashes(git_dir, work_tree, want)


def export_diff(git_dir: Path, old: str, new: str, name: str,
                work_tree: Path | None = None) -> tuple[bytes, Patch, dict[str, str]]:
    """The canonical diff ``old`` -> ``new`` in ``git_dir``, parsed, with the sha256 of
    each path's post-image; ``work_tree``: a clean checkout of ``new`` to read them from."""
    changes = _changes(git_dir, old, new)
    if changes is None:
        return _one_diff(git_dir, old, new, name, work_tree)
    slots = threading.BoundedSemaphore(2)
    scratch = Scratch("patchbake-export.")
    out = scratch.path
    try:
        diffs = [DiffInFile(git_dir, old, new, out / f"{k}.patch", part, slots)
                 for k, part in enumerate(_halves([p for p, _, _ in changes]))]
        try:
            post = _post_hashes(git_dir, work_tree,
                                {p: oid for p, status, oid in changes if status != "D"})
        finally:
            for d in diffs:
                d.join()
        data = b"".join(d.result() for d in diffs)
    finally:
        scratch.remove()
    patch = parse_patch(data, name)
    if [f.path for f in patch.files] != [p for p, _, _ in changes]:
        return _one_diff(git_dir, old, new, name, work_tree)
    return data, patch, post
