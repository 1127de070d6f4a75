"""Safe extraction: every unsafe member kind is refused with its name and reason, and
nothing is left behind; modes are normalised and set-id bits dropped."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from patchbake.errors import FetchError, UnsafeArchiveError
from patchbake.sources.extract import copy_tree, extract


def member(name: str, *, data: bytes = b"", mode: int = 0o644, type: bytes = tarfile.REGTYPE,
           link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.linkname = type, mode, link
    ti.size = len(data) if type == tarfile.REGTYPE else 0
    return ti, data


def tar(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return path


OK = member("top/ok.py", data=b"ok\n")

UNSAFE = {
    "absolute": ([member("/etc/evil", data=b"x")], "/etc/evil", "absolute path"),
    "dotdot": ([member("top/../../evil", data=b"x")], "top/../../evil", "'..' component"),
    "dotdot-dir": ([member("top/a/..", type=tarfile.DIRTYPE)], "top/a/..", "'..'"),
    "symlink-absolute": ([member("top/l", type=tarfile.SYMTYPE, link="/etc/passwd")],
                         "top/l", "absolute path '/etc/passwd'"),
    "symlink-escape": ([member("top/l", type=tarfile.SYMTYPE, link="../../outside")],
                       "top/l", "resolves outside the tree"),
    "symlink-escape-strip": ([OK, member("top/l", type=tarfile.SYMTYPE, link="../x")],
                             "top/l", "resolves outside the tree"),
    "symlink-chain": ([member("top/a", type=tarfile.SYMTYPE, link="b"),
                       member("top/b", type=tarfile.SYMTYPE, link="c/../.."),
                       member("top/c", type=tarfile.DIRTYPE)], "top/", "outside the tree"),
    "symlink-then-file": ([member("top/d", type=tarfile.SYMTYPE, link="."),
                           member("top/d/f", data=b"x")], "top/d", "clashes"),
    "hardlink-escape": ([member("top/h", type=tarfile.LNKTYPE, link="/etc/passwd")],
                        "top/h", "absolute path"),
    "hardlink-missing": ([member("top/h", type=tarfile.LNKTYPE, link="top/nothing")],
                         "top/h", "not an earlier regular file"),
    "hardlink-dotdot": ([member("top/h", type=tarfile.LNKTYPE, link="top/../../x")],
                        "top/h", "'..'"),
    "hardlink-to-symlink": ([member("top/l", type=tarfile.SYMTYPE, link="x"),
                             member("top/h", type=tarfile.LNKTYPE, link="top/l")],
                            "top/h", "not an earlier regular file"),
    "chardev": ([member("top/null", type=tarfile.CHRTYPE)], "top/null", "device node"),
    "blockdev": ([member("top/sda", type=tarfile.BLKTYPE)], "top/sda", "device node"),
    "fifo": ([member("top/pipe", type=tarfile.FIFOTYPE)], "top/pipe", "a fifo"),
    "duplicate": ([OK, OK], "top/ok.py", "appears twice"),
    "file-under-file": ([OK, member("top/ok.py/x", data=b"x")], "top/ok.py/x",
                        "under a path that is a file"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_member_refused(tmp_path: Path, case: str) -> None:
    members, name, why = UNSAFE[case]
    archive = tar(tmp_path / "a.tgz", *members)
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError) as exc:
        extract(archive, dest, strip="top" if case == "symlink-escape-strip" else None)
    assert name in exc.value.message and why in exc.value.message, exc.value.message
    assert exc.value.exit_code == 12
    assert not (tmp_path / "outside").exists() and not (tmp_path / "evil").exists()


def test_modes_normalised_setid_dropped(tmp_path: Path) -> None:
    archive = tar(tmp_path / "a.tgz",
                  member("top", type=tarfile.DIRTYPE, mode=0o1777),
                  member("top/suid", data=b"x", mode=0o4755),
                  member("top/sgid", data=b"x", mode=0o2640),
                  member("top/private", data=b"x", mode=0o600),
                  member("top/d", type=tarfile.DIRTYPE, mode=0o700),
                  member("top/d/link", type=tarfile.SYMTYPE, link="../suid"),
                  member("top/hard", type=tarfile.LNKTYPE, link="top/suid", mode=0o4755))
    root, used = extract(archive, tmp_path / "out", strip=None)
    assert used == "top" and root == tmp_path / "out" / "top"
    modes = {p.name: stat.S_IMODE(os.lstat(p).st_mode) for p in root.iterdir()}
    assert modes["suid"] == 0o755 and modes["sgid"] == 0o644 and modes["private"] == 0o644
    assert modes["d"] == 0o755 and modes["hard"] == 0o755
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o755
    assert os.readlink(root / "d" / "link") == "../suid"
    assert (root / "hard").read_bytes() == b"x"
    assert os.stat(root / "hard").st_ino != os.stat(root / "suid").st_ino


def test_explicit_strip(tmp_path: Path) -> None:
    archive = tar(tmp_path / "a.tgz", OK, member("./top/b", data=b"b"))
    root, used = extract(archive, tmp_path / "out", strip="top")
    assert used == "top" and sorted(p.name for p in root.iterdir()) == ["b", "ok.py"]


def test_strip_mismatch(tmp_path: Path) -> None:
    archive = tar(tmp_path / "a.tgz", OK, member("other/x", data=b"x"))
    with pytest.raises(FetchError, match="'other/x' is outside the top-level directory 'top'"):
        extract(archive, tmp_path / "out", strip="top")


def test_no_auto_strip_with_two_tops(tmp_path: Path) -> None:
    archive = tar(tmp_path / "a.tgz", OK, member("other/x", data=b"x"))
    root, used = extract(archive, tmp_path / "out", strip=None)
    assert used is None and root == tmp_path / "out"


def test_not_an_archive(tmp_path: Path) -> None:
    bad = tmp_path / "a.tgz"
    bad.write_bytes(b"this is not a tarball")
    with pytest.raises(FetchError, match="not a readable tar archive") as exc:
        extract(bad, tmp_path / "out", strip=None)
    assert exc.value.exit_code == 10


def test_truncated_archive(tmp_path: Path) -> None:
    good = tar(tmp_path / "a.tgz", member("top/big", data=os.urandom(200_000)))
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(good.read_bytes()[:-5000])
    with pytest.raises(FetchError, match="member 'top/big' is truncated or corrupt"):
        extract(cut, tmp_path / "out", strip=None)


def test_zip_traversal_and_link(tmp_path: Path) -> None:
    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("top/../../evil", b"x")
    with pytest.raises(UnsafeArchiveError, match="'top/../../evil' has a '..' component"):
        extract(z, tmp_path / "o1", strip=None)
    with zipfile.ZipFile(z, "w") as zf:
        zi = zipfile.ZipInfo("top/l")
        zi.external_attr = 0o120777 << 16
        zf.writestr(zi, b"/etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="absolute path '/etc/passwd'"):
        extract(z, tmp_path / "o2", strip=None)


def test_copy_tree_rules(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref")
    (src / "a").write_text("a")
    os.chmod(src / "a", 0o4750)
    os.symlink("a", src / "l")
    copy_tree(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    assert sorted(p.name for p in dst.iterdir()) == ["a", "l"]
    assert stat.S_IMODE(os.stat(dst / "a").st_mode) == 0o755
    os.symlink("../../x", src / "bad")
    with pytest.raises(UnsafeArchiveError, match="'bad' is a symlink to '../../x'"):
        copy_tree(src, tmp_path / "dst2")


def test_symlink_under_symlink_writes_nothing_outside(tmp_path: Path) -> None:
    """A link member under another link member: refused before either is followed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    archive = tar(tmp_path / "a.tgz", OK,
                  member("top/evil", type=tarfile.SYMTYPE, link="../../victim"),
                  member("top/evil/sub/planted", type=tarfile.SYMTYPE, link="x"))
    with pytest.raises(UnsafeArchiveError) as exc:
        extract(archive, tmp_path / "out", strip=None)
    assert "'top/evil/sub/planted' lies under the symlink 'top/evil'" in exc.value.message
    assert exc.value.exit_code == 12
    assert list(victim.iterdir()) == []
