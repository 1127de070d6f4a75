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
from typing import TypeAlias

from .apply import Edits

_Node: TypeAlias = dict[bytes, "_Node | tuple[bytes, str]"]

_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
_OFS_DELTA = 6
_COPY_MAX = 0x10000  # the most bytes one copy instruction of a delta takes (as git writes)


class Pack:
    """Objects gathered in memory, written by :meth:`write` as one pack + index."""

    def __init__(self) -> None:
        # raw id -> (kind, data, raw id of the delta base or None); a delta's data is
        # the delta, its base is added before it
        self._objects: dict[bytes, tuple[bytes, bytes, bytes | None]] = {}

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
        self._objects.setdefault(raw, (kind, data, None))
        return raw.hex()

    def add_delta(self, base_id: str, delta: bytes, result_id: str) -> str:
        """Add the object ``result_id`` as ``delta`` of the object ``base_id``, which was
        added before (git applies the delta when it reads the object); return its id.

        ``result_id`` is the id the caller computed from the very bytes the delta makes
        (the applier hashes every post-image); a delta of a file is a few hundred bytes
        where the file would be tens of thousands.
        """
        base = bytes.fromhex(base_id)
        if base not in self._objects:
            raise ValueError(f"delta base {base_id} is not in the pack")
        raw = bytes.fromhex(result_id)
        self._objects.setdefault(raw, (b"blob", delta, base))
        return result_id

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
        """Write ``objects/pack/pack-<sum>.{pack,idx}`` (the index last, as git does;
        each under a temporary name first)."""
        d = os.path.join(objects, "pack")
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, "tmp_pack")
        where: dict[bytes, tuple[int, int]] = {}  # raw id -> (offset, crc32)
        with open(tmp, "wb") as f:
            # Entries go to the file one by one, the pack's sha1 updated as they go (no
            # joined copy of the whole pack: it is as large as the touched files).
            head = b"PACK" + struct.pack(">II", 2, len(self._objects))
            pack_hash = hashlib.sha1(head)
            f.write(head)
            offset = len(head)
            for raw, (kind, data, base) in self._objects.items():
                head = _entry_header(_TYPES[kind], len(data)) if base is None else \
                    _entry_header(_OFS_DELTA, len(data)) + _ofs(offset - where[base][0])
                # one copy of the entry costs less than a call per block for each of
                # the checksum, the pack's hash and the write
                entry = b"".join(_stored_entry(head, data))
                where[raw] = (offset, zlib.crc32(entry))
                pack_hash.update(entry)
                f.write(entry)
                offset += len(entry)
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
        # The index appears whole (a git that is already running may look for packs
        # while this one is written: the re-export adds a pack per batch).
        with open(tmp + "_idx", "wb") as f:  # not "*.idx" until whole
            f.write(idx)
        os.rename(tmp + "_idx", name + ".idx")


_STORED_MAX = 0xFFFF  # the most bytes one stored deflate block holds


def _stored_entry(head: bytes, data: bytes) -> list[bytes | memoryview]:
    """One pack entry: its ``head``, then ``data`` as a zlib stream of stored (level 0)
    deflate blocks, as pieces that point into ``data`` rather than copy it.

    This is what ``zlib.compress(data, 0)`` writes, framed by hand: a zlib header, the
    data in blocks of at most 65,535 bytes each behind its length and the length's
    complement (RFC 1951, section 3.2.4), then the Adler-32 of the data. Building it
    here saves the copy of every touched file into a compressed buffer; the re-export
    writes tens of megabytes of them for a large patch.
    """
    pieces: list[bytes | memoryview] = [head, b"\x78\x01"]
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


def _ofs(distance: int) -> bytes:
    """An OFS_DELTA entry's distance back to its base: 7 bits a byte, most significant
    first, each continued byte's value one less (git's encoding)."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.append(0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(reversed(out))


def _size(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


_INSERT_MAX = 127  # the most bytes one insert instruction of a delta carries
_INSERT_OP = [bytes((n,)) for n in range(_INSERT_MAX + 1)]
_COPY = struct.Struct("<BIH")  # copy: every offset byte and two size bytes given


def delta_of(base_size: int, edits: Edits, size: int) -> bytes:
    """A git delta that makes, from a base of ``base_size`` bytes, the ``size`` bytes that
    ``edits`` describe: copy instructions for its ranges, insert instructions for its
    bytes (the format :func:`gitbinary.apply_delta` reads).

    A copy names all four offset bytes and two size bytes (a flag per byte says it is
    present, zero or not); one of 0x10000 bytes names no size byte, which means 0x10000.
    """
    out = [_size(base_size), _size(size)]
    for e in edits:
        if isinstance(e, bytes):
            for i in range(0, len(e), _INSERT_MAX):
                part = e[i:i + _INSERT_MAX]
                out += (_INSERT_OP[len(part)], part)
            continue
        start, end = e
        while start < end:
            n = min(end - start, _COPY_MAX)
            out.append(_COPY.pack(0xBF, start, n) if n < _COPY_MAX
                       else _COPY.pack(0x8F, start, 0)[:5])
            start += n
    return b"".join(out)
