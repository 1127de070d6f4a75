"""Workspace, export, re-export, series split and the bare guard with the real git.

The upstream here is the small fixture tree (a ``path`` source), so these run in seconds;
tests/integration/test_patchset_sdist.py repeats the important ones on vLLM 0.25.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake import scratch
from patchbake.entry import main
from patchbake.patchset.apply import Outcome
from patchbake.patchset.guard import check

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


HOSTILE_GITCONFIG = """\
[diff]
    noprefix = true
    mnemonicPrefix = true
    algorithm = patience
    context = 5
    interHunkContext = 7
    renames = copies
    indentHeuristic = false
    orderFile = {order}
    external = /bin/false
[core]
    abbrev = 12
    quotePath = false
    autocrlf = true
    attributesFile = {attrs}
[color]
    ui = always
[user]
    name = someone
    email = someone@example.invalid
"""


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@localhost",
           "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@localhost"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = fx.make_repo(tmp_path, with_patch=False)
    monkeypatch.chdir(r)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(r / "pipeline.yaml"))
    return r


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def make_change(ws: Path, msg: str = "change core") -> None:
    fx_edit = ws / "pkg" / "core.py"
    fx_edit.write_text(fx_edit.read_text().replace("return x + 7\n", "return x + 7  # seven\n"))
    (ws / "pkg" / "added.py").write_text("A = 1\n")
    (ws / "pkg" / "gone.py").unlink()
    data = bytearray((ws / "pkg" / "sub" / "data.bin").read_bytes())
    data[7] ^= 0xFF
    (ws / "pkg" / "sub" / "data.bin").write_bytes(bytes(data))
    (ws / "pkg" / "sub" / "run.sh").chmod(0o755)
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", msg)


def hostile_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = tmp_path / "hostile-home"
    h.mkdir()
    (h / "order").write_text("pkg/gone.py\n*\n")
    (h / "attrs").write_text("* diff=evil text eol=crlf\n")
    (h / ".gitconfig").write_text(HOSTILE_GITCONFIG.format(order=h / "order",
                                                           attrs=h / "attrs"))
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(h))
    monkeypatch.setenv("GIT_DIFF_OPTS", "--unified=9")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "diff.context")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "8")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")


def test_workspace_export_twice_and_hostile_config_identical(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    rc, _, err = cli(capsys, "patch", "workspace", str(ws))
    assert rc == 0, err
    log = git(ws, "log", "--format=%an <%ae> %ad %s", "--date=iso-strict")
    assert "patchbake <patchbake@localhost> 1970-01-01T00:00:00+00:00 patchbake: pristine " \
           "fixture==1.0" in log
    make_change(ws)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    patch = repo / "patch" / "fixture-fix-v1.0.patch"
    first = patch.read_bytes()
    files_first = (repo / "patch" / "FILES.txt").read_bytes()
    assert b"diff --git a/pkg/added.py b/pkg/added.py\nnew file mode 100644\n" in first
    assert b"GIT binary patch\n" in first
    assert b"diff --git a/pkg/sub/run.sh b/pkg/sub/run.sh\nold mode 100644\nnew mode 100755\n" \
        in first
    listed = (repo / "patch" / "FILES.txt").read_text()
    assert "pkg/sub/data.bin  M  +0  -0  " in listed and "pkg/sub/run.sh  M  +0  -0  " in listed
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    assert patch.read_bytes() == first
    # Hostile user config, env and repository-local config and attributes: same bytes.
    hostile_home(tmp_path, monkeypatch)
    git(ws, "config", "diff.noprefix", "true")
    git(ws, "config", "diff.algorithm", "histogram")
    (ws / ".git" / "info" / "attributes").write_text("*.py diff=evil\n")
    git(ws, "config", "diff.evil.textconv", "tr a-z A-Z")
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    assert patch.read_bytes() == first
    assert (repo / "patch" / "FILES.txt").read_bytes() == files_first
    rc, out, _ = cli(capsys, "patch", "check", "--json")
    assert rc == 0 and json.loads(out)["ok"] is True


def test_reexport_of_an_unchanged_patch_from_a_new_workspace_keeps_source(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    source = (repo / "patch" / "SOURCE").read_bytes()
    ws2 = tmp_path / "ws2"
    assert cli(capsys, "patch", "workspace", str(ws2))[0] == 0
    assert git(ws2, "rev-parse", "HEAD").strip() != git(ws, "rev-parse", "HEAD").strip()
    rc, out, err = cli(capsys, "--json", "patch", "export", "--from", str(ws2))
    assert rc == 0, err
    assert json.loads(out)["changed"] is False
    assert (repo / "patch" / "SOURCE").read_bytes() == source


def test_export_refusals(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    (ws / "pkg" / "core.py").write_text("dirty\n")
    rc, _, err = cli(capsys, "patch", "export", "--from", str(ws))
    assert rc == 23 and "has uncommitted changes (pkg/core.py)" in err
    git(ws, "checkout", "--", "pkg/core.py")
    (ws / "pkg" / "untracked.py").write_text("x\n")
    rc, _, err = cli(capsys, "patch", "export", "--from", str(ws))
    assert rc == 23 and "pkg/untracked.py" in err
    (ws / "pkg" / "untracked.py").unlink()
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    first_commit = git(ws, "rev-parse", "HEAD").strip()
    # A later commit exports fine (SOURCE moves forward) ...
    (ws / "README.txt").write_text("more\n")
    git(ws, "commit", "-qam", "more")
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    # ... an older one (REPO@REV) would move SOURCE backwards.
    rc, _, err = cli(capsys, "patch", "export", "--from", f"{ws}@{first_commit}")
    assert rc == 23 and "refusing to move SOURCE backwards" in err
    rc, _, err = cli(capsys, "patch", "export", "--from", f"{ws}@{first_commit}", "--force",
                     "--reason", "drop the README edit on purpose")
    assert rc == 0, err
    src = json.loads((repo / "patch" / "SOURCE").read_text())
    assert src["forced"]["reason"] == "drop the README edit on purpose"
    assert src["source"]["kind"] == "repo" and src["source"]["commit"] == first_commit
    # A hand edit of the committed patch is not silently erased by the next export.
    p = repo / "patch" / "fixture-fix-v1.0.patch"
    p.write_bytes(p.read_bytes().replace(b"# seven", b"# SEVEN"))
    rc, _, err = cli(capsys, "patch", "export", "--from", str(ws))
    assert rc == 23 and "changed after the last export" in err
    rc, _, err = cli(capsys, "patch", "export", "--from", f"{ws}@nosuchrev")
    assert rc == 23 and "is not a commit" in err


def test_stale_workspace_refused(repo: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Two workspaces from the same patch: the second export must not erase the first."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli(capsys, "patch", "workspace", str(a))[0] == 0
    assert cli(capsys, "patch", "workspace", str(b))[0] == 0
    make_change(a)
    assert cli(capsys, "patch", "export", "--from", str(a))[0] == 0
    (b / "README.txt").write_text("other work\n")
    git(b, "commit", "-qam", "other")
    rc, _, err = cli(capsys, "patch", "export", "--from", str(b))
    assert rc == 23 and "not in" in err and "cannot prove" in err
    # A workspace made from the new patch carries it, so exporting from it is fine.
    c = tmp_path / "c"
    assert cli(capsys, "patch", "workspace", str(c))[0] == 0
    assert (c / "pkg" / "added.py").exists()
    assert cli(capsys, "patch", "export", "--from", str(c))[0] == 0


def test_workspace_reused_or_replaced_never_losing_work(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's chain runs twice: the same workspace again is reused; one made for an
    older patch is replaced by --force only when nothing in it would be lost."""
    ws = tmp_path / "ws"
    rc, out, err = cli(capsys, "--json", "patch", "workspace", str(ws))
    assert rc == 0, err
    first = json.loads(out)
    assert first["reused"] is False
    rc, out, err = cli(capsys, "--json", "patch", "workspace", str(ws))
    assert rc == 0, err
    again = json.loads(out)
    assert again["reused"] is True and again["base_commit"] == first["base_commit"]
    # work committed and exported: the workspace is no longer what `workspace` makes
    make_change(ws)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    rc, _, err = cli(capsys, "patch", "workspace", str(ws))
    assert rc == 23 and "not the current one: it holds commits after" in err
    assert "--force" in err
    # uncommitted work: --force keeps it
    (ws / "README.txt").write_text("not committed\n")
    rc, _, err = cli(capsys, "patch", "workspace", str(ws), "--force")
    assert rc == 23 and "uncommitted changes (README.txt)" in err
    assert (ws / "README.txt").read_text() == "not committed\n"
    git(ws, "commit", "-qam", "not exported")
    rc, _, err = cli(capsys, "patch", "workspace", str(ws), "--force")
    assert rc == 23 and "commits the canonical patch does not reproduce" in err
    assert git(ws, "log", "-1", "--format=%s").strip() == "not exported"
    # once exported, the work is in the patch: --force replaces the workspace
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    rc, out, err = cli(capsys, "--json", "patch", "workspace", str(ws), "--force")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["reused"] is False and doc["base_commit"] != first["base_commit"]
    assert git(ws, "rev-parse", "HEAD").strip() == doc["base_commit"]
    assert (ws / "README.txt").read_text() == "not committed\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ws.")] == []
    # a directory that is no workspace is never replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine\n")
    rc, _, err = cli(capsys, "patch", "workspace", str(other), "--force")
    assert rc == 23 and "not a patchbake workspace" in err
    assert (other / "keep.txt").read_text() == "mine\n"


def test_series_split_then_verify(repo: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws, "first change")
    (ws / "pkg" / "sub" / "nonl.txt").write_text("alpha\nbeta\ngamma\n")
    git(ws, "commit", "-qam", "second change")
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    rc, out, err = cli(capsys, "--json", "series", "split", "--from", str(ws))
    assert rc == 0, err
    assert json.loads(out)["patches"] == ["0001-first-change.patch", "0002-second-change.patch"]
    rc, out, err = cli(capsys, "--json", "series", "verify")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["series_digest"] == doc["canonical_digest"]


def test_guard_reexport_with_git() -> None:
    r = check(fx.patch_bytes(), fx.files_bytes(), pristine_root=fx.PRISTINE)
    assert r.ok, r.problems
    # A hunk header's function context edited by hand parses and applies, but git
    # would not write it: only the re-export notices.
    data = fx.patch_bytes().replace(b"@@ -11,7 +11,8 @@ def f2(x):", b"@@ -11,7 +11,8 @@")
    r = check(data, fx.files_bytes(), pristine_root=fx.PRISTINE)
    assert [p.kind for p in r.problems] == ["reexport", "stale-files"]
    assert "differs from the committed patch at line 5" in r.problems[0].message


def _bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PATH"] = "/usr/bin:/bin"
    return env


def test_check_patch_files_bare_python(tmp_path: Path) -> None:
    """python3 -I -S (no site-packages, no PYTHONPATH): stdlib only, and git."""
    tool = REPO / "tools" / "check_patch_files.py"
    argv = [sys.executable, "-I", "-S", str(tool), "--json", "--patch", str(fx.PATCH),
            "--files", str(fx.FILES), "--source", str(tmp_path / "none"),
            "--tree", str(fx.PRISTINE)]
    r = subprocess.run(argv, env=_bare_env(), capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True
    bad = tmp_path / "bad.patch"
    bad.write_bytes(fx.drop_section(fx.patch_bytes(), "pkg/new.py"))
    argv[argv.index(str(fx.PATCH))] = str(bad)
    r = subprocess.run(argv, env=_bare_env(), capture_output=True, text=True,
                       check=False)
    assert r.returncode == 21
    assert "work was dropped by a regeneration" in r.stdout


def test_check_patch_files_on_repository_patch(shared_home: Path) -> None:
    """The repository's own patch, from a bare interpreter; three-way when the tree is cached."""
    env = {**_bare_env(), "PATCHBAKE_HOME": str(shared_home)}
    r = subprocess.run([sys.executable, "-I", "-S", str(REPO / "tools" / "check_patch_files.py"),
                        "--repo", str(REPO)], env=env, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok: ")


def test_export_from_unrelated_repo_and_missing_source(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "x").write_text("x\n")
    git(other, "add", "x")
    git(other, "commit", "-qm", "unrelated")
    rc, _, err = cli(capsys, "patch", "export", "--from", f"{other}@HEAD")
    assert rc == 23 and "no pristine commit of fixture==1.0" in err
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    (repo / "patch" / "fixture-fix-v1.0.patch").write_bytes(fx.patch_bytes())
    rc, _, err = cli(capsys, "patch", "export", "--from", f"{ws}@HEAD")
    assert rc == 23 and "the committed patch has no SOURCE record" in err
    rc, _, err = cli(capsys, "patch", "export", "--from", str(tmp_path / "nope"))
    assert rc == 23 and "not a workspace directory or REPO@REV" in err


def test_series_split_refusals(repo: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    rc, _, err = cli(capsys, "series", "split", "--from", str(ws))
    assert rc == 24 and "change nothing" in err
    git(ws, "checkout", "-qb", "side")
    make_change(ws)
    git(ws, "checkout", "-q", "main")
    (ws / "README.txt").write_text("main side\n")
    git(ws, "commit", "-qam", "main side")
    git(ws, "merge", "-q", "--no-edit", "side")
    rc, _, err = cli(capsys, "series", "split", "--from", str(ws))
    assert rc == 24 and "is a merge; a series needs a linear history" in err


def test_pristine_commit_rules(repo: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    pristine = git(ws, "rev-parse", "refs/patchbake/pristine").strip()
    message = git(ws, "log", "-1", "--format=%B", pristine)
    # A pristine commit that HEAD does not descend from.
    other = git(ws, "commit-tree", f"{pristine}^{{tree}}", "-m", message + "\nother\n").strip()
    git(ws, "update-ref", "refs/patchbake/pristine", other)
    rc, _, err = cli(capsys, "patch", "export", "--from", str(ws))
    assert rc == 23 and "does not descend from the pristine commit" in err
    # One that records another tree digest (made with another extraction of the pin).
    forged = message.split("tree-digest: ")[0] + "tree-digest: sha256:" + "0" * 64 + "\n"
    root = git(ws, "commit-tree", f"{pristine}^{{tree}}", "-m", forged).strip()
    head = git(ws, "commit-tree", "HEAD^{tree}", "-p", root, "-m", "on forged").strip()
    git(ws, "update-ref", "refs/patchbake/pristine", root)
    git(ws, "update-ref", "refs/heads/main", head)
    rc, _, err = cli(capsys, "patch", "export", "--from", str(ws))
    assert rc == 23 and "its pristine commit records the tree sha256:0000" in err


def test_rewritten_workspace_that_drops_work_is_refused(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A workspace made from the committed patch, reset to the pristine commit: an export
    without the patch's paths would erase them. Rebuilding the same work is fine."""
    a = tmp_path / "a"
    assert cli(capsys, "patch", "workspace", str(a))[0] == 0
    make_change(a)
    assert cli(capsys, "patch", "export", "--from", str(a))[0] == 0
    committed = (repo / "patch" / "fixture-fix-v1.0.patch").read_bytes()
    b = tmp_path / "b"
    assert cli(capsys, "patch", "workspace", str(b))[0] == 0
    git(b, "reset", "-q", "--hard", "refs/patchbake/pristine")
    (b / "README.txt").write_text("other work\n")
    git(b, "commit", "-qam", "other")
    rc, _, err = cli(capsys, "patch", "export", "--from", str(b))
    assert rc == 23 and "its history no longer contains the base commit" in err
    assert "pkg/added.py, pkg/core.py, pkg/gone.py and 2 more" in err
    assert (repo / "patch" / "fixture-fix-v1.0.patch").read_bytes() == committed
    rc, _, err = cli(capsys, "patch", "export", "--from", str(b), "--force", "--reason",
                     "start over")
    assert rc == 0, err
    # The same work rebuilt on the pristine commit (as a series is made) exports as is.
    c = tmp_path / "c"
    assert cli(capsys, "patch", "workspace", str(c))[0] == 0
    head = git(c, "rev-parse", "HEAD").strip()
    git(c, "reset", "-q", "--hard", "refs/patchbake/pristine")
    git(c, "read-tree", "-u", "--reset", head)
    git(c, "commit", "-qm", "the same, rebuilt")
    rc, out, err = cli(capsys, "--json", "patch", "export", "--from", str(c))
    assert rc == 0 and json.loads(out)["changed"] is False, err


def test_batched_reexport_is_the_one_diff(tmp_path: Path) -> None:
    """Diffs of consecutive batches of paths in canonical order, joined, are git's one
    diff of them all: also where a directory's name sorts among its siblings' files, or
    a file becomes a directory."""
    from patchbake.patchset.apply import Outcome
    from patchbake.patchset.diffparse import parse_patch
    from patchbake.patchset.filelist import sort_key
    from patchbake.patchset.reexport import Reexport, reexport
    from patchbake.patchset.strict import apply_in_memory

    names = ["a-b/c", "a.b", "a/b", "a/b.c/d", "a/bc", "a0", "b", "b c/d", "z/\u00e9.txt"]
    made = [Outcome(n, "M", b"one\ntwo\nthree\n" * 3, "100644",
                    b"one\n2\nthree\n" * 3 + n.encode() + b"\n", "100755" if i % 3 else "100644")
            for i, n in enumerate(names)]
    made.append(Outcome("c/new", "A", None, None, b"new\n", "100644"))
    made.append(Outcome("c/old", "D", b"old\n", "100644", None, None))
    made.append(Outcome("d", "D", b"file\n", "100644", None, None))  # a file becomes
    made.append(Outcome("d/e", "A", None, None, b"a directory\n", "100644"))  # a directory
    made.sort(key=lambda o: sort_key(o.path))
    applied = list(apply_in_memory(parse_patch(fx.patch_bytes()), fx.PRISTINE).values())
    assert any(o.edits for o in applied)
    for outcomes in (made, applied):
        one = _one_shot_diff(outcomes, tmp_path)  # `git diff-tree A B`, no --stdin
        assert reexport(outcomes, tmp_path) == one
        for expect in (None, 3, len(outcomes)):  # one file a batch; about three; the guard's
            with Reexport(batches=True, scratch_parent=tmp_path,
                          batch_bytes=1 if expect is None else 1 << 30) as rx:
                if expect is not None:
                    rx.expect(len(outcomes), expect)
                for o in outcomes:
                    rx.add(o)
                assert rx.result() == one
    assert reexport(applied, tmp_path) == fx.patch_bytes()
    assert list(tmp_path.iterdir()) == []  # the scratch repositories are gone


def test_scratch_of_a_killed_process_is_swept(tmp_path: Path) -> None:
    """A process killed with SIGKILL while it held a re-export scratch directory leaves
    it behind; one made once it has not changed for a while removes it."""
    from patchbake.scratch import Scratch

    code = ("import os, sys\nfrom pathlib import Path\n"
            "from patchbake.scratch import Scratch\n"
            "s = Scratch('patchbake-reexport.', Path(sys.argv[1]))\n"
            "(s.path / 'pack').write_bytes(b'x' * 4096)\n"
            "print(s.path, flush=True)\nos.kill(os.getpid(), 9)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
                       check=False)
    assert r.returncode == -9, r.stderr
    left = Path(r.stdout.strip())
    assert left.is_dir() and left.parent == tmp_path
    s = Scratch("patchbake-reexport.", tmp_path)  # just killed: not yet taken for dead
    assert left.is_dir()
    s.remove()
    then = time.time() - scratch.DEAD_AGE_S - 60
    os.utime(left, (then, then))
    s = Scratch("patchbake-reexport.", tmp_path)
    assert not left.exists() and s.path.is_dir()
    s.remove()
    assert list(tmp_path.iterdir()) == []


def test_reexport_and_export_scratch_directories_are_held(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-export's directory is held while it runs (a sweep by another process's
    new one keeps it) and gone after; export's diff makes and removes one too."""
    import fcntl

    from patchbake.patchset import exportdiff
    from patchbake.patchset.diffparse import parse_patch
    from patchbake.patchset.reexport import Reexport
    from patchbake.patchset.strict import apply_in_memory

    applied = list(apply_in_memory(parse_patch(fx.patch_bytes()), fx.PRISTINE).values())
    with Reexport(batches=True, scratch_parent=tmp_path) as rx:
        rx.add(applied[0])
        root = next(tmp_path.iterdir())
        then = time.time() - scratch.DEAD_AGE_S - 60
        os.utime(root, (then, then))
        scratch.Scratch("patchbake-reexport.", tmp_path).remove()
        assert root.is_dir()
        fd = os.open(root / ".held", os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        for o in applied[1:]:
            rx.add(o)
        assert rx.result() == fx.patch_bytes()
    assert list(tmp_path.iterdir()) == []

    made: list[Path] = []

    class Recorded(scratch.Scratch):
        def __init__(self, prefix: str, parent: Path | None = None) -> None:
            super().__init__(prefix, tmp_path)
            made.append(self.path)

    monkeypatch.setattr(exportdiff, "SPLIT_MIN", 2)
    monkeypatch.setattr(exportdiff, "Scratch", Recorded)
    (tmp_path / "repo").mkdir()
    ws, first, second = _two_commits(tmp_path / "repo", {"f00": b"x\n", "f03": b"y\n"})
    from patchbake.patchset.gitcmd import scratch_repo

    repo = scratch_repo(tmp_path / "repo", [ws / ".git" / "objects"])
    exportdiff.export_diff(repo, first, second, "t.patch", ws)
    assert len(made) == 1 and not made[0].exists()


def test_a_cli_process_leaves_no_git_home(repo: Path, home: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """git runs with an empty HOME of its own; a command's process removes it as it
    ends (gitrun's atexit function)."""
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    tmpd = tmp_path / "tmpd"
    tmpd.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_HOME": str(home),
           "TMPDIR": str(tmpd)}
    for args in (["patch", "export", "--from", str(ws)], ["patch", "check"],
                 ["patch", "check", "--json"]):
        out = subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        assert [p.name for p in tmpd.iterdir() if p.name.startswith("patchbake-git-home.")] == []


def _one_shot_diff(outcomes: list[Outcome], parent: Path) -> bytes:
    """git's one diff of the outcomes' pre- and post-images, all in one pack: the
    re-export must write exactly this, however it cuts the files into batches."""
    import shutil

    from patchbake.patchset.gitcmd import canonical_diff, scratch_repo
    from patchbake.patchset.gitobjects import Pack
    from patchbake.patchset.paths import to_bytes

    pack = Pack()
    pre = {to_bytes(o.path): (o.pre_mode or "100644", pack.add(b"blob", o.pre))
           for o in outcomes if o.pre is not None}
    post = {to_bytes(o.path): (o.post_mode or "100644", pack.add(b"blob", o.post))
            for o in outcomes if o.post is not None}
    old, new = pack.add_tree(pre), pack.add_tree(post)
    repo = scratch_repo(parent)
    try:
        pack.write(repo / "objects")
        return canonical_diff(repo, old, new)
    finally:
        shutil.rmtree(repo)


def _two_commits(tmp_path: Path, edits: dict[str, bytes | None],
                 modes: dict[str, int] | None = None) -> tuple[Path, str, str]:
    """A repository whose first commit holds f00..f19 and d, the second ``edits``
    (None deletes) and ``modes``."""
    from patchbake.patchset.gitcmd import git as pgit
    from patchbake.patchset.workspace import commit_all

    ws = tmp_path / "ws"
    ws.mkdir()
    pgit(["init", "-q", "--template=", str(ws)], cwd=tmp_path)
    for i in range(20):
        (ws / f"f{i:02d}").write_bytes(b"".join(b"line %d\n" % k for k in range(40)))
    (ws / "d").write_bytes(b"a file first\n")
    first = commit_all(ws, "first\n", None)
    for name, data in edits.items():
        path = ws / name
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for name, mode in (modes or {}).items():
        (ws / name).chmod(mode)
    return ws, first, commit_all(ws, "second\n", first)


@pytest.mark.parametrize("case", ["plain", "file-to-directory", "symlink", "wrong-halves"])
def test_export_diff_in_halves_is_the_one_diff(tmp_path: Path, case: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two halves of the listed paths (or, where halves would be wrong, one diff): the
    same bytes, sections and post-image hashes as git's one diff."""
    import hashlib

    from patchbake.patchset import exportdiff
    from patchbake.patchset.gitcmd import scratch_repo

    edits: dict[str, bytes | None] = {f"f{i:02d}": b"changed %d\n" % i for i in range(0, 20, 3)}
    edits.update({"f01": None, "new/file": b"new\n"})
    if case == "file-to-directory":
        edits.update({"d": None, "d/e": b"now a directory\n"})
    if case == "symlink":
        edits["d"] = None
    ws, first, second = _two_commits(tmp_path, edits, {"f05": 0o755})
    if case == "symlink":
        (ws / "d").symlink_to("f00")
        from patchbake.patchset.workspace import commit_all
        second = commit_all(ws, "third\n", second)
    monkeypatch.setattr(exportdiff, "SPLIT_MIN", 2)
    if case == "wrong-halves":  # halves out of order: the sections disagree with the list
        monkeypatch.setattr(exportdiff, "_halves", lambda paths: [paths[len(paths) // 2:],
                                                                  paths[:len(paths) // 2]])
    scratch = scratch_repo(tmp_path, [ws / ".git" / "objects"])
    got = exportdiff.export_diff(scratch, first, second, "t.patch", ws)
    one = exportdiff._one_diff(scratch, first, second, "t.patch", None)
    assert got == one
    want = {p: hashlib.sha256((ws / p).read_bytes()).hexdigest()
            for p in ("f00", "f05", "new/file")}
    assert {p: got[2][p] for p in want} == want
    if case in ("plain", "wrong-halves"):
        assert exportdiff._changes(scratch, first, second) is not None
        assert len(exportdiff._halves([p for p, _, _ in
                                       exportdiff._changes(scratch, first, second) or []])) == 2


def test_export_halves_are_not_cut_through_a_directory() -> None:
    from patchbake.patchset import exportdiff

    many = [f"p{i:03d}" for i in range(200)]
    assert exportdiff._halves(many) == [many[:100], many[100:]]
    assert exportdiff._halves(many[:10]) == [[]]  # small: one diff
    cut = many[:99] + ["p099", "p099/x"] + many[101:]  # p099 ends the first half
    assert exportdiff._halves(sorted(cut)) == [[]]


def test_check_and_export_processes_start_without_heavy_imports(
        repo: Path, tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`patch check` and `patch export` processes are timed against `git apply --check`
    and `git diff` (bench/bench_patch.py): output to a pipe draws nothing, so they run
    without rich, and on Linux the store's directory is the XDG one, without platformdirs."""
    ws = tmp_path / "ws"
    assert cli(capsys, "patch", "workspace", str(ws))[0] == 0
    make_change(ws)
    # the first export of a lineage with a series splits it (not timed)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    heavy = ("platformdirs", "rich")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    for args in (["patch", "export", "--from", str(ws)], ["patch", "check"],
                 ["patch", "check", "--json"]):
        code = ("import sys\nfrom patchbake.entry import main\n"
                f"rc = main({args!r})\n"
                f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
        out = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.stderr.strip().splitlines()[-1] == "0 []", (args, out.stderr)
    # the repository's own pipeline.yaml declares images, suites, channels and signing too
    code = ("import sys\nfrom patchbake.entry import main\n"
            "rc = main(['--pipeline', sys.argv[1], 'patch', 'check', '--no-tree'])\n"
            f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "pipeline.yaml")],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.stderr.strip().splitlines()[-1] == "0 []", out.stderr
