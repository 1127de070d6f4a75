"""The ``git`` source kind against a real git repository."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from patchbake import config, entry
from patchbake.digest import Digest
from patchbake.errors import FetchError
from patchbake.sources import fetch, tree_digest
from patchbake.store import Store

pytestmark = pytest.mark.integration

ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "upstream"
    (r / "pkg").mkdir(parents=True)
    (r / "setup.py").write_text("setup()\n")
    (r / "pkg" / "__init__.py").write_text("x = 1\r\n")  # CRLF kept as committed
    (r / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(r / "run.sh", 0o755)
    os.symlink("pkg/__init__.py", r / "link")
    git(r, "init", "-q", "-b", "main")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "one")
    return r


def lineage(repo: Path, commit: str) -> config.Lineage:
    data = {"version": 1, "name": "t", "lineages": {"g": {
        "name": "n", "patch": "p", "files": "f", "source_record": "s",
        "upstream": {"kind": "git", "version": "1.0", "repo": str(repo), "commit": commit}}}}
    return config.parse(data, repo.parent / "pipeline.yaml").lineage()


def working_tree_digest(repo: Path, tmp: Path) -> Digest:
    import shutil
    copy = tmp / "wt"
    shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    return tree_digest(copy)


def test_git_commit_fetched(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    store = Store.open(tmp_path / "store")
    f = fetch(lineage(repo, commit), store)
    assert f.archive_sha256 is None and f.files == 4 and f.pin.endswith(f"git:{commit}")
    assert f.tree_digest == working_tree_digest(repo, tmp_path)
    assert (f.root / "pkg" / "__init__.py").read_bytes() == b"x = 1\r\n"
    assert os.readlink(f.root / "link") == "pkg/__init__.py"
    assert os.stat(f.root / "run.sh").st_mode & 0o111
    # a later commit on the branch does not change what the pinned commit gives
    (repo / "setup.py").write_text("changed\n")
    git(repo, "commit", "-q", "-am", "two")
    assert fetch(lineage(repo, commit), store) == f
    second = fetch(lineage(repo, git(repo, "rev-parse", "HEAD")), store)
    assert second.tree_digest != f.tree_digest


def test_bad_commit(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.open(tmp_path / "store")
    with pytest.raises(FetchError, match="is not a commit in"):
        fetch(lineage(repo, "0" * 40), store)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with pytest.raises(FetchError, match=f"{tree} is a tree, not a commit"):
        fetch(lineage(repo, tree), store)
    with pytest.raises(FetchError, match="is not a git repository"):
        fetch(lineage(tmp_path, "0" * 40), store)
    with pytest.raises(FetchError, match="does not exist"):
        fetch(lineage(tmp_path / "nope", "0" * 40), store)
    assert list((store.root / "trees").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []
    # through the CLI: message and exit code
    p = tmp_path / "pipeline.yaml"
    p.write_text(f"""version: 1
name: t
lineages:
  g:
    name: n
    upstream: {{kind: git, version: '1.0', repo: upstream, commit: '{"1" * 40}'}}
    patch: p
    files: f
    source_record: s
""")
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    assert entry.main(["--pipeline", str(p), "fetch"]) == 10
    err = capsys.readouterr().err
    assert f"git source: {'1' * 40} is not a commit in {repo}" in err
