"""Writing git objects (blobs, trees) directly, for the guard's re-export. Stdlib only.

The re-export diffs two small trees that hold only the touched files. Those objects are
collected in memory (ids computed here) and written as ONE pack with its index (pack
v2, idx v2, zlib stored blocks, no deltas): two files instead of a loose file and a directory
per object, which made writing, reading and removing the scratch repository the larger
part of the re-export. git then only has to run ``diff-tree`` on the two tree ids.
Git reads an object the same way from a pack or a loose file, so the diff is the same.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from pathlib import Path

# No run-time alias: the bare guard pays for every import (typing) at start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    _Node = dict[bytes, "_Node | tuple[bytes, str]"]

_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}


class Pack:
    """Objects gathered in memory, written by :meth:`write` as one pack + index."""

    def __init__(self) -> None:
        self._objects: dict[bytes, tuple[bytes, bytes]] = {}  # raw id -> (kind, data)

    def add(self, kind: bytes, data: bytes, known_id: str | None = None) -> str:
        """Add one object (once per id); return its id.

        ``known_id``: the id the caller already computed from these very bytes (the
        applier hashes every pre- and post-image it checks); not recomputed.
        """
        if known_id is not None:
            raw = bytes.fromhex(known_id)
        else:
            h = hashlib.sha1(b"%s %d\0" % (kind, len(data)))
            h.update(data)
            raw = h.digest()
        self._objects.setdefault(raw, (kind, data))
        return raw.hex()

    def add_tree(self, files: dict[bytes, tuple[str, str]]) -> str:
        """Add the trees holding ``files`` (path -> (mode, blob id)); return the root's id.

        Entries are sorted as git sorts them: by name, a directory's name compared as if
        it ended in ``/``.
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
            return self.add(b"tree", data)

        return build(root)

    def write(self, objects: Path) -> None:
        """Write ``objects/pack/pack-<sum>.{pack,idx}`` (the index last, as git does)."""
        d = os.path.join(objects, "pack")
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, "tmp_pack")
        where: dict[bytes, tuple[int, int]] = {}  # raw id -> (offset, crc32)
        with open(tmp, "wb") as f:
            # Entries go to the file one by one, the pack's sha1 updated as they go (no
            # joined copy of every object: the pack is as large as the touched files).
            head = b"PACK" + struct.pack(">II", 2, len(self._objects))
            pack_hash = hashlib.sha1(head)
            f.write(head)
            offset = len(head)
            for raw, (kind, data) in self._objects.items():
                crc, size = 0, 0
                for piece in _stored_entry(_TYPES[kind], data):
                    crc = zlib.crc32(piece, crc)
                    pack_hash.update(piece)
                    f.write(piece)
                    size += len(piece)
                where[raw] = (offset, crc)
                offset += size
            pack_sum = pack_hash.digest()
            f.write(pack_sum)
        if offset >= 1 << 31:  # 8-byte offsets are never needed for a handful of files
            raise ValueError("re-export pack over 2 GiB")
        ids = sorted(where)
        fanout = [0] * 256
        for raw in ids:
            fanout[raw[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        idx = b"".join((b"\377tOc", struct.pack(">I", 2), struct.pack(">256I", *fanout),
                        *ids, struct.pack(f">{len(ids)}I", *(where[r][1] for r in ids)),
                        struct.pack(f">{len(ids)}I", *(where[r][0] for r in ids)), pack_sum))
        idx += hashlib.sha1(idx).digest()
        name = os.path.join(d, f"pack-{pack_sum.hex()}")
        os.rename(tmp, name + ".pack")
        with open(name + ".idx", "wb") as f:
            f.write(idx)


_STORED_MAX = 0xFFFF  # the most bytes one stored deflate block holds


def _stored_entry(type_code: int, data: bytes) -> list[bytes | memoryview]:
    """One pack entry: its header, then ``data`` as a zlib stream of stored (level 0)
    deflate blocks, as pieces that point into ``data`` rather than copy it.

    This is what ``zlib.compress(data, 0)`` writes, framed by hand: a zlib header, the
    data in blocks of at most 65,535 bytes each behind its length and the length's
    complement (RFC 1951, section 3.2.4), then the Adler-32 of the data. Building it
    here saves the copy of every touched file into a compressed buffer; the re-export
    writes tens of megabytes of them for a large patch.
    """
    pieces: list[bytes | memoryview] = [_entry_header(type_code, len(data)), b"\x78\x01"]
    view = memoryview(data)
    start = 0
    while True:
        block = view[start:start + _STORED_MAX]
        start += len(block)
        final = start >= len(data)
        pieces.append(struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF))
        pieces.append(block)
        if final:
            break
    pieces.append(struct.pack(">I", zlib.adler32(data)))
    return pieces


def _entry_header(type_code: int, size: int) -> bytes:
    """A pack entry's type and size: 4 size bits in the first byte, then 7 per byte."""
    out = bytearray()
    byte = (type_code << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)
