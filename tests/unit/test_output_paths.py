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


def _one_line_17(capsys: pytest.CaptureFixture[str], rc: int, dest: str) -> None:
    err = capsys.readouterr().err
    assert rc == 17, err
    [line] = err.splitlines()
    assert line.startswith(f"patchbake: error: {dest}") and "cannot be written" in line, line


def test_release_export_and_report_under_proc(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from release_support import make_release
    from release_support import make_repo as make_release_repo

    root = tmp_path / "repo"
    rel = make_release(root, make_release_repo(root, tmp_path / "keys"), "sha256:" + "ab" * 32)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    capsys.readouterr()
    _one_line_17(capsys, main(["release", "export", rel.id, "--to", "/proc/bundle"]),
                 "/proc/bundle")
    _one_line_17(capsys, main(["report", rel.id, "--out", "/proc/r.html"]),
                 "/proc/r.html")
    _one_line_17(capsys, main(["keys", "generate", "--out", "/proc/keys"]),
                 "/proc/keys")


def test_an_oci_layout_without_index_json(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path)
    layout_dir = tmp_path / "layout"
    layout_dir.mkdir()
    (layout_dir / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout_dir / "blobs" / "sha256").mkdir(parents=True)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    monkeypatch.chdir(repo.root)
    capsys.readouterr()
    assert main(["image", "inspect", str(layout_dir)]) == 30
    err = capsys.readouterr().err
    [line] = err.splitlines()
    assert "index.json does not exist" in line and "Traceback" not in err, err
