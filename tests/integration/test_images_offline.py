"""The offline definition end to end with the real vLLM 0.25.1 sdist and the repository's
patch: stand-in base at real scale, embedded bake, reproducibility across stores, verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from images_repo import cli, cli_json, repo_copy, seed_sdist

pytestmark = [pytest.mark.integration, pytest.mark.sdist]


def test_bake_verify_reproducible(tmp_path: Path, shared_home: Path) -> None:
    root = repo_copy(tmp_path)
    first = cli_json(root, shared_home, "bake", "sm89-serving-offline")
    assert set(first) >= {"image", "digest", "config_digest", "layers", "record"}
    assert first["digest"].startswith("sha256:") and len(first["layers"]) == 3
    record = json.loads((root / first["record"]).read_text())
    assert record["manifest_digest"] == first["digest"]
    assert record["base"]["digest"] == record["base"]["manifest_digest"]
    assert len(record["baked_files"]) >= 1

    again = cli_json(root, shared_home, "bake", "sm89-serving-offline")
    assert again["cached"] and again["digest"] == first["digest"]

    other = tmp_path / "other-store"
    seed_sdist(shared_home, other)
    root2 = repo_copy(tmp_path / "second")
    second = cli_json(root2, other, "bake", "sm89-serving-offline")
    assert not second["cached"]
    assert second["digest"] == first["digest"]
    assert (root2 / second["record"]).read_bytes() == (root / first["record"]).read_bytes()

    out = cli_json(root, shared_home, "verify", "sm89-serving-offline")
    assert out["matched"] == out["total"] == len(record["baked_files"])
    assert out["mismatched"] == [] and out["digest"] == first["digest"]
    drift = out["base_drift"]
    assert drift["counts"] == {"changed": 0, "missing": 0, "extra": 0}
    assert drift["excluded_generated"] == ["vllm/_version.py"]
    assert drift["unchanged"] > 2400  # the stand-in carries the whole vLLM Python tree
    text = cli(root, shared_home, "verify", "sm89-serving-offline").stdout
    assert f"{out['total']}/{out['total']} baked source files matched a fresh apply" in text


def test_standin_scale(tmp_path: Path, shared_home: Path) -> None:
    root = repo_copy(tmp_path)
    s = cli_json(root, shared_home, "image", "standin")
    assert 2400 <= s["files"] <= 2800
    blobs = shared_home / "blobs" / "sha256"
    size = sum((blobs / d[7:]).stat().st_size for d in s["layers"])
    assert 30e6 < size < 45e6
    text = (root / "images" / "sm89-serving-offline.yaml").read_text()
    assert s["digest"] in text  # the pinned stand-in digest is what this machine builds


def test_bake_trusts_stored_base_and_verify_catches_a_changed_blob(tmp_path: Path,
                                                                   shared_home: Path) -> None:
    """A cold bake does not re-hash the base (the store hashed it on write); a base blob
    changed on disk afterwards is caught by `store fsck` and by `verify`, never released."""
    import os

    home = tmp_path / "store"
    seed_sdist(shared_home, home)
    root = repo_copy(tmp_path)
    first = cli_json(root, home, "bake", "sm89-serving-offline")
    blob = home / "blobs" / "sha256" / first["layers"][0].removeprefix("sha256:")
    os.chmod(blob, 0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))

    os.environ["SOURCE_DATE_EPOCH"] = "1"  # a new image, baked cold on the changed base
    try:
        second = cli_json(root, home, "bake", "sm89-serving-offline")
    finally:
        del os.environ["SOURCE_DATE_EPOCH"]
    assert not second["cached"] and second["digest"] != first["digest"]
    fsck = cli(root, home, "store", "fsck", "--no-trees", check=False)
    assert fsck.returncode == 11 and blob.name[:12] in fsck.stderr
    for extra in ((), ("--no-cache",)):
        out = cli(root, home, "verify", "sm89-serving-offline", *extra, check=False)
        assert out.returncode == 11, out.stderr
        assert f"blob {first['layers'][0]} hashes to" in out.stderr
