"""The registry client against the real distribution registry (Debian's docker-registry on
127.0.0.1) and the real Docker engine: what we push, docker pulls, by digest."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from patchbake.digest import Digest
from patchbake.errors import TagMovedError
from patchbake.fsutil import canonical_json
from patchbake.oci.registry import RegistryClient
from patchbake.store import Store
from patchbake.storecheck import bad_blobs

pytestmark = [pytest.mark.integration, pytest.mark.registry]


@dataclass(frozen=True)
class Built:
    digest: Digest
    config_digest: Digest
    layer_digest: Digest
    blobs: tuple[Digest, ...]


def _sha(data: bytes) -> str:
    return str(Digest.of(data))


def build_image(store: Store, marker: str, extra_bytes: int = 0) -> Built:
    """A small deterministic image: one uncompressed tar layer, config, OCI manifest."""
    files = {"etc/patchbake-test": marker.encode() + b"\n"}
    if extra_bytes:
        # Deterministic, incompressible filler: big enough to travel as a streamed file body.
        seed, chunks = marker.encode(), []
        for i in range(extra_bytes // 32 + 1):
            chunks.append(hashlib.sha256(seed + i.to_bytes(8, "big")).digest())
        files["opt/filler.bin"] = b"".join(chunks)[:extra_bytes]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in sorted({p.rsplit("/", 1)[0] for p in files}):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 0
            tf.addfile(ti)
        for path, data in sorted(files.items()):
            ti = tarfile.TarInfo(path)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tf.addfile(ti, io.BytesIO(data))
    layer = buf.getvalue()
    cfg = canonical_json({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Cmd": ["/etc/patchbake-test"], "Labels": {"patchbake.test": marker}},
        "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "patchbake test"}]})
    man = canonical_json({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _sha(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _sha(layer), "size": len(layer)}]})
    for blob in (layer, cfg, man):
        store.put_bytes(blob)
    return Built(Digest.of(man), Digest.of(cfg), Digest.of(layer),
                 (Digest.of(cfg), Digest.of(layer)))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "store")


def _head(registry: str, path: str) -> int:
    return requests.head(f"http://{registry}/v2/{path}", timeout=10,
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
                         ).status_code


def test_push_repush_pull_roundtrip(registry: str, store: Store, tmp_path: Path) -> None:
    img = build_image(store, "roundtrip", extra_bytes=3 << 20)
    client = RegistryClient(registry)
    res = client.push(store, img.digest, f"{registry}/pb/roundtrip:v1")
    assert sorted(res.uploaded) == sorted(img.blobs) and res.manifests == (img.digest,)
    assert res.bytes_uploaded > 3 << 20

    again = RegistryClient(registry).push(store, img.digest, f"{registry}/pb/roundtrip:v1")
    assert again.uploaded == () and sorted(again.skipped) == sorted(img.blobs)
    assert again.tag_existed and again.manifests == ()

    raw = requests.get(f"http://{registry}/v2/pb/roundtrip/manifests/v1", timeout=10,
                       headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert raw.content == store.read_blob(img.digest)

    fresh = Store.open(tmp_path / "fresh")
    res2 = RegistryClient(registry).pull_image(fresh, f"{registry}/pb/roundtrip:v1")
    assert res2.digest == img.digest and res2.config_digest == img.config_digest
    for d in (img.digest, *img.blobs):
        assert fresh.read_blob(d) == store.read_blob(d)
    assert bad_blobs(fresh) == []


def test_mount_across_repositories(registry: str, store: Store) -> None:
    img = build_image(store, "mount")
    client = RegistryClient(registry)
    client.push(store, img.digest, f"{registry}/pb/mount-src:v1")
    res = client.push(store, img.digest, f"{registry}/pb/mount-dst:v1")
    assert sorted(res.mounted) == sorted(img.blobs) and res.uploaded == ()
    for d in img.blobs:
        assert _head(registry, f"pb/mount-dst/blobs/{d}") == 200
    # Without a record, --mount-from names the source.
    bare = RegistryClient(registry, record_mounts=False)
    res = bare.push(store, img.digest, f"{registry}/pb/mount-dst2@{img.digest}",
                    mount_from=["pb/mount-src"])
    assert sorted(res.mounted) == sorted(img.blobs)


def test_tag_move_refused_and_nothing_changed(registry: str, store: Store) -> None:
    first, second = build_image(store, "tag-a"), build_image(store, "tag-b")
    client = RegistryClient(registry)
    client.push(store, first.digest, f"{registry}/pb/tags:stable")
    with pytest.raises(TagMovedError, match=f"already points to {first.digest}") as ei:
        client.push(store, second.digest, f"{registry}/pb/tags:stable")
    assert ei.value.exit_code == 32
    assert _head(registry, f"pb/tags/manifests/{second.digest}") == 404
    assert _head(registry, f"pb/tags/blobs/{second.layer_digest}") == 404
    raw = requests.get(f"http://{registry}/v2/pb/tags/manifests/stable", timeout=10,
                       headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert Digest.of(raw.content) == first.digest


def _patchbake(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHBAKE_HOME": str(home), "PATCHBAKE_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "patchbake", *args], env=env, check=False,
                          capture_output=True, text=True, timeout=120)


def test_cli_push_pull_and_tag_move(registry: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = Store.open(home)
    img, other = build_image(store, "cli"), build_image(store, "cli-other")
    r = _patchbake(home, "push", str(img.digest), f"{registry}/pb/cli:1.0", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["digest"] == str(img.digest)
    assert sorted(doc["pushed"]) == sorted(str(d) for d in img.blobs)

    r = _patchbake(home, "push", str(other.digest), f"{registry}/pb/cli:1.0")
    assert r.returncode == 32
    assert f"pb/cli:1.0 already points to {img.digest}; refusing to move it" in r.stderr

    r = _patchbake(tmp_path / "home2", "pull", f"{registry}/pb/cli:1.0", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["digest"] == str(img.digest) and doc["config_digest"] == str(img.config_digest)


def test_pull_of_a_missing_tag_names_the_tags_there(registry: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    img = build_image(Store.open(home), "missing-tag")
    assert _patchbake(home, "push", str(img.digest), f"{registry}/pb/missing:1.0").returncode == 0
    r = _patchbake(tmp_path / "home2", "pull", f"{registry}/pb/missing:1.1")
    assert r.returncode == 31
    assert (f"{registry}/pb/missing has no tag '1.1'; did you mean '1.0'? (pb/missing's "
            "tags: 1.0)") in r.stderr and "HTTP 404 MANIFEST_UNKNOWN" in r.stderr
    r = _patchbake(tmp_path / "home2", "pull", f"{registry}/pb/never-pushed:1")
    assert r.returncode == 31 and f"{registry}/pb/never-pushed has no tag '1'" in r.stderr
    assert _patchbake(home, "push", str(img.digest), f"{registry}/pb/missing:0.9").returncode == 0
    r = _patchbake(home, "tags", f"{registry}/pb/missing")
    assert r.returncode == 0 and r.stdout == "0.9\n1.0\n", r.stderr
    r = _patchbake(home, "tags", f"{registry}/pb/missing:1.0")
    assert r.returncode == 2 and "give the repository alone" in r.stderr


def test_push_of_a_damaged_store_blob_names_the_blob_not_the_registry(
        registry: str, tmp_path: Path) -> None:
    """A layer whose bytes changed on disk (same size): the registry refuses the upload,
    and the error says which store blob is damaged and how to repair it."""
    home = tmp_path / "home"
    store = Store.open(home)
    img = build_image(store, "damaged", extra_bytes=2 << 20)
    path = store.blob_path(img.layer_digest)
    data = bytearray(path.read_bytes())
    data[-600] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    r = _patchbake(home, "push", str(img.digest), f"{registry}/pb/damaged:1")
    assert r.returncode == 11, r.stderr
    assert f"the store's blob {img.layer_digest} is damaged" in r.stderr
    assert "store fsck --quarantine" in r.stderr


def test_image_inspect_gives_one_identity_for_every_spelling(registry: str,
                                                             tmp_path: Path) -> None:
    """crane digest / skopeo inspect: the store digest, a prefix of it and the registry
    reference all show the same manifest, config and layers; -q prints the digest only."""
    home = tmp_path / "home"
    img = build_image(Store.open(home), "inspect")
    ref = f"{registry}/pb/inspect:1"
    assert _patchbake(home, "push", str(img.digest), ref).returncode == 0
    docs = []
    for spelling in (str(img.digest), f"sha256:{img.digest.hex[:12]}", ref):
        r = _patchbake(home, "image", "inspect", spelling, "--json")
        assert r.returncode == 0, r.stderr
        docs.append(json.loads(r.stdout))
        r = _patchbake(home, "image", "inspect", "-q", spelling)
        assert r.stdout == f"{img.digest}\n", r.stderr
    assert [d["kind"] for d in docs] == ["store", "store", "registry"]
    for d in docs:
        assert d["manifest_digest"] == str(img.digest)
        assert d["config_digest"] == str(img.config_digest)
        assert [la["digest"] for la in d["layers"]] == [str(img.layer_digest)]
        assert d["labels"] == {"patchbake.test": "inspect"} and d["platform"] == "linux/amd64"
    r = _patchbake(home, "image", "inspect", f"{registry}/pb/inspect:2")
    assert r.returncode == 31 and "has no tag '2' (pb/inspect's tags: 1)" in r.stderr


@pytest.mark.docker
def test_docker_pulls_what_we_pushed(registry: str, store: Store, docker_engine: str) -> None:
    img = build_image(store, "docker-pull")
    RegistryClient(registry).push(store, img.digest, f"{registry}/pb/docker:v1")
    ref = f"{registry}/pb/docker@{img.digest}"
    try:
        pulled = subprocess.run(["docker", "pull", ref], capture_output=True, text=True, check=False,
                                timeout=120)
        assert pulled.returncode == 0, pulled.stderr
        info = subprocess.run(["docker", "image", "inspect", ref], capture_output=True,
                              text=True, timeout=60, check=True)
        doc = json.loads(info.stdout)[0]
        assert doc["Id"] == str(img.config_digest)  # the classic store reports the config
        assert ref in doc["RepoDigests"]
        assert doc["Config"]["Labels"]["patchbake.test"] == "docker-pull"
    finally:
        subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, timeout=60, check=False)


def test_cli_push_and_pull_start_without_heavy_imports(registry: str, tmp_path: Path) -> None:
    """A push or pull process is timed against skopeo: the CLI loads the registry commands
    only, so it imports neither the engine build's templates (jinja2) nor the signing
    stack (cryptography), and without a terminal it draws nothing (no rich)."""
    home = tmp_path / "home"
    img = build_image(Store.open(home), "startup")
    heavy = ("rich", "jinja2", "cryptography")
    for home_, args in ((home, ["push", str(img.digest), f"{registry}/pb/startup:1", "--json"]),
                        (tmp_path / "home2", ["pull", f"{registry}/pb/startup:1", "--json"])):
        code = ("import sys\nfrom patchbake.entry import main\n"
                f"rc = main({args!r})\n"
                f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules), "
                "file=sys.stderr)")
        env = {**os.environ, "PATCHBAKE_HOME": str(home_), "PATCHBAKE_NO_PROGRESS": "1"}
        r = subprocess.run([sys.executable, "-c", code], env=env, check=False,
                           capture_output=True, text=True, timeout=120)
        assert r.stderr.splitlines()[-1] == "0 []", r.stderr
        assert json.loads(r.stdout)["digest"] == str(img.digest)


def test_four_pushes_of_one_image_at_once_all_succeed(registry: str, store: Store) -> None:
    """Concurrent pushers of the same blobs race in the registry (one rewrites a blob's
    link file as another's manifest is checked against it): every push still succeeds."""
    import threading
    import uuid

    img = build_image(store, "race")
    for _ in range(3):
        ref = f"{registry}/pb/race-{uuid.uuid4().hex[:8]}:t1"
        out: list[Digest] = []

        def one(ref: str = ref, out: list[Digest] = out) -> None:
            out.append(RegistryClient(registry).push(store, img.digest, ref).digest)

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out == [img.digest] * 4
