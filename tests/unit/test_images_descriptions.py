"""One image, one description: a docker-archive whose manifest.json (docker load) and
index.json (OCI tools) name different images is refused; an OCI layout whose index names
several manifests is narrowed by name, digest or platform, and otherwise refused."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from images_craft import add_member, entry, layer, layout_dir, two_description_archive, with_layer
from images_support import SP, Repo, make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.errors import ImageError
from patchbake.verify.baked import verify_image
from patchbake.oci.archive import import_docker_archive
from patchbake.oci.media import OCI_INDEX
from patchbake.store import Store

EVIL = b"import os; os.system('id')\n"


def _verify(repo: Repo, ref: str | Digest):  # type: ignore[no-untyped-def]
    return verify_image(repo.pipeline, ref, repo.store, patched=repo.patched,
                        definition="offline")


def _baked(tmp_path: Path) -> tuple[Repo, Digest, Path]:
    repo = make_repo(tmp_path)
    out = tmp_path / "img.tar"
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched,
                     docker_archive=out)
    return repo, res.digest, out


def _evil(repo: Repo, digest: Digest) -> Digest:
    return with_layer(repo.store, digest, layer([(f"{SP.strip('/')}/vllm/envs.py", EVIL)]))


def test_archive_whose_manifest_json_names_another_image_is_refused(tmp_path: Path) -> None:
    repo, digest, good = _baked(tmp_path)
    evil = _evil(repo, digest)
    two = two_description_archive(repo.store, good, evil, tmp_path / "two.tar")
    fresh = Store.open(tmp_path / "fresh")
    with pytest.raises(ImageError, match=r"manifest.json \(read by docker load\) and "
                       r"index.json \(read by OCI tools\) name different configs") as info:
        import_docker_archive(fresh, two)
    assert info.value.exit_code == ImageError.exit_code
    assert not fresh.has(digest)  # nothing was stored
    with pytest.raises(ImageError, match="name different configs"):
        _verify(repo, str(two))
    assert _verify(repo, str(good)).ok


def test_archive_layers_compared_by_bytes_not_paths(tmp_path: Path) -> None:
    repo, digest, good = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    last = Digest.parse(manifest["layers"][-1]["digest"])
    # same config, same layer bytes at another path: the two descriptions agree
    with tarfile.open(good) as src, tarfile.open(tmp_path / "moved.tar", "w") as out:
        for m in src.getmembers():
            if m.name == "manifest.json":
                doc = json.load(src.extractfile(m))  # type: ignore[arg-type]
                doc[0]["Layers"][-1] = "ours/layer.tar"
                add_member(out, "manifest.json", json.dumps(doc).encode())
            else:
                out.addfile(m, src.extractfile(m) if m.isfile() else None)
        add_member(out, "ours/layer.tar", repo.store.read_blob(last))
    assert _verify(repo, str(tmp_path / "moved.tar")).ok
    # one more layer in manifest.json only: two images
    evil_layer = layer([(f"{SP.strip('/')}/vllm/envs.py", EVIL)])
    with tarfile.open(good) as src, tarfile.open(tmp_path / "longer.tar", "w") as out:
        for m in src.getmembers():
            if m.name == "manifest.json":
                doc = json.load(src.extractfile(m))  # type: ignore[arg-type]
                doc[0]["Layers"].append("evil/layer.tar")
                add_member(out, "manifest.json", json.dumps(doc).encode())
            else:
                out.addfile(m, src.extractfile(m) if m.isfile() else None)
        add_member(out, "evil/layer.tar", evil_layer)
    with pytest.raises(ImageError, match="name 4 vs 3 layers"):
        import_docker_archive(Store.open(tmp_path / "fresh"), tmp_path / "longer.tar")


def test_archive_entry_twice_is_refused(tmp_path: Path) -> None:
    _, _, good = _baked(tmp_path)
    with tarfile.open(good) as src, tarfile.open(tmp_path / "dup.tar", "w") as out:
        for m in src.getmembers():
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        add_member(out, "./manifest.json", b"[]")  # a later copy: docker load would use it
    with pytest.raises(ImageError, match="'manifest.json' appears twice"):
        import_docker_archive(Store.open(tmp_path / "fresh"), tmp_path / "dup.tar")


def test_layout_with_several_manifests(tmp_path: Path) -> None:
    repo, digest, _ = _baked(tmp_path)
    evil = _evil(repo, digest)
    st = repo.store
    both = layout_dir(st, tmp_path / "both", [entry(st, digest, name="good"),
                                              entry(st, evil, name="evil")], [digest, evil])
    # both are linux/amd64 (read from their configs): nothing is guessed
    with pytest.raises(ImageError, match=r"names 2 image manifests \(2 for linux/amd64\).*"
                       "refusing to guess") as info:
        _verify(repo, str(both))
    assert info.value.exit_code == ImageError.exit_code
    by_name = _verify(repo, f"{both}@good")
    assert by_name.ok and by_name.digest == digest
    assert "names 'good' (org.opencontainers.image.ref.name)" in by_name.extra["selected"]
    by_digest = _verify(repo, f"{both}@{digest}")
    assert by_digest.extra["selected"].startswith("named by digest")
    assert not _verify(repo, f"{both}@{evil}").ok
    lone = layout_dir(st, tmp_path / "lone", [entry(st, digest)], [digest, evil])
    with pytest.raises(ImageError, match="does not list"):  # in blobs/, not in the index
        _verify(repo, f"{lone}@{evil}")
    assert _verify(repo, str(lone)).extra["selected"].startswith("the only image manifest")


def test_layout_narrowed_by_platform_and_nested_index(tmp_path: Path) -> None:
    repo, digest, _ = _baked(tmp_path)
    evil = _evil(repo, digest)
    st = repo.store
    arm = {"os": "linux", "architecture": "arm64"}
    amd = {"os": "linux", "architecture": "amd64"}
    plat = layout_dir(st, tmp_path / "plat", [entry(st, evil, platform=arm),
                                              entry(st, digest, platform=amd)], [digest, evil])
    res = _verify(repo, str(plat))
    assert res.ok and res.extra["selected"] == ("the only linux/amd64 image among 2 manifests "
                                                f"{plat}/index.json names")
    # a nested index: followed, and the same rules apply to what it names
    inner = {"schemaVersion": 2, "mediaType": OCI_INDEX,
             "manifests": [entry(st, digest, platform=amd), entry(st, evil, platform=amd)]}
    ihex = st.put_bytes(json.dumps(inner).encode())
    nested = layout_dir(st, tmp_path / "nested", [entry(st, ihex,
                                                        media_type=OCI_INDEX)],
                        [ihex, digest, evil])
    with pytest.raises(ImageError, match="refusing to guess"):
        _verify(repo, str(nested))
    inner["manifests"] = [entry(st, digest, platform=amd)]
    ihex = st.put_bytes(json.dumps(inner).encode())
    nested1 = layout_dir(st, tmp_path / "nested1", [entry(st, ihex,
                                                          media_type=OCI_INDEX)],
                         [ihex, digest])
    res = _verify(repo, str(nested1))
    assert res.ok and res.digest == digest and f"> {ihex}" in res.extra["selected"]


def _retitle(data: bytearray, offset: int, prefix: bytes) -> None:
    """Write ``prefix`` into bytes 345.. of the header at ``offset`` (GNU: atime/ctime;
    Python's tarfile reads them as a ustar prefix) and fix the checksum."""
    data[offset + 345:offset + 345 + len(prefix)] = prefix
    data[offset + 148:offset + 156] = b" " * 8
    data[offset + 148:offset + 156] = b"%06o\0 " % sum(data[offset:offset + 512])


def test_archive_names_readers_disagree_on_are_refused(tmp_path: Path) -> None:
    _, _, good = _baked(tmp_path)
    # manifest.json in GNU format with bytes at 345: Go (docker load) reads
    # "manifest.json", Python's tarfile "00000000001/manifest.json"
    with tarfile.open(good) as src, tarfile.open(tmp_path / "gnu.tar", "w",
                                                 format=tarfile.GNU_FORMAT) as out:
        for m in src.getmembers():
            if m.name != "manifest.json":
                out.addfile(m, src.extractfile(m) if m.isfile() else None)
        at = out.offset
        add_member(out, "manifest.json", b"[]")
    data = bytearray((tmp_path / "gnu.tar").read_bytes())
    _retitle(data, at, b"00000000001\0")  # Go: a GNU atime; Python: a ustar prefix
    (tmp_path / "gnu.tar").write_bytes(bytes(data))
    with tarfile.open(tmp_path / "gnu.tar") as check:
        assert "00000000001/manifest.json" in check.getnames()  # what Python alone would believe
    with pytest.raises(ImageError, match="tar readers disagree on its name"):
        import_docker_archive(Store.open(tmp_path / "fresh"), tmp_path / "gnu.tar")
    # a PAX path record naming a member
    with tarfile.open(good) as src, tarfile.open(tmp_path / "pax.tar", "w",
                                                 format=tarfile.PAX_FORMAT) as out:
        for m in src.getmembers():
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        ti = tarfile.TarInfo("short")
        ti.pax_headers = {"path": "blobs/sha256/" + "0" * 64}
        ti.size = 1
        out.addfile(ti, io.BytesIO(b"x"))
    with pytest.raises(ImageError, match="PAX or GNU long-name"):
        import_docker_archive(Store.open(tmp_path / "fresh2"), tmp_path / "pax.tar")


@pytest.mark.parametrize("manifests", [b"5", b'"ab"', b'{"a": 1}'])
def test_archive_index_whose_manifests_is_not_a_list_is_one_line(
        tmp_path: Path, manifests: bytes) -> None:
    with tarfile.open(tmp_path / "odd.tar", "w", format=tarfile.USTAR_FORMAT) as out:
        add_member(out, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add_member(out, "index.json", b'{"manifests": ' + manifests + b"}")
    with pytest.raises(ImageError, match="'manifests' is not a list of descriptors"):
        import_docker_archive(Store.open(tmp_path / "fresh"), tmp_path / "odd.tar")
