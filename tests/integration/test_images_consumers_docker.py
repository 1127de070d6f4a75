"""The real consumers read these crafted images as the foreign image, and patchbake refuses
each one (it used to verify the genuine image beside the foreign one):

- docker-archive outer tar: members after a header whose checksum starts with NUL (Python's
  tarfile stops there, Go reads on), `blobs//sha256/x` beside `blobs/sha256/x`, a `blobs`
  symlink, no manifest.json (docker 20.10's legacy loader);
- descriptions Go's encoding/json reads case-insensitively: `Layers`/`RootFS` after
  `layers`/`rootfs`, `rootfſ`, `env`/`entrypoint` after `Env`/`Entrypoint`.

Each archive goes through `docker load` + `docker create` + `docker export` (network
none); the OCI layout through `umoci raw unpack --rootless`."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from images_repo import cli, cli_json, repo_copy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from images_craft import Pairs, add_member, dumps, layer
from patchbake.digest import Digest
from patchbake.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.sdist]
SP = "usr/local/lib/python3.12/dist-packages"
TARGET = f"{SP}/vllm/__init__.py"
EVIL = b"print('foreign vllm')\n"
LONG_S = "\u017f"


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(args), capture_output=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory, shared_home: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("consumers")
    root = repo_copy(tmp)
    good = tmp / "good.tar"
    res = cli_json(root, shared_home, "bake", "sm89-serving-offline", "--docker-archive",
                   str(good))
    store = Store.open(shared_home)
    manifest = json.loads(store.read_blob(Digest.parse(res["digest"])))
    config = json.loads(store.read_blob(Digest.parse(manifest["config"]["digest"])))
    evil = layer([(TARGET, EVIL)])
    return {"root": root, "good": good, "digest": res["digest"], "manifest": manifest,
            "config": config, "store": store, "evil": evil, "evil_digest": str(Digest.of(evil))}


@pytest.fixture
def tags() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for t in made:
        _run("docker", "rmi", "-f", t)


def _docker_reads(archive: Path, tag: str) -> tuple[bytes | None, dict[str, Any]]:
    """(TARGET as the engine's container holds it, the image's inspect) after docker load."""
    load = _run("docker", "load", "-i", str(archive))
    assert load.returncode == 0, load.stderr
    made = _run("docker", "create", "--network", "none", tag, "true")
    assert made.returncode == 0, made.stderr
    cid = made.stdout.decode().strip()
    try:
        exported = _run("docker", "export", cid)
        assert exported.returncode == 0, exported.stderr
    finally:
        _run("docker", "rm", "-f", cid)
    inspect = json.loads(_run("docker", "image", "inspect", tag).stdout)[0]
    with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as tf:
        names = {m.name.lstrip("./"): m for m in tf.getmembers()}
        f = tf.extractfile(names[TARGET]) if TARGET in names else None
        return (f.read() if f else None), inspect


def _refused(b: dict[str, Any], home: Path, ref: Path, code: int, why: str) -> None:
    out = cli(b["root"], home, "verify", str(ref), "--definition", "sm89-serving-offline",
              check=False)
    assert out.returncode == code, out.stderr
    assert out.stderr.count("\n") == 1 and why in out.stderr, out.stderr


def _evil_config(b: dict[str, Any]) -> bytes:
    """The genuine config with the last diff_id replaced by the foreign layer's."""
    cfg = json.loads(json.dumps(b["config"]))
    cfg["rootfs"]["diff_ids"][-1] = b["evil_digest"]
    return dumps(cfg)


def _archive(b: dict[str, Any], dest: Path, tag: str, *, manifest_json: bytes | None = None,
             skip: tuple[str, ...] = ()) -> tarfile.TarFile:
    """The genuine archive, re-tagged (manifest.json replaced); more members are added by
    the caller before it closes the returned tar."""
    out = tarfile.open(dest, "w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115 - caller closes
    with tarfile.open(b["good"]) as src:
        for m in src.getmembers():
            if m.name == "manifest.json" or m.name.startswith(skip):
                continue
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
    entry = {"Config": f"blobs/sha256/{b['manifest']['config']['digest'][7:]}",
             "RepoTags": [tag],
             "Layers": [f"blobs/sha256/{x['digest'][7:]}" for x in b["manifest"]["layers"]]}
    if "manifest.json" not in skip:
        add_member(out, "manifest.json", manifest_json or json.dumps([entry]).encode())
    return out


def _nul_checksum(name: str, data: bytes) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), 0o644
    hdr = bytearray(ti.tobuf(format=tarfile.USTAR_FORMAT))
    hdr[148:156] = b"\0" + hdr[148:154] + b"\0"  # Go trims the NUL, Python stops there
    return bytes(hdr) + data + bytes(-len(data) % 512)


def test_archive_tar_classes_docker_reads_and_patchbake_refuses(
        tmp_path: Path, shared_home: Path, docker_engine: str, baked: dict[str, Any],
        tags: list[str]) -> None:
    b = baked
    cfg_path = f"blobs/sha256/{b['manifest']['config']['digest'][7:]}"
    last = f"blobs/sha256/{b['manifest']['layers'][-1]['digest'][7:]}"
    # 1. hidden members after a NUL-checksum header overwrite the config and last layer
    tag = "patchbake-test/hidden:t"
    tags.append(tag)
    _archive(b, tmp_path / "plain.tar", tag).close()
    body = (tmp_path / "plain.tar").read_bytes().rstrip(b"\0")
    body += bytes(-len(body) % 512)
    (tmp_path / "hidden.tar").write_bytes(body + _nul_checksum(cfg_path, _evil_config(b))
                                          + _nul_checksum(last, b["evil"]) + bytes(1024))
    assert _docker_reads(tmp_path / "hidden.tar", tag)[0] == EVIL
    _refused(b, shared_home, tmp_path / "hidden.tar", 30, "appears twice")
    # 2. `blobs//sha256/x`: Python keeps it apart, docker load writes it over blobs/sha256/x
    tag = "patchbake-test/alias:t"
    tags.append(tag)
    with _archive(b, tmp_path / "alias.tar", tag) as out:
        add_member(out, cfg_path.replace("blobs/", "blobs//"), _evil_config(b))
        add_member(out, last.replace("blobs/", "blobs//"), b["evil"])
    assert _docker_reads(tmp_path / "alias.tar", tag)[0] == EVIL
    _refused(b, shared_home, tmp_path / "alias.tar", 30, "appears twice")
    # 3. `blobs` a symlink to `real`: docker load reads the blobs through it
    tag = "patchbake-test/symlink:t"
    tags.append(tag)
    with _archive(b, tmp_path / "link.tar", tag, skip=("blobs",)) as out:
        for d in ("real", "real/sha256"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            out.addfile(ti)
        ti = tarfile.TarInfo("blobs")
        ti.type, ti.linkname = tarfile.SYMTYPE, "real"
        out.addfile(ti)
        with tarfile.open(b["good"]) as src:
            for m in src.getmembers():
                if m.isfile() and m.name.startswith("blobs/"):
                    out.addfile(m, src.extractfile(m))
        add_member(out, cfg_path.replace("blobs/", "real/"), _evil_config(b))
        add_member(out, last.replace("blobs/", "real/"), b["evil"])
    assert _docker_reads(tmp_path / "link.tar", tag)[0] == EVIL
    _refused(b, shared_home, tmp_path / "link.tar", 12, "unsafe archive entry 'blobs' is a "
                                                        "symlink")


def test_archive_without_manifest_json_docker_loads_legacy(
        tmp_path: Path, shared_home: Path, docker_engine: str, baked: dict[str, Any],
        tags: list[str]) -> None:
    b = baked
    tag = "patchbake-test/legacy:latest"
    tags.append(tag)
    with _archive(b, tmp_path / "legacy.tar", tag, skip=("manifest.json",)) as out:
        add_member(out, "repositories", json.dumps({tag.split(":")[0]: {"latest": "blobs"}})
                   .encode())
        add_member(out, "blobs/json", json.dumps({
            "id": "a" * 64, "os": "linux", "architecture": "amd64",
            "config": {"Entrypoint": ["/bin/true"]}}).encode())
        add_member(out, "blobs/layer.tar", b["evil"])
    assert _docker_reads(tmp_path / "legacy.tar", tag)[0] == EVIL
    _refused(b, shared_home, tmp_path / "legacy.tar", 30, "has no manifest.json")


def _case_keyed(b: dict[str, Any], key_layers: str, key_rootfs: str) -> tuple[bytes, bytes]:
    """(manifest, config) bytes naming the genuine image under `layers`/`rootfs` and, after
    them, the image plus the foreign layer under keys Go reads as the same fields."""
    cfg = b["config"]
    cbytes = dumps(Pairs([*cfg.items(), (key_rootfs, {
        "type": "layers", "diff_ids": [*cfg["rootfs"]["diff_ids"], b["evil_digest"]]})]))
    m = b["manifest"]
    mbytes = dumps(Pairs([
        *{**m, "config": {**m["config"], "digest": str(Digest.of(cbytes)),
                          "size": len(cbytes)}}.items(),
        (key_layers, [*m["layers"], {**m["layers"][-1], "digest": b["evil_digest"],
                                     "size": len(b["evil"])}])]))
    return mbytes, cbytes


def _layout(b: dict[str, Any], dest: Path, mbytes: bytes, cbytes: bytes) -> Path:
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for d in [Digest.parse(x["digest"]) for x in b["manifest"]["layers"]]:
        shutil.copy(b["store"].blob_path(d), blobs / d.hex)
    for data in (mbytes, cbytes, b["evil"]):
        (blobs / Digest.of(data).hex).write_bytes(data)
    (dest / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": str(Digest.of(mbytes)), "size": len(mbytes),
        "annotations": {"org.opencontainers.image.ref.name": "crafted"}}]}))
    return dest


@pytest.mark.parametrize("keys", [("Layers", "RootFS"), (f"Layer{LONG_S}", f"rootf{LONG_S}")])
def test_case_folded_keys_consumers_read_and_patchbake_refuses(
        tmp_path: Path, shared_home: Path, docker_engine: str, baked: dict[str, Any],
        tags: list[str], keys: tuple[str, str]) -> None:
    b = baked
    mbytes, cbytes = _case_keyed(b, *keys)
    lay = _layout(b, tmp_path / "layout", mbytes, cbytes)
    if shutil.which("umoci"):
        bundle = tmp_path / "bundle"
        cp = _run("umoci", "raw", "unpack", "--rootless", "--image", f"{lay}:crafted",
                  str(bundle))
        assert cp.returncode == 0, cp.stderr
        assert (bundle / TARGET).read_bytes() == EVIL
    _refused(b, shared_home, lay, 30, "one key to Go")
    # the archive: manifest.json lists the foreign layer under a key Go reads as Layers
    tag = "patchbake-test/case-keys:t"
    tags.append(tag)
    layers = [f"blobs/sha256/{x['digest'][7:]}" for x in b["manifest"]["layers"]]
    entry = Pairs([("Config", f"blobs/sha256/{Digest.of(cbytes).hex}"), ("RepoTags", [tag]),
                   ("Layers", layers),
                   (keys[0].lower(), [*layers, f"blobs/sha256/{b['evil_digest'][7:]}"])])
    with _archive(b, tmp_path / "case.tar", tag, manifest_json=dumps([entry]),
                  skip=("index.json",)) as out:
        for data in (cbytes, b["evil"]):
            add_member(out, f"blobs/sha256/{Digest.of(data).hex}", data)
    assert _docker_reads(tmp_path / "case.tar", tag)[0] == EVIL
    _refused(b, shared_home, tmp_path / "case.tar", 30, "one key to Go")


def test_case_folded_runtime_config_docker_obeys_and_patchbake_refuses(
        tmp_path: Path, shared_home: Path, docker_engine: str, baked: dict[str, Any],
        tags: list[str]) -> None:
    b = baked
    cfg = json.loads(json.dumps(b["config"]))
    inner = Pairs([*cfg["config"].items(), ("entrypoint", ["/usr/bin/python3", "-c", "1"]),
                   ("env", [*cfg["config"]["Env"], "LD_PRELOAD=/tmp/x.so"])])
    cbytes = dumps(Pairs([*((k, inner if k == "config" else v) for k, v in cfg.items())]))
    tag = "patchbake-test/case-config:t"
    tags.append(tag)
    layers = [f"blobs/sha256/{x['digest'][7:]}" for x in b["manifest"]["layers"]]
    entry = {"Config": f"blobs/sha256/{Digest.of(cbytes).hex}", "RepoTags": [tag],
             "Layers": layers}
    with _archive(b, tmp_path / "rc.tar", tag, manifest_json=json.dumps([entry]).encode(),
                  skip=("index.json",)) as out:
        add_member(out, f"blobs/sha256/{Digest.of(cbytes).hex}", cbytes)
    inspect = _docker_reads(tmp_path / "rc.tar", tag)[1]
    assert inspect["Config"]["Entrypoint"] == ["/usr/bin/python3", "-c", "1"]
    assert "LD_PRELOAD=/tmp/x.so" in inspect["Config"]["Env"]
    _refused(b, shared_home, tmp_path / "rc.tar", 30, "keys 'Entrypoint' and 'entrypoint'")
