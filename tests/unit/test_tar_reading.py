"""The layer reader against the crafted corpus (tests/fixtures/tarcorpus), hermetically:
each case is read or refused as the corpus says (the integration test checks the "read"
cases against umoci and the Docker engine), refusals carry their own class and name the
layer digest, and a memoised layer is refused exactly when a fresh read refuses it."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "tarcorpus"))

from oci_build import write_oci_layout
from patchbake.digest import Digest
from patchbake.errors import AmbiguousLayerError, PatchbakeError
from patchbake.oci.image import DirBlobs, load_image
from patchbake.oci.scan import final_files, scan_image
from patchbake.oci.view import FileInfo
from tar_corpus import BASE, CASES, EVIL, Case, file, layer, symlink


def _read(tmp: Path, layers: list[bytes]) -> dict[str, FileInfo]:
    digest = write_oci_layout(tmp, layers)
    return final_files(load_image(DirBlobs(tmp), Digest.parse(digest)), DirBlobs(tmp))


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_is_read_or_refused_as_the_consumers_require(case: Case,
                                                                   tmp_path: Path) -> None:
    try:
        _read(tmp_path, [BASE, *case.layers])
        got = "read"
    except PatchbakeError as exc:
        got = "refuse"
        assert "layer " in exc.message and "sha256:" in exc.message, exc.message
    assert got == case.expect


@pytest.mark.parametrize("name, path, content", [
    ("dir-with-size-hides-entry", "vllm/a.py", EVIL),  # Go reads no data for a directory
    ("symlink-with-size-hides-entry", "vllm/a.py", EVIL),
    ("pax-repeated-key-last-wins", "vllm/a.py", EVIL),
    ("ustar-prefix", "vllm/a.py", EVIL),
    ("gnu-magic-numeric-times", "vllm/b.py", EVIL),  # no prefix with GNU magic
    ("base256-size", "vllm/b.py", EVIL),
    ("octal-size-leading-nul", "vllm/b.py", EVIL),
    ("pax-size-overrides-header", "vllm/b.py", b"EVIL!"),
    ("gnu-long-name-then-pax-without-path", "vllm/a.py", EVIL),
    ("hardlink-same-layer", "vllm/a.py", EVIL),
])
def test_what_go_reads_is_what_patchbake_reads(name: str, path: str, content: bytes,
                                               tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == name)
    files = _read(tmp_path, [BASE, *case.layers])
    assert files[path].sha256 == _sha(content)


@pytest.mark.parametrize("name, gone", [("dir-replaces-baked-file", "vllm/a.py"),
                                        ("file-replaces-directory", "vllm/sub/c.py"),
                                        ("whiteout-of-parent", "vllm/sub/c.py"),
                                        ("symlink-replaces-directory", "vllm/sub/c.py")])
def test_replaced_paths_leave_the_view(name: str, gone: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == name)
    assert gone not in _read(tmp_path, [BASE, *case.layers])


def test_ambiguity_has_its_own_class_and_exit_code(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "pax-path-vs-gnu-long-name")
    with pytest.raises(AmbiguousLayerError, match=r"layer 1 \(sha256:[0-9a-f]{64}\).*GNU long"
                       ) as err:
        _read(tmp_path, [BASE, *case.layers])
    assert err.value.exit_code == 35


def test_a_memoised_layer_is_checked_against_the_layers_below_it(tmp_path: Path) -> None:
    # the same top layer, memoised over a base where vllm/sub is a directory, must still be
    # refused over a base where vllm/sub is a symlink (the cache replays the checks)
    top = layer(file(b"vllm/sub/c.py", EVIL))
    cache = tmp_path / "cache"
    ok = tmp_path / "ok"
    digest = write_oci_layout(ok, [BASE, top])
    for _ in range(2):  # fresh, then memoised
        view = scan_image(load_image(DirBlobs(ok), Digest.parse(digest)), DirBlobs(ok), ("vllm/",),
                          cache_dir=cache)
        assert view.files["vllm/sub/c.py"].sha256 == _sha(EVIL)
    bad = tmp_path / "bad"
    digest = write_oci_layout(bad, [BASE, layer(symlink(b"vllm/sub", b"../opt")), top])
    for _ in range(2):
        with pytest.raises(AmbiguousLayerError, match="layer 2 .*symlink"):
            scan_image(load_image(DirBlobs(bad), Digest.parse(digest)), DirBlobs(bad), ("vllm/",),
                       cache_dir=cache)


def test_a_changed_blob_below_is_reported_before_a_memoised_refusal(tmp_path: Path) -> None:
    # a fresh read reports layer 1's bad digest before it reaches layer 2; replaying the
    # memos (hashed in the background) must report the same, not layer 2's refusal
    from patchbake.errors import IntegrityError

    top = layer(file(b"vllm/sub/c.py", EVIL))
    link = layer(symlink(b"vllm/sub", b"../opt"))
    cache = tmp_path / "cache"
    for name, layers in (("ok", [BASE, top]), ("link", [BASE, link])):
        d = write_oci_layout(tmp_path / name, layers)
        scan_image(load_image(DirBlobs(tmp_path / name), Digest.parse(d)), DirBlobs(tmp_path / name),
                   ("vllm/",), cache_dir=cache)
    bad = tmp_path / "bad"
    digest = write_oci_layout(bad, [BASE, link, top])
    blob = bad / "blobs" / "sha256" / _sha(link)
    blob.chmod(0o644)
    blob.write_bytes(link[:-1] + b"\1")  # in the zero padding after the archive's end
    for cache_dir in (None, cache):  # read fresh; every layer memoised
        with pytest.raises(IntegrityError, match="layer 1: blob"):
            scan_image(load_image(DirBlobs(bad), Digest.parse(digest)), DirBlobs(bad), ("vllm/",),
                       cache_dir=cache_dir)


def test_refusal_names_the_entry_for_a_tracked_region_scan(tmp_path: Path) -> None:
    # verify scans only the vLLM package and /opt/patchbake: a symlinked parent above the
    # tracked region is still seen (symlinks are followed for the whole image)
    layers = [BASE, layer(symlink(b"usr", b"vllm")), layer(file(b"usr/a.py", EVIL))]
    digest = write_oci_layout(tmp_path, layers)
    with pytest.raises(AmbiguousLayerError, match="entry 'usr'"):
        scan_image(load_image(DirBlobs(tmp_path), Digest.parse(digest)), DirBlobs(tmp_path), ("vllm/",))


@pytest.mark.parametrize("name", ["dir-replaces-baked-file", "file-replaces-directory",
                                  "whiteout-of-parent", "opaque-directory",
                                  "hardlink-same-layer", "dir-with-size-hides-entry"])
def test_materialised_tree_is_the_view(name: str, tmp_path: Path) -> None:
    # materialise writes what the view holds: a directory replaced by a file (and the
    # other way round) is replaced on disk too
    from tar_corpus import dir_

    base = layer(dir_(b"vllm/"), dir_(b"vllm/sub/"), file(b"vllm/a.py", b"A\n"),
                 file(b"vllm/b.py", b"B\n"), file(b"vllm/sub/c.py", b"C\n"))
    case = next(c for c in CASES if c.name == name)
    digest = write_oci_layout(tmp_path / "oci", [base, *case.layers])
    out = tmp_path / "out"
    out.mkdir()
    view = scan_image(load_image(DirBlobs(tmp_path / "oci"), Digest.parse(digest)),
                      DirBlobs(tmp_path / "oci"), ("vllm/",), write_root=out, write_prefix="")
    on_disk = {str(p.relative_to(out)): _sha(p.read_bytes())
               for p in out.rglob("*") if p.is_file()}
    assert on_disk == {p: i.sha256 for p, i in view.files.items()}


def test_kept_contents_come_back_from_the_cache_checked(tmp_path: Path) -> None:
    record = b'{"files": []}\n' * 1000
    digest = write_oci_layout(tmp_path / "oci", [BASE, layer(file(b"opt/patchbake/r.json",
                                                                 record))])
    blobs = DirBlobs(tmp_path / "oci")
    img = load_image(blobs, Digest.parse(digest))
    cache = tmp_path / "cache"
    tracked = ("vllm/", "opt/patchbake/")
    assert scan_image(img, blobs, tracked, cache_dir=cache).contents["opt/patchbake/r.json"] \
        == record
    kept = cache / "kept" / _sha(record)
    memos = b"".join(p.read_bytes() for p in cache.glob("*.json"))
    assert kept.read_bytes() == record and b"r.json" in memos and record not in memos
    assert scan_image(img, blobs, tracked, cache_dir=cache).contents["opt/patchbake/r.json"] \
        == record
    kept.chmod(0o644)
    kept.write_bytes(b"tampered")  # a changed kept file is not trusted: the layer is re-read
    assert scan_image(img, blobs, tracked, cache_dir=cache).contents["opt/patchbake/r.json"] \
        == record


def test_cli_verify_refuses_an_ambiguous_layer_with_exit_35(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the first class on a real bake: a layer whose entry has a pax path (a baked
    # file) and a GNU long name (a new file); one line naming the layer digest and why
    import json

    from images_support import SP, make_repo
    from patchbake.images.bake import bake_image
    from patchbake.entry import main
    from patchbake.oci import layout
    from patchbake.oci.media import Descriptor
    from tar_corpus import gnu_long, pax

    repo = make_repo(tmp_path)
    digest = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest
    sp = SP.strip("/").encode()
    data = layer(pax((b"path", sp + b"/vllm/envs.py")), gnu_long(sp + b"/vllm/evil.py\0"),
                 file(sp + b"/vllm/x.py", EVIL))
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    hexd = repo.store.put_bytes(data)
    manifest["layers"].append(Descriptor(manifest["layers"][-1]["mediaType"], hexd,
                                         len(data)).to_json())
    config["rootfs"]["diff_ids"].append(str(hexd))
    cd, cs, _ = layout.put_json(repo.store, config)
    manifest["config"] = {**manifest["config"], "digest": str(cd), "size": cs}
    crafted, _, _ = layout.put_json(repo.store, manifest)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    import patchbake.verify.baked as baked_mod

    monkeypatch.setattr(baked_mod, "patched_tree", lambda lin, store: repo.patched)
    rc = main(["--pipeline", str(repo.root / "pipeline.yaml"), "verify", str(crafted),
               "--definition", "offline"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == AmbiguousLayerError.exit_code == 35
    assert len(err) == 1 and str(hexd) in err[0] and "GNU long name" in err[0], err
