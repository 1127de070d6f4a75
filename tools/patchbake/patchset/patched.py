"""The patched tree of a lineage, cached in the store and keyed by what it is made of.

``patched_tree(lineage, store)`` is what later stages (bake, verify) build from: the
pristine tree (by tree digest) plus the canonical patch (by sha256) plus FILES.txt (by
sha256) name one directory under ``store/trees/``; building it is a strict apply with every
post-image checked against FILES.txt, and a cached copy is re-checked on every use.
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import ApplyError, GuardError, PatchbakeError
from ..fsutil import atomic_write, pretty_json, read_input, read_optional, sha256_bytes
from ..sources import fetch, tree_digest
from ..sources.treememo import TreeMemo, memo_path
from ..store import Store
from .diffparse import Patch, parse_patch
from .filelist import FileList, parse_filelist
from .strict import build_tree
from .treeio import hash_touched

CACHE_VERSION = 1


@dataclass(frozen=True)
class PatchedTree:
    root: Path  # read-only by convention: it is shared through the store
    files: dict[str, str]  # touched path -> post-image sha256 (deleted paths excluded)
    deleted: frozenset[str]
    patch_sha256: str
    files_sha256: str
    tree_digest: Digest  # of the patched tree
    pristine_digest: Digest  # of the upstream tree it was built from


@dataclass(frozen=True)
class LineagePatch:
    """The committed patch and FILES.txt of a lineage, read once and parsed."""

    patch: Patch
    filelist: FileList | None
    patch_bytes: bytes
    files_bytes: bytes | None

    @property
    def patch_sha256(self) -> str:
        return sha256_bytes(self.patch_bytes)

    @property
    def files_sha256(self) -> str:
        return sha256_bytes(self.files_bytes or b"")


def read_lineage_patch(patch_path: Path, files_path: Path) -> LineagePatch:
    data = read_input(patch_path, "patch", GuardError, missing=partial(
        GuardError, hint="create it with `patchbake patch workspace DIR`, edit, then "
                         "`patchbake patch export --from DIR`"))
    files_bytes = read_optional(files_path, "file list", GuardError)
    patch = parse_patch(data, patch_path.name)
    fl = parse_filelist(files_bytes, files_path.name) if files_bytes is not None else None
    return LineagePatch(patch, fl, data, files_bytes)


def _meta_path(store: Store, key: str) -> Path:
    return store.root / "patched" / f"{key}.json"


def _load(store: Store, key: str, lp: LineagePatch) -> PatchedTree | None:
    root = store.tree_path(Digest.from_hex(key))
    try:
        meta: dict[str, Any] = json.loads(_meta_path(store, key).read_bytes())
        tree = Digest.parse(meta["tree_digest"])
        pristine = Digest.parse(meta["pristine_digest"])
    except (OSError, ValueError, KeyError, TypeError, PatchbakeError):
        return None  # a damaged record is rebuilt, not trusted
    if meta.get("version") != CACHE_VERSION or not root.is_dir():
        return None
    files: dict[str, str] = meta["files"]
    deleted = frozenset(meta["deleted"])
    # Re-check the touched files on every use: cheap, and a modified cache is caught.
    now = hash_touched(root, [*files, *deleted])
    if any(now[p] != h for p, h in files.items()) or any(now[p] is not None for p in deleted):
        raise ApplyError(f"cached patched tree {root} was modified after it was built",
                         hint=f"delete {root} and {_meta_path(store, key)}, then retry")
    return PatchedTree(root, files, deleted, lp.patch_sha256, lp.files_sha256,
                       tree, pristine)


def patched_tree(lineage: Any, store: Store) -> PatchedTree:
    """Fetch the lineage's pinned upstream and return its strictly patched tree (cached)."""
    lp = read_lineage_patch(lineage.patch, lineage.files)
    fetched = fetch(lineage, store)
    basis = f"patched-tree v{CACHE_VERSION}\0{fetched.tree_digest}\0{lp.patch_sha256}\0" \
            f"{lp.files_sha256}"
    key = hashlib.sha256(basis.encode()).hexdigest()
    cached = _load(store, key, lp)
    if cached is not None:
        return cached
    with store.lock(f"patched-{key}"):
        cached = _load(store, key, lp)
        if cached is not None:
            return cached
        staging = store.tmpdir("patched")
        try:
            tree = staging / "tree"
            # the pristine tree's memo (filled where the pristine tree is hashed: verify,
            # the pristine package), confirmed against its files right before they are
            # linked: the links are then memoised from it (sources.treememo.seed_links),
            # so the new tree's digest reads only the files the patch wrote
            pristine_memo = TreeMemo.for_tree(store.root, fetched.root)
            confirmed = pristine_memo.confirm(fetched.root) if pristine_memo else set()
            confirmed_at = time.time_ns()
            # Both trees live in the store (one file system) and are read-only by
            # convention: untouched files are hard links to the pristine ones; every
            # touched file is a new file (written after an unlink), checked by hash.
            applied = build_tree(lp.patch, fetched.root, tree, filelist=lp.filelist,
                                 link=True)
            memo = TreeMemo(memo_path(store.root, key))
            if pristine_memo is not None:
                memo.seed_links(pristine_memo, confirmed, tree, confirmed_at)
                pristine_memo.save()
            digest = tree_digest(tree, memo)
            root = store.publish_tree(tree, Digest.from_hex(key))
        finally:
            store.discard(staging)
        meta = {"version": CACHE_VERSION, "files": applied.files,
                "deleted": sorted(applied.deleted), "tree_digest": str(digest),
                "pristine_digest": str(fetched.tree_digest), "patch_sha256": lp.patch_sha256,
                "files_sha256": lp.files_sha256}
        atomic_write(_meta_path(store, key), pretty_json(meta))
    return PatchedTree(root, applied.files, applied.deleted, lp.patch_sha256,
                       lp.files_sha256, digest, fetched.tree_digest)
