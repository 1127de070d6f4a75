"""Base sources (OCI layout with a multi-arch index, docker-archive pins), the mode
decision, and the engine template (rendered, not built: no daemon in unit tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from images_support import SP, make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.errors import ImageError, IntegrityError
from patchbake.fsutil import canonical_json
from patchbake.images import definition
from patchbake.images.engine_bake import render
from patchbake.images.overlay import build_overlay, decide_mode, native_paths
from patchbake.images.tree import BaseTree
from patchbake.oci.archive import export_docker_archive


def _layout_with_index(repo, dest: Path) -> str:  # type: ignore[no-untyped-def]
    """An OCI layout holding the stand-in under a two-platform index; returns its digest."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifest = json.loads(repo.store.read_blob(repo.standin_digest))
    for d in [repo.standin_digest, Digest.parse(manifest["config"]["digest"]),
              *[Digest.parse(x["digest"]) for x in manifest["layers"]]]:
        (blobs / d.hex).write_bytes(repo.store.read_blob(d))
    size = len(repo.store.read_blob(repo.standin_digest))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [
                 {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "digest": "sha256:" + "1" * 64, "size": 10,
                  "platform": {"os": "linux", "architecture": "arm64"}},
                 {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "digest": str(repo.standin_digest), "size": size,
                  "platform": {"os": "linux", "architecture": "amd64"}}]}
    import hashlib

    data = canonical_json(index)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest[7:]).write_bytes(data)
    (dest / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (dest / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": [
        {"mediaType": index["mediaType"], "digest": digest, "size": len(data)}]}))
    return digest


def test_oci_layout_index_base(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    index = _layout_with_index(repo, repo.root / "base-layout")
    text = (f"version: 1\nbase:\n  source: oci-layout\n  name: example/base:1\n"
            f"  digest: {index}\n  platform_digest: {repo.standin_digest}\n"
            f"  path: base-layout\nsite_packages: {SP}\nmode: overlay\n")
    repo.define("fromlayout", text)
    offline = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    res = bake_image(repo.pipeline, "fromlayout", repo.store, patched=repo.patched)
    assert res.layers[:-1] == offline.layers[:-1]
    assert res.base["index_digest"] == index \
        and res.base["manifest_digest"] == str(repo.standin_digest)
    repo.define("wrongplatform", text.replace(str(repo.standin_digest), "sha256:" + "2" * 64))
    with pytest.raises(IntegrityError, match="linux/amd64 manifest is"):
        bake_image(repo.pipeline, "wrongplatform", repo.store, patched=repo.patched)


def test_docker_archive_base_pinned(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    export_docker_archive(repo.store, repo.standin_digest, repo.root / "base.tar", ["b:1"])
    config_digest = json.loads(repo.store.read_blob(repo.standin_digest))["config"]["digest"]
    for pin in (repo.standin_digest, config_digest):
        repo.define("fromarchive", f"version: 1\nbase: {{source: docker-archive, name: b:1, "
                    f"digest: '{pin}', path: base.tar}}\nsite_packages: {SP}\nmode: overlay\n")
        assert bake_image(repo.pipeline, "fromarchive", repo.store, patched=repo.patched)
    repo.define("badpin", f"version: 1\nbase: {{source: docker-archive, name: b:1, digest: "
                f"'sha256:{'3' * 64}', path: base.tar}}\nsite_packages: {SP}\nmode: overlay\n")
    with pytest.raises(IntegrityError, match="the definition pins sha256:3333"):
        bake_image(repo.pipeline, "badpin", repo.store, patched=repo.patched)


def test_mode_decision(tmp_path: Path) -> None:
    assert native_paths(["csrc/a.cu", "vllm/x.py", "CMakeLists.txt", "setup.py",
                         "vllm/_C.cpp"]) == ["CMakeLists.txt", "csrc/a.cu", "setup.py",
                                             "vllm/_C.cpp"]
    repo = make_repo(tmp_path, mode="build")
    (repo.root / "images" / "offline.yaml").write_text(
        (repo.root / "images" / "offline.yaml").read_text()
        + "build: {builder: 'example/devel@sha256:" + "4" * 64 + "'}\n")
    defn = definition.load(repo.pipeline, "offline")
    mode, warnings = decide_mode(defn, repo.patched)
    assert mode == "overlay" and "touches no native source" in warnings[0]


def test_template_renders_both_modes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo.root / "images" / "Dockerfile.sm89.j2").write_bytes(
        (Path(__file__).resolve().parents[2] / "images" / "Dockerfile.sm89.j2").read_bytes())
    defn = definition.load(repo.pipeline, "offline")
    overlay = build_overlay(defn, repo.patched, repo.pipeline.lineage(), "b", Digest.from_hex("0" * 64),
                            BaseTree({}, {}, None))
    labels = {"org.opencontainers.image.version": "0.25.1+x", "dev.patchbake.patch.sha256": "ab"}
    text = render(defn, "overlay", "base:1", overlay, labels,
                  {"config": {"Entrypoint": ["vllm", "serve"], "Cmd": ["--help"]}})
    # the start-up check wrapper in front of the base's entrypoint; the base's cmd kept
    assert 'ENTRYPOINT ["/opt/patchbake/entrypoint.sh", "vllm", "serve"]' in text
    assert 'CMD ["--help"]' in text
    assert "FROM base:1" in text and "COPY overlay/ /" in text and "AS build" not in text
    assert 'ENV TORCH_CUDA_ARCH_LIST="8.9"' in text
    assert f"RUN rm -f {SP}/vllm/scripts.py" in text
    assert 'dev.patchbake.patch.sha256="ab"' in text
    built = render(defn, "build", "base:1", overlay, labels)
    assert "AS build" in built and "--no-build-isolation" in built and "--no-index" in built
    assert built.count('TORCH_CUDA_ARCH_LIST="8.9"') == 2


def test_template_missing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    defn = definition.load(repo.pipeline, "offline")
    overlay = build_overlay(defn, repo.patched, repo.pipeline.lineage(), "b", Digest.from_hex("0" * 64),
                            BaseTree({}, {}, None))
    with pytest.raises(ImageError, match="template .* does not exist"):
        render(defn, "overlay", "base:1", overlay, {})


@pytest.mark.parametrize("entry", [[1], [{"Layers": []}], [{"Config": "c.json", "Layers": "x"}]])
def test_classic_archive_with_a_malformed_manifest_is_an_image_error(
        tmp_path: Path, entry: list) -> None:  # type: ignore[type-arg]
    import io
    import tarfile

    from patchbake.oci.archive import import_docker_archive
    from patchbake.store import Store

    path = tmp_path / "classic.tar"
    with tarfile.open(path, "w") as tf:
        data = json.dumps(entry).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    store = Store.open(tmp_path / "store")
    with pytest.raises(ImageError) as err:
        import_docker_archive(store, path)
    assert err.value.exit_code == 30
    assert "manifest.json" in err.value.one_line()


@pytest.mark.parametrize("name, repo", [
    ("vllm/vllm-openai:v0.25.1", "vllm/vllm-openai"),
    ("127.0.0.1:5000/base:1", "127.0.0.1:5000/base"),
    ("127.0.0.1:5000/base", "127.0.0.1:5000/base"),
    ("host:5000/org/base@sha256:" + "a" * 64, "host:5000/org/base"),
])
def test_registry_repo_keeps_the_port(name: str, repo: str) -> None:
    # the engine backend used name.split(':')[0], which cut "127.0.0.1:5000/base:1" to
    # "127.0.0.1"; both backends now share this
    from patchbake.images.base import registry_repo

    assert registry_repo(name) == repo
