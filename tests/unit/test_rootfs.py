"""The root filesystem tarball re-written by our writer: exact modes and owners, hard links
as copies, devices dropped, files that vary between machines or runs left out."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from patchbake.errors import ImageError, UnsafeArchiveError
from patchbake.images import rootfs
from patchbake.oci.tarwriter import with_parents, write_layer


def _add(tf: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"",
         mode: int = 0o644, uid: int = 0, gid: int = 0, link: str = "",
         mtime: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, mtime
    info.uname, info.linkname = "someone", link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_rootfs(path: Path, *, mtime: int = 0, hostname: bytes = b"vm\n") -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        _add(tf, "./", tarfile.DIRTYPE, mode=0o755, mtime=mtime)
        for d, mode, gid in (("./usr/", 0o755, 0), ("./usr/bin/", 0o755, 0),
                             ("./tmp/", 0o1777, 0), ("./var/", 0o755, 0),
                             ("./var/mail/", 0o2775, 8), ("./var/log/", 0o755, 0),
                             ("./etc/", 0o755, 0), ("./dev/", 0o755, 0)):
            _add(tf, d, tarfile.DIRTYPE, mode=mode, gid=gid, mtime=mtime)
        _add(tf, "./usr/bin/su", data=b"su binary", mode=0o4755, mtime=mtime)
        _add(tf, "./usr/bin/perl5.36", data=b"perl", mode=0o755, mtime=mtime)
        _add(tf, "./usr/bin/perl", tarfile.LNKTYPE, link="./usr/bin/perl5.36", mode=0o755)
        _add(tf, "./usr/bin/sh", tarfile.SYMTYPE, link="dash", mode=0o777)
        _add(tf, "./etc/shadow", data=b"root:*:19675:0:99999:7:::\n", mode=0o640, gid=42)
        _add(tf, "./etc/shadow-", data=b"older\n", mode=0o600)
        _add(tf, "./etc/hostname", data=hostname)
        _add(tf, "./etc/apt/sources.list", data=b"deb http://example.invalid/debian bookworm main\n")
        _add(tf, "./var/log/dpkg.log", data=f"{mtime} install\n".encode())
        _add(tf, "./dev/null", tarfile.CHRTYPE, mode=0o666)
        _add(tf, "./dev/fifo", tarfile.FIFOTYPE, mode=0o644)
    return path


def layer_of(path: Path, epoch: int = 1700000000) -> tuple[bytes, rootfs.RootfsPlan]:
    with rootfs.opened(path) as tf:
        plan = rootfs.plan_rootfs(tf)
        return b"".join(write_layer(with_parents(plan.entries), epoch)), plan


def test_modes_owners_links_devices_and_dropped_files(tmp_path: Path) -> None:
    data, plan = layer_of(make_rootfs(tmp_path / "r.tar"))
    assert plan.devices == 2
    assert sorted(plan.dropped) == ["etc/apt/sources.list", "etc/hostname", "etc/shadow-",
                                    "var/log/dpkg.log"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        m = {x.name: x for x in tf.getmembers()}
        assert (m["usr/bin/su"].mode, m["tmp"].mode) == (0o4755, 0o1777)
        assert (m["var/mail"].mode, m["var/mail"].gid) == (0o2775, 8)
        assert (m["etc/shadow"].mode, m["etc/shadow"].gid) == (0o640, 42)
        assert m["usr/bin/perl"].isreg()  # a hard link written as a copy
        assert tf.extractfile("usr/bin/perl").read() == b"perl"  # type: ignore[union-attr]
        assert m["usr/bin/sh"].issym() and m["usr/bin/sh"].linkname == "dash"
        assert "dev/null" not in m and "dev/fifo" not in m and "dev" in m
        assert "var/log" in m  # directories of dropped files stay
        assert {x.mtime for x in m.values()} == {1700000000}
        assert {(x.uname, x.gname) for x in m.values()} == {("", "")}


def test_what_varies_between_runs_does_not_reach_the_layer(tmp_path: Path) -> None:
    one, _ = layer_of(make_rootfs(tmp_path / "a.tar", mtime=1, hostname=b"builder-a\n"))
    two, _ = layer_of(make_rootfs(tmp_path / "b.tar", mtime=2, hostname=b"builder-b\n"))
    assert hashlib.sha256(one).digest() == hashlib.sha256(two).digest()


def test_unsafe_and_unsupported_entries_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tf:
        _add(tf, "./../escape", data=b"x")
    with rootfs.opened(bad) as tf, pytest.raises(UnsafeArchiveError, match="not a safe path"):
        rootfs.plan_rootfs(tf)
    dangling = tmp_path / "dangling.tar"
    with tarfile.open(dangling, "w") as tf:
        _add(tf, "./usr/bin/perl", tarfile.LNKTYPE, link="./usr/bin/nowhere")
    with rootfs.opened(dangling) as tf, pytest.raises(ImageError, match="hard link"):
        rootfs.plan_rootfs(tf)
    (tmp_path / "notatar").write_bytes(b"x" * 700)
    with pytest.raises(ImageError, match="not an uncompressed tar"):
        with rootfs.opened(tmp_path / "notatar"):
            pass


def test_mmdebstrap_runs_under_a_fixed_umask(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by building the base in two stores with different umasks: the directory a
    setup hook makes, and the seed directory of held packages that sync-in copies over it,
    took the caller's umask into the tarball (0700 under umask 077)."""
    import os

    from patchbake import proc
    from patchbake.sources import debian, lockgen

    seen: list[int] = []
    (tmp_path / "held.deb").write_bytes(b"deb")

    def fake_run(argv: list[str], **_: object) -> None:
        mask = os.umask(0)
        os.umask(mask)
        seen.append(mask)
        # sync-in copies the seed directory, its mode included, over the archives directory
        seen.append((tmp_path / "seed").stat().st_mode & 0o777)
        (tmp_path / "installed.tsv").write_text("python3\t3.11.2-1+b1\tamd64\n")

    monkeypatch.setattr(proc, "run", fake_run)
    previous = os.umask(0o077)
    try:
        debian.bootstrap(lockgen.DEFAULT_OS, 0, Path("/dev/null"), tmp_path,
                         (("python3.deb", tmp_path / "held.deb"),))
        assert os.umask(0o077) == 0o077  # the caller's umask is given back
    finally:
        os.umask(previous)
    assert seen == [0o022, 0o755]
