"""Tree digest: stable over archive format, order and mtimes; sensitive to bytes, modes
and link targets; the byte format is pinned (docs/sources.md)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Literal

import pytest
from patchbake.digest import Digest
from patchbake.errors import UnsafeArchiveError
from patchbake.sources import tree_digest
from patchbake.sources.digest import tree_entries
from patchbake.sources.extract import extract

FILES = {"pkg/setup.py": (b"print('hi')\n", 0o644), "pkg/run.sh": (b"#!/bin/sh\n", 0o755),
         "pkg/a/b.py": (b"x = 1\n", 0o644), "pkg/a.b": (b"dot\n", 0o600)}


def make_tar(path: Path, files: dict[str, tuple[bytes, int]], *, mtime: float = 0,
             reverse: bool = False, fmt: int = tarfile.PAX_FORMAT, mode: Literal["w:gz", "w"] = "w:gz",
             links: dict[str, str] | None = None) -> Path:
    names = sorted(files, reverse=reverse)
    with tarfile.open(path, mode, format=fmt) as tf:
        for name in names:
            data, m = files[name]
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime, ti.uid, ti.uname = len(data), m, mtime, 1234, "x"
            tf.addfile(ti, io.BytesIO(data))
        for name, target in (links or {}).items():
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, target, mtime
            tf.addfile(ti)
    return path


def tree_from(tmp: Path, archive: Path, name: str) -> Path:
    root, _ = extract(archive, tmp / name, strip=None)
    return root


def test_same_content_different_packaging_same_digest(tmp_path: Path) -> None:
    a = tree_from(tmp_path, make_tar(tmp_path / "a.tgz", FILES, links={"pkg/l": "a/b.py"}), "a")
    b = tree_from(tmp_path, make_tar(tmp_path / "b.tar", FILES, mtime=time.time(),
                                     reverse=True, fmt=tarfile.GNU_FORMAT, mode="w",
                                     links={"pkg/l": "a/b.py"}), "b")
    z = tmp_path / "c.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for name, (data, m) in sorted(FILES.items()):
            zi = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | m) << 16
            zf.writestr(zi, data)
        zi = zipfile.ZipInfo("pkg/l")
        zi.external_attr = 0o120777 << 16
        zf.writestr(zi, b"a/b.py")
    c = tree_from(tmp_path, z, "c")
    os.utime(b / "setup.py", (1, 1))
    assert tree_digest(a) == tree_digest(b) == tree_digest(c)


@pytest.mark.parametrize("change", ["byte", "mode", "link", "rename", "add"])
def test_one_change_changes_digest(tmp_path: Path, change: str) -> None:
    root = tree_from(tmp_path, make_tar(tmp_path / "a.tgz", FILES, links={"pkg/l": "a/b.py"}), "a")
    before = tree_digest(root)
    if change == "byte":
        (root / "a" / "b.py").write_bytes(b"x = 2\n")
    elif change == "mode":
        os.chmod(root / "setup.py", 0o755)
    elif change == "link":
        os.unlink(root / "l")
        os.symlink("a.b", root / "l")
    elif change == "rename":
        os.rename(root / "a.b", root / "a.c")
    else:
        (root / "new").write_bytes(b"")
    assert tree_digest(root) != before


def test_empty_directories_and_group_bits_do_not_count(tmp_path: Path) -> None:
    root = tree_from(tmp_path, make_tar(tmp_path / "a.tgz", FILES), "a")
    before = tree_digest(root)
    (root / "empty").mkdir()
    os.chmod(root / "setup.py", 0o664)
    assert tree_digest(root) == before


def test_format_is_pinned(tmp_path: Path) -> None:
    """The documented format, computed by hand: change docs/sources.md with this test."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"hi\n")
    (tmp_path / "run").write_bytes(b"")
    os.chmod(tmp_path / "run", 0o755)
    os.symlink("d/x", tmp_path / "ln")

    def h(b: bytes) -> str:
        return hashlib.sha256(b).hexdigest()

    body = (b"patchbake-tree-digest v1\n"
            + b"100644 " + h(b"hi\n").encode() + b" d/x\0"
            + b"120000 " + h(b"d/x").encode() + b" ln\0"
            + b"100755 " + h(b"").encode() + b" run\0")
    assert tree_digest(tmp_path) == Digest.from_hex(h(body))
    assert [e.path for e in tree_entries(tmp_path)] == [b"d/x", b"ln", b"run"]


def test_bytewise_order(tmp_path: Path) -> None:
    for name in ("a.b", "a/b", "a-b", "B", "a0"):
        p = tmp_path / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(name.encode())
    assert [e.path for e in tree_entries(tmp_path)] == sorted(
        [b"a.b", b"a/b", b"a-b", b"B", b"a0"])


def test_fifo_in_tree_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UnsafeArchiveError, match="pipe") as exc:
        tree_digest(tmp_path)
    assert exc.value.exit_code == 12


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UnsafeArchiveError, match="not a directory"):
        tree_digest(tmp_path / "missing")


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test extra
    given = None  # type: ignore[assignment]

if given is not None:
    _part = st.text(alphabet="ab.-_0", min_size=1, max_size=3).filter(
        lambda s: s not in (".", ".."))
    _paths = st.lists(_part, min_size=1, max_size=3).map("/".join)
    _trees = st.dictionaries(_paths, st.tuples(st.binary(max_size=64),
                                               st.sampled_from([0o644, 0o755, 0o600, 0o4711])),
                             min_size=1, max_size=8)

    @settings(max_examples=25, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(tree=_trees, reverse=st.booleans())
    def test_archive_round_trip_matches_directory(tmp_path_factory: pytest.TempPathFactory,
                                                  tree: dict[str, tuple[bytes, int]],
                                                  reverse: bool) -> None:
        # drop paths that are a prefix directory of another (a file cannot also be a dir)
        names = sorted(tree)
        tree = {n: tree[n] for n in names if not any(o.startswith(n + "/") for o in names)}
        tmp = tmp_path_factory.mktemp("prop")
        direct = tmp / "direct"
        for name, (data, mode) in tree.items():
            p = direct / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            os.chmod(p, 0o755 if mode & 0o111 else 0o644)
        files = {f"top/{n}": v for n, v in tree.items()}
        root = tree_from(tmp, make_tar(tmp / "a.tar", files, reverse=reverse, mode="w"), "x")
        assert tree_digest(root) == tree_digest(direct)
