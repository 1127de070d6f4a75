"""The real Docker engine reads manifest.json: an archive whose manifest.json names another
image than its index.json is loaded by `docker load` as the manifest.json image (foreign
code in vllm/), and patchbake refuses the archive instead of verifying the index.json one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from images_repo import cli, cli_json, repo_copy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from images_craft import layer, two_description_archive, with_layer
from patchbake.digest import Digest
from patchbake.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.sdist]
SP = "usr/local/lib/python3.12/dist-packages"
EVIL = b"print('not the patch')\n"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300,
                        check=False)
    if check and cp.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {cp.stderr}")
    return cp


@pytest.fixture
def made() -> Iterator[list[str]]:
    refs: list[str] = []
    yield refs
    for ref in refs:
        docker("rmi", "-f", ref, check=False)


def test_docker_loads_manifest_json_patchbake_refuses_two_descriptions(
        tmp_path: Path, shared_home: Path, docker_engine: str, made: list[str]) -> None:
    root = repo_copy(tmp_path)
    good = tmp_path / "good.tar"
    res = cli_json(root, shared_home, "bake", "sm89-serving-offline", "--docker-archive",
                   str(good))
    store = Store.open(shared_home)
    evil = with_layer(store, Digest.parse(res["digest"]), layer([(f"{SP}/vllm/envs.py", EVIL)]))
    tag = f"patchbake/two-descriptions:{evil.short()}"
    two = two_description_archive(store, good, evil, tmp_path / "two.tar", tag)
    made.append(tag)

    docker("load", "-i", str(two))
    evil_config = json.loads(store.read_blob(evil))["config"]["digest"]
    # what the engine loaded is the manifest.json image, not the one index.json names
    assert docker("image", "inspect", tag, "--format", "{{.Id}}").stdout.strip() == evil_config
    assert evil_config != res["config_digest"]
    cid = docker("create", "--network", "none", tag, "true").stdout.strip()
    try:
        got = docker("cp", f"{cid}:/{SP}/vllm/envs.py", "-").stdout
    finally:
        docker("rm", cid, check=False)
    assert "not the patch" in got

    out = cli(root, shared_home, "verify", str(two), check=False)
    assert out.returncode == 30, out.stderr  # ImageError
    assert out.stderr.count("\n") == 1 and "name different configs" in out.stderr
    ok = cli_json(root, shared_home, "verify", str(good))
    assert ok["matched"] == ok["total"] and ok["mismatched"] == [] and ok["problems"] == []
    # the image the engine loaded, verified through the engine, fails on its foreign layer
    bad = cli(root, shared_home, "verify", f"docker:{tag}", "--definition",
              "sm89-serving-offline", check=False)
    assert bad.returncode == 33 and "vllm/envs.py" in bad.stderr


def test_docker_reads_a_gnu_header_name_python_reads_otherwise(
        tmp_path: Path, shared_home: Path, docker_engine: str, made: list[str]) -> None:
    """Only manifest.json naming the foreign image, in a GNU-format header whose bytes
    345.. are set: Go's archive/tar (docker load) reads it as "manifest.json", Python's
    tarfile as "00000000001/manifest.json". Patchbake must refuse the archive, not verify index.json."""
    import io
    import tarfile

    root = repo_copy(tmp_path)
    good = tmp_path / "good.tar"
    res = cli_json(root, shared_home, "bake", "sm89-serving-offline", "--docker-archive",
                   str(good))
    store = Store.open(shared_home)
    evil = with_layer(store, Digest.parse(res["digest"]), layer([(f"{SP}/vllm/envs.py", EVIL)]))
    tag = f"patchbake/gnu-name:{evil.short()}"
    two = two_description_archive(store, good, evil, tmp_path / "two.tar", tag)
    out_path = tmp_path / "gnu.tar"
    with tarfile.open(two) as src, tarfile.open(out_path, "w", format=tarfile.GNU_FORMAT) as out:
        for m in src.getmembers():
            if m.name != "manifest.json":
                out.addfile(m, src.extractfile(m) if m.isfile() else None)
        at = out.offset
        doc = src.extractfile("manifest.json").read()  # type: ignore[union-attr]
        ti = tarfile.TarInfo("manifest.json")
        ti.size = len(doc)
        out.addfile(ti, io.BytesIO(doc))
    data = bytearray(out_path.read_bytes())
    data[at + 345:at + 357] = b"00000000001\0"  # Go: GNU atime 1; Python: a prefix
    data[at + 148:at + 156] = b" " * 8
    data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + 512])
    out_path.write_bytes(bytes(data))
    made.append(tag)
    docker("load", "-i", str(out_path))
    evil_config = json.loads(store.read_blob(evil))["config"]["digest"]
    assert docker("image", "inspect", tag, "--format", "{{.Id}}").stdout.strip() == evil_config
    bad = cli(root, shared_home, "verify", str(out_path), check=False)
    assert bad.returncode == 30 and "tar readers disagree on its name" in bad.stderr
