"""Staging entries are held by a lock their writer holds, never judged by a process id."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from patchbake import staging
from patchbake.fsutil import atomic_writer
from patchbake.store import Store


def test_a_held_entry_is_not_litter_whatever_pid_its_name_says(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    # a writer in another PID namespace has a number that means nothing here: the name
    # says pid 999999999 (no such process), the lock says alive
    fd, blob = staging.new_file(store.root / "tmp", "blob.999999999.")
    held = staging.new_dir(store.root / "tmp", "extract.999999999.")
    (held / "part").write_bytes(b"x")
    try:
        assert not staging.is_litter(Path(blob)) and not staging.is_litter(held)
        assert Store.open(store.root, sweep=False).sweep_tmp() == []
        assert Path(blob).exists() and (held / "part").exists()
    finally:
        os.close(fd)
        staging.release(held)
    assert staging.is_litter(Path(blob)) and staging.is_litter(held)
    assert sorted(Store.open(store.root, sweep=False).sweep_tmp()) == sorted([Path(blob), held])
    assert not Path(blob).exists() and not held.exists()


def test_an_unheld_entry_is_litter_at_once(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    dead = store.root / "tmp" / f"extract.{os.getpid()}.abc"  # even with our own pid
    dead.mkdir()
    assert staging.reclaim(dead) and not dead.exists()


def test_a_record_being_written_is_not_swept(tmp_path: Path) -> None:
    target = tmp_path / "records" / "r.json"
    with atomic_writer(target) as f:
        f.write(b"{}")
        [tmp] = list(target.parent.glob(".r.json.*.tmp"))
        assert not staging.reclaim(tmp) and tmp.exists()
    assert target.read_bytes() == b"{}" and not list(target.parent.glob(".*.tmp"))


def test_a_writer_whose_entry_was_reclaimed_makes_another(tmp_path: Path) -> None:
    # what the writer checks after taking its lock: the path still names its inode
    fd, path = staging.new_file(tmp_path, "blob.1.")
    try:
        os.unlink(path)
        assert not staging._same(path, fd)  # noqa: SLF001 - the check under test
    finally:
        os.close(fd)


def test_released_directories_do_not_keep_descriptors(tmp_path: Path) -> None:
    made = [staging.new_dir(tmp_path, "d.") for _ in range(5)]
    for d in made:
        d.rmdir()
    staging.new_dir(tmp_path, "d.")
    assert not any(str(d) in staging._HELD for d in made)  # noqa: SLF001


def test_an_interrupt_during_the_removal_does_not_cut_it_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM that lands while a command removes its staging on the way out (the
    reliability harness's export trial 25) once left it half removed, as litter."""
    held = staging.new_dir(tmp_path, "extract.")
    for i in range(5):
        (held / f"f{i}").write_bytes(b"x")
    real = shutil.rmtree
    calls: list[str] = []

    def interrupted(path: str, ignore_errors: bool = False) -> None:
        calls.append(str(path))
        if len(calls) == 1:
            os.unlink(os.path.join(path, "f0"))
            raise KeyboardInterrupt  # what the SIGTERM handler raises (entry.Terminated)
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        staging.discard(held)
    assert not held.exists() and len(calls) == 2
    assert str(held) not in staging._HELD  # noqa: SLF001


def test_an_interrupt_while_a_directory_is_made_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(fd: int, op: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fcntl, "flock", interrupted)
    with pytest.raises(KeyboardInterrupt):
        staging.new_dir(tmp_path, "extract.")
    assert list(tmp_path.iterdir()) == []
