"""Store maintenance: ``store fsck`` (is every object what its name says, and what did a
crash leave behind) and ``store gc`` (remove that litter and objects nothing names).

What counts as *named* (never collected): anything whose sha256 appears in the store's
records (``index.json``, ``sources/``, ``patched/``, ``bakes/``, ``registry/`` and any other
record directory, file names included), in the repository's records (``pipeline.yaml``,
``patch/``, ``images/``, ``manifests/``: image records, evidence, releases, lineages,
ledger), or inside a named JSON blob (a manifest names its config and layers, an index
its manifests), transitively. The match is deliberately loose (any 64-hex string): gc
keeps a blob too many rather than delete one a record needs. Objects younger than the
grace period are kept too: a bake writes its layers before the manifest that names them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .digest import Digest, is_digest, is_hex
from .errors import PatchbakeError, StoreError
from .fsutil import CHUNK, open_input
from .sources.digest import tree_digest
from .sources.treememo import memo_path
from .staging import reclaim
from .store import Store, is_litter, remove_entry
from .storereach import unreachable

HEX_IN_TEXT = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
SKIP_DIRS = frozenset({"blobs", "trees", "tmp", "locks", "quarantine"})
REPO_RECORDS = ("pipeline.yaml", "patch", "images", "manifests")
MAX_SCAN_BYTES = 16 << 20  # record files and JSON blobs larger than this are not scanned
DEFAULT_GRACE_S = 3600.0


@dataclass
class Report:
    blobs: int = 0
    trees: int = 0
    bad_blobs: list[str] = field(default_factory=list)
    bad_trees: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # names in blobs/ that are not digests
    missing: list[str] = field(default_factory=list)  # what a name or record needs, absent
    litter: list[str] = field(default_factory=list)  # staging left by dead processes
    idle_locks: list[str] = field(default_factory=list)
    unreferenced_blobs: list[str] = field(default_factory=list)
    unreferenced_trees: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    bytes_freed: int = 0

    @property
    def damaged(self) -> bool:
        return bool(self.bad_blobs or self.bad_trees or self.missing)

    @property
    def clean(self) -> bool:
        return not self.damaged and not self.litter and not self.stray


def _open_regular(path: Path) -> BinaryIO | None:
    """``path`` opened for reading without blocking, or None when it is no regular file
    (or is gone): a FIFO planted in the store or the repository must not hang fsck or gc."""
    try:
        return open_input(path, "file", StoreError)
    except PatchbakeError:
        return None


def _read_small(path: Path, *, json_only: bool = False) -> bytes | None:
    """The bytes of a record (or, ``json_only``, a blob that starts as a JSON object) to
    scan; None if it is no regular file, is over MAX_SCAN_BYTES or is not JSON."""
    f = _open_regular(path)
    if f is None:
        return None
    with f:
        if os.fstat(f.fileno()).st_size > MAX_SCAN_BYTES:
            return None
        head = f.read(1)
        if json_only and head != b"{":
            return None
        data = head + f.read(MAX_SCAN_BYTES)
    return data if len(data) <= MAX_SCAN_BYTES else None


def hash_file(path: Path) -> str:
    """The sha256 of a blob; "" for what is no regular file (so it matches no name)."""
    f = _open_regular(path)
    if f is None:
        return ""
    h = hashlib.sha256()
    with f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _blob_files(store: Store) -> Iterator[Path]:
    d = store.root / "blobs" / "sha256"
    if d.is_dir():
        yield from sorted(d.iterdir())


def bad_blobs(store: Store) -> list[str]:
    """Names of blobs whose content no longer hashes to their name."""
    return [p.name for p in _blob_files(store) if is_hex(p.name) and hash_file(p) != p.name]


def _tree_claims(store: Store) -> dict[str, str]:
    """trees/<name> -> the tree digest a record says it has."""
    claims: dict[str, str] = {}
    for kind in ("sources", "patched"):
        for rec in sorted((store.root / kind).glob("*.json")):
            raw = _read_small(rec)
            try:
                doc = json.loads(raw) if raw is not None else None
            except (OSError, ValueError):
                continue
            digest = doc.get("tree_digest") if isinstance(doc, dict) else None
            if not is_digest(digest):
                continue
            hexd = Digest.parse(digest).hex
            name = hexd if kind == "sources" else rec.stem
            claims[name] = hexd
    return claims


def _locks(store: Store) -> list[Path]:
    d = store.root / "locks"
    return sorted(d.glob("*.lock")) if d.is_dir() else []


def _is_idle(lock: Path) -> bool:
    f = _open_regular(lock)  # no regular file: Store.lock refuses it, naming it
    if f is None:
        return False
    try:
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return True
    except OSError:
        return False


def _litter(store: Store) -> list[Path]:
    """Staging under tmp/ and half-written ``.<name>.<pid>.<r>.tmp`` record files that
    no writer holds (see :mod:`patchbake.staging`)."""
    now = time.time()
    out = [p for p in sorted((store.root / "tmp").iterdir()) if is_litter(p, now)] \
        if (store.root / "tmp").is_dir() else []
    for dirpath, dirnames, filenames in os.walk(store.root):
        if dirpath == str(store.root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            p = Path(dirpath) / name
            if name.startswith(".") and name.endswith(".tmp") and is_litter(p, now):
                out.append(p)
    return out


def _scan(data: bytes, into: set[str]) -> None:
    into.update(m.decode() for m in HEX_IN_TEXT.findall(data))


def _walk_files(root: Path) -> Iterator[Path]:
    for dirpath, _d, filenames in os.walk(root):
        for name in filenames:
            yield Path(dirpath) / name


def _record_files(store: Store, repo: Path | None) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(store.root):
        if dirpath == str(store.root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        elif dirpath == str(store.root / "bakes"):
            # tree memos are named by their tree and hold file hashes: they name nothing
            # to keep (a tree's memo goes with the tree)
            dirnames[:] = [d for d in dirnames if d != "tree-memo"]
        for name in filenames:
            yield Path(dirpath) / name
    if repo is None:
        return
    for rel in REPO_RECORDS:
        p = repo / rel
        if p.is_file():
            yield p
        elif p.is_dir():
            yield from _walk_files(p)


def referenced(store: Store, repo: Path | None) -> set[str]:
    """Every sha256 hex some record names, closed over the JSON blobs it names."""
    names: set[str] = set()
    for p in _record_files(store, repo):
        _scan(p.name.encode(), names)
        try:
            data = _read_small(p)
        except OSError:
            continue
        if data is not None:
            _scan(data, names)
    todo = list(names)
    seen: set[str] = set()
    while todo:
        hexd = todo.pop()
        if hexd in seen:
            continue
        seen.add(hexd)
        p = store.root / "blobs" / "sha256" / hexd
        try:
            data = _read_small(p, json_only=True)
        except OSError:
            continue
        if data is None:
            continue
        found: set[str] = set()
        _scan(data, found)
        names |= found
        todo.extend(found - seen)
    return names


def _old(p: Path, grace_s: float, now: float) -> bool:
    try:
        return now - p.lstat().st_mtime >= grace_s
    except FileNotFoundError:
        return False


def fsck(store: Store, *, repo: Path | None = None, trees: bool = True,
         quarantine: bool = False) -> Report:
    """Re-hash every blob (and every recorded tree), find litter, idle locks and
    unreferenced objects. With ``quarantine``, mismatching blobs move to quarantine/."""
    rep = Report()
    for p in _blob_files(store):
        rep.blobs += 1
        if not is_hex(p.name):
            rep.stray.append(p.name)
        elif hash_file(p) != p.name:
            rep.bad_blobs.append(p.name)
    if trees:
        claims = _tree_claims(store)
        tdir = store.root / "trees"
        for t in sorted(tdir.iterdir()) if tdir.is_dir() else []:
            rep.trees += 1
            want = claims.get(t.name)
            if want is not None and tree_digest(t).hex != want:
                rep.bad_trees.append(t.name)
    rep.missing = unreachable(store)
    rep.litter = [str(p.relative_to(store.root)) for p in _litter(store)]
    rep.idle_locks = [p.name for p in _locks(store) if _is_idle(p)]
    names = referenced(store, repo)
    rep.unreferenced_blobs = [p.name for p in _blob_files(store)
                              if is_hex(p.name) and p.name not in names]
    tdir = store.root / "trees"
    rep.unreferenced_trees = [t.name for t in sorted(tdir.iterdir()) if t.name not in names] \
        if tdir.is_dir() else []
    if quarantine:
        _quarantine(store, rep)
    return rep


def _quarantine(store: Store, rep: Report) -> None:
    qdir = store.root / "quarantine" / "sha256"
    qdir.mkdir(parents=True, exist_ok=True)
    for hexd in rep.bad_blobs:
        dest = qdir / f"{hexd}.{int(time.time())}"
        os.replace(store.root / "blobs" / "sha256" / hexd, dest)
        rep.quarantined.append(f"blobs/sha256/{hexd}")
    for name in rep.bad_trees:
        dest = store.root / "quarantine" / "trees" / f"{name}.{int(time.time())}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(store.root / "trees" / name, dest)
        rep.quarantined.append(f"trees/{name}")


def _size(p: Path) -> int:
    if p.is_dir() and not p.is_symlink():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
    try:
        return p.lstat().st_size
    except FileNotFoundError:
        return 0


def gc(store: Store, *, repo: Path | None = None, grace_s: float = DEFAULT_GRACE_S,
       dry_run: bool = False) -> Report:
    """Remove litter, idle lock files and unreferenced blobs and trees older than
    ``grace_s``. Never removes anything a record names (see the module docstring)."""
    rep = fsck(store, repo=repo, trees=False)
    now = time.time()
    for rel in rep.litter:  # removed only while gc holds its lock: never a live writer's
        p = store.root / rel
        size = _size(p)
        if dry_run or reclaim(p, now):
            rep.bytes_freed += size
            rep.removed.append(rel)
    # a name in blobs/sha256/ that is no digest is nothing the store wrote (its writes go
    # through tmp/): nothing can name it, whatever its age
    for name in rep.stray:
        p = store.root / "blobs" / "sha256" / name
        rep.bytes_freed += _size(p)
        rep.removed.append(f"blobs/sha256/{name}")
        if not dry_run:
            _remove(p)
    _remove_unreferenced(store, rep, grace_s, now, dry_run)
    for name in rep.idle_locks:
        if not dry_run:
            _remove_idle_lock(store.root / "locks" / name)
    return rep


def _remove_unreferenced(store: Store, rep: Report, grace_s: float, now: float,
                         dry_run: bool) -> None:
    """Blobs and trees nothing names, once older than ``grace_s``; a tree's memo goes
    with it."""
    doomed = [store.root / "blobs" / "sha256" / h for h in rep.unreferenced_blobs]
    doomed += [store.root / "trees" / t for t in rep.unreferenced_trees]
    for p in doomed:
        if not _old(p, grace_s, now):
            continue
        rep.bytes_freed += _size(p)
        rep.removed.append(str(p.relative_to(store.root)))
        if not dry_run:
            _remove(p)
        memo = memo_path(store.root, p.name)  # a removed tree's stat -> hash memo
        if p.parent.name == "trees" and memo.exists():
            rep.bytes_freed += _size(memo)
            rep.removed.append(str(memo.relative_to(store.root)))
            if not dry_run:
                _remove(memo)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        # a tree's files are read-only for nobody; directories may be 0555 after a chmod
        for d, _dirs, _files in os.walk(p):
            os.chmod(d, 0o755)
        shutil.rmtree(p)
    else:
        remove_entry(p)


def _remove_idle_lock(path: Path) -> None:
    """Unlink a lock file while holding it (Store.lock re-checks the inode it locked)."""
    f = _open_regular(path)
    if f is None:
        return
    try:
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            path.unlink()
    except FileNotFoundError:
        return


def describe(paths: Iterable[str], limit: int = 5) -> str:
    items = list(paths)
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
