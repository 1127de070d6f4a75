"""The served suite's fixtures bundle: made here, checked on the GPU box (both hermetic).

``make_bundle.py`` and ``device_check.py`` live beside the suite (tests/gpu_suites is
never collected by the tool's test run), so they are loaded by path.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from patchbake.patchset.gitbinary import blob_id

SUITE = Path(__file__).resolve().parents[1] / "gpu_suites" / "dsv4_served"
PRE = b"x = 1\n"
POST = b"x = 1\ny = 2\n"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"served_{name}", SUITE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(path: Path, files: dict[str, bytes], tamper: str | None = None) -> Path:
    dist = path.name.split("-")[0] + "-1.0.dist-info"

    def rec(data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        return "sha256=" + digest.decode()

    lines = [f"{n},{rec(b'tampered' if n == tamper else d)},{len(d)}" for n, d in files.items()]
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}/RECORD", "\n".join(lines + [f"{dist}/RECORD,,"]) + "\n")
    return path


def _inputs(tmp: Path, tamper: str | None = None) -> list[str]:
    vllm = _wheel(tmp / "vllm-1.0-py3-none-any.whl",
                  {"vllm/a.py": PRE, "vllm/vllm-rs": b"binary" * 50, "vllm/big.bin": bytes(range(256)) * 8},
                  tamper)
    deps = tmp / "deps"
    deps.mkdir()
    _wheel(deps / "dep-1.0-py3-none-any.whl", {"dep/__init__.py": b"X = 1\n"})
    _wheel(deps / "numpy-1.0-py3-none-any.whl", {"numpy/__init__.py": b""})
    patch = tmp / "p.patch"
    patch.write_bytes(
        b"diff --git a/vllm/a.py b/vllm/a.py\n"
        + f"index {blob_id(PRE)}..{blob_id(POST)} 100644\n".encode()
        + b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n")
    files = tmp / "FILES.txt"
    files.write_text(f"# test\nvllm/a.py  M  +1  -0  {hashlib.sha256(POST).hexdigest()}\n")
    torch = _wheel(tmp / "torch-9.9-py3-none-any.whl", {"torch/x.py": b"t"})
    return ["make_bundle.py", "--vllm-wheel", str(vllm), "--dep-wheels", str(deps),
            "--skip-dep", "numpy", "--patch", str(patch), "--files-txt", str(files),
            "--record-wheel", str(torch), "--out", str(tmp / "out")]


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    mb = _load("make_bundle")
    monkeypatch.setattr(mb, "PART_BYTES", 512)  # several parts from a tiny stream
    monkeypatch.setattr(sys, "argv", _inputs(tmp_path))
    mb.main()
    return tmp_path / "out"


def test_bundle_lists_every_file_and_carries_the_patched_overlay(made: Path) -> None:
    manifest = json.loads((made / "manifest.json").read_text())
    by_path = {e["path"]: e for e in manifest["files"]}
    assert by_path["vllm/a.py"]["carried"] and by_path["dep/__init__.py"]["wheel"].startswith("dep-")
    assert not by_path["vllm/vllm-rs"]["carried"] and by_path["vllm/vllm-rs"]["not_carried_reason"]
    assert "numpy/__init__.py" not in by_path and manifest["skipped_dep_wheels"]
    assert manifest["overlay"] == [{"path": "vllm/a.py", "sha256": hashlib.sha256(POST).hexdigest(),
                                    "from": "p.patch"}]
    assert len(manifest["parts"]) > 1
    assert (made / "records" / "torch-9.9-py3-none-any.whl.RECORD").is_file()


def test_device_check_unpacks_verifies_and_makes_both_trees(made: Path, tmp_path: Path) -> None:
    report = _load("device_check").unpack(made, tmp_path / "box")
    patched, pristine = Path(report["patched_tree"]), Path(report["pristine_tree"])
    assert (patched / "vllm" / "a.py").read_bytes() == POST
    assert (pristine / "vllm" / "a.py").read_bytes() == PRE  # the overlay never wrote through a link
    assert (tmp_path / "box" / "site" / "vllm" / "a.py").read_bytes() == PRE
    assert report["files_checked"] == 6 and len(report["files_not_carried"]) == 1


def test_device_check_refuses_a_damaged_part(made: Path, tmp_path: Path) -> None:
    part = made / "part-01"
    part.write_bytes(b"\0" + part.read_bytes()[1:])
    with pytest.raises(SystemExit, match="part-01 does not match the manifest"):
        _load("device_check").unpack(made, tmp_path / "box")


def test_a_wheel_file_that_disagrees_with_its_record_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", _inputs(tmp_path, tamper="vllm/a.py"))
    with pytest.raises(SystemExit, match="vllm/a.py does not match the wheel's RECORD"):
        _load("make_bundle").main()


def test_a_patch_result_that_disagrees_with_files_txt_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _inputs(tmp_path)
    (tmp_path / "FILES.txt").write_text("vllm/a.py  M  +1  -0  " + "0" * 64 + "\n")
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="FILES.txt records 0000"):
        _load("make_bundle").main()
