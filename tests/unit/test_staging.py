"""Staging entries are held by a lock their writer holds, never judged by a process id."""

from __future__ import annotations

import os
from pathlib import Path

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
