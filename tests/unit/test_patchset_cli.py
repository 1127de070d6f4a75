"""The patch and series commands end to end on the fixture (hermetic: no git needed here)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.entry import main
from patchbake.config import load
from patchbake.errors import ApplyError
from patchbake.patchset.patched import patched_tree
from patchbake.sources import tree_digest
from patchbake.store import Store


@pytest.fixture
def repo(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = fx.make_repo(tmp_path, with_patch=True)
    monkeypatch.chdir(r)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(r / "pipeline.yaml"))
    return r


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_check_json_passes(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "patch", "check", "--no-tree", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True and doc["files"] == 6
    assert sorted(doc) == ["added", "files", "format_version", "ok", "patch_sha256", "problems",
                           "removed"]


def test_check_reports_dropped_work(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = repo / "patch" / "fixture-fix-v1.0.patch"
    p.write_bytes(fx.drop_section(p.read_bytes(), "pkg/sub/nonl.txt"))
    rc, out, err = cli(capsys, "patch", "check", "--no-tree", "--json")
    doc = json.loads(out)
    assert rc == 21 and doc["ok"] is False
    assert {"kind": "dropped", "path": "pkg/sub/nonl.txt"}.items() <= doc["problems"][0].items()
    assert "work was dropped by a regeneration" in err


def test_check_without_git_exits_tool_missing(repo: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The re-export needs git: a machine without it is told so (exit 4, what to install),
    not that the patch failed its guard (exit 21). The table still shows every check."""
    empty = tmp_path / "no-tools"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    rc, out, err = cli(capsys, "patch", "check")
    assert rc == 4, err
    assert err == "patchbake: error: 'git' is not installed or not on PATH (install git and retry)\n"
    assert "re-export failed: 'git' is not installed" in out


def test_check_missing_patch(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "patch" / "fixture-fix-v1.0.patch").unlink()
    rc, _, err = cli(capsys, "patch", "check", "--no-tree")
    assert rc == 21 and "fixture-fix-v1.0.patch does not exist" in err


def test_apply_to_then_refuse_non_empty(repo: Path, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    rc, out, _ = cli(capsys, "--json", "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 0 and json.loads(out)["verified"] is True
    assert (tmp_path / "out" / "pkg" / "new.py").exists()
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 22 and "is not empty" in err


def test_apply_refuses_hash_mismatch(repo: Path, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    f = repo / "patch" / "FILES.txt"
    f.write_bytes(f.read_bytes().replace(b"07426f9c", b"17426f9c"))
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 22 and "post-image of pkg/core.py hashes to" in err
    assert not (tmp_path / "out").exists()


def test_apply_refuses_malformed_patch(repo: Path, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    p = repo / "patch" / "fixture-fix-v1.0.patch"
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 20 and "lines end in CRLF" in err


def test_export_usage_errors(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "patch", "export", "--reason", "x")
    assert rc == 2 and "--reason goes with --force" in err
    rc, _, err = cli(capsys, "patch", "export", "--force")
    assert rc == 23 and "--force needs --reason" in err


def test_workspace_refuses_non_empty(repo: Path, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "x").write_text("")
    rc, _, err = cli(capsys, "patch", "workspace", str(tmp_path / "ws"))
    assert rc == 23 and "is not an empty directory" in err


def _write_series(repo: Path, groups: list[list[int]]) -> None:
    d = repo / "patch" / "series"
    d.mkdir(exist_ok=True)
    secs = fx.sections(fx.patch_bytes())
    names = []
    for n, g in enumerate(groups, 1):
        names.append(f"{n:04d}-part.patch")
        (d / names[-1]).write_bytes(b"".join(secs[i] for i in g))
    (d / "series").write_text("".join(f"{x}\n" for x in names))


def test_series_verify_passes(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_series(repo, [[0, 1, 2], [3, 4, 5]])
    rc, out, _ = cli(capsys, "--json", "series", "verify")
    doc = json.loads(out)
    assert rc == 0 and doc["series_digest"] == doc["canonical_digest"] and doc["paths"] == 6


def test_series_verify_names_first_difference(repo: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _write_series(repo, [[0, 1, 2], [3, 5]])
    rc, _, err = cli(capsys, "series", "verify")
    assert rc == 24 and "first differing file pkg/sub/nonl.txt" in err


def test_series_verify_missing_and_bad_patch(repo: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "series", "verify")
    assert rc == 24 and "series does not exist" in err
    _write_series(repo, [[0, 1, 2, 3, 4, 5], [0]])
    rc, _, err = cli(capsys, "series", "verify")
    assert rc == 24 and "0002-part.patch" in err and "already applied" in err


def test_patched_tree_is_cached_and_rechecked(repo: Path) -> None:
    lin = load(repo / "pipeline.yaml").lineage()
    store = Store.open()
    t1 = patched_tree(lin, store)
    t2 = patched_tree(lin, store)
    assert t1 == t2 and t1.root.is_dir()
    assert t1.deleted == {"pkg/gone.py"} and "pkg/new.py" in t1.files
    assert t1.tree_digest == tree_digest(t1.root) != t1.pristine_digest
    (t1.root / "pkg" / "new.py").write_text("tampered\n")
    with pytest.raises(ApplyError, match="was modified after it was built"):
        patched_tree(lin, store)
    shutil.rmtree(t1.root)
    assert patched_tree(lin, store).tree_digest == t1.tree_digest  # rebuilt


TAMPER = {
    "drop-hunk": (lambda d: fx.drop_hunk(d, "pkg/core.py", 1), "dropped",
                  "pkg/core.py: work was dropped by a regeneration"),
    "drop-file": (lambda d: fx.drop_section(d, "pkg/new.py"), "dropped",
                  "pkg/new.py: work was dropped by a regeneration"),
    "change-count": (lambda d: d.replace(b"@@ -11,7 +11,8 @@", b"@@ -11,7 +11,9 @@"), "parse",
                     "fixture-fix-v1.0.patch:"),
    "swap-sections": (lambda d: fx.swap_sections(d, 0, 2), "order",
                      "file sections are not in canonical order"),
    "crlf": (lambda d: d.replace(b"\n", b"\r\n"), "crlf", "lines end in CRLF"),
    "truncate": (lambda d: d[: len(d) // 2], "final-newline", "lacks a final newline"),
}


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_check_tamper_through_the_cli(repo: Path, capsys: pytest.CaptureFixture[str],
                                      case: str) -> None:
    """Each tamper case from the issue: exit 21, one line on stderr naming the case."""
    mutate, kind, message = TAMPER[case]
    p = repo / "patch" / "fixture-fix-v1.0.patch"
    p.write_bytes(mutate(p.read_bytes()))
    rc, out, err = cli(capsys, "patch", "check", "--no-tree", "--json")
    assert rc == 21
    assert json.loads(out)["problems"][0]["kind"] == kind
    # under --json the error is one JSON document on stderr too
    assert err.count("\n") == 1
    error = json.loads(err)["error"]
    assert error["class"] == "GuardError" and error["code"] == 21
    assert message in error["message"]


def _pin_tree(repo: Path, tree: Path) -> None:
    """Point the lineage's upstream at ``tree`` (a directory source pinned by its digest)."""
    y = repo / "pipeline.yaml"
    sha = tree_digest(tree).hex
    y.write_text(re.sub(r'path: "[^"]*", sha256: [0-9a-f]{64}',
                        f'path: "{tree}", sha256: {sha}', y.read_text()))


def test_reversed_patch_through_the_cli(repo: Path, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    """A pin whose tree already holds the patch's post-image: the patch is reversed."""
    from patchbake.patchset.diffparse import parse_patch
    from patchbake.patchset.strict import apply_to_dir

    apply_to_dir(parse_patch(fx.patch_bytes(), "p"), fx.PRISTINE, tmp_path / "patched")
    _pin_tree(repo, tmp_path / "patched")
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 22 and "the patch is reversed" in err
    assert not (tmp_path / "out").exists()
    rc, _, err = cli(capsys, "patch", "check")
    assert rc == 21 and "the patch is reversed here" in err


def test_path_through_a_symlink_through_the_cli(repo: Path, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "linked")
    (tree / "pkg" / "sub").rename(tree / "pkg" / "realsub")
    (tree / "pkg" / "sub").symlink_to("realsub")
    _pin_tree(repo, tree)
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 22 and "pkg/sub is a symbolic link" in err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_legacy_files_txt_through_the_cli(repo: Path, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """The older one-path-per-line FILES.txt is read by check and apply (paths only)."""
    f = repo / "patch" / "FILES.txt"
    legacy = b"# touched paths\n" + b"".join(
        ln.split(b"  ")[0] + b"\n" for ln in f.read_bytes().splitlines()
        if not ln.startswith(b"#"))
    f.write_bytes(legacy)
    rc, out, err = cli(capsys, "patch", "check", "--no-tree", "--json")
    assert rc == 0 and json.loads(out)["ok"] is True, err
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out"))
    assert rc == 0, err
    f.write_bytes(legacy.replace(b"pkg/new.py\n", b""))
    rc, _, err = cli(capsys, "patch", "check", "--no-tree")
    assert rc == 21 and "pkg/new.py: new work not recorded" in err
    rc, _, err = cli(capsys, "patch", "apply", "--to", str(tmp_path / "out2"))
    assert rc == 22 and "only in the patch: pkg/new.py" in err


def test_lineage_picks_the_files(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two lineages side by side: the newest is the default, --lineage picks the other."""
    y = repo / "pipeline.yaml"
    text = y.read_text()
    second = text.split("lineages:\n", 1)[1].replace("v1.0:", "v0.9:") \
        .replace('version: "1.0"', 'version: "0.9"').replace("patch/", "patch/v0.9/")
    y.write_text(text + second)
    (repo / "patch" / "v0.9").mkdir()
    rc, out, _ = cli(capsys, "patch", "check", "--no-tree", "--json")
    assert rc == 0 and json.loads(out)["files"] == 6
    rc, _, err = cli(capsys, "--lineage", "v0.9", "patch", "check", "--no-tree")
    assert rc == 21 and "v0.9/fixture-fix-v1.0.patch does not exist" in err
    (repo / "patch" / "v0.9" / "fixture-fix-v1.0.patch").write_bytes(
        fx.drop_section(fx.patch_bytes(), "pkg/new.py"))
    rc, out, err = cli(capsys, "--lineage", "v0.9", "patch", "check", "--no-tree", "--json")
    assert rc == 21 and json.loads(out)["problems"][0]["kind"] == "files-missing"
    rc, _, err = cli(capsys, "--lineage", "v0.8", "patch", "check")
    assert rc == 3 and "no lineage 'v0.8'" in err
