"""The real vLLM 0.25.1 sdist through the index pip is configured with (cached in the
shared test store): its identity, its size, and a tree digest that survives re-packing."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

import pytest
from patchbake import config, entry
from patchbake.digest import Digest
from patchbake.sources import Fetched, fetch, tree_digest
from patchbake.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.sdist]

SHA = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"


@pytest.fixture(scope="module")
def vllm(shared_home: Path, pipeline_path: Path) -> Fetched:
    lin = config.load(pipeline_path).lineage("v0.25.1")
    return fetch(lin, Store.open(shared_home))


def test_real_sdist_identity(vllm: Fetched, shared_home: Path) -> None:
    assert vllm.archive_sha256 == Digest.from_hex(SHA)
    assert (vllm.root / "setup.py").is_file() and (vllm.root / "vllm" / "__init__.py").is_file()
    # 6,640 archive entries: 5,873 files plus 767 directories, which the digest leaves out
    assert vllm.files == 5873
    dirs = sum(len(d) for _, d, _ in os.walk(vllm.root))
    assert vllm.files + dirs + 1 == 6640
    assert vllm.root.is_relative_to(shared_home)


def test_tree_digest_recomputes_to_the_record(vllm: Fetched) -> None:
    # Speed is measured in bench/bench_sources.py, never asserted in a test.
    assert tree_digest(vllm.root) == vllm.tree_digest


def test_cli_second_fetch_is_cached(vllm: Fetched, shared_home: Path, pipeline_path: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATCHBAKE_HOME", str(shared_home))
    import requests

    def no_network(*a: object, **k: object) -> None:
        raise AssertionError("a cached fetch must not touch the network")

    monkeypatch.setattr(requests.Session, "send", no_network)
    assert entry.main(["--pipeline", str(pipeline_path), "fetch", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tree_digest"] == str(vllm.tree_digest) and doc["archive_sha256"] == SHA


def test_repacked_tarball_same_digest_changed_byte_not(vllm: Fetched, tmp_path: Path) -> None:
    """Re-pack with another top directory, reversed order, new mtimes, plain tar."""
    repacked = tmp_path / "repacked.tar"
    paths = sorted((p for p in vllm.root.rglob("*")), reverse=True)
    with tarfile.open(repacked, "w", format=tarfile.GNU_FORMAT) as tf:
        for p in paths:
            ti = tf.gettarinfo(str(p), arcname="other-top/" + str(p.relative_to(vllm.root)))
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = time.time(), 42, 42, "a", "b"
            if ti.isreg():
                with open(p, "rb") as f:
                    tf.addfile(ti, f)
            else:
                tf.addfile(ti)
    base = {"version": 1, "name": "t", "lineages": {"r": {
        "name": "n", "patch": "p", "files": "f", "source_record": "s",
        "upstream": {"kind": "path", "version": "0.25.1", "path": str(repacked)}}}}
    store = Store.open(tmp_path / "store")
    again = fetch(config.parse(base, tmp_path / "pipeline.yaml").lineage(), store)
    assert again.archive_sha256 != Digest.from_hex(SHA)
    assert again.tree_digest == vllm.tree_digest and again.files == vllm.files
    victim = again.root / "vllm" / "__init__.py"
    os.chmod(victim, 0o644)
    victim.write_bytes(victim.read_bytes() + b" ")
    assert tree_digest(again.root) != vllm.tree_digest
