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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..digest import Digest
from ..errors import UnsafeArchiveError

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


def _scan(root: Path, skip_top: frozenset[bytes]) -> list[tuple[bytes, bytes, int]]:
    """(relative path, absolute path, st_mode) of every non-directory, unsorted."""
    base = os.fsencode(root)
    found: list[tuple[bytes, bytes, int]] = []
    stack: list[bytes] = [b""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(base, rel) if rel else base) as it:
            for e in it:
                if not rel and e.name in skip_top:
                    continue
                relpath = rel + b"/" + e.name if rel else e.name
                m = e.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(m):
                    stack.append(relpath)
                elif stat.S_ISREG(m) or stat.S_ISLNK(m):
                    found.append((relpath, e.path, m))
                else:
                    raise UnsafeArchiveError(
                        f"{os.fsdecode(relpath)}: is a {stat.filemode(m)[0]!r}-type entry, "
                        "not a file, directory or symlink; a pinned tree cannot contain it")
    return found


def _entry(item: tuple[bytes, bytes, int]) -> Entry:
    relpath, full, m = item
    if stat.S_ISLNK(m):
        return Entry(relpath, MODE_LINK, hashlib.sha256(os.readlink(full)).hexdigest())
    return Entry(relpath, MODE_EXEC if m & 0o111 else MODE_FILE, _hash_file(full))


def tree_entries(root: Path, *, on_item: Callable[[int], None] | None = None,
                 skip_top: frozenset[bytes] = frozenset()) -> list[Entry]:
    """Every file and symlink under ``root``, sorted bytewise by relative path.

    Directories count only through what they hold (as in git): an empty directory does
    not change the digest. Devices, fifos and sockets are refused. ``skip_top`` names
    top-level entries to leave out (a source directory's ``.git``).
    """
    if not root.is_dir():
        raise UnsafeArchiveError(f"{root}: not a directory; cannot compute a tree digest")
    items = _scan(root, skip_top)
    items.sort(key=lambda t: t[0])

    # hashlib releases the GIL on large buffers and file reads block: two threads
    # overlap I/O with hashing; map() keeps the sorted order.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        out = []
        for e in pool.map(_entry, items, chunksize=64):
            out.append(e)
            if on_item:
                on_item(1)
    return out


def digest_entries(entries: list[Entry]) -> Digest:
    h = hashlib.sha256(FORMAT)
    for e in entries:
        h.update(b"%s %s %s\0" % (e.mode.encode(), e.sha256.encode(), e.path))
    return Digest.from_hex(h.hexdigest())


def tree_digest(root: Path) -> Digest:
    """The digest of the sorted (path, mode, content hash) list of ``root``."""
    return digest_entries(tree_entries(Path(root)))
