"""Writing git objects (blobs, trees) directly, for the guard's re-export. Stdlib only.

The re-export diffs two small trees that hold only the touched files. Writing those
objects as loose objects from Python (ids computed here, zlib level 0, no packing) is
several times faster than ``git fast-import``, which compresses and checksums a pack:
git then only has to run ``diff-tree`` on the two tree ids.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import Union

_Node = dict[bytes, Union["_Node", tuple[bytes, str]]]


def write_object(objects: Path, kind: bytes, data: bytes) -> str:
    """Store one loose object under ``objects``; return its id."""
    header = b"%s %d\0" % (kind, len(data))
    h = hashlib.sha1(header)
    h.update(data)
    oid = h.hexdigest()
    d = os.path.join(objects, oid[:2])
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, oid[2:])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(zlib.compress(header + data, 0))
    return oid


def write_tree(objects: Path, files: dict[bytes, tuple[str, str]]) -> str:
    """Write the trees holding ``files`` (path -> (mode, blob id)); return the root tree id.

    Entries are sorted as git sorts them: by name, a directory's name compared as if it
    ended in ``/``.
    """
    root: _Node = {}
    for path, (mode, oid) in files.items():
        parts = path.split(b"/")
        node = root
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            assert isinstance(child, dict)
            node = child
        node[parts[-1]] = (mode.encode(), oid)

    def build(node: _Node) -> str:
        entries: list[tuple[bytes, bytes, bytes, str]] = []
        for name, v in node.items():
            if isinstance(v, dict):
                entries.append((name + b"/", b"40000", name, build(v)))
            else:
                entries.append((name, v[0], name, v[1]))
        entries.sort(key=lambda e: e[0])
        data = b"".join(b"%s %s\0%s" % (mode, name, bytes.fromhex(oid))
                        for _, mode, name, oid in entries)
        return write_object(objects, b"tree", data)

    return build(root)
