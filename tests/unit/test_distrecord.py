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
    script = b"#!/usr/bin/python3\nfrom vllm.entrypoints.cli.main import main\n"
    lines.append(f"../../../bin/vllm,{distrecord.record_hash(_sha(script))},{len(script)}\n")
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
    script = b"#!/usr/bin/python3\nfrom vllm.entrypoints.cli.main import main\n"
    view.files["usr/local/bin/vllm"] = FileInfo("file", 0o755, len(script), _sha(script), 0)
    return view


def test_every_row_is_checked_against_the_image() -> None:
    record = _record(FILES)
    counts, problems = dist_record_findings(_view(FILES, record), SP)
    assert problems == [] and counts["checked"] == len(FILES) + 1  # and the console script
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


def test_a_symlinked_hook_passes_only_to_an_allow_listed_file_with_its_content() -> None:
    from patchbake.verify.startup_hooks import _link_problem

    content = b"# Debian's sitecustomize\n"
    target = "/etc/python3.11/sitecustomize.py"
    view = View()
    view.files[target.lstrip("/")] = FileInfo("file", 0o644, len(content), _sha(content), 0)
    link_sha = _sha(target.encode())  # the view hashes a symlink's target text
    hook = "/usr/lib/python3.11/sitecustomize.py"
    allow = {hook: _sha(content), target: _sha(content)}
    assert _link_problem(view, link_sha, hook, allow) is None
    assert "not an allow-listed file" in (_link_problem(
        view, link_sha, hook, {hook: _sha(content)}) or "")
    assert "not an allow-listed file" in (_link_problem(
        view, _sha(b"/tmp/evil.py"), hook, allow) or "")
    other = {hook: _sha(b"something else"), target: _sha(content)}
    assert "whose content is not the allow-listed one" in (_link_problem(
        view, link_sha, hook, other) or "")
