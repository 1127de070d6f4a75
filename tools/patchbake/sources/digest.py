"""Tree digest: one sha256 over a tree's paths, file modes and contents.

It ignores mtimes, owners, directory entries and the archive format, so the same content
packed twice (tar.gz, tar, zip, git archive, a plain directory) gives the same digest,
and one changed byte, executable bit or symlink target gives another. The exact byte
format is specified in docs/sources.md; change it only together with ``FORMAT``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..digest import Digest
from ..errors import UnsafeArchiveError
from .treememo import TreeMemo

FORMAT = b"patchbake-tree-digest v1\n"
MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
_READ = 1 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    path: bytes  # relative, '/'-separated, no leading './'
    mode: str  # MODE_FILE, MODE_EXEC or MODE_LINK
    sha256: str  # content hash; for a symlink, the hash of its target bytes


def _hash_file(path: bytes) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        data = f.read(_READ)
        while data:
            h.update(data)
            data = f.read(_READ)
    return h.hexdigest()


Item = tuple[bytes, bytes, os.stat_result]  # relative path, absolute path, lstat


def _scan(root: Path, skip_top: frozenset[bytes]) -> list[Item]:
    """(relative path, absolute path, lstat) of every non-directory, unsorted."""
    base = os.fsencode(root)
    found: list[Item] = []
    stack: list[bytes] = [b""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(base, rel) if rel else base) as it:
            for e in it:
                if not rel and e.name in skip_top:
                    continue
                relpath = rel + b"/" + e.name if rel else e.name
                st = e.stat(follow_symlinks=False)
                m = st.st_mode
                if stat.S_ISDIR(m):
                    stack.append(relpath)
                elif stat.S_ISREG(m) or stat.S_ISLNK(m):
                    found.append((relpath, e.path, st))
                else:
                    raise UnsafeArchiveError(
                        f"{os.fsdecode(relpath)}: is a {stat.filemode(m)[0]!r}-type entry, "
                        "not a file, directory or symlink; a pinned tree cannot contain it")
    return found


def _entry(item: Item) -> Entry:
    relpath, full, st = item
    if stat.S_ISLNK(st.st_mode):
        return Entry(relpath, MODE_LINK, hashlib.sha256(os.readlink(full)).hexdigest())
    return Entry(relpath, _mode(st), _hash_file(full))


def _mode(st: os.stat_result) -> str:
    return MODE_EXEC if st.st_mode & 0o111 else MODE_FILE


def tree_entries(root: Path, *, on_item: Callable[[int], None] | None = None,
                 skip_top: frozenset[bytes] = frozenset(),
                 memo: TreeMemo | None = None) -> list[Entry]:
    """Every file and symlink under ``root``, sorted bytewise by relative path.

    Directories count only through what they hold (as in git): an empty directory does
    not change the digest. Devices, fifos and sockets are refused. ``skip_top`` names
    top-level entries to leave out (a source directory's ``.git``). With ``memo`` (see
    ``sources.treememo``) a file whose stat is unchanged is not read again, and the memo
    is brought up to date and saved.
    """
    if not root.is_dir():
        raise UnsafeArchiveError(f"{root}: not a directory; cannot compute a tree digest")
    stat_after = time.time_ns()
    items = _scan(root, skip_top)
    items.sort(key=lambda t: t[0])
    known: dict[bytes, Entry] = {}
    if memo is not None:
        for rel, _, st in items:
            sha = memo.lookup(rel, st) if stat.S_ISREG(st.st_mode) else None
            if sha is not None:
                known[rel] = Entry(rel, _mode(st), sha)
    todo = [i for i in items if i[0] not in known]

    # hashlib releases the GIL on large buffers and file reads block: two threads
    # overlap I/O with hashing; map() keeps the sorted order.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for item, e in zip(todo, pool.map(_entry, todo, chunksize=64), strict=True):
            known[e.path] = e
            if memo is not None and e.mode != MODE_LINK:
                memo.record(e.path, item[2], e.sha256, stat_after)
            if on_item:
                on_item(1)
    if on_item and len(known) > len(todo):
        on_item(len(known) - len(todo))
    if memo is not None:
        memo.keep_only(set(known))
        memo.save()
    return [known[rel] for rel, _, _ in items]


def digest_entries(entries: list[Entry]) -> Digest:
    h = hashlib.sha256(FORMAT)
    for e in entries:
        h.update(b"%s %s %s\0" % (e.mode.encode(), e.sha256.encode(), e.path))
    return Digest.from_hex(h.hexdigest())


def tree_digest(root: Path, memo: TreeMemo | None = None) -> Digest:
    """The digest of the sorted (path, mode, content hash) list of ``root``."""
    return digest_entries(tree_entries(Path(root), memo=memo))
