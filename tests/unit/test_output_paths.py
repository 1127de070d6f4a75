"""An output aimed where nothing can be written (under /proc, under a file) is one line
and exit 17 (OutputPathError), never a traceback; other failures are not renamed."""

from __future__ import annotations

from pathlib import Path

import pytest
from images_support import make_repo
from patchbake.entry import main
from patchbake.errors import OutputPathError
from patchbake.fsutil import atomic_write, output_to
from patchbake.images.bake import bake_image


@pytest.mark.parametrize("dest", ["/proc/patchbake-nope/out.tar", "/proc/out.tar"])
def test_a_write_refused_at_the_output_is_exit_17(dest: str) -> None:
    with pytest.raises(OutputPathError, match="cannot be written") as e, \
            output_to(Path(dest), "--to"):
        atomic_write(dest, b"x")
    assert e.value.exit_code == 17 and "--to" in (e.value.hint or "")


def test_a_file_in_the_way_is_exit_17(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file")
    with pytest.raises(OutputPathError), output_to(tmp_path / "f" / "out", "--out"):
        atomic_write(tmp_path / "f" / "out" / "page.html", b"x")


def test_an_unrelated_failure_is_not_renamed(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), output_to(tmp_path / "out", "--to"):
        (tmp_path / "elsewhere" / "input").read_bytes()


@pytest.mark.parametrize("dest", ["/proc/patchbake-nope/x.tar", "/proc/x.tar"])
def test_image_export_under_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], dest: str) -> None:
    repo = make_repo(tmp_path)
    bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    monkeypatch.chdir(repo.root)
    capsys.readouterr()
    assert main(["image", "export", "offline", dest]) == 17
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"patchbake: error: {dest} cannot be written")
