"""A docker-archive is read as `docker load` reads it: its outer tar with Go's archive/tar
rules (members after a header Python's tarfile takes for the end are read, and only zeros
may follow the end), names cleaned as filepath.Clean cleans them before the duplicate
check, regular files and directories only, and manifest.json required."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from images_craft import add_member
from images_support import make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.errors import ImageError, UnsafeArchiveError
from patchbake.oci.archive import import_docker_archive
from patchbake.oci.archive_tar import ArchiveTar
from patchbake.store import Store


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Digest]:
    """A baked image's docker-archive (manifest.json + index.json) and its digest."""
    tmp = tmp_path_factory.mktemp("archive")
    repo = make_repo(tmp)
    out = tmp / "img.tar"
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched,
                     docker_archive=out)
    return out, res.digest


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(archive) as src:
        return [(m, (src.extractfile(m).read() if m.isfile() else None))  # type: ignore[union-attr]
                for m in src.getmembers()]


def _rewrite(good: Path, dest: Path, *, skip: Callable[[str], bool] = lambda _: False,
             extra: Callable[[tarfile.TarFile], None] = lambda _: None) -> Path:
    with tarfile.open(dest, "w", format=tarfile.USTAR_FORMAT) as out:
        for m, data in _members(good):
            if not skip(m.name):
                out.addfile(m, io.BytesIO(data) if data is not None else None)
        extra(out)
    return dest


def _blob_of(good: Path, kind: str) -> str:
    entry = json.loads(dict((m.name, d) for m, d in _members(good))["manifest.json"] or b"")[0]
    return str(entry["Config"] if kind == "config" else entry["Layers"][-1])


def _nul_checksum_member(name: str, data: bytes) -> bytes:
    """A member whose checksum field starts with NUL: Go trims it and reads the number,
    Python's tarfile cuts the field there and takes the header for the end of the archive."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), 0o644
    hdr = bytearray(ti.tobuf(format=tarfile.USTAR_FORMAT))
    hdr[148:156] = b"\0" + hdr[148:154] + b"\0"
    return bytes(hdr) + data + bytes(-len(data) % 512)


def _append_raw(archive: Path, dest: Path, raw: bytes) -> Path:
    body = archive.read_bytes()
    end = len(body)
    while end >= 512 and body[end - 512:end] == bytes(512):
        end -= 512
    dest.write_bytes(body[:end] + raw + bytes(1024))
    return dest


def test_members_after_a_header_python_stops_at_are_read(good: tuple[Path, Digest],
                                                         tmp_path: Path) -> None:
    archive, digest = good
    config = _blob_of(archive, "config")
    # a hidden second copy of the config: docker load's extraction keeps the later one
    dup = _append_raw(archive, tmp_path / "dup.tar",
                      _nul_checksum_member(config, b'{"rootfs": {}}'))
    with tarfile.open(dup) as python_reads:
        assert config in python_reads.getnames() and len(python_reads.getmembers()) == \
            len(_members(archive))  # Python's tarfile never sees the hidden copy
    with pytest.raises(ImageError, match=f"archive entry '{config}' appears twice") as info:
        import_docker_archive(Store.open(tmp_path / "fresh"), dup)
    assert info.value.exit_code == 30 and "\n" not in info.value.one_line()
    # a hidden manifest.json where Python sees none: it must agree with index.json
    no_json = _rewrite(archive, tmp_path / "nojson.tar", skip=lambda n: n == "manifest.json")
    other = [{"Config": config, "RepoTags": [], "Layers": []}]
    hidden = _append_raw(no_json, tmp_path / "hidden.tar", _nul_checksum_member(
        "manifest.json", json.dumps(other).encode()))
    assert "manifest.json" in ArchiveTar.read(hidden)
    with pytest.raises(ImageError, match="name 0 vs 3 layers"):
        import_docker_archive(Store.open(tmp_path / "fresh"), hidden)
    # a member Go reads and nothing names: read, and harmless
    extra = _append_raw(archive, tmp_path / "extra.tar", _nul_checksum_member("notes", b"x"))
    assert "notes" in ArchiveTar.read(extra)
    assert import_docker_archive(Store.open(tmp_path / "fresh"), extra).manifest_digest == digest


@pytest.mark.parametrize("tail", [b"junk", bytes(512) + b"x" * 512])
def test_only_zeros_may_follow_the_end_of_the_archive(good: tuple[Path, Digest], tmp_path: Path,
                                                      tail: bytes) -> None:
    bad = tmp_path / "tail.tar"
    bad.write_bytes(good[0].read_bytes() + tail)
    with pytest.raises(ImageError, match="bytes other than zeros follow the tar's "
                                         "end-of-archive marker"):
        import_docker_archive(Store.open(tmp_path / "fresh"), bad)


@pytest.mark.parametrize("spelling", ["blobs//sha256/{hex}", "./blobs/sha256/{hex}",
                                      "blobs/./sha256/{hex}", "blobs/sha256//{hex}",
                                      "blobs/sha256/{hex}/", "/blobs/sha256/{hex}"])
def test_names_docker_writes_to_one_file_are_one_name(good: tuple[Path, Digest], tmp_path: Path,
                                                      spelling: str) -> None:
    archive, _ = good
    config = _blob_of(archive, "config")
    name = spelling.format(hex=config.rpartition("/")[2])
    bad = _rewrite(archive, tmp_path / "alias.tar",
                   extra=lambda out: add_member(out, name, b'{"rootfs": {}}'))
    refused = UnsafeArchiveError if name.startswith("/") else ImageError
    with pytest.raises(refused, match="appears twice|is an absolute path") as info:
        import_docker_archive(Store.open(tmp_path / "fresh"), bad)
    assert "\n" not in info.value.one_line()


def test_manifest_json_paths_are_cleaned_as_docker_cleans_them(good: tuple[Path, Digest],
                                                               tmp_path: Path) -> None:
    archive, digest = good

    def respell(out: tarfile.TarFile) -> None:
        entry = json.loads(dict((m.name, d) for m, d in _members(archive))["manifest.json"]
                           or b"")
        entry[0]["Config"] = "./" + entry[0]["Config"].replace("/", "//")
        entry[0]["Layers"] = ["/" + x for x in entry[0]["Layers"]]
        add_member(out, "manifest.json", json.dumps(entry).encode())

    ok = _rewrite(archive, tmp_path / "spelt.tar", skip=lambda n: n == "manifest.json",
                  extra=respell)
    assert import_docker_archive(Store.open(tmp_path / "fresh"), ok).manifest_digest == digest


def _link(name: str, kind: bytes, target: str = "") -> Callable[[tarfile.TarFile], None]:
    def add(out: tarfile.TarFile) -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.linkname = kind, target
        out.addfile(ti)
    return add


@pytest.mark.parametrize("kind,what", [(tarfile.SYMTYPE, "symlink"), (tarfile.LNKTYPE, "hard link"),
                                       (tarfile.CHRTYPE, "character device"),
                                       (tarfile.BLKTYPE, "block device"),
                                       (tarfile.FIFOTYPE, "fifo")])
def test_only_regular_files_and_directories(good: tuple[Path, Digest], tmp_path: Path,
                                            kind: bytes, what: str) -> None:
    archive, _ = good
    # 'blobs' a link to another directory: docker load reads the blobs through it
    bad = _rewrite(archive, tmp_path / "link.tar", skip=lambda n: n.startswith("blobs"),
                   extra=_link("blobs", kind, "real"))
    with pytest.raises(UnsafeArchiveError, match=f"unsafe archive entry 'blobs' is a {what}: "
                                                 "docker load would create it") as info:
        import_docker_archive(Store.open(tmp_path / "fresh"), bad)
    assert info.value.exit_code == 12


@pytest.mark.parametrize("first,then", [("blobs/sha256/x", "blobs/sha256/x/y"),
                                        ("blobs/sha256/x/y", "blobs/sha256/x"),
                                        ("blobs", None)])
def test_an_entry_replacing_or_below_a_file_is_refused(good: tuple[Path, Digest], tmp_path: Path,
                                                       first: str, then: str | None) -> None:
    def add(out: tarfile.TarFile) -> None:
        add_member(out, first, b"a")
        if then:
            add_member(out, then, b"b")

    bad = _rewrite(good[0], tmp_path / "shadow.tar", extra=add)
    with pytest.raises(ImageError, match="replaces or lies below another entry"):
        import_docker_archive(Store.open(tmp_path / "fresh"), bad)


def test_an_archive_without_manifest_json_is_refused(good: tuple[Path, Digest],
                                                     tmp_path: Path) -> None:
    """docker load (20.10) reads such an archive with its legacy loader: `repositories` and
    every top-level directory as an image, not what index.json names."""
    archive, digest = good

    def legacy(out: tarfile.TarFile) -> None:
        add_member(out, "repositories", b'{"x/y": {"latest": "blobs"}}')
        add_member(out, "blobs/json", b'{"id": "' + b"a" * 64 + b'"}')
        add_member(out, "blobs/layer.tar", bytes(1024))

    for name, extra in (("oci-only", lambda _: None), ("legacy", legacy)):
        bad = _rewrite(archive, tmp_path / f"{name}.tar", skip=lambda n: n == "manifest.json",
                       extra=extra)
        fresh = Store.open(tmp_path / f"fresh-{name}")
        with pytest.raises(ImageError, match="has no manifest.json: docker load would read it "
                                             "with its legacy loader") as info:
            import_docker_archive(fresh, bad)
        assert info.value.exit_code == 30 and "\n" not in info.value.one_line()
        assert not fresh.has(digest)


def test_archives_of_ours_and_of_docker_save_still_read(good: tuple[Path, Digest],
                                                        tmp_path: Path) -> None:
    archive, digest = good
    seen = ArchiveTar.read(archive)
    assert {"manifest.json", "index.json", "oci-layout"} <= set(seen.files)
    assert "blobs/sha256" in seen.dirs
    assert import_docker_archive(Store.open(tmp_path / "fresh"), archive).manifest_digest == digest


def test_python_tarfile_reads_no_archive_a_consumer_reads() -> None:
    """tarfile is left only where this tool itself is the consumer: the upstream sdist it
    extracts and the root filesystem tarball mmdebstrap writes for it (re-written entry by
    entry into the serving base's layer); what goes to the engine is our own tar writer's."""
    root = Path(__file__).resolve().parents[2] / "tools" / "patchbake"
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if "import tarfile" in p.read_text())
    assert users == ["images/rootfs.py", "sources/extract.py"], users
