"""The patchset stage on the real vLLM 0.25.1 sdist (fetched once into ``shared_home``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from patchbake.entry import main
from patchbake.config import load
from patchbake.patchset.filelist import parse_filelist
from patchbake.patchset.patched import patched_tree
from patchbake.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.sdist]
REPO = Path(__file__).resolve().parents[2]
SHA = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"

PIPELINE = f"""\
version: 1
name: sdist-test
lineages:
  v0.25.1:
    name: test-change
    upstream: {{kind: index, package: vllm, version: 0.25.1, filename: vllm-0.25.1.tar.gz,
               sha256: {SHA}, strip: vllm-0.25.1}}
    patch: patch/test-change-v0.25.1.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
"""


@pytest.fixture
def store_env(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHBAKE_HOME", str(shared_home))
    monkeypatch.setenv("PATCHBAKE_NO_PROGRESS", "1")
    return shared_home


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_repository_patch_passes_the_guard(store_env: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(REPO / "pipeline.yaml"))
    rc, out, err = cli(capsys, "patch", "check", "--json")
    assert rc == 0, out + err
    doc = json.loads(out)
    assert doc["ok"] is True and doc["files"] >= 1 and doc["problems"] == []


def test_patched_tree_matches_files_txt(store_env: Path) -> None:
    lin = load(REPO / "pipeline.yaml").lineage()
    tree = patched_tree(lin, Store.open())
    fl = parse_filelist(lin.files.read_bytes())
    for e in fl.entries:
        if e.sha256:
            assert tree.files[e.path] == e.sha256
            assert hashlib.sha256((tree.root / e.path).read_bytes()).hexdigest() == e.sha256
    assert tree.tree_digest != tree.pristine_digest


def test_workspace_edit_export_is_reproducible(store_env: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "patch").mkdir(parents=True)
    (repo / "pipeline.yaml").write_text(PIPELINE)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(repo / "pipeline.yaml"))
    ws = tmp_path / "ws"
    rc, _, err = cli(capsys, "patch", "workspace", str(ws))
    assert rc == 0, err
    target = ws / "vllm" / "v1" / "sample" / "ops" / "topk_topp_sampler.py"
    target.write_text(target.read_text().replace(
        "    The logits tensor may be updated in-place.\n",
        "    The logits tensor may be updated in-place (test).\n", 1))
    (ws / "vllm" / "patchbake_test_marker.py").write_text('"""marker"""\n')
    (ws / "setup.py").chmod(0o755)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    subprocess.run(["git", "add", "-A"], cwd=ws, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "test edit"], cwd=ws, env=env, check=True)
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    patch = repo / "patch" / "test-change-v0.25.1.patch"
    first = patch.read_bytes()
    assert b"old mode 100644\nnew mode 100755\n" in first
    assert b"new file mode 100644" in first
    # Same bytes as git's own diff of the two commits with the canonical flags.
    plain = subprocess.run(
        ["git", "-c", "core.quotePath=true", "diff", "--no-ext-diff", "--no-textconv",
         "--no-color", "--src-prefix=a/", "--dst-prefix=b/", "-U3", "--inter-hunk-context=0",
         "--diff-algorithm=myers", "--indent-heuristic", "--no-renames", "--full-index",
         "--binary", "refs/patchbake/pristine", "HEAD"],
        cwd=ws, check=True, capture_output=True).stdout
    assert plain == first
    home = tmp_path / "hostile"
    home.mkdir()
    (home / ".gitconfig").write_text("[diff]\n\tnoprefix = true\n\talgorithm = patience\n"
                                     "\tcontext = 5\n[core]\n\tabbrev = 9\n")
    monkeypatch.setenv("HOME", str(home))
    assert cli(capsys, "patch", "export", "--from", str(ws))[0] == 0
    assert patch.read_bytes() == first
    rc, out, err = cli(capsys, "patch", "check", "--json")
    assert rc == 0, out + err
    assert json.loads(out)["files"] == 3


def test_new_patched_tree_reads_only_what_the_patch_wrote(shared_home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The tree memo on the real sdist: once the pristine tree is memoised, building a new
    patched tree (hard links + the patch's files) reads only the files the patch wrote
    (and their pristine originals, whose ctime the unlink moved), not all ~5,900."""
    import shutil

    from patchbake.sources import digest as digestmod

    home = tmp_path / "store"
    (home / "blobs" / "sha256").mkdir(parents=True)
    shutil.copy(shared_home / "blobs" / "sha256" / SHA, home / "blobs" / "sha256" / SHA)
    monkeypatch.setenv("PATCHBAKE_HOME", str(home))
    lin = load(REPO / "pipeline.yaml").lineage()
    store = Store.open()
    import time

    from patchbake.sources import fetch

    from patchbake.sources.digest import tree_entries
    from patchbake.sources.treememo import TreeMemo

    fetched = fetch(lin, store)
    time.sleep(0.2)  # files are memoised once older than RACY_NS (their ctime is now)
    # verify and the pristine package hash the pristine tree with its memo: so does this
    tree_entries(fetched.root, memo=TreeMemo.for_tree(store.root, fetched.root))
    first = patched_tree(lin, store)
    for meta in (home / "patched").glob("*.json"):  # the next edit: a tree not built yet
        meta.unlink()
    # moved, not deleted: deleting the links would move the pristine files' ctimes
    # (link count), and the next apply would read them all again once
    first.root.rename(home / "previous-tree")
    reads: list[bytes] = []
    real = digestmod._hash_file

    def counted(path: bytes) -> str:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(digestmod, "_hash_file", counted)
    again = patched_tree(lin, store)
    assert again.tree_digest == first.tree_digest
    written = len(first.files)
    assert 0 < len(reads) <= 2 * written, (len(reads), written)
    assert sum(1 for p in again.root.rglob("*") if p.is_file()) > 5000
