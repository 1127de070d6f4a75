"""The hostile-input corpus, in-process (the fast part of the reliability harness)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from corpus import CASES, Case
from patchbake.entry import main
from patchbake.store import Store
from patchbake.storecheck import fsck


def snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = [n for n in dirnames if d / n not in skip]
        for n in [*filenames, *dirnames]:
            p = d / n
            if p in skip:
                continue
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def check_outcome(c: Case, rc: int, err: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    if c.code == 0:  # an input that must be accepted
        assert rc == 0 and "patchbake: error" not in err, err
        return
    assert rc == c.code, f"exit {rc}, expected {c.code}: {err}"
    assert lines and lines[-1].startswith("patchbake: error: "), err
    # progress steps ("==> ...") and warnings may precede it; one error line, at the end
    assert len([ln for ln in lines if ln.startswith("patchbake: error")]) == 1, err
    assert re.search(re.escape(c.match), lines[-1]), f"{c.match!r} not in {lines[-1]!r}"


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_hostile_input(c: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    monkeypatch.setenv("PATCHBAKE_HOME", str(store))
    argv = c.build(tmp_path)
    repo = tmp_path / "repo"
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(repo / "pipeline.yaml"))
    monkeypatch.chdir(repo)
    for k, v in c.env.items():
        monkeypatch.setenv(k, v)
    skip = (store, *((tmp_path / c.writes,) if c.writes else ()))
    before = snapshot(tmp_path, skip)
    capsys.readouterr()
    rc = main(argv)
    _, err = capsys.readouterr()
    check_outcome(c, rc, err)
    assert snapshot(tmp_path, skip) == before, "something was written outside the store"
    rep = fsck(Store(store), repo=repo) if store.is_dir() else None
    assert rep is None or rep.clean, rep


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 80 and len({c.name for c in CASES}) == len(CASES)
