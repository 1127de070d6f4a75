"""Scratch directories outside the store: held while in use, swept once their owner is
gone (patchbake.scratch)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from patchbake import scratch
from patchbake.scratch import Scratch


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _left_by_a_dead_owner(parent: Path, name: str, age: float) -> Path:
    d = parent / name
    (d / "objects").mkdir(parents=True)
    (d / ".held").write_bytes(b"")  # nobody holds its lock
    _age(d, age)
    return d


def test_sweep_removes_only_what_nobody_holds(tmp_path: Path) -> None:
    held = Scratch("pb-test.", tmp_path)
    _age(held.path, 2 * scratch.ORPHAN_AGE_S)  # old, but held by this process
    dead = _left_by_a_dead_owner(tmp_path, "pb-test.dead", scratch.DEAD_AGE_S + 60)
    recent = _left_by_a_dead_owner(tmp_path, "pb-test.recent", 5)  # unheld, just changed
    young = tmp_path / "pb-test.young"  # no lock file yet: being made
    young.mkdir()
    orphan = tmp_path / "pb-test.orphan"  # no lock file, and old: left behind
    orphan.mkdir()
    _age(orphan, scratch.ORPHAN_AGE_S + 60)
    other = _left_by_a_dead_owner(tmp_path, "other.dead", scratch.DEAD_AGE_S + 60)
    new = Scratch("pb-test.", tmp_path)
    for kept in (held.path, new.path, recent, young, other):
        assert kept.is_dir(), kept
    assert not dead.exists() and not orphan.exists()
    new.remove()
    held.remove()
    held.remove()  # a second remove does nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.dead", "pb-test.recent",
                                                          "pb-test.young"]


def test_sweep_is_not_steered_by_planted_entries(tmp_path: Path) -> None:
    """A FIFO as ``.held`` (opening it would wait for a writer), a symbolic link named
    like a scratch directory, a plain file: none hangs the sweep or reaches outside."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"keep")
    (victim / ".held").write_bytes(b"")
    _age(victim, scratch.DEAD_AGE_S + 60)
    parent = tmp_path / "shm"
    parent.mkdir()
    (parent / "pb-test.link").symlink_to(victim)
    fifo = parent / "pb-test.fifo"
    fifo.mkdir()
    os.mkfifo(fifo / ".held")
    _age(fifo, scratch.DEAD_AGE_S + 60)
    (parent / "pb-test.file").write_bytes(b"")
    t = time.monotonic()
    s = Scratch("pb-test.", parent)
    assert time.monotonic() - t < 5
    assert (victim / "keep").read_bytes() == b"keep"
    assert (parent / "pb-test.link").is_symlink() and fifo.is_dir()
    assert (parent / "pb-test.file").is_file()
    s.remove()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_sweep_leaves_other_users_directories(tmp_path: Path) -> None:
    theirs = _left_by_a_dead_owner(tmp_path, "pb-test.theirs", scratch.DEAD_AGE_S + 60)
    os.chown(theirs, 65534, 65534)
    _age(theirs, scratch.DEAD_AGE_S + 60)
    Scratch("pb-test.", tmp_path).remove()
    assert theirs.is_dir()


def test_held_is_in_place_only_once_locked(tmp_path: Path) -> None:
    """The lock file appears under its name already held: a sweep never finds the
    directory of an owner that is making it unheld."""
    import fcntl

    s = Scratch("pb-test.", tmp_path)
    assert sorted(p.name for p in s.path.iterdir()) == [".held"]
    fd = os.open(s.path / ".held", os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    s.remove()
    assert not s.path.exists()
