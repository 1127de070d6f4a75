"""A tree's file hashes memoised by their stat, the way git's index memoises them.

One memo per tree the store holds, kept beside it (``bakes/tree-memo/<tree name>.json``,
removed with the tree by ``store gc``): relative path ->
(size, mtime_ns, inode, ctime_ns, sha256). A file is re-hashed unless all five match
what ``lstat`` says now, so an edit (new mtime and ctime), a replaced file (new inode) or
a chmod (new ctime) is hashed again; only what changed costs a read.

Racily clean entries (git's term): a file changed again within the same timestamp tick
as the stat that was memoised would keep its stat. So a hash is memoised only for a file
whose mtime and ctime are older, by ``RACY_NS``, than the moment its stat was taken:
any later write would carry a later timestamp. A file too young is hashed again next time
(and memoised then).

The memo only saves time: it is written atomically, and one that is missing, torn, of
another format or unreadable is ignored and rebuilt. Trees the store holds are read-only
by convention; ``store fsck`` and ``fetch --verify`` re-hash them without any memo.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..fsutil import cache_write

FORMAT = "patchbake-tree-memo/1"
# coarser than any kernel's timestamp tick (HZ=100: 10 ms) with room to spare
RACY_NS = 50_000_000

Stat = tuple[int, int, int, int]  # size, mtime_ns, inode, ctime_ns


def memo_path(store_root: Path, tree_name: str) -> Path:
    return store_root / "bakes" / "tree-memo" / f"{tree_name}.json"


def stat_key(st: os.stat_result) -> Stat:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


class TreeMemo:
    """The memo of one tree; ``lookup`` before hashing a file, ``record`` after, ``save``
    once the tree is done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: dict[bytes, tuple[Stat, str]] = {}
        self.changed = False
        self.hits = 0
        self._load()

    @classmethod
    def for_tree(cls, store_root: Path, root: Path) -> TreeMemo | None:
        """The memo of a tree the store holds (``trees/<name>``: ``bakes/tree-memo/
        <name>.json``, removed with the tree by ``store gc``); None for a tree elsewhere,
        which is then hashed in full."""
        path = Path(root).resolve()
        if path.parent != (store_root / "trees").resolve():
            return None
        return cls(memo_path(store_root, path.name))

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_bytes())
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                return
            files = {os.fsencode(k): ((int(v[0]), int(v[1]), int(v[2]), int(v[3])), str(v[4]))
                     for k, v in doc["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return  # absent or damaged: every file is hashed and the memo rebuilt
        self.files = files

    def lookup(self, rel: bytes, st: os.stat_result) -> str | None:
        """The memoised sha256 of ``rel`` if all of its stat is unchanged."""
        got = self.files.get(rel)
        if got is None or got[0] != stat_key(st):
            return None
        self.hits += 1
        return got[1]

    def record(self, rel: bytes, st: os.stat_result, sha256: str, stat_after_ns: int) -> None:
        """Memoise ``sha256`` for ``rel``, whose stat ``st`` was taken after the clock read
        ``stat_after_ns`` (``time.time_ns()``), unless the file is too young (racy)."""
        if max(st.st_mtime_ns, st.st_ctime_ns) >= stat_after_ns - RACY_NS:
            if self.files.pop(rel, None) is not None:
                self.changed = True
            return
        entry = (stat_key(st), sha256)
        if self.files.get(rel) != entry:
            self.files[rel] = entry
            self.changed = True

    def confirm(self, root: Path) -> set[bytes]:
        """The memoised files of the tree at ``root`` whose stat is unchanged now (one
        lstat each, no walk): what ``seed_links`` may take after linking them."""
        base = os.fsencode(root)
        ok = set()
        for rel, (st, _) in self.files.items():
            try:
                if stat_key(os.lstat(os.path.join(base, rel))) == st:
                    ok.add(rel)
            except OSError:
                continue
        return ok

    def seed_links(self, source: TreeMemo, confirmed: set[bytes], root: Path,
                   stat_after_ns: int) -> int:
        """Memoise the files of the tree at ``root`` that were just hard-linked from the
        tree of memo ``source``, whose ``confirmed`` entries (``source.confirm``) matched
        their files right before the links were made; ``stat_after_ns`` is a clock
        reading taken after that check. A link with the confirmed entry's inode, size and
        mtime is that same file, and its mtime being old means no write came since (a
        write sets it to the current time). Making the link gave the inode a new ctime:
        both memos take it, so the source tree stays memoised too. Returns how many files
        were seeded."""
        base = os.fsencode(root)
        n = 0
        for rel in confirmed:
            (size, mtime, ino, _), sha = source.files[rel]
            try:
                st = os.lstat(os.path.join(base, rel))
            except OSError:
                continue  # deleted by the patch
            if (st.st_ino, st.st_size, st.st_mtime_ns) != (ino, size, mtime) or \
                    not stat.S_ISREG(st.st_mode) or st.st_mtime_ns >= stat_after_ns - RACY_NS:
                continue
            self.files[rel] = source.files[rel] = (stat_key(st), sha)
            n += 1
        self.changed = source.changed = self.changed or source.changed or n > 0
        return n

    def keep_only(self, present: set[bytes]) -> None:
        """Forget files the tree no longer has."""
        gone = self.files.keys() - present
        for rel in gone:
            del self.files[rel]
        self.changed = self.changed or bool(gone)

    def save(self) -> None:
        if not self.changed:
            return
        doc: dict[str, Any] = {
            "format": FORMAT,
            "files": {os.fsdecode(k): [*st, sha] for k, (st, sha) in sorted(self.files.items())}}
        # a store that cannot take it (full, read-only) hashes the tree again next time
        if cache_write(self.path, json.dumps(doc, separators=(",", ":")).encode()) is None:
            self.changed = False
