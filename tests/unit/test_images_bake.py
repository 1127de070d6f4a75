"""Embedded bake: one deterministic layer, same digest in two stores, cached re-bake,
records written once, mode decided by FILES.txt, the base pinned by digest."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from images_support import SP, make_repo
from patchbake.images.bake import bake_image, latest_digest
from patchbake.entry import main
from patchbake.errors import ConfigError, ImageError, IntegrityError
from patchbake.oci import layout
from patchbake.store import Store


def test_two_stores_same_digest_and_cached(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    assert not first.cached and str(first.digest).startswith("sha256:")
    again = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    assert again.cached and again.digest == first.digest
    other = Store.open(tmp_path / "other-store")
    second = bake_image(repo.pipeline, "offline", other, patched=repo.patched)
    assert not second.cached
    assert (second.digest, second.config_digest, second.layers) == \
        (first.digest, first.config_digest, first.layers)
    assert layout.lookup(repo.store, "offline").digest == first.digest
    assert latest_digest(repo.pipeline, "offline") == first.digest
    assert (repo.root / first.record).is_file()


@pytest.mark.parametrize("entry", [b"[]", b"{}", b'{"manifest_digest": 1}', b"{torn"])
def test_foreign_or_torn_cache_entry_is_a_miss(tmp_path: Path, entry: bytes) -> None:
    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    entries = list((repo.store.root / "bakes").glob("*.json"))
    key = [p for p in entries if json.loads(p.read_bytes()).get("manifest_digest")
           == str(first.digest)]
    assert len(key) == 1
    key[0].write_bytes(entry)
    again = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    assert not again.cached and again.digest == first.digest


def test_epoch_changes_digest(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    a = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    b = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1700000000)
    assert a.digest != b.digest and a.layers[:-1] == b.layers[:-1]


def test_layer_is_deterministic_tar(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    data = repo.store.read_blob(res.layers[-1])
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.rstrip("/").encode())
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    sp = SP.strip("/")
    assert f"{sp}/vllm/sub/topk.py" in names and f"{sp}/vllm/.wh.scripts.py" in names
    assert "opt/patchbake/identity.json" in names and "opt/patchbake/verify.py" in names
    assert "usr" in names and f"{sp}/vllm" in names  # explicit parents
    assert f"{sp}/vllm/_version.py" not in names  # untouched files are not baked


def test_labels_and_annotations(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    manifest = json.loads(repo.store.read_blob(res.digest))
    config = json.loads(repo.store.read_blob(res.config_digest))
    labels = config["config"]["Labels"]
    for key in ("base.name", "base.digest", "revision", "source", "version"):
        assert labels[f"org.opencontainers.image.{key}"]
        assert manifest["annotations"][f"org.opencontainers.image.{key}"] == labels[
            f"org.opencontainers.image.{key}"]
    assert labels["org.opencontainers.image.base.digest"] == str(repo.standin_digest)
    assert labels["dev.patchbake.patch.sha256"] == "a" * 64
    assert labels["dev.patchbake.files.sha256"] == "b" * 64
    assert labels["dev.patchbake.upstream.pin"].startswith("vllm==0.25.1")
    assert config["history"][-1]["created"] == "1970-01-01T00:00:00Z"
    base = json.loads(repo.store.read_blob(repo.standin_digest))
    assert manifest["layers"][:-1] == base["layers"]  # base layers referenced verbatim


def test_record_fields_and_write_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    rec = json.loads((repo.root / res.record).read_text())
    for key in ("manifest_digest", "config_digest", "layers", "base", "patch", "files_sha256",
                "upstream", "baked_files", "writers"):
        assert key in rec
    assert {f["path"].rsplit("/", 1)[-1] for f in rec["baked_files"]} == \
        {"envs.py", "topk.py", "new_module.py"}
    assert all(set(f) == {"path", "mode", "size", "sha256"} for f in rec["baked_files"])
    (repo.root / res.record).write_text((repo.root / res.record).read_text()
                                        .replace('"embedded"', '"edited"'))
    with pytest.raises(ImageError, match="never overwritten"):
        bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)


def test_native_change_refuses_overlay(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, patched={"csrc/topk.cu": b"// kernel\n",
                                         "vllm/envs.py": b"A = 2\n"})
    with pytest.raises(ImageError, match="native sources.*csrc/topk.cu") as info:
        bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    assert info.value.exit_code == 30
    assert "mode: build" in (info.value.hint or "")


def test_standin_pin_mismatch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    p = repo.root / "images" / "offline.yaml"
    p.write_text(p.read_text().replace(str(repo.standin_digest), "sha256:" + "0" * 64))
    with pytest.raises(IntegrityError, match="pins sha256:0000"):
        bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)


def test_docker_archive_export_roundtrip(tmp_path: Path) -> None:
    from patchbake.oci.archive import import_docker_archive

    repo = make_repo(tmp_path)
    out = tmp_path / "img.tar"
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched,
                     docker_archive=out)
    with tarfile.open(out) as tf:
        manifest = json.loads(tf.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["Config"] == f"blobs/sha256/{res.config_digest.hex}"
        assert len(manifest[0]["Layers"]) == len(res.layers)
    again = tmp_path / "img2.tar"
    bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, docker_archive=again)
    assert out.read_bytes() == again.read_bytes()  # the export is deterministic too
    fresh = Store.open(tmp_path / "fresh")
    imp = import_docker_archive(fresh, out)
    assert imp.manifest_digest == res.digest and imp.from_oci_index


def test_cli_bake_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    import patchbake.images.bake as bake_mod

    monkeypatch.setattr(bake_mod, "patched_tree", lambda lin, store: repo.patched)
    rc = main(["--pipeline", str(repo.root / "pipeline.yaml"), "bake", "offline", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and set(out) >= {"image", "digest", "config_digest", "layers", "record"}
    assert out["record"].startswith("manifests/images/offline/")
    rc = main(["--pipeline", str(repo.root / "pipeline.yaml"), "bake", "ofline"])
    err = capsys.readouterr().err
    assert rc == ConfigError.exit_code and "did you mean 'offline'" in err


def test_definition_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(tmp_path)
    std = f"version: 1\nbase: {{source: standin, name: s, digest: '{repo.standin_digest}'}}\n"
    cases = {
        "nodigest": ((f"version: 1\nbase: {{source: registry, name: x/y:1}}\n"
                      f"site_packages: {SP}\nmode: overlay\n"),
                     "missing required key 'base.digest'"),
        "typo": (f"{std}site_package: {SP}\nmode: overlay\n", "did you mean 'site_packages'"),
        "badmode": (f"{std}site_packages: {SP}\nmode: overlay2\n",
                    "must be one of overlay, build"),
        "tagonly": ((f"version: 1\nbase: {{source: registry, name: x/y:1, digest: 'latest'}}\n"
                     f"site_packages: {SP}\nmode: overlay\n"), "must be sha256:"),
        "nobuilder": (f"{std}site_packages: {SP}\nmode: build\n",
                      "needs 'build.builder'"),
    }
    for name, (text, message) in cases.items():
        repo.define(name, text)
        rc = main(["--pipeline", str(repo.root / "pipeline.yaml"), "image", "show", name])
        err = capsys.readouterr().err
        assert rc == ConfigError.exit_code, (name, err)
        assert message in err, (name, err)
