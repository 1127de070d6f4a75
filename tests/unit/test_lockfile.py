"""The lock file: canonical bytes only, every field checked, one line on refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchbake.digest import Digest
from patchbake.errors import LockError
from patchbake.sources import lockfile
from patchbake.sources.lockfile import DebPackage, Lock, OsRoot, Target, Wheel

HEX = "ab" * 32


def _lock() -> Lock:
    return Lock(
        lineage="v0.25.1", requirement="vllm==0.25.1", resolver="pip 23.0.1",
        source_date_epoch=1700000000,
        target=Target("3.11", ("cp311", "abi3", "none"), ("manylinux_2_28_x86_64",),
                      "/usr/local/lib/python3.11/dist-packages"),
        os=OsRoot("debian", "bookworm", "amd64", "essential", ("python3",),
                  (DebPackage("zlib1g", "1:1.2.13", "amd64", "zlib1g_1.2.13_amd64.deb",
                              Digest.from_hex(HEX)),
                   DebPackage("bash", "5.2", "amd64", "bash_5.2_amd64.deb",
                              Digest.from_hex(HEX)))),
        wheels=(Wheel("vllm", "0.25.1", "vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl",
                      Digest.from_hex(HEX)),
                Wheel("torch", "2.11.0", "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                      Digest.from_hex("cd" * 32))))


def test_round_trip_is_byte_identical_and_sorted(tmp_path: Path) -> None:
    data = lockfile.dump(_lock())
    path = tmp_path / "vllm.lock"
    path.write_bytes(data)
    lock, digest = lockfile.load(path)
    assert lockfile.dump(lock) == data
    assert [w.name for w in lock.wheels] == ["torch", "vllm"]
    assert [p.name for p in lock.os.packages] == ["bash", "zlib1g"]
    assert digest == lockfile.lock_digest(data)
    assert lock.wheel("vllm").requirement() == f"vllm==0.25.1 --hash=sha256:{HEX}"


def _refused(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "bad.lock"
    path.write_bytes(data)
    with pytest.raises(LockError) as exc:
        lockfile.load(path)
    assert exc.value.exit_code == 38
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_edited_by_hand_is_refused(tmp_path: Path) -> None:
    doc = json.loads(lockfile.dump(_lock()))
    edited = json.dumps(doc, indent=4).encode()
    assert "canonical bytes" in _refused(tmp_path, edited)


@pytest.mark.parametrize("field, value, says", [
    ("sha256", "sha256:xyz", "sha256:<64 lowercase hex digits>"),
    ("filename", "../evil.whl", "a wheel's file name"),
    ("name", "-bad", "a package name"),
])
def test_bad_wheel_fields_are_named(tmp_path: Path, field: str, value: str, says: str) -> None:
    doc = json.loads(lockfile.dump(_lock()))
    doc["wheels"][0][field] = value
    message = _refused(tmp_path, json.dumps(doc).encode())
    assert f"wheels[0].{field}" in message and says in message


def test_unknown_member_and_missing_file(tmp_path: Path) -> None:
    doc = json.loads(lockfile.dump(_lock()))
    doc["extra"] = 1
    assert "unknown field 'extra'" in _refused(tmp_path, json.dumps(doc).encode())
    with pytest.raises(LockError, match="does not exist"):
        lockfile.load(tmp_path / "absent.lock")


def test_duplicate_wheel_is_refused(tmp_path: Path) -> None:
    lock = _lock()
    twice = Lock(lock.lineage, lock.requirement, lock.resolver, lock.source_date_epoch,
                 lock.target, lock.os, lock.wheels + lock.wheels[:1])
    assert "listed twice" in _refused(tmp_path, lockfile.dump(twice))
