"""``patchbake port`` on the real vLLM sdists: 0.25.1 -> 0.33.0, every verdict.

The fixture patches (tests/fixtures/port/, made by its regen.py from real 0.25.1 files)
touch files whose real upstream history between the two releases gives each verdict.
Both sdists are fetched once into ``shared_home`` (the 0.33.0 one is 47 MB).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from patchbake.entry import main
from patchbake.config import load

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.sdist033]
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "port"
SHA_0251 = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"
SHA_0330 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"

PIPELINE = f"""\
version: 1
name: port-test
# lineages: one per upstream pin (this comment must survive the port's edit)
lineages:
  v0.25.1:
    name: fx
    upstream: {{kind: index, package: vllm, version: 0.25.1, filename: vllm-0.25.1.tar.gz,
               sha256: {SHA_0251}, strip: vllm-0.25.1}}
    patch: patch/fx-v0.25.1.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE

# the suites of this instance (none)
suites: {{}}
"""
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}


@pytest.fixture(scope="module")
def store(shared_home: Path) -> Path:
    return shared_home


def cli(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def make_repo(tmp: Path, fixture: str) -> Path:
    repo = tmp / "repo"
    (repo / "patch").mkdir(parents=True)
    (repo / "pipeline.yaml").write_text(PIPELINE)
    (repo / "patch" / "fx-v0.25.1.patch").write_bytes((FIXTURES / fixture).read_bytes())
    files = FIXTURES / fixture.replace(".patch", ".FILES.txt")
    (repo / "patch" / "FILES.txt").write_bytes(files.read_bytes())
    return repo


@pytest.fixture(scope="module")
def ported(store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    mp = pytest.MonkeyPatch()
    mp.setenv("PATCHBAKE_HOME", str(store))
    mp.setenv("PATCHBAKE_NO_PROGRESS", "1")
    repo = make_repo(tmp_path_factory.mktemp("verdicts"), "verdicts-v0.25.1.patch")
    mp.setenv("PATCHBAKE_PIPELINE", str(repo / "pipeline.yaml"))
    try:
        rc, out, err = cli("port", "--to", "0.33.0", "--sha256", SHA_0330, "--json",
                           "--markdown", str(repo / "port.md"))
    finally:
        mp.undo()
    assert rc == 26, out + err  # a conflict and a vanished target are left to the user
    assert "2 hunk(s) need a hand" in err
    return repo, json.loads(out), err


def verdict(doc: dict[str, Any], path: str, hunk: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [h for h in doc["hunks"]
                                  if h["file"] == path and h["hunk"] == hunk]
    [row] = rows
    return row


def ws_file(doc: dict[str, Any], path: str) -> str:
    return (Path(doc["workspace"]) / path).read_text()


def test_clean_hunks_apply_at_their_recorded_line(ported: tuple[Path, dict[str, Any], str]) -> None:
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/ray/lazy_utils.py", 1)
    assert (row["verdict"], row["line"], row["offset"]) == ("clean", 3, None)
    text = ws_file(doc, "vllm/ray/lazy_utils.py").splitlines()
    assert text[5] == '    """Check if Ray is initialized (False when Ray is not installed)."""'
    new = verdict(doc, "vllm/patchbake_port_marker.py", 0)
    assert new["verdict"] == "clean"
    assert "PORTED = True" in ws_file(doc, "vllm/patchbake_port_marker.py")


def test_moved_hunk_reports_its_offset(ported: tuple[Path, dict[str, Any], str]) -> None:
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/ray/lazy_utils.py", 2)
    assert (row["verdict"], row["recorded_line"], row["line"], row["offset"]) == \
        ("moved", 22, 21, -1)
    lines = ws_file(doc, "vllm/ray/lazy_utils.py").splitlines()
    # upstream dropped a blank line above it: the change sits one line up, once
    assert lines[23].endswith("is not None  # actor")  # line 25 in 0.25.1
    assert sum("# actor" in ln for ln in lines) == 1


def test_context_changed_but_mergeable_is_merged(ported: tuple[Path, dict[str, Any], str]) -> None:
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/utils/tensor_schema.py", 1)
    assert row["verdict"] == "merged" and row["line"] == 161
    text = ws_file(doc, "vllm/utils/tensor_schema.py")
    assert "dynamic_dims: set[str],  # names whose size may vary\n" in text
    # upstream's own change (the blank line after the docstring dropped) is kept
    assert 'matches the expected shape."""\n        if len(actual_shape)' in text
    assert "<<<<<<<" not in text


def test_conflict_leaves_markers_with_the_old_pristine_as_base(
        ported: tuple[Path, dict[str, Any], str]) -> None:
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/parser/engine/events.py", 1)
    assert row["verdict"] == "conflict"
    assert "at the end of the new file" in row["note"]
    text = ws_file(doc, "vllm/parser/engine/events.py")
    assert re.search(r"<<<<<<< ours \(v0\.25\.1 patch\)\n    token_limit: int = 0\n"
                     r"\|\|\|\|\|\|\| base \(vllm==0\.25\.1 pristine\)\n=======\n"
                     r"    token_count: int = 0\n>>>>>>> theirs \(vllm==0\.33\.0\)\n", text)


def test_change_upstream_made_with_more_beside_it_is_absorbed(
        ported: tuple[Path, dict[str, Any], str]) -> None:
    """git's merge marks a conflict (upstream added a blank line where we added the
    sentence); the block holds our change, so it is absorbed, never a conflict."""
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/config/kv_events.py", 1)
    assert row["verdict"] == "absorbed"
    assert "together with others beside it" in row["note"]
    text = ws_file(doc, "vllm/config/kv_events.py")
    assert text.count("send high-water mark") == 1 and "<<<<<<<" not in text


def test_target_gone_names_the_rename_candidate(ported: tuple[Path, dict[str, Any], str]) -> None:
    _repo, doc, _ = ported
    row = verdict(doc, "vllm/entrypoints/serve/utils/ssl.py", 1)
    assert row["verdict"] == "target-gone"
    assert row["candidates"][0] == {"path": "vllm/entrypoints/launchers/utils/ssl.py",
                                    "similarity": 1.0}
    kept = Path(doc["workspace"]) / ".git" / "patchbake-port" / "target-gone.patch"
    assert b"diff --git a/vllm/entrypoints/serve/utils/ssl.py" in kept.read_bytes()


def test_report_counts_markdown_and_pipeline_edit(ported: tuple[Path, dict[str, Any], str]) -> None:
    repo, doc, _ = ported
    assert doc["counts"] == {"clean": 2, "moved": 1, "absorbed": 1, "merged": 1,
                             "conflict": 1, "target-gone": 1}
    assert doc["committed"] is None and doc["pipeline_updated"] is True
    md = (repo / "port.md").read_text()
    assert md.startswith("### Port of `fx-v0.25.1.patch`: vllm==0.25.1 -> vllm==0.33.0")
    assert "| `vllm/ray/lazy_utils.py` | 2 | 22 | moved | 21 | -1 |" in md
    text = (repo / "pipeline.yaml").read_text()
    assert "# lineages: one per upstream pin (this comment must survive" in text
    assert text.index("  v0.33.0:") < text.index("# the suites of this instance")
    lin = load(repo / "pipeline.yaml").lineage("v0.33.0")
    assert lin.upstream.sha256 == SHA_0330 and lin.upstream.strip == "vllm-0.33.0"
    assert lin.patch == repo / "patch" / "v0.33.0" / "fx-v0.33.0.patch"
    assert lin.series == repo / "patch" / "v0.33.0" / "series"


def test_resolve_commit_export_new_lineage(ported: tuple[Path, dict[str, Any], str],
                                           store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, doc, _ = ported
    ws = Path(doc["workspace"])
    old = {p.name: p.read_bytes() for p in (repo / "patch").iterdir() if p.is_file()}
    events = ws / "vllm/parser/engine/events.py"
    text = events.read_text()
    events.write_text(re.sub(r"<<<<<<< .*?=======\n(.*?)>>>>>>> [^\n]*\n",
                             r"\1    token_limit: int = 0\n", text, flags=re.S))
    ssl = ws / "vllm/entrypoints/launchers/utils/ssl.py"
    ssl.write_text(ssl.read_text().replace("that monitors SSL", "that watches SSL"))
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "add", "-A"], cwd=ws, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "port to 0.33.0"], cwd=ws, env=env, check=True)
    monkeypatch.setenv("PATCHBAKE_HOME", str(store))
    monkeypatch.setenv("PATCHBAKE_NO_PROGRESS", "1")
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(repo / "pipeline.yaml"))
    rc, out, err = cli("--lineage", "v0.33.0", "patch", "export", "--json")
    assert rc == 0, out + err
    exp = json.loads(out)
    assert exp["files"] == 5 and exp["series"] == ["0001-port-to-0-33-0.patch"]
    new_dir = repo / "patch" / "v0.33.0"
    assert sorted(p.name for p in new_dir.iterdir()) == [
        "FILES.txt", "SOURCE", "fx-v0.33.0.patch", "series"]
    # the old lineage is left alone
    assert {p.name: p.read_bytes() for p in (repo / "patch").iterdir() if p.is_file()} == old
    for key in ("v0.25.1", "v0.33.0"):
        rc, out, err = cli("--lineage", key, "patch", "check", "--json")
        assert rc == 0 and json.loads(out)["ok"] is True, (key, out, err)
    rc, out, err = cli("--lineage", "v0.33.0", "series", "verify", "--independent", "--json")
    assert rc == 0, out + err
    assert json.loads(out)["independent"] is True
    # porting again, now that the new lineage is declared and has a patch: the pin as
    # declared, pipeline.yaml untouched, and the workspace starts from the pristine tree
    before = (repo / "pipeline.yaml").read_bytes()
    again = repo / ".work" / "again"
    rc, out, err = cli("port", "--to", "0.33.0", "--workspace", str(again), "--json")
    assert rc == 26, out + err
    assert json.loads(out)["pipeline_updated"] is False
    assert (repo / "pipeline.yaml").read_bytes() == before
    assert "<<<<<<< ours" in (again / "vllm/parser/engine/events.py").read_text()
    assert "that monitors SSL" in (again / "vllm/entrypoints/launchers/utils/ssl.py").read_text()


def test_real_upstream_change_backported_is_absorbed(store: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, "backport-v0.25.1.patch")
    monkeypatch.setenv("PATCHBAKE_HOME", str(store))
    monkeypatch.setenv("PATCHBAKE_NO_PROGRESS", "1")
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(repo / "pipeline.yaml"))
    rc, out, err = cli("port", "--to", "0.33.0", "--sha256", SHA_0330, "--json")
    assert rc == 0, out + err
    doc = json.loads(out)
    [row] = doc["hunks"]
    assert (row["file"], row["verdict"], row["line"]) == \
        ("vllm/config/kv_events.py", "absorbed", 31)
    assert doc["counts"]["absorbed"] == 1 and doc["unresolved"] == 0
    ws = Path(doc["workspace"])
    # never applied twice: the ported file is upstream's, byte for byte, and committed
    pristine = load(repo / "pipeline.yaml").lineage("v0.33.0")
    from patchbake.sources import fetch
    from patchbake.store import Store

    root = fetch(pristine, Store.open()).root
    got = (ws / "vllm/config/kv_events.py").read_bytes()
    assert got == (root / "vllm/config/kv_events.py").read_bytes()
    assert got.count(b"send high-water mark") == 1
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True,
                            check=True).stdout
    assert status == b"" and doc["committed"]
