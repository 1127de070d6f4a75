"""The tree memo (stat -> sha256, like git's index): a file is read again only when its
stat changed, a damaged memo is ignored and rebuilt, a racy file is never memoised, and
hard links made from a confirmed tree are memoised without being read."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from patchbake.sources import digest as digestmod
from patchbake.sources.digest import digest_entries, tree_entries
from patchbake.sources.treememo import RACY_NS, TreeMemo
from patchbake.store import Store
from patchbake.storecheck import gc


def _tree(root: Path, n: int = 5) -> None:
    for i in range(n):
        p = root / "pkg" / f"m{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x = %d\n" % i)
    (root / "pkg" / "link").symlink_to("m0.py")
    time.sleep(2 * RACY_NS / 1e9)  # old enough to be memoised (see RACY_NS)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    real = digestmod._hash_file

    def counted(path: bytes) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(digestmod, "_hash_file", counted)
    return seen


def _memo(tmp_path: Path, root: Path) -> TreeMemo:
    return TreeMemo(tmp_path / "memos" / f"{root.name}.json")


def test_only_trees_the_store_holds_have_a_memo(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store")
    inside = store.root / "trees" / ("a" * 64)
    memo = TreeMemo.for_tree(store.root, inside)
    assert memo is not None and memo.path == store.root / "bakes" / "tree-memo" / \
        f"{'a' * 64}.json"
    assert TreeMemo.for_tree(store.root, tmp_path / "elsewhere") is None


def test_gc_removes_a_tree_with_its_memo(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store")
    tree = store.root / "trees" / ("b" * 64)
    _tree(tree)
    memo = TreeMemo.for_tree(store.root, tree)
    assert memo is not None
    tree_entries(tree, memo=memo)
    assert memo.path.is_file()
    rep = gc(store, repo=tmp_path, grace_s=0)
    assert f"trees/{'b' * 64}" in rep.removed and not tree.exists()
    assert f"bakes/tree-memo/{'b' * 64}.json" in rep.removed and not memo.path.exists()


def test_unchanged_tree_reads_no_file(tmp_path: Path, reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    plain = tree_entries(root)
    assert len(reads) == 5
    first = tree_entries(root, memo=_memo(tmp_path, root))
    assert first == plain and len(reads) == 10
    again = tree_entries(root, memo=_memo(tmp_path, root))
    assert again == plain and len(reads) == 10  # nothing read


def test_edit_rehashes_only_the_edited_file(tmp_path: Path, reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    tree_entries(root, memo=_memo(tmp_path, root))
    (root / "pkg" / "m3.py").write_bytes(b"x = 33\n")
    reads.clear()
    got = tree_entries(root, memo=_memo(tmp_path, root))
    assert reads == [os.fsencode(root / "pkg" / "m3.py")]
    assert digest_entries(got) == digest_entries(tree_entries(root))


def test_same_size_edit_with_mtime_restored_is_rehashed(tmp_path: Path,
                                                         reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    tree_entries(root, memo=_memo(tmp_path, root))
    p = root / "pkg" / "m1.py"
    st = p.stat()
    p.write_bytes(b"x = 9\n")  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime moves on
    reads.clear()
    got = {e.path: e.sha256 for e in tree_entries(root, memo=_memo(tmp_path, root))}
    assert reads == [os.fsencode(p)]
    assert got[b"pkg/m1.py"] == {e.path: e.sha256 for e in tree_entries(root)}[b"pkg/m1.py"]


def test_replaced_file_is_rehashed(tmp_path: Path, reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    tree_entries(root, memo=_memo(tmp_path, root))
    p = root / "pkg" / "m2.py"
    st = p.stat()
    new = root / "pkg" / "new"
    new.write_bytes(b"y = 2\n")  # same size, other bytes, other inode
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, p)
    reads.clear()
    tree_entries(root, memo=_memo(tmp_path, root))
    assert reads == [os.fsencode(p)]


@pytest.mark.parametrize("damage", [b"", b"{torn", b"[]", b'{"format": "other/1"}',
                                    b'{"format": "patchbake-tree-memo/1", "files": 1}',
                                    b'{"format": "patchbake-tree-memo/1", "files": {"a": [1]}}'])
def test_damaged_memo_is_ignored_and_rebuilt(tmp_path: Path, reads: list[bytes],
                                             damage: bytes) -> None:
    root = tmp_path / "t"
    _tree(root)
    memo = _memo(tmp_path, root)
    tree_entries(root, memo=memo)
    memo.path.write_bytes(damage)
    reads.clear()
    got = tree_entries(root, memo=_memo(tmp_path, root))
    assert len(reads) == 5 and got == tree_entries(root)
    assert json.loads(memo.path.read_bytes())["format"] == "patchbake-tree-memo/1"


def test_entry_with_another_stat_is_not_trusted(tmp_path: Path, reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    memo = _memo(tmp_path, root)
    tree_entries(root, memo=memo)
    doc = json.loads(memo.path.read_bytes())
    for v in doc["files"].values():
        v[2] += 1  # another inode: the memo's hash (here also wrong) must not be used
        v[4] = "0" * 64
    memo.path.write_bytes(json.dumps(doc).encode())
    reads.clear()
    assert tree_entries(root, memo=_memo(tmp_path, root)) == tree_entries(root)
    assert len(reads) == 10


def test_young_file_is_not_memoised(tmp_path: Path, reads: list[bytes]) -> None:
    root = tmp_path / "t"
    _tree(root)
    tree_entries(root, memo=_memo(tmp_path, root))
    (root / "pkg" / "m4.py").write_bytes(b"x = 44\n")  # written now: racy
    tree_entries(root, memo=_memo(tmp_path, root))
    assert b"pkg/m4.py" not in _memo(tmp_path, root).files
    reads.clear()
    tree_entries(root, memo=_memo(tmp_path, root))  # read again, memoised once old enough
    assert reads == [os.fsencode(root / "pkg" / "m4.py")]


def test_memo_is_written_atomically_and_an_unwritable_store_is_no_error(tmp_path: Path
                                                                       ) -> None:
    root = tmp_path / "t"
    _tree(root)
    memo = _memo(tmp_path, root)
    tree_entries(root, memo=memo)
    assert [p.name for p in memo.path.parent.iterdir()] == [memo.path.name]  # no temp left
    (tmp_path / "not-a-dir").write_bytes(b"")
    blocked = TreeMemo(tmp_path / "not-a-dir" / "memo.json")  # cannot be written (ENOTDIR)
    assert tree_entries(root, memo=blocked) == tree_entries(root)
    assert blocked.changed  # nothing saved: the next run hashes again


def test_confirm_leaves_out_changed_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(root)
    memo = _memo(tmp_path, root)
    tree_entries(root, memo=memo)
    os.chmod(root / "pkg" / "m1.py", 0o600)  # ctime moves
    (root / "pkg" / "m2.py").unlink()
    assert memo.confirm(root) == {b"pkg/m0.py", b"pkg/m3.py", b"pkg/m4.py"}


def test_hard_links_from_a_confirmed_tree_are_seeded(tmp_path: Path,
                                                     reads: list[bytes]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    source = _memo(tmp_path, src)
    tree_entries(src, memo=source)
    confirmed, confirmed_at = source.confirm(src), time.time_ns()  # right before linking
    assert len(confirmed) == 5
    for p in sorted(src.rglob("*.py")):
        (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        os.link(p, dst / p.relative_to(src))
    (dst / "pkg" / "m0.py").unlink()
    (dst / "pkg" / "m0.py").write_bytes(b"patched\n")  # a file the patch wrote
    target = _memo(tmp_path, dst)
    assert target.seed_links(source, confirmed, dst, confirmed_at) == 4
    source.save()
    reads.clear()
    got = tree_entries(dst, memo=target)
    assert reads == [os.fsencode(dst / "pkg" / "m0.py")]
    assert got == tree_entries(dst)
    reads.clear()
    # linking moved the ctimes: still memoised; the patched file's unlink moved its
    # source's ctime again, so that one is read
    tree_entries(src, memo=_memo(tmp_path, src))
    assert reads == [os.fsencode(src / "pkg" / "m0.py")]
