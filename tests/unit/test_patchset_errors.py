"""The remaining refusals of apply, strict apply, series, SOURCE and the bare guard script."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.errors import ApplyError, ExportError, GuardError, SeriesError
from patchbake.patchset.apply import apply_hunks, apply_patch
from patchbake.patchset.diffparse import parse_patch
from patchbake.patchset.filelist import parse_filelist
from patchbake.patchset.patched import read_lineage_patch
from patchbake.patchset.series import read_series
from patchbake.patchset.sourcerec import read_source
from patchbake.patchset.strict import apply_in_memory, apply_to_dir
from patchbake.patchset.treeio import TreeReader

REPO = Path(__file__).resolve().parents[2]
PATCH = parse_patch(fx.patch_bytes())


def test_overlapping_hunks_are_refused() -> None:
    core = PATCH.by_path()["pkg/core.py"]
    with pytest.raises(ApplyError, match="overlaps or precedes the hunk before it"):
        apply_hunks("pkg/core.py", [core.hunks[0], core.hunks[0]],
                    (fx.PRISTINE / "pkg" / "core.py").read_bytes())


def test_binary_that_does_not_reverse(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    data = fx.patch_bytes()
    # Keep the forward delta, replace the reverse part by a literal of other bytes.
    start = data.index(b"delta 10\n")
    end = data.index(b"\n\n", start) + 2
    tampered = data[:start] + b"literal 0\nHcmV?d00001\n\n" + data[end:]
    with pytest.raises(ApplyError, match="does not reverse to the file in the tree"):
        apply_patch(parse_patch(tampered), TreeReader(tree), pristine=True)


def test_destination_rules(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ApplyError, match="exists and is not a directory"):
        apply_to_dir(PATCH, fx.PRISTINE, tmp_path / "file")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ApplyError, match="is a symbolic link; give a real directory"):
        apply_to_dir(PATCH, fx.PRISTINE, tmp_path / "link")


def test_path_through_a_file_and_a_fifo(tmp_path: Path) -> None:
    import os

    tree = fx.pristine_copy(tmp_path / "t")
    sub = tree / "pkg" / "sub"
    for f in sub.iterdir():
        f.unlink()
    sub.rmdir()
    sub.write_text("now a file\n")
    with pytest.raises(ApplyError, match="pkg/sub is not a directory"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)
    tree2 = fx.pristine_copy(tmp_path / "t2")
    (tree2 / "pkg" / "core.py").unlink()
    os.mkfifo(tree2 / "pkg" / "core.py")
    with pytest.raises(ApplyError, match="pkg/core.py is not a regular file"):
        apply_patch(PATCH, TreeReader(tree2), pristine=True)


def test_filelist_naming_other_paths() -> None:
    fl = parse_filelist(fx.files_bytes().replace(b"pkg/new.py  A", b"pkg/nev.py  A"))
    with pytest.raises(ApplyError, match="only in FILES.txt: pkg/nev.py; only in the patch: "
                                         "pkg/new.py"):
        apply_in_memory(PATCH, fx.PRISTINE, filelist=fl)


def test_quoted_path_errors_in_filelist() -> None:
    head = fx.files_bytes().split(b"pkg/core.py")[0]
    with pytest.raises(GuardError, match="bad quoted path"):
        parse_filelist(head + b'"pkg\\q.py"  M  +0  -0  ' + b"a" * 64 + b"\n")
    with pytest.raises(GuardError, match="text after a quoted path"):
        parse_filelist(head + b'"pkg"x  M  +0  -0  ' + b"a" * 64 + b"\n")


def test_series_file_rules(tmp_path: Path) -> None:
    with pytest.raises(SeriesError, match="series does not exist"):
        read_series(tmp_path)
    (tmp_path / "series").write_text("# nothing\n\n")
    with pytest.raises(SeriesError, match="names no patches"):
        read_series(tmp_path)
    (tmp_path / "series").write_text("../escape.patch\n")
    with pytest.raises(SeriesError, match="is not a patch file in"):
        read_series(tmp_path)
    (tmp_path / "series").write_text("missing.patch\n")
    with pytest.raises(SeriesError, match="'missing.patch' is not a patch file"):
        read_series(tmp_path)


def test_source_record_errors(tmp_path: Path) -> None:
    assert read_source(tmp_path / "none") is None
    (tmp_path / "SOURCE").write_text("{not json")
    with pytest.raises(ExportError, match="not valid JSON") as exc:
        read_source(tmp_path / "SOURCE")
    assert exc.value.exit_code == 23
    (tmp_path / "SOURCE").write_text('{"format": "other"}')
    with pytest.raises(ExportError, match="not a patchbake source record"):
        read_source(tmp_path / "SOURCE")


def test_missing_lineage_patch(tmp_path: Path) -> None:
    with pytest.raises(GuardError, match="does not exist") as exc:
        read_lineage_patch(tmp_path / "x.patch", tmp_path / "FILES.txt")
    assert exc.value.exit_code == 21


def _bare_tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_patch_files",
                                                  REPO / "tools" / "check_patch_files.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bare_guard_two_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = _bare_tool()
    argv = ["--patch", str(fx.PATCH), "--files", str(fx.FILES), "--source",
            str(tmp_path / "none"), "--no-tree"]
    assert tool.main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ok: 6 files +9 -4") and "three-way" not in out
    assert "apply, hash and re-export checks skipped" in err
    bad = tmp_path / "bad.patch"
    bad.write_bytes(fx.drop_section(fx.patch_bytes(), "pkg/gone.py"))
    argv[1] = str(bad)
    assert tool.main(argv) == 21
    assert "[dropped] pkg/gone.py: work was dropped by a regeneration" in capsys.readouterr()[0]


def test_bare_guard_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = _bare_tool()
    base = ["--source", str(tmp_path / "none"), "--files", str(fx.FILES)]
    assert tool.main([*base, "--patch", str(tmp_path / "nope.patch")]) == 21
    assert "nope.patch does not exist" in capsys.readouterr()[1]
    assert tool.main([*base, "--patch", str(fx.PATCH), "--tree", str(tmp_path / "no")]) == 21
    assert "not a directory" in capsys.readouterr()[1]
    assert tool.main([*base, "--patch", str(fx.PATCH), "--require-tree"]) == 21
    assert "no pristine tree" in capsys.readouterr()[1]
    empty = tmp_path / "repo"
    (empty / "patch").mkdir(parents=True)
    assert tool.main(["--repo", str(empty)]) == 21
    assert "cannot tell which patch to check" in capsys.readouterr()[1]
