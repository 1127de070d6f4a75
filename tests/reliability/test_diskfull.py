"""Disk full and read-only stores against real file systems (a small tmpfs, remounted
read-only): one line, exit 13, nothing half-made; a write that is only a cache is skipped
with a warning, and a push never fails after the push itself succeeded."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from images_support import make_repo
from patchbake.images.bake import bake_image
from patchbake.entry import main
from patchbake.store import Store
from patchbake.storecheck import fsck

pytestmark = [pytest.mark.integration]


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, check=False)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount_ro(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


def fill(path: Path, leave: int = 0) -> None:
    """Fill the file system holding ``path`` (less ``leave`` bytes)."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize - leave
    with open(path / "filler", "wb") as f:
        try:
            while free > 0:
                n = min(free, 1 << 20)
                f.write(b"\0" * n)
                free -= n
            f.flush()
        except OSError:
            pass


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("patchbake: error")]
    assert len(lines) == 1, err
    return lines[0]


def test_fetch_into_a_full_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import corpus

    with tmpfs(tmp_path / "fs", "2m") as fs:
        monkeypatch.setenv("PATCHBAKE_HOME", str(fs / "store"))
        corpus.scratch(tmp_path)
        argv = corpus._pin_archive(tmp_path, corpus._tar(
            [corpus._f(f"up/f{i}", os.urandom(100_000)) for i in range(40)], mode="w"), "up.tar")
        monkeypatch.setenv("PATCHBAKE_PIPELINE", str(tmp_path / "repo" / "pipeline.yaml"))
        Store.open(fs / "store")
        fill(fs, leave=200_000)
        rc, _, err = run(capsys, *argv)
        line = one_error(err)
        assert rc == 13 and "the disk is full" in line, err
        assert list((fs / "store" / "tmp").iterdir()) == []
        assert list((fs / "store" / "trees").iterdir()) == []
        assert fsck(Store(fs / "store")).clean


def test_fetch_into_a_read_only_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import corpus

    with tmpfs(tmp_path / "fs", "4m") as fs:
        monkeypatch.setenv("PATCHBAKE_HOME", str(fs / "store"))
        corpus.scratch(tmp_path)
        argv = corpus._pin_archive(tmp_path, corpus._tar([corpus._f("up/a")]))
        monkeypatch.setenv("PATCHBAKE_PIPELINE", str(tmp_path / "repo" / "pipeline.yaml"))
        Store.open(fs / "store")
        remount_ro(fs)
        rc, _, err = run(capsys, *argv)
        assert rc == 13 and "read-only" in one_error(err), err


def test_bake_into_a_full_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake.errors import StoreError

    with tmpfs(tmp_path / "fs", "64m") as fs:
        repo = make_repo(tmp_path, store_dir=fs / "store")
        fill(fs, leave=4096)
        with pytest.raises(StoreError, match="the disk is full") as e:
            bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
        assert e.value.exit_code == 13
        assert list((fs / "store" / "tmp").iterdir()) == []
        assert fsck(Store(fs / "store"), trees=False).clean


def test_verify_on_a_full_store_skips_its_memos(tmp_path: Path) -> None:
    """Memos only save time: a full store still verifies (the memo writes are skipped,
    nothing half-written is left) and the next verify reads every layer again."""
    from patchbake.verify.baked import verify_image

    with tmpfs(tmp_path / "fs", "64m") as fs:
        repo = make_repo(tmp_path, store_dir=fs / "store")
        res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
        shutil.rmtree(fs / "store" / "bakes")  # cold: every memo is to be written again
        fill(fs, leave=0)
        for _ in range(2):
            got = verify_image(repo.pipeline, res.digest, repo.store, patched=repo.patched)
            assert got.ok, got
        assert not (fs / "store" / "bakes" / "layer-ops").exists() or not any(
            p.suffix == ".json" for p in (fs / "store" / "bakes" / "layer-ops").iterdir())
        assert [p for p in (fs / "store").rglob(".*.tmp")] == []
        assert fsck(Store(fs / "store"), trees=False).clean


@pytest.mark.registry
def test_push_succeeds_from_a_read_only_store_and_pull_into_it_fails_cleanly(
        tmp_path: Path, registry: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with tmpfs(tmp_path / "fs", "64m") as fs:
        repo = make_repo(tmp_path, store_dir=fs / "store")
        res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
        remount_ro(fs)
        monkeypatch.setenv("PATCHBAKE_HOME", str(fs / "store"))
        monkeypatch.chdir(repo.root)
        rc, _, err = run(capsys, "push", str(res.digest), f"{registry}/faults/ro:push")
        assert rc == 0, err
        assert "patchbake: warning: the blob-location cache" in err and "read-only" in err
        rc, _, err = run(capsys, "pull", f"{registry}/faults/ro:push")
        assert rc == 13 and "read-only" in one_error(err), err
    with tmpfs(tmp_path / "fs2", "1m") as fs2:
        monkeypatch.setenv("PATCHBAKE_HOME", str(fs2 / "store"))
        Store.open(fs2 / "store")
        fill(fs2, leave=8192)
        rc, _, err = run(capsys, "pull", f"{registry}/faults/ro:push")
        assert rc == 13 and "the disk is full" in one_error(err), err
        assert list((fs2 / "store" / "tmp").iterdir()) == []


def test_pull_of_an_image_the_read_only_store_holds_under_that_name_succeeds(
        tmp_path: Path, registry: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing needs writing, so nothing is written: the manifest is compared with the
    stored bytes and the name is already there."""
    with tmpfs(tmp_path / "fs", "64m") as fs:
        repo = make_repo(tmp_path, store_dir=fs / "store")
        res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
        monkeypatch.setenv("PATCHBAKE_HOME", str(fs / "store"))
        monkeypatch.chdir(repo.root)
        ref = f"{registry}/faults/ro-present:1"
        assert run(capsys, "push", str(res.digest), ref)[0] == 0
        assert run(capsys, "pull", ref)[0] == 0
        remount_ro(fs)
        rc, out, err = run(capsys, "--json", "pull", ref)
        assert rc == 0, err
        assert "Traceback" not in err


def test_gates_on_a_read_only_store_are_a_store_error_not_a_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake import config
    from patchbake.errors import StoreError
    from patchbake.release import create, gates
    from release_support import make_repo as make_release_repo
    from release_support import sign_all

    root = tmp_path / "repo"
    keys = make_release_repo(root, tmp_path / "keys")
    with tmpfs(tmp_path / "fs", "8m") as fs:
        store = Store.open(fs / "store")
        # the store holds the image (a blob under its digest): an image it does not hold
        # is a verdict (blocked, 60), tests/unit/test_release_gates.py
        digest = str(store.put_bytes(b'{"schemaVersion": 2}'))
        sign_all(root, keys, "sm89-serving-offline", digest)
        remount_ro(fs)
        p = config.load(root / "pipeline.yaml")
        ev = create.evaluation(p, store, f"sm89-serving-offline@{digest}")
        with pytest.raises(StoreError, match="read-only") as e:
            gates.evaluate(ev, p.channels["sm89-stable"])
        assert e.value.exit_code == 13
