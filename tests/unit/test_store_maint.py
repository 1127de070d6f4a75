"""store fsck and gc: what is damage, what is litter, and what gc must never remove."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.store import Store
from patchbake.storecheck import fsck, gc


def old(p: Path) -> None:
    t = time.time() - 7200
    os.utime(p, (t, t), follow_symlinks=False)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Store, Path, dict[str, str]]:
    store = Store.open(tmp_path / "store")
    repo = tmp_path / "repo"
    (repo / "manifests" / "evidence").mkdir(parents=True)
    d: dict[str, str] = {}
    d["sdist"] = store.put_bytes(b"the pinned sdist").hex
    (repo / "pipeline.yaml").write_text(f"upstream: {{sha256: {d['sdist']}}}\n")
    d["layer"] = store.put_bytes(b"a layer").hex
    d["config"] = store.put_bytes(json.dumps({"rootfs": {"diff_ids": ["sha256:" + d["layer"]]}}).encode()).hex
    d["manifest"] = store.put_bytes(json.dumps({
        "config": {"digest": "sha256:" + d["config"]},
        "layers": [{"digest": "sha256:" + d["layer"]}]}).encode()).hex
    (store.root / "index.json").write_text(json.dumps({"manifests": [
        {"digest": "sha256:" + d["manifest"]}]}))
    d["evidence_subject"] = store.put_bytes(b"an image only evidence names").hex
    (repo / "manifests" / "evidence" / "x.dsse.json").write_text(
        json.dumps({"subject": "sha256:" + d["evidence_subject"]}))
    d["recorded_tree_blob"] = store.put_bytes(b"an archive a source record names").hex
    (store.root / "sources" / "k.json").write_text(json.dumps(
        {"archive_sha256": d["recorded_tree_blob"], "tree_digest": "sha256:" + "e" * 64}))
    d["orphan"] = store.put_bytes(b"nothing names me").hex
    for p in (store.root / "blobs" / "sha256").iterdir():
        old(p)
    return store, repo, d


def test_gc_keeps_everything_named_and_removes_the_rest(world: tuple[Store, Path, dict[str, str]]) -> None:
    store, repo, d = world
    (store.root / "tmp" / "extract.999999999.x").mkdir()
    (store.root / "tmp" / "extract.999999999.x" / "f").write_text("partial")
    rep = gc(store, repo=repo, grace_s=3600)
    assert sorted(rep.removed) == sorted([f"blobs/sha256/{d['orphan']}", "tmp/extract.999999999.x"])
    for key in ("sdist", "layer", "config", "manifest", "evidence_subject", "recorded_tree_blob"):
        assert store.has(Digest.from_hex(d[key])), key
    assert fsck(store, repo=repo).clean


def test_gc_keeps_young_unreferenced_objects(world: tuple[Store, Path, dict[str, str]]) -> None:
    store, repo, d = world
    fresh = store.put_bytes(b"a layer a running bake just wrote")
    rep = gc(store, repo=repo, grace_s=3600)
    assert store.has(fresh) and not store.has(Digest.from_hex(d["orphan"])) and rep.bytes_freed > 0


def test_gc_without_the_repository_keeps_only_what_the_store_names(
        world: tuple[Store, Path, dict[str, str]]) -> None:
    store, _repo, d = world
    gc(store, repo=None, grace_s=0, dry_run=True)
    assert store.has(Digest.from_hex(d["sdist"]))  # a dry run removes nothing


def test_fsck_finds_damage_and_quarantines(world: tuple[Store, Path, dict[str, str]]) -> None:
    store, repo, d = world
    p = store.blob_path(Digest.from_hex(d["layer"]))
    os.chmod(p, 0o644)
    p.write_bytes(b"changed")
    (store.root / "blobs" / "sha256" / "not-a-digest").write_text("x")
    rep = fsck(store, repo=repo)
    assert rep.bad_blobs == [d["layer"]] and rep.stray == ["not-a-digest"] and not rep.clean
    rep = fsck(store, repo=repo, quarantine=True)
    assert not store.has(Digest.from_hex(d["layer"]))
    assert len(list((store.root / "quarantine" / "sha256").iterdir())) == 1


def test_fsck_checks_recorded_trees(tmp_path: Path) -> None:
    from patchbake.sources.digest import tree_digest

    store = Store.open(tmp_path / "s")
    t = store.root / "trees" / ("a" * 64)
    t.mkdir()
    (t / "f.py").write_text("x = 1\n")
    (store.root / "sources" / "r.json").write_text(json.dumps({"tree_digest": "sha256:" + "a" * 64}))
    assert fsck(store).bad_trees == ["a" * 64]
    good = tree_digest(t).hex
    os.rename(t, store.root / "trees" / good)
    (store.root / "sources" / "r.json").write_text(json.dumps({"tree_digest": "sha256:" + good}))
    assert fsck(store).bad_trees == [] and fsck(store).clean


def test_idle_locks_are_found_and_removed_while_held(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    with store.lock("busy"):
        with store.lock("other"):
            pass
        rep = gc(store, grace_s=0)
        assert "other.lock" in rep.idle_locks and "busy.lock" not in rep.idle_locks
        assert store.lock_path("busy").exists() and not store.lock_path("other").exists()
    with store.lock("other"):  # a lock file gc removed is simply made again
        assert store.lock_path("other").exists()


def test_cli_exit_codes(world: tuple[Store, Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    store, repo, d = world
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    assert main(["store", "fsck", "--repo", str(repo)]) == 0
    (store.root / "tmp" / "blob.999999999.x").write_text("partial")
    capsys.readouterr()
    assert main(["store", "fsck", "--repo", str(repo)]) == 13
    assert "leftover(s) of crashed runs" in capsys.readouterr().err
    assert main(["store", "gc", "--repo", str(repo), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 1 and "tmp/blob.999999999.x" in out["removed"]
    os.chmod(store.blob_path(Digest.from_hex(d["sdist"])), 0o644)
    store.blob_path(Digest.from_hex(d["sdist"])).write_bytes(b"rot")
    assert main(["store", "fsck", "--repo", str(repo)]) == 11
    assert "do not match their name" in capsys.readouterr().err


def test_fsck_sees_a_broken_index_json(world: tuple[Store, Path, dict[str, str]],
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    store, repo, _d = world
    (store.root / "index.json").write_text('{"manifests": [')
    rep = fsck(store, repo=repo)
    assert not rep.clean and rep.missing and rep.missing[0].startswith("index.json: ")
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    capsys.readouterr()
    assert main(["store", "fsck", "--repo", str(repo)]) == 11
    err = capsys.readouterr().err
    assert "missing or unreadable: index.json:" in err and len(err.strip().splitlines()) <= 2


@pytest.mark.parametrize("gone", ["manifest", "config", "layer"])
def test_fsck_sees_an_object_a_named_image_needs_deleted(
        world: tuple[Store, Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], gone: str) -> None:
    store, repo, d = world
    store.blob_path(Digest.from_hex(d[gone])).unlink()
    rep = fsck(store, repo=repo)
    assert [m for m in rep.missing if f"sha256:{d[gone]} is not in the store" in m], rep.missing
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    capsys.readouterr()
    assert main(["store", "fsck", "--repo", str(repo)]) == 11
    assert d[gone] in capsys.readouterr().err


def test_strays_are_leftovers_and_gc_removes_them(world: tuple[Store, Path, dict[str, str]],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    store, repo, _d = world
    stray = store.root / "blobs" / "sha256" / "not-a-digest"
    stray.write_text("x")
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    capsys.readouterr()
    assert main(["store", "fsck", "--repo", str(repo)]) == 13  # not the corruption code
    assert "blobs/sha256/not-a-digest" in capsys.readouterr().err
    assert main(["store", "gc", "--repo", str(repo)]) == 0
    assert not stray.exists() and fsck(store, repo=repo).clean
