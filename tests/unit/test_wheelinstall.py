"""The wheel installer on small hand-made wheels: where each part goes, scripts, entry
points, RECORD, unsafe member paths, RECORD mismatches and conflicts between wheels."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from patchbake.errors import ImageError, IntegrityError, UnsafeArchiveError
from patchbake.images.wheelinstall import Scheme, install_wheel, merge, opened
from patchbake.oci.tarwriter import Entry, with_parents, write_layer

SP = "usr/local/lib/python3.11/dist-packages"
SCHEME = Scheme.debian_local("/" + SP, "3.11")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path, files: dict[str, bytes], *, name: str = "demo",
               version: str = "1.0", executable: tuple[str, ...] = (),
               record: dict[str, str] | None = None, leave_out: tuple[str, ...] = (),
               sizes: dict[str, str] | None = None) -> Path:
    """A wheel with ``files`` plus METADATA, WHEEL and a correct RECORD (``record``
    overrides rows; ``leave_out`` drops rows)."""
    di = f"{name}-{version}.dist-info"
    members = {**files, f"{di}/METADATA": f"Name: {name}\nVersion: {version}\n".encode(),
               f"{di}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"}
    rows = [[p, f"sha256={_b64(d)}", str(len(d))] for p, d in members.items()
            if p not in leave_out]
    for p, value in (record or {}).items():
        rows = [r for r in rows if r[0] != p] + [[p, value, str(len(members[p]))]]
    for p, size in (sizes or {}).items():
        rows = [r if r[0] != p else [p, r[1], size] for r in rows]
    out = io.StringIO()
    csv.writer(out).writerows([*rows, [f"{di}/RECORD", "", ""]])
    members[f"{di}/RECORD"] = out.getvalue().encode()
    with zipfile.ZipFile(path, "w") as zf:
        for p, d in members.items():
            info = zipfile.ZipInfo(p)
            info.external_attr = (0o100755 if p in executable else 0o100644) << 16
            zf.writestr(info, d)
    return path


def install(path: Path) -> dict[str, tuple[Entry, bytes]]:
    """Installed files by absolute path, with their bytes as the layer writer reads them."""
    with opened(path, path.name) as zf:
        inst = install_wheel(zf, path.name, SCHEME)
        out = {}
        for f in inst.files:
            e = f.entry
            if e.data is not None:
                data = e.data
            else:
                assert e.opener is not None
                with e.opener() as fh:
                    data = b"".join(iter(lambda: fh.read(7), b""))
            assert hashlib.sha256(data).hexdigest() == f.sha256
            out["/" + e.path] = (e, data)
        return out


def test_files_scripts_data_headers_and_entry_points(tmp_path: Path) -> None:
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {
        "demo/__init__.py": b"x = 1\n",
        "demo/_ext.so": b"\x7fELF",
        "demo-1.0.data/purelib/demo_pure.py": b"p\n",
        "demo-1.0.data/platlib/demo_plat.so": b"\x7fELF2",
        "demo-1.0.data/scripts/demo-run": b"#!python -u\nprint('hi')\n",
        "demo-1.0.data/scripts/plain.sh": b"#!/bin/sh\necho\n",
        "demo-1.0.data/headers/demo.h": b"int x;\n",
        "demo-1.0.data/data/share/demo/x.txt": b"data\n",
        "demo-1.0.dist-info/entry_points.txt":
            b"[console_scripts]\ndemo = demo.cli:main.run\n[gui_scripts]\nDemoGui = demo.gui:start\n"
            b"[demo.plugins]\nignored = demo:plugin\n",
    }, executable=("demo/_ext.so",))
    got = install(whl)
    sp = "/" + SP
    assert got[f"{sp}/demo/__init__.py"][1] == b"x = 1\n"
    assert got[f"{sp}/demo/__init__.py"][0].mode == 0o644
    assert got[f"{sp}/demo/_ext.so"][0].mode == 0o755
    assert f"{sp}/demo_pure.py" in got and f"{sp}/demo_plat.so" in got
    assert got["/usr/local/bin/demo-run"][1] == b"#!/usr/bin/python3 -u\nprint('hi')\n"
    assert got["/usr/local/bin/demo-run"][0].mode == 0o755
    assert got["/usr/local/bin/plain.sh"][1] == b"#!/bin/sh\necho\n"
    assert got["/usr/local/include/python3.11/demo/demo.h"][1] == b"int x;\n"
    assert got["/usr/local/share/demo/x.txt"][1] == b"data\n"
    launcher = got["/usr/local/bin/demo"][1].decode()
    assert launcher.startswith("#!/usr/bin/python3\n")
    assert "from demo.cli import main\n" in launcher and "sys.exit(main.run())" in launcher
    assert "from demo.gui import start" in got["/usr/local/bin/DemoGui"][1].decode()
    assert "/usr/local/bin/ignored" not in got
    assert not any(".data/" in p for p in got)
    assert got[f"{sp}/demo-1.0.dist-info/INSTALLER"][1] == b"patchbake\n"


def test_record_lists_what_was_installed(tmp_path: Path) -> None:
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {
        "demo/__init__.py": b"x = 1\n",
        "demo-1.0.data/scripts/demo-run": b"#!python\nprint('hi')\n",
        "demo-1.0.dist-info/entry_points.txt": b"[console_scripts]\ndemo = demo:main\n"})
    got = install(whl)
    record = got[f"/{SP}/demo-1.0.dist-info/RECORD"][1]
    assert b"\r\n" in record  # pip's csv rows
    rows = list(csv.reader(io.StringIO(record.decode())))
    by_path = {r[0]: r for r in rows}
    assert by_path["demo-1.0.dist-info/RECORD"] == ["demo-1.0.dist-info/RECORD", "", ""]
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    installed = {p.removeprefix(f"/{SP}/") if p.startswith(f"/{SP}/") else p: d
                 for p, (_, d) in got.items()}
    for rel, data in [("demo/__init__.py", b"x = 1\n"),
                      ("../../../bin/demo-run", got["/usr/local/bin/demo-run"][1]),
                      ("../../../bin/demo", got["/usr/local/bin/demo"][1]),
                      ("demo-1.0.dist-info/INSTALLER", b"patchbake\n")]:
        assert by_path[rel] == [rel, f"sha256={_b64(data)}", str(len(data))]
    assert len(rows) == len(installed)  # every installed file, RECORD's own line included


@pytest.mark.parametrize("member", ["../evil.py", "/etc/passwd", "demo/../../x.py", "a//b.py"])
def test_unsafe_member_paths_are_refused(tmp_path: Path, member: str) -> None:
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {member: b"x"})
    with pytest.raises(UnsafeArchiveError, match="not a safe relative path") as exc:
        install(whl)
    assert exc.value.exit_code == 12


def test_member_not_matching_record_fails_while_streaming(tmp_path: Path) -> None:
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/a.py": b"real\n"},
                     record={"demo/a.py": "sha256=" + _b64(b"fake")})
    with pytest.raises(IntegrityError, match="does not match its wheel's RECORD hash") as exc:
        install(whl)
    assert exc.value.exit_code == 11


def test_member_missing_from_record_is_refused(tmp_path: Path) -> None:
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/a.py": b"a"},
                     leave_out=("demo/a.py",))
    with pytest.raises(IntegrityError, match="demo/a.py is not in its RECORD"):
        install(whl)


def test_not_a_zip_and_bad_entry_point(tmp_path: Path) -> None:
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ImageError, match="cannot be read as a zip"):
        install(bad)
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {
        "demo-1.0.dist-info/entry_points.txt": b"[console_scripts]\n../x = demo:main\n"})
    with pytest.raises(ImageError, match="is not 'name = module:function'"):
        install(whl)


def _plan(path: Path):  # type: ignore[no-untyped-def]
    zf = zipfile.ZipFile(path)
    return install_wheel(zf, path.name, SCHEME)


def test_conflicts_identical_bytes_once_different_bytes_later_wins(tmp_path: Path) -> None:
    a = _plan(make_wheel(tmp_path / "nvidia_a-1.0-py3-none-any.whl",
                         {"nvidia/__init__.py": b"", "nvidia/x.txt": b"from a"},
                         name="nvidia_a"))
    b = _plan(make_wheel(tmp_path / "nvidia_b-1.0-py3-none-any.whl",
                         {"nvidia/__init__.py": b"", "nvidia/x.txt": b"from b"},
                         name="nvidia_b"))
    entries, conflicts = merge([a, b])
    paths = [e.path for e in entries]
    assert paths.count(f"{SP}/nvidia/__init__.py") == 1
    assert [(c.path, c.kept, c.dropped) for c in conflicts] == \
        [(f"{SP}/nvidia/x.txt", "nvidia_b", "nvidia_a")]
    layer = b"".join(write_layer(with_parents(entries), 0))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tf:
        assert tf.extractfile(f"{SP}/nvidia/x.txt").read() == b"from b"  # type: ignore[union-attr]
    _, reversed_conflicts = merge([b, a])
    assert [c.kept for c in reversed_conflicts] == ["nvidia_a"]


def test_record_row_with_a_wrong_size_is_rehashed_and_reported(tmp_path: Path) -> None:
    # seen in a real wheel of the lock: RECORD's size (and hash) of a .so are not the member's
    whl = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/lib.so": b"new bytes"},
                     record={"demo/lib.so": "sha256=" + _b64(b"old")}, sizes={"demo/lib.so": "3"})
    with opened(whl, whl.name) as zf:
        inst = install_wheel(zf, whl.name, SCHEME)
    assert inst.record_fixed == ("demo/lib.so",)
    got = install(whl)
    record = got[f"/{SP}/demo-1.0.dist-info/RECORD"][1].decode()
    assert f"demo/lib.so,sha256={_b64(b'new bytes')},9" in record
