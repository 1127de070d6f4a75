"""`patchbake push` / `patchbake pull`: JSON shape, tables, exit codes and messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from patchbake import entry
from patchbake.digest import Digest
from patchbake.commands import registry as cmd
from patchbake.oci.registry import RegistryClient
from patchbake.store import Store
from registry_fake import HOST, FakeRegistry, make_image, store_image


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRegistry:
    reg = FakeRegistry()

    def factory(host: str, **kw: Any) -> RegistryClient:
        return RegistryClient(host, adapter=reg, sleep=lambda s: None, **kw)

    monkeypatch.setattr(cmd, "RegistryClient", factory)
    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    return reg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = entry.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_push_json_then_pull_json(home: Path, fake: FakeRegistry,
                                  capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    img = make_image()
    digest = store_image(Store.open(home), img)
    rc, out, err = run(capsys, "push", str(digest), f"{HOST}/app:v1", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["digest"] == str(digest) and doc["ref"] == f"{HOST}/app:v1"
    assert sorted(doc["pushed"]) == sorted(str(d) for d in img.blobs)
    assert doc["mounted"] == [] and doc["skipped"] == [] and doc["version"] == 1

    other = home.parent / "other"
    monkeypatch.setenv("PATCHBAKE_HOME", str(other))
    rc, out, err = run(capsys, "pull", f"{HOST}/app:v1", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["digest"] == str(digest) and doc["config_digest"] == str(img.config_digest)
    assert sorted(doc["fetched"]) == sorted(str(d) for d in img.blobs) \
        and doc["index_digest"] is None
    index = json.loads((other / "index.json").read_text())
    assert index["manifests"][0]["digest"] == str(digest)
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == \
        f"{HOST}/app:v1"


def test_push_by_store_name_prints_a_table(home: Path, fake: FakeRegistry,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake.oci import layout
    from patchbake.oci.media import Descriptor

    store = Store.open(home)
    img = make_image()
    store_image(store, img)
    layout.add_ref(store, "demo", Descriptor("application/vnd.oci.image.manifest.v1+json",
                                             img.digest, len(img.manifest)))
    rc, out, err = run(capsys, "push", "demo", f"{HOST}/app:v2")
    assert rc == 0, err
    assert "uploaded" in out and "2 blobs" in out and str(img.digest)[:30] in out


def test_tag_move_exit_32(home: Path, fake: FakeRegistry,
                          capsys: pytest.CaptureFixture[str]) -> None:
    old = make_image(b"old\n")
    fake.seed_image("app", old, tag="v1")
    digest = store_image(Store.open(home), make_image(b"new\n"))
    rc, out, err = run(capsys, "push", str(digest), f"{HOST}/app:v1")
    assert rc == 32 and out == ""
    assert f"{HOST}/app:v1 already points to {old.digest}; refusing to move it" in err
    assert "tags never move" in err


def test_unknown_source_exit_30(home: Path, fake: FakeRegistry,
                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "push", "no-such-image", f"{HOST}/app:v1")
    assert rc == 30
    assert "'no-such-image' is neither a manifest digest in the store" in err


def test_push_of_a_digest_not_in_the_store_exit_30(home: Path, fake: FakeRegistry,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "push", "sha256:" + "0" * 64, f"{HOST}/app:v1")
    assert rc == 30, err
    assert f"manifest sha256:{'0' * 64} is not in the store" in err


def test_bad_destination_exit_2(home: Path, fake: FakeRegistry,
                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "push", "sha256:" + "0" * 64, "app:v1")
    assert rc == 2 and "names no registry host" in err


def test_pull_of_tampered_blob_exit_31(home: Path, fake: FakeRegistry,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    fake.tamper_blobs = True
    rc, out, err = run(capsys, "pull", f"{HOST}/app:v1", "--json")
    assert rc == 31 and out == ""
    assert "answered blob" in err and "nothing was stored" in err
    assert not (home / "index.json").exists() or str(img.digest) not in (home / "index.json").read_text()


def test_pull_missing_manifest_exit_31(home: Path, fake: FakeRegistry,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "pull", f"{HOST}/app:nope")
    assert rc == 31 and "HTTP 404 MANIFEST_UNKNOWN" in err


def test_push_definition_means_its_latest_bake(home: Path, fake: FakeRegistry,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.images import record

    img = make_image()
    store_image(Store.open(home), img)
    asked: list[str] = []

    def latest(ctx: object, name: str) -> Digest | None:
        asked.append(name)
        return img.digest if name == "sm89-serving-offline" else None

    monkeypatch.setattr(record, "latest_digest", latest)
    rc, out, err = run(capsys, "push", "sm89-serving-offline",
                       f"{HOST}/vllm-sm89:0.25.1-dsv4", "--json")
    assert rc == 0, err
    assert json.loads(out)["digest"] == str(img.digest) and asked == ["sm89-serving-offline"]


def test_push_definition_prefers_the_record_over_the_store_name(
        home: Path, fake: FakeRegistry, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.images import record
    from patchbake.oci import layout
    from patchbake.oci.media import Descriptor

    recorded, other = make_image(b"recorded\n"), make_image(b"other\n")
    store = Store.open(home)
    store_image(store, recorded)
    store_image(store, other)
    layout.ensure_layout(store)
    layout.add_ref(store, "sm89-serving-offline",  # the store names another bake of it
                   Descriptor("application/vnd.oci.image.manifest.v1+json", other.digest,
                              len(other.manifest)))
    monkeypatch.setattr(record, "latest_digest", lambda ctx, name: recorded.digest
                        if name == "sm89-serving-offline" else None)
    rc, out, err = run(capsys, "push", "sm89-serving-offline", f"{HOST}/app:1", "--json")
    assert rc == 0, err
    assert json.loads(out)["digest"] == str(recorded.digest)
