"""Performance paths that must not change results: hard-linked builds, the re-export pack."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.patchset.diffparse import parse_patch
from patchbake.patchset.filelist import parse_filelist
from patchbake.patchset.gitobjects import Pack, _entry_header
from patchbake.patchset.strict import build_tree
from patchbake.sources.digest import tree_digest

PATCH = parse_patch(fx.patch_bytes(), "canonical.patch")
FILES = parse_filelist(fx.files_bytes())


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_linked_build_equals_copied_build_and_leaves_pristine_alone(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    shutil.copytree(fx.PRISTINE, pristine)
    odd = pristine / "pkg" / "odd-mode.txt"  # not a normalised mode: must be copied
    odd.write_bytes(b"odd\n")
    odd.chmod(0o600)
    before = _snapshot(pristine)
    copied = build_tree(PATCH, pristine, tmp_path / "copied", filelist=FILES)
    linked = build_tree(PATCH, pristine, tmp_path / "linked", filelist=FILES, link=True)
    assert _snapshot(tmp_path / "linked") == _snapshot(tmp_path / "copied")
    assert tree_digest(tmp_path / "linked") == tree_digest(tmp_path / "copied")
    assert linked.files == copied.files and linked.deleted == copied.deleted
    assert _snapshot(pristine) == before  # applying never wrote through a link
    for p, src in ((p, pristine / p) for p in linked.files):
        if src.exists():  # a touched file is a new inode, never the pristine one
            assert not os.path.samefile(tmp_path / "linked" / p, src)
    untouched = [p for p in before if p not in linked.files and p not in linked.deleted
                 and p != "pkg/odd-mode.txt"]
    assert untouched and all(os.path.samefile(tmp_path / "linked" / p, pristine / p)
                             for p in untouched)
    assert not os.path.samefile(tmp_path / "linked" / "pkg/odd-mode.txt", odd)
    assert (tmp_path / "linked" / "pkg/odd-mode.txt").stat().st_mode & 0o777 == 0o644


def _read_pack(pack: bytes) -> dict[str, tuple[int, bytes]]:
    assert pack[:4] == b"PACK" and struct.unpack(">II", pack[4:12])[0] == 2
    assert hashlib.sha1(pack[:-20]).digest() == pack[-20:]
    count = struct.unpack(">I", pack[8:12])[0]
    out: dict[str, tuple[int, bytes]] = {}
    pos = 12
    for _ in range(count):
        byte = pack[pos]
        kind, size, shift = (byte >> 4) & 7, byte & 0x0F, 4
        pos += 1
        while byte & 0x80:
            byte = pack[pos]
            size |= (byte & 0x7F) << shift
            shift += 7
            pos += 1
        d = zlib.decompressobj()
        data = d.decompress(pack[pos:])
        assert len(data) == size
        pos = len(pack) - len(d.unused_data)
        name = {2: b"tree", 3: b"blob"}[kind]
        oid = hashlib.sha1(b"%s %d\0" % (name, size) + data).hexdigest()
        out[oid] = (kind, data)
    assert pos == len(pack) - 20
    return out


def test_pack_holds_every_object_once_with_a_matching_index(tmp_path: Path) -> None:
    p = Pack()
    sizes = (0, 1, 15, 16, 17, 2047, 70000)
    ids = [p.add(b"blob", bytes([65 + i % 26]) * n) for i, n in enumerate(sizes)]
    assert p.add(b"blob", b"") == ids[0] == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    root = p.add_tree({b"a/b.py": ("100644", ids[1]), b"a.py": ("100755", ids[2]),
                       b"a-b/c": ("100644", ids[3])})
    p.write(tmp_path)
    (packf,) = (tmp_path / "pack").glob("*.pack")
    (idxf,) = (tmp_path / "pack").glob("*.idx")
    objs = _read_pack(packf.read_bytes())
    assert set(ids) <= set(objs) and root in objs and len(objs) == len(sizes) + 3
    tree = objs[root][1]  # git order: "a-b/" < "a.py" < "a/"
    assert tree.index(b"a-b\0") < tree.index(b"a.py\0") < tree.index(b" a\0")
    idx = idxf.read_bytes()
    assert idx[:8] == b"\377tOc\0\0\0\2"
    assert hashlib.sha1(idx[:-20]).digest() == idx[-20:]
    assert idx[-40:-20] == packf.read_bytes()[-20:] and packf.stem == "pack-" + idx[-40:-20].hex()
    n = struct.unpack(">I", idx[8 + 255 * 4:8 + 256 * 4])[0]
    assert n == len(objs)
    names = [idx[1032 + 20 * i:1052 + 20 * i].hex() for i in range(n)]
    assert names == sorted(objs)


def test_entry_header_varint() -> None:
    assert _entry_header(3, 0) == b"\x30"
    assert _entry_header(3, 15) == b"\x3f"
    assert _entry_header(3, 16) == b"\xb0\x01"
    assert _entry_header(2, 70000) == bytes([0x80 | 0x20 | (70000 & 15), 0x80 | ((70000 >> 4) & 0x7F), 70000 >> 11])


def test_outcome_ids_are_the_blob_ids_of_their_contents() -> None:
    from patchbake.patchset.gitbinary import blob_id
    from patchbake.patchset.strict import apply_in_memory

    outcomes = apply_in_memory(PATCH, fx.PRISTINE, filelist=FILES)
    seen = 0
    for o in outcomes.values():
        for data, oid in ((o.pre, o.pre_id), (o.post, o.post_id)):
            if oid is not None:
                assert data is not None and blob_id(data) == oid
                seen += 1
    assert seen >= len(outcomes)  # every section carried at least one reusable id
