"""``patchbake fetch``: output fields, and each user-facing failure's message and exit
code as the CLI reports them. Plus two processes sharing one store."""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import tarfile
from pathlib import Path

import pytest
from patchbake import config, entry
from patchbake.sources import fetch
from patchbake.store import Store


def make_sdist(path: Path, extra: list[tarfile.TarInfo] | None = None) -> str:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in (("demo-1.0/setup.py", b"setup()\n"), ("demo-1.0/demo/a.py", b"a\n")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for ti in extra or []:
            tf.addfile(ti)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pipeline(tmp: Path, upstream: str) -> Path:
    p = tmp / "pipeline.yaml"
    p.write_text(f"""version: 1
name: t
lineages:
  v1.0:
    name: n
    upstream: {{{upstream}}}
    patch: patch/n.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
""")
    return p


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = entry.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_fetch_json_and_table(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sha = make_sdist(tmp_path / "demo.tar.gz")
    p = pipeline(tmp_path, f"kind: path, version: '1.0', path: demo.tar.gz, sha256: {sha}")
    rc, out, err = run(["--pipeline", str(p), "fetch", "--json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) == {"format_version", "lineage", "pin", "kind", "archive_sha256",
                        "tree_digest", "files", "store_path"}
    assert doc["archive_sha256"] == sha and doc["files"] == 2 and doc["lineage"] == "v1.0"
    assert Path(doc["store_path"]).is_relative_to(home)
    rc, out, _ = run(["--pipeline", str(p), "fetch", "--verify"], capsys)
    assert rc == 0 and doc["tree_digest"][:20] in out.replace("\n", "").replace("│", "")


@pytest.mark.parametrize("case,code,message", [
    ("missing", 10, "does not exist"),
    ("mismatch", 11, "expected sha256:" + "1" * 64 + "; nothing was stored"),
    ("unsafe", 12, "archive member 'demo-1.0/l' is a symlink to '../../etc'"),
    ("strip", 10, "is outside the top-level directory 'other'"),
])
def test_fetch_errors(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str],
                      case: str, code: int, message: str) -> None:
    link = tarfile.TarInfo("demo-1.0/l")
    link.type, link.linkname = tarfile.SYMTYPE, "../../etc"
    sha = make_sdist(tmp_path / "demo.tar.gz", [link] if case == "unsafe" else [])
    up = {"missing": "kind: path, version: '1.0', path: gone.tar.gz",
          "mismatch": f"kind: path, version: '1.0', path: demo.tar.gz, sha256: '{'1' * 64}'",
          "unsafe": f"kind: path, version: '1.0', path: demo.tar.gz, sha256: {sha}",
          "strip": "kind: path, version: '1.0', path: demo.tar.gz, strip: other"}[case]
    rc, out, err = run(["--pipeline", str(pipeline(tmp_path, up)), "fetch"], capsys)
    assert rc == code and message in err and err.startswith("patchbake: error: "), err
    assert out == ""
    assert list((home / "tmp").iterdir()) == [] and list((home / "trees").iterdir()) == []


def test_fetch_all_lineages(tmp_path: Path, home: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    sha = make_sdist(tmp_path / "demo.tar.gz")
    p = pipeline(tmp_path, f"kind: path, version: '1.0', path: demo.tar.gz, sha256: {sha}")
    text = p.read_text()
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a").write_text("a")
    p.write_text(text + text.split("lineages:\n", 1)[1].replace("v1.0:", "v0.9:").replace(
        f"kind: path, version: '1.0', path: demo.tar.gz, sha256: {sha}",
        "kind: path, version: '0.9', path: tree").replace("patch/", "patch/v0.9/"))
    rc, out, err = run(["--pipeline", str(p), "fetch", "--all", "--json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)["lineages"]
    assert [d["lineage"] for d in doc] == ["v0.9", "v1.0"]
    assert doc[0]["archive_sha256"] is None and doc[0]["files"] == 1
    rc, out, _ = run(["--pipeline", str(p), "--lineage", "v0.9", "fetch"], capsys)
    assert rc == 0 and "v0.9" in out and "-" in out


def _fetch_in_child(store_root: str, pipeline_path: str, q: multiprocessing.Queue[str]) -> None:
    lin = config.load(pipeline_path).lineage()
    f = fetch(lin, Store.open(store_root), base=Path(pipeline_path).parent)
    q.put(str(f.tree_digest))


def test_two_processes_share_the_store(tmp_path: Path) -> None:
    sha = make_sdist(tmp_path / "demo.tar.gz")
    p = pipeline(tmp_path, f"kind: path, version: '1.0', path: demo.tar.gz, sha256: {sha}")
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[str] = ctx.Queue()
    procs = [ctx.Process(target=_fetch_in_child, args=(str(tmp_path / "s"), str(p), q))
             for _ in range(2)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(30)
        assert pr.exitcode == 0
    digests = {q.get(timeout=5), q.get(timeout=5)}
    assert len(digests) == 1
    store = tmp_path / "s"
    assert len(list((store / "trees").iterdir())) == 1
    assert len(list((store / "sources").iterdir())) == 1
    assert list((store / "tmp").iterdir()) == []
