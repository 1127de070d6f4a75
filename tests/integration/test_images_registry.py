"""verify against the real distribution registry: a baked image pushed by digest, then
verified from the registry reference (every pulled byte hash-checked), and a registry
base source (manifest + config only) baked onto."""

from __future__ import annotations

from pathlib import Path

import pytest
from images_repo import cli, cli_json, repo_copy

pytestmark = [pytest.mark.integration, pytest.mark.registry, pytest.mark.sdist]


def test_verify_registry_reference(tmp_path: Path, shared_home: Path, registry: str) -> None:
    from patchbake.digest import Digest
    from patchbake.oci.registry import push
    from patchbake.store import Store

    root = repo_copy(tmp_path)
    res = cli_json(root, shared_home, "bake", "sm89-serving-offline")
    push(Store.open(shared_home), Digest.parse(res["digest"]),
         f"{registry}/patchbake/offline:verify-test")
    out = cli_json(root, shared_home, "verify", f"{registry}/patchbake/offline@{res['digest']}")
    assert out["kind"] == "registry" and out["digest"] == res["digest"]
    assert out["matched"] == out["total"] >= 1 and out["mismatched"] == []
    bad = cli(root, shared_home, "verify", f"{registry}/patchbake/offline@sha256:{'0' * 64}",
              check=False)
    assert bad.returncode != 0 and "error" in bad.stderr


def test_registry_base_layers_are_pulled_to_bind_the_lineage(tmp_path: Path, shared_home: Path,
                                                      registry: str) -> None:
    from patchbake.digest import Digest
    from patchbake.oci.registry import push
    from patchbake.store import Store

    root = repo_copy(tmp_path)
    standin = cli_json(root, shared_home, "image", "standin")
    push(Store.open(shared_home), Digest.parse(standin["digest"]),
         f"{registry}/patchbake/standin:0.25.1")
    text = (root / "images" / "sm89-serving-offline.yaml").read_text()
    (root / "images" / "fromreg.yaml").write_text(
        text.replace("source: standin", "source: registry")
            .replace("name: patchbake/standin-vllm:0.25.1",
                     f"name: {registry}/patchbake/standin:0.25.1"))
    p = root / "pipeline.yaml"
    p.write_text(p.read_text().replace("images:\n", "images:\n  fromreg: images/fromreg.yaml\n"))
    home = tmp_path / "fresh-store"  # nothing of the base here: it comes from the registry
    seed = shared_home / "blobs" / "sha256"
    dest = home / "blobs" / "sha256"
    dest.mkdir(parents=True)
    sdist = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"
    (dest / sdist).write_bytes((seed / sdist).read_bytes())
    res = cli_json(root, home, "bake", "fromreg")
    offline = cli_json(root, shared_home, "bake", "sm89-serving-offline")
    assert res["layers"][:-1] == offline["layers"][:-1]  # the base's layers, verbatim
    assert res["base"]["digest"] == standin["digest"]
    for layer in standin["layers"]:
        # pulled and read: the base's vllm/ tree binds it to the lineage and fills the
        # image's full tree manifest (a base of another upstream is refused)
        assert (dest / layer[7:]).exists()
