"""Lock generation and artifact checks, hermetic: pip's report read, the Debian package set
compared with the lock, pip's failures named."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchbake import proc
from patchbake.digest import Digest
from patchbake.errors import FetchError, IntegrityError, LockError, ProcessError
from patchbake.sources import artifacts, lockgen
from patchbake.sources.lockfile import DebPackage, Lock, OsRoot, Wheel

HEX = "12" * 32


def _item(name: str, filename: str, sha: str | None = HEX) -> dict[str, object]:
    archive = {"hashes": {"sha256": sha}} if sha else {}
    return {"metadata": {"name": name, "version": "1.0"},
            "download_info": {"url": f"https://index.invalid/files/{filename}",
                              "archive_info": archive}}


def test_report_gives_normalized_sorted_wheels_without_urls() -> None:
    res = lockgen.wheels_from_report({"pip_version": "23.0.1", "install": [
        _item("Zeta_Pkg", "zeta_pkg-1.0-py3-none-any.whl"),
        _item("alpha.pkg", "alpha.pkg-1.0-py3-none-any.whl")]})
    assert [w.name for w in res.wheels] == ["alpha-pkg", "zeta-pkg"]
    assert res.wheels[1].filename == "zeta_pkg-1.0-py3-none-any.whl"
    assert res.wheels[0].sha256 == Digest.from_hex(HEX)
    assert res.resolver == "pip 23.0.1"


@pytest.mark.parametrize("item, says", [
    (_item("x", "x-1.0.tar.gz"), "not a wheel"),
    (_item("x", "x-1.0-py3-none-any.whl", sha=None), "gives no sha256"),
    (_item("x", "x-1.0-py3-none-any.whl", sha="zz"), "sha256:<64 lowercase hex digits>"),
])
def test_report_that_cannot_be_locked_is_refused(item: dict[str, object], says: str) -> None:
    with pytest.raises(LockError) as exc:
        lockgen.wheels_from_report({"pip_version": "23", "install": [item]})
    assert says in str(exc.value) and exc.value.exit_code == 38


def _lock(packages: tuple[DebPackage, ...]) -> Lock:
    return Lock("v0.25.1", "vllm==0.25.1", "pip 23", 0, lockgen.DEFAULT_TARGET,
                OsRoot("debian", "bookworm", "amd64", "essential", ("python3",), packages),
                (Wheel("six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl",
                       Digest.from_hex(HEX)),))


def test_a_moved_mirror_is_a_stale_lock() -> None:
    lock = _lock((DebPackage("bash", "5.2-1", "amd64", "bash_5.2-1_amd64.deb",
                             Digest.from_hex(HEX)),))
    artifacts._check_installed(lock, (("bash", "5.2-1", "amd64"),))
    with pytest.raises(LockError) as exc:
        artifacts._check_installed(lock, (("bash", "5.2-2", "amd64"),))
    assert "apt's sources now installs bash 5.2-2" in str(exc.value)
    assert "patchbake lock" in (exc.value.hint or "")


def _pip_fails(stderr: str):  # type: ignore[no-untyped-def]
    def run(argv, **kwargs):  # type: ignore[no-untyped-def]
        raise ProcessError(f"python -m pip exited 1: {stderr}")
    return run


def test_pip_hash_mismatch_and_missing_wheel_have_their_own_codes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(())
    monkeypatch.setattr(proc, "run", _pip_fails("THESE PACKAGES DO NOT MATCH THE HASHES"))
    with pytest.raises(IntegrityError) as exc:
        artifacts._pip_download(list(lock.wheels), lock, tmp_path)
    assert exc.value.exit_code == 11
    monkeypatch.setattr(proc, "run", _pip_fails("No matching distribution found for six"))
    with pytest.raises(FetchError) as exc2:
        artifacts._pip_download(list(lock.wheels), lock, tmp_path)
    assert exc2.value.exit_code == 10
