"""RECORD of an installed distribution: rewritten for baked files, checked row by row."""

from __future__ import annotations

import hashlib

from patchbake.images import distrecord
from patchbake.oci.view import FileInfo, View
from patchbake.verify.above_base import dist_record_findings, is_dist_record

SP = "usr/local/lib/python3.11/dist-packages"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record(files: dict[str, bytes]) -> bytes:
    quoted = {p: f'"{p}"' if "," in p else p for p in files}  # as csv writes them
    lines = [f"{quoted[p]},{distrecord.record_hash(_sha(d))},{len(d)}\n"
             for p, d in files.items()]
    return "".join(lines + ["vllm-0.25.1.dist-info/RECORD,,\n",
                            "vllm/__pycache__/x.cpython-311.pyc,,\n"]).encode()


FILES = {"vllm/a.py": b"a = 1\n", "vllm/b.py": b"b = 2\n", "vllm/_C.abi3.so": b"\x7fELF",
         "vllm-0.25.1.dist-info/METADATA": b"Version: 0.25.1\n",
         "vllm/with,comma.py": b"c = 3\n"}


def test_rewritten_changes_only_the_baked_rows() -> None:
    before = _record(FILES)
    new = b"a = 'patched'\n"
    after = distrecord.rewritten(before, {"vllm/a.py": (_sha(new), len(new))}, {"vllm/b.py"})
    rows = {r.path: r for r in distrecord.rows(after)}
    assert rows["vllm/a.py"].sha256 == _sha(new) and rows["vllm/a.py"].size == len(new)
    assert "vllm/b.py" not in rows
    assert rows["vllm/with,comma.py"].sha256 == _sha(FILES["vllm/with,comma.py"])
    kept = [line for line in before.splitlines(keepends=True)
            if not line.startswith((b"vllm/a.py,", b"vllm/b.py,"))]
    assert all(line in after.splitlines(keepends=True) for line in kept)


def _view(files: dict[str, bytes], record: bytes) -> View:
    view = View()
    for path, data in {**files, "vllm-0.25.1.dist-info/RECORD": record}.items():
        view.files[f"{SP}/{path}"] = FileInfo("file", 0o644, len(data), _sha(data), 0)
    view.contents[f"{SP}/vllm-0.25.1.dist-info/RECORD"] = record
    return view


def test_every_row_is_checked_against_the_image() -> None:
    record = _record(FILES)
    counts, problems = dist_record_findings(_view(FILES, record), SP)
    assert problems == [] and counts["checked"] == len(FILES)
    tampered = {**FILES, "vllm/_C.abi3.so": b"\x7fELF evil"}
    assert dist_record_findings(_view(tampered, record), SP)[1] == [
        "RECORD: vllm/_C.abi3.so differs from its RECORD hash"]
    extra = {**FILES, "vllm/sneaky.py": b"import os\n"}
    assert dist_record_findings(_view(extra, record), SP)[1] == [
        "RECORD: vllm/sneaky.py is installed but not in RECORD"]
    fewer = {k: v for k, v in FILES.items() if k != "vllm/b.py"}
    assert dist_record_findings(_view(fewer, record), SP)[1] == [
        "RECORD: vllm/b.py is in RECORD but not installed"]


def test_only_the_vllm_dist_info_record_counts() -> None:
    assert is_dist_record(f"{SP}/vllm-0.25.1.dist-info/RECORD", SP)
    assert not is_dist_record(f"{SP}/vllm-0.25.1.dist-info/sub/RECORD", SP)
    assert not is_dist_record(f"{SP}/torch-2.11.0.dist-info/RECORD", SP)
    assert dist_record_findings(View(), SP) == ({"rows": 0, "checked": 0}, [])
