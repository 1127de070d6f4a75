"""The lock against the real parts: pip's resolver and downloader through pip's own
configuration, mmdebstrap through apt's sources, and the committed locks themselves."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from patchbake import config
from patchbake.digest import Digest
from patchbake.errors import IntegrityError
from patchbake.sources import artifacts, lockfile, lockgen
from patchbake.store import Store

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("lineage", ["v0.25.1", "v0.33.0"])
def test_committed_locks_load_and_pin_the_lineage(lineage: str) -> None:
    lin = config.load(ROOT / "pipeline.yaml").lineage(lineage)
    assert lin.lock is not None
    lock, _ = lockfile.load(lin.lock)
    assert lock.lineage == lineage
    assert lock.wheel("vllm").version == lin.upstream.version
    for name, version in lin.upstream.pins:
        assert lock.wheel(name).version == version
    assert {"python3", "libc6"} <= {p.name for p in lock.os.packages}


def test_pip_resolves_and_downloads_a_locked_wheel(tmp_path: Path) -> None:
    res = lockgen.resolve_wheels("six==1.16.0", lockgen.DEFAULT_TARGET, tmp_path)
    assert [(w.name, w.version) for w in res.wheels] == [("six", "1.16.0")]
    lock = lockfile.Lock("t", "six==1.16.0", res.resolver, 0, lockgen.DEFAULT_TARGET,
                         lockgen.DEFAULT_OS, res.wheels)
    store = Store.open(tmp_path / "store")
    paths = artifacts.fetch_wheels(store, lock, tmp_path / "work")
    assert Digest.from_hex(paths["six"].name) == res.wheels[0].sha256
    # a lock whose sha256 the index's file does not have: refused, nothing stored
    wrong = dataclasses.replace(res.wheels[0], sha256=Digest.from_hex("00" * 32))
    bad = dataclasses.replace(lock, wheels=(wrong,))
    other = Store.open(tmp_path / "other")
    with pytest.raises(IntegrityError):
        artifacts.fetch_wheels(other, bad, tmp_path / "work2")
    assert not [p for p in (other.root / "blobs").rglob("*") if p.is_file()]


@pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap is not installed "
                    "(make setup-system installs it)")
def test_mmdebstrap_gives_the_package_set_and_its_debs(tmp_path: Path) -> None:
    spec = dataclasses.replace(lockgen.DEFAULT_OS, include=())
    os_root = lockgen.resolve_os(spec, lockgen.DEFAULT_EPOCH, tmp_path)
    names = {p.name for p in os_root.packages}
    assert {"dash", "libc6", "coreutils"} <= names
    deb = next(p for p in os_root.packages if p.name == "dash")
    assert deb.filename.startswith("dash_") and deb.filename.endswith(".deb")
    assert isinstance(deb.sha256, Digest)
