"""`patchbake port` refusals before any work, and `series verify --independent`'s
dependency finding (hermetic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.entry import main
from patchbake.patchset.gitbinary import blob_id
from patchbake.patchset.seriesdeps import _applies, _needs

PIPE = """\
version: 1
name: t
lineages:
  v1.0:
    name: fix
    upstream: {kind: index, package: pkg, version: "1.0", filename: pkg-1.0.tar.gz,
               sha256: %s}
    patch: patch/fix-v1.0.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
  v1.5:
    name: fix
    upstream: {kind: index, package: pkg, version: "1.5", filename: pkg-1.5.tar.gz,
               sha256: %s}
    patch: patch/v1.5/fix-v1.5.patch
    files: patch/v1.5/FILES.txt
    source_record: patch/v1.5/SOURCE
""" % ("a" * 64, "b" * 64)


@pytest.fixture
def pipe(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPE)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(p))
    return p


@pytest.mark.parametrize(("argv", "message"), [
    (["port", "--to", "0.33 x"], "--to '0.33 x' is not a release version"),
    (["port", "--to", "2.0", "--lineage", "v 2"], "--lineage 'v 2' is not a lineage key"),
    (["port", "--to", "0.5"], "no lineage older than 0.5 to port from"),
    (["--lineage", "v1.5", "port", "--to", "1.5"], "lineage v1.5 is the one being ported"),
    (["--lineage", "v1.0", "port", "--to", "2.0", "--lineage", "v1.5"],
     "lineage v1.5 exists and pins 1.5, not 2.0"),
    (["port", "--to", "2.0", "--sha256", "XYZ"], "--sha256 'XYZ' is not 64 lowercase hex"),
])
def test_port_refusals(pipe: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                       message: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 25 and message in err, err
    assert pipe.read_text() == PIPE


def _patch(path: str, before: bytes, after: bytes, old_start: int, old: list[bytes],
           new: list[bytes]) -> tuple[str, bytes]:
    body = b"".join([b" " + x if x in new and x in old else b"-" + x for x in old]
                    + [b"+" + x for x in new if x not in old])
    head = (f"diff --git a/{path} b/{path}\nindex {blob_id(before)}..{blob_id(after)} 100644\n"
            f"--- a/{path}\n+++ b/{path}\n@@ -{old_start},{len(old)} +{old_start},{len(new)} @@\n")
    return path, head.encode() + body


def test_dependent_slice_names_what_it_needs(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\n")
    (tmp_path / "b.txt").write_bytes(b"uno\n")
    # slice 1 changes a.txt, slice 2 changes a.txt again on top of it, slice 3 is b.txt
    _n1, p1 = _patch("a.txt", b"one\ntwo\n", b"one\nTWO\n", 1, [b"one\n", b"two\n"],
                    [b"one\n", b"TWO\n"])
    _n2, p2 = _patch("a.txt", b"one\nTWO\n", b"ONE\nTWO\n", 1, [b"one\n", b"TWO\n"],
                    [b"ONE\n", b"TWO\n"])
    _n3, p3 = _patch("b.txt", b"uno\n", b"UNO\n", 1, [b"uno\n"], [b"UNO\n"])
    patches = [("0001.patch", p1), ("0002.patch", p2), ("0003.patch", p3)]
    assert _applies([patches[0]], tmp_path) is None
    why = _applies([patches[1]], tmp_path)
    assert why is not None and "0002.patch" in why
    assert _needs(1, patches, tmp_path) == ("0001.patch",)
    assert _applies([patches[2]], tmp_path) is None
    assert _needs(2, patches, tmp_path) == ()


def _index(tmp_path: Path, anchor: str) -> str:
    d = tmp_path / "index" / "pkg"
    d.mkdir(parents=True)
    (d / "index.html").write_text(f"<html><body>{anchor}</body></html>\n")
    return (tmp_path / "index").as_uri()


def test_pin_comes_from_the_index_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.port.pin import index_sha256

    url = _index(tmp_path, f'<a href="../files/pkg-2.0.tar.gz#sha256={"c" * 64}">'
                           "pkg-2.0.tar.gz</a>")
    monkeypatch.setenv("PIP_INDEX_URL", url)
    assert index_sha256("pkg", "pkg-2.0.tar.gz") == "c" * 64


@pytest.mark.parametrize(("anchor", "message"), [
    ('<a href="../files/pkg-1.0.tar.gz">pkg-1.0.tar.gz</a>', "lists no file 'pkg-2.0.tar.gz'"),
    ('<a href="../files/pkg-2.0.tar.gz">pkg-2.0.tar.gz</a>', "states no sha256 for pkg-2.0"),
])
def test_port_refuses_an_unpinnable_sdist(pipe: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], anchor: str,
                                          message: str) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", _index(tmp_path, anchor))
    rc = main(["port", "--to", "2.0"])
    err = capsys.readouterr().err
    assert rc == 10 and message in err, err
    assert pipe.read_text() == PIPE
