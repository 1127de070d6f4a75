"""verify: layers streamed and digest-checked, whiteouts in memory, every baked file
compared with a fresh apply, base drift; tampering refused with a clear error; the
in-image verifier; materialise."""

from __future__ import annotations

import hashlib
import io
import json
import os
import runpy
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from images_support import SP, Repo, make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.entry import main
from patchbake.errors import ImageError, IntegrityError, UnsafeArchiveError, VerifyError
from patchbake.fsutil import canonical_json
from patchbake.verify.baked import materialise, raise_on_failure, verify_image
from patchbake.oci import layout
from patchbake.oci.media import Descriptor
from patchbake.store import Store


def baked(tmp_path: Path) -> tuple[Repo, Digest]:
    repo = make_repo(tmp_path)
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    return repo, res.digest


def verify(repo: Repo, ref: str | Digest):  # type: ignore[no-untyped-def]
    return verify_image(repo.pipeline, ref, repo.store, patched=repo.patched,
                        definition="offline")


def test_verify_matches_fresh_apply(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    res = verify(repo, "offline")
    assert res.ok and (res.matched, res.total) == (4, 4)  # 3 files + 1 deletion
    assert res.summary() == "4/4 baked source files matched a fresh apply"
    assert res.digest == digest and len(res.layers) == 3
    assert res.base_drift["counts"] == {"changed": 0, "missing": 0, "extra": 0}
    assert res.base_drift["excluded_generated"] == ["vllm/_version.py"]
    assert res.base_drift["unchanged"] == 2  # __init__.py, sampling_params.py


def test_verify_reports_each_mismatch_with_both_hashes(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    other = dict(repo.patched.files)
    other["vllm/envs.py"] = "f" * 64
    patched = type(repo.patched)(**{**repo.patched.__dict__, "files": other})
    res = verify_image(repo.pipeline, digest, repo.store, patched=patched)
    assert not res.ok and res.matched == 3 and res.total == 4
    (m,) = res.mismatched
    assert m["path"] == "vllm/envs.py" and m["expected"] == "f" * 64
    assert m["found"] == repo.patched.files["vllm/envs.py"]
    with pytest.raises(VerifyError, match="3/4 baked source files") as info:
        raise_on_failure(res)
    assert info.value.exit_code == 33


def _flip(path: Path, offset: int) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_flipped_layer_byte(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    layer = Digest.parse(manifest["layers"][1]["digest"])
    _flip(repo.store.blob_path(layer), 5000)
    with pytest.raises(IntegrityError, match="layer 1: blob .* hashes to"):
        verify(repo, "offline")


def test_flipped_config_and_manifest_bytes(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    _flip(repo.store.blob_path(Digest.parse(manifest["config"]["digest"])), 10)
    with pytest.raises(IntegrityError, match="config .* hashes to"):
        verify(repo, "offline")
    repo2, digest2 = baked(tmp_path / "two")
    _flip(repo2.store.blob_path(digest2), 10)
    with pytest.raises(IntegrityError, match="manifest .* hashes to"):
        verify(repo2, "offline")


def _rewrite(store: Store, manifest: dict, config: dict | None = None) -> Digest:  # type: ignore[type-arg]
    if config is not None:
        cd, cs, _ = layout.put_json(store, config)
        manifest = {**manifest, "config": {**manifest["config"], "digest": str(cd), "size": cs}}
    md, _, _ = layout.put_json(store, manifest)
    return md


def test_swapped_layer(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    manifest["layers"][0], manifest["layers"][1] = manifest["layers"][1], manifest["layers"][0]
    swapped = _rewrite(repo.store, manifest)
    with pytest.raises(IntegrityError, match="diff_id .*layer swapped"):
        verify(repo, swapped)


def _layer(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _with_extra_layer(repo: Repo, digest: Digest, data: bytes) -> Digest:
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    added = repo.store.put_bytes(data)
    manifest["layers"].append(Descriptor(manifest["layers"][-1]["mediaType"], added,
                                         len(data)).to_json())
    config["rootfs"]["diff_ids"].append(str(added))
    return _rewrite(repo.store, manifest, config)


def test_unsafe_entry_refused(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    evil = _with_extra_layer(repo, digest, _layer([("../../etc/passwd", b"x")]))
    with pytest.raises(UnsafeArchiveError, match="escapes the image root") as info:
        verify(repo, evil)
    assert info.value.exit_code == 12


def test_later_layer_whiteout_is_seen(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    sp = SP.strip("/")
    hidden = _with_extra_layer(repo, digest, _layer([(f"{sp}/vllm/sub/.wh.topk.py", b"")]))
    res = verify(repo, hidden)
    assert not res.ok
    assert [m["path"] for m in res.mismatched] == ["vllm/sub/topk.py"] * 2
    assert res.mismatched[0]["why"] == "missing from the image"
    assert res.mismatched[1]["why"] == "layer 3 (above the base) deletes it; the patch does not"


def test_opaque_dir_and_hand_edit(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    sp = SP.strip("/")
    edited = _with_extra_layer(repo, digest, _layer([
        (f"{sp}/vllm/.wh..wh..opq", b""), (f"{sp}/vllm/envs.py", b"hand edit\n")]))
    res = verify(repo, edited)
    found = {m["path"]: m for m in res.mismatched}
    assert found["vllm/envs.py"]["found"] == hashlib.sha256(b"hand edit\n").hexdigest()
    assert "vllm/sub/topk.py" in found  # the opaque dir hid the lower layers
    assert "deletes what is under it" in found["vllm"]["why"]
    assert res.base_drift["counts"]["missing"] == 0  # a failure above the base, not drift


def test_materialise_writes_verified_tree(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    dest = materialise(repo.store, digest, tmp_path / "mat", pipeline=repo.pipeline)
    got = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert "vllm/scripts.py" not in got and "vllm/new_module.py" in got
    assert (dest / "vllm/sub/topk.py").read_bytes() == \
        (repo.patched.root / "vllm/sub/topk.py").read_bytes()
    with pytest.raises(ImageError, match="already exists"):
        materialise(repo.store, digest, dest, pipeline=repo.pipeline)


def test_tampered_materialise_writes_nothing(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    _flip(repo.store.blob_path(Digest.parse(manifest["layers"][-1]["digest"])), 700)
    with pytest.raises(IntegrityError):
        materialise(repo.store, digest, tmp_path / "mat", pipeline=repo.pipeline)
    assert not (tmp_path / "mat").exists()
    assert not list((repo.store.root / "tmp").iterdir())


def test_tampered_archive_stores_nothing(tmp_path: Path) -> None:
    from patchbake.oci.archive import import_docker_archive

    repo = make_repo(tmp_path)
    out = tmp_path / "img.tar"
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched,
                     docker_archive=out)
    data = bytearray(out.read_bytes())
    needle = data.find(b"B = 2")  # inside our layer blob
    data[needle] ^= 0x20
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    fresh = Store.open(tmp_path / "fresh")
    with pytest.raises(IntegrityError, match="nothing was stored"):
        import_docker_archive(fresh, bad)
    assert not fresh.has(res.digest) and not fresh.has(res.layers[-1])
    with pytest.raises(IntegrityError):
        verify(repo, str(bad))
    assert verify(repo, str(out)).ok


def test_cli_verify_json_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    repo, digest = baked(tmp_path)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    import patchbake.verify.baked as baked_mod

    monkeypatch.setattr(baked_mod, "patched_tree", lambda lin, store: repo.patched)
    pipe = ["--pipeline", str(repo.root / "pipeline.yaml")]
    assert main([*pipe, "verify", "offline", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["matched"], out["total"], out["mismatched"], out["digest"]) == (4, 4, [], str(digest))
    assert set(out["base_drift"]) >= {"changed", "missing", "extra", "unchanged"}
    _flip(repo.store.blob_path(Digest.parse(json.loads(repo.store.read_blob(digest))
                                            ["layers"][-1]["digest"])), 900)
    assert main([*pipe, "verify", "offline"]) == IntegrityError.exit_code
    assert "hashes to" in capsys.readouterr().err
    assert main([*pipe, "verify", "nonsense-ref"]) == ImageError.exit_code
    assert "cannot resolve image reference" in capsys.readouterr().err


def _rootfs(repo: Repo, digest: Digest, root: Path) -> None:
    manifest = json.loads(repo.store.read_blob(digest))
    for layer in manifest["layers"]:  # unpack (test only) to run the verifier over files
        with tarfile.open(repo.store.blob_path(Digest.parse(layer["digest"]))) as tf:
            for m in tf.getmembers():
                name = m.name.rsplit("/", 1)[-1]
                if name.startswith(".wh."):
                    (root / m.name).parent.joinpath(name[4:]).unlink(missing_ok=True)
                elif m.isfile():
                    tf.extract(m, root)


InImage = tuple[Path, Callable[..., tuple[int, str]]]


@pytest.fixture
def in_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> InImage:
    repo, digest = baked(tmp_path)
    root = tmp_path / "rootfs"
    _rootfs(repo, digest, root)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    script = str(root / "opt/patchbake/verify.py")

    def run(*args: str) -> tuple[int, str]:
        monkeypatch.setattr("sys.argv", [script, "--root", str(root), *args])
        with pytest.raises(SystemExit) as info:
            runpy.run_path(script, run_name="__main__")
        cap = capsys.readouterr()
        return int(info.value.code or 0), cap.out + cap.err

    return root, run


def test_in_image_verifier(in_image: InImage) -> None:
    root, run = in_image
    rc, out = run()
    assert rc == 0, out
    assert out.startswith("patchbake build: offline | vllm 0.25.1 + topk")
    # every file of the installed tree: 6 pristine - 1 deleted + 1 new
    assert f"OK: 6/6 files of {SP}/vllm/ match the tree manifest" in out
    target = root / SP.strip("/") / "vllm/envs.py"
    target.write_bytes(target.read_bytes() + b"# edit\n")
    rc, out = run()
    assert rc == 1 and "MISMATCH modified" in out
    assert out.splitlines()[-1].startswith("patchbake: image does not match its record: modified")
    assert run("--line")[0] == 0
    (root / "opt/patchbake/identity.json").unlink()
    rc, out = run("--quiet")
    assert rc == 2 and out.startswith("patchbake: refused: no readable identity record")
    assert len(out.splitlines()) == 1


@pytest.mark.parametrize("tamper, reason", [
    # a base file (not a baked one): only the full tree manifest sees it
    (lambda r: (r / SP.strip("/") / "vllm/sampling_params.py").write_text("evil = 1\n"),
     f"modified {SP}/vllm/sampling_params.py"),
    (lambda r: (r / SP.strip("/") / "vllm/__init__.py").unlink(),
     f"missing {SP}/vllm/__init__.py"),
    (lambda r: (r / SP.strip("/") / "vllm/sub/extra.py").write_text("x = 1\n"),
     f"extra {SP}/vllm/sub/extra.py"),
    (lambda r: (r / SP.strip("/") / "evil.pth").write_text("import os\n"),
     f"startup-hook {SP}/evil.pth"),
    (lambda r: (r / SP.strip("/") / "sitecustomize.py").write_text("import os\n"),
     f"startup-hook {SP}/sitecustomize.py"),
    (lambda r: os.chmod(r / SP.strip("/") / "vllm/envs.py", 0o755),
     f"mode {SP}/vllm/envs.py (recorded 0644, found 0755)"),
])
def test_in_image_verifier_sees_every_file_and_hook(in_image: InImage,
                                                    tamper: Callable[[Path], object],
                                                    reason: str) -> None:
    root, run = in_image
    tamper(root)
    rc, out = run("--quiet")
    assert rc == 1
    assert out == f"patchbake: image does not match its record: {reason}\n" or \
        out.startswith(f"patchbake: image does not match its record: {reason}")
    assert len(out.splitlines()) == 1


def test_in_image_verifier_shadowing_vllm(in_image: InImage,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root, run = in_image
    (root / "shadow/vllm").mkdir(parents=True)
    (root / "shadow/vllm/__init__.py").write_text("evil = 1\n")
    monkeypatch.setenv("PYTHONPATH", "/shadow")
    rc, out = run("--quiet")
    assert rc == 1 and out.startswith("patchbake: image does not match its record: shadow "
                                      "/shadow/vllm")


def test_in_image_verifier_allow_listed_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(tmp_path)
    pth = b"import _virtualenv\n"
    text = (repo.root / "images/offline.yaml").read_text()
    (repo.root / "images/offline.yaml").write_text(
        text + f"startup_allow:\n  - path: {SP}/ok.pth\n"
               f"    sha256: {hashlib.sha256(pth).hexdigest()}\n")
    digest = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest
    root = tmp_path / "rootfs"
    _rootfs(repo, digest, root)
    (root / SP.strip("/") / "ok.pth").write_bytes(pth)
    monkeypatch.chdir(tmp_path)
    script = str(root / "opt/patchbake/verify.py")
    monkeypatch.setattr("sys.argv", [script, "--root", str(root), "--quiet"])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(script, run_name="__main__")
    assert (info.value.code or 0) == 0, capsys.readouterr()
    (root / SP.strip("/") / "ok.pth").write_bytes(pth + b"import evil\n")
    with pytest.raises(SystemExit) as info:
        runpy.run_path(script, run_name="__main__")
    assert info.value.code == 1
    assert f"startup-hook {SP}/ok.pth" in capsys.readouterr().err


def test_in_image_verifier_refuses_an_empty_tree_manifest(in_image: InImage) -> None:
    root, run = in_image
    ident = root / "opt/patchbake/identity.json"
    rec = json.loads(ident.read_bytes())
    empty = canonical_json({"format": "patchbake-tree/1", "root": f"{SP}/vllm/", "files": []})
    (root / "opt/patchbake/tree.json").write_bytes(empty)
    rec["tree"]["sha256"] = hashlib.sha256(empty).hexdigest()
    ident.write_bytes(canonical_json(rec))
    rc, out = run("--quiet")
    assert rc == 2 and "lists no files: an empty record proves nothing" in out
    del rec["tree"]
    ident.write_bytes(canonical_json(rec))
    rc, out = run("--quiet")
    assert rc == 2 and "names no tree manifest" in out
    (root / "opt/patchbake/tree.json").write_bytes(b"{}")
    rec["tree"] = {"path": "/opt/patchbake/tree.json", "sha256": "0" * 64}
    ident.write_bytes(canonical_json(rec))
    rc, out = run("--quiet")
    assert rc == 2 and "does not hash to the sha256 the identity record names" in out


def test_canonical_json_used_for_config(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    manifest_bytes = repo.store.read_blob(digest)
    assert canonical_json(json.loads(manifest_bytes)) == manifest_bytes


def test_layer_ops_cache_still_hashes_every_byte(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    cache = repo.store.root / "bakes" / "layer-ops"
    before = set(cache.glob("*.json"))  # bake memoises the base's layers for its vllm/ tree
    cold = verify(repo, digest)
    # one memo per layer for the tracked view, one for the layer above the base read whole
    assert cold.ok and len(set(cache.glob("*.json")) - before) == 4
    warm = verify(repo, digest)
    assert warm.ok and warm.to_json()["base_drift"] == cold.to_json()["base_drift"]
    assert (warm.matched, warm.total) == (cold.matched, cold.total)
    manifest = json.loads(repo.store.read_blob(digest))
    _flip(repo.store.blob_path(Digest.parse(manifest["layers"][1]["digest"])), 3000)
    with pytest.raises(IntegrityError, match="layer 1: blob"):
        verify(repo, digest)  # the memo is keyed by digest; the bytes are still hashed


def test_gzip_layer_digest_and_diff_id(tmp_path: Path) -> None:
    import gzip

    repo, digest = baked(tmp_path)
    sp = SP.strip("/")
    tar = _layer([(f"{sp}/vllm/extra_file.py", b"y = 2\n")])
    gz = gzip.compress(tar, mtime=0)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    hexd = repo.store.put_bytes(gz)
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                               "digest": str(hexd), "size": len(gz)})
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(tar).hexdigest())
    good = _rewrite(repo.store, manifest, config)
    res = verify(repo, good)  # digests fine; a file above the base outside the baked set
    assert not res.ok and res.base_drift["extra"] == []
    (m,) = res.mismatched
    assert m["path"] == "vllm/extra_file.py" and "outside the baked set" in m["why"]
    config["rootfs"]["diff_ids"][-1] = "sha256:" + "9" * 64
    wrong = _rewrite(repo.store, manifest, config)
    with pytest.raises(IntegrityError, match="uncompressed tar hashes to"):
        verify(repo, wrong)


def test_cli_image_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    repo, digest = baked(tmp_path)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    pipe = ["--pipeline", str(repo.root / "pipeline.yaml")]
    assert main([*pipe, "image", "ls", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["definitions"][0]["latest"] == str(digest)
    assert out["store"]["offline"] == str(digest)
    assert main([*pipe, "image", "export", "offline", str(tmp_path / "x.tar")]) == 0
    assert str(digest) in capsys.readouterr().out
    assert main([*pipe, "image", "materialise", "offline", str(tmp_path / "tree")]) == 0
    assert (tmp_path / "tree" / "vllm" / "new_module.py").read_bytes() == b"X = 1\n"
    capsys.readouterr()
    assert main([*pipe, "image", "show", "nope"]) == 3
    assert "no image definition 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("record", [b"[1, 2]", b'{"files": [1]}', b'{"files": [], "patch": "x"}'])
def test_identity_record_of_the_wrong_shape_is_a_problem_not_a_crash(
        tmp_path: Path, record: bytes) -> None:
    repo, digest = baked(tmp_path)
    odd = _with_extra_layer(repo, digest, _layer([("opt/patchbake/identity.json", record)]))
    res = verify(repo, odd)
    assert not res.ok
    assert res.problems[0] == "/opt/patchbake/identity.json is not an identity record (wrong shape)"


def test_identity_record_naming_no_patch_is_a_problem(tmp_path: Path) -> None:
    repo, digest = baked(tmp_path)
    odd = _with_extra_layer(repo, digest, _layer([("opt/patchbake/identity.json",
                                                   b'{"files": [], "patch": {}}')]))
    res = verify(repo, odd)
    assert not res.ok
    assert "/opt/patchbake/identity.json names no patch sha256: which patch was baked " \
        "cannot be checked" in res.problems


def _image_file(repo: Repo, digest: Digest, path: str) -> bytes:
    manifest = json.loads(repo.store.read_blob(digest))
    for desc in reversed(manifest["layers"]):
        with tarfile.open(fileobj=io.BytesIO(repo.store.read_blob(Digest.parse(desc["digest"])))) as tf:
            try:
                f = tf.extractfile(path)
            except KeyError:
                continue
            if f is not None:
                return f.read()
    raise AssertionError(f"{path} not in the image")


def test_in_image_verifier_swapped_with_a_self_consistent_record_is_a_problem(
        tmp_path: Path) -> None:
    """A stub verifier (always OK) and an identity record rewritten to name its sha256:
    the record alone cannot vouch for the verifier; it must be the one this tool bakes."""
    repo, digest = baked(tmp_path)
    stub = b"print('OK')\n"
    ident = json.loads(_image_file(repo, digest, "opt/patchbake/identity.json"))
    ident["verifier"]["sha256"] = hashlib.sha256(stub).hexdigest()
    odd = _with_extra_layer(repo, digest, _layer([
        ("opt/patchbake/verify.py", stub),
        ("opt/patchbake/identity.json", json.dumps(ident).encode())]))
    res = verify(repo, odd)
    assert not res.ok
    assert any("/opt/patchbake/verify.py is not the in-image verifier this patchbake bakes"
               in p for p in res.problems), res.problems


@pytest.mark.parametrize("cut", [4, 8])  # the gzip trailer (CRC, size) cut or gone
def test_truncated_gzip_layer_is_refused(tmp_path: Path, cut: int) -> None:
    """Go's gzip reader fails on a stream without its end (the engine's pull and load
    fail); the bytes inflated so far must not verify, whatever the manifest and config say."""
    import gzip
    import zlib

    repo, digest = baked(tmp_path)
    tar = _layer([("opt/patchbake/notes.txt", b"n\n" * 4000)])
    gz = gzip.compress(tar, mtime=0)[:-cut]
    d = zlib.decompressobj(31)
    inflated = d.decompress(gz)
    assert not d.eof and inflated.endswith(bytes(1024))  # the tar end is in what inflates
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    hexd = repo.store.put_bytes(gz)
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                               "digest": str(hexd), "size": len(gz)})
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(inflated).hexdigest())
    crafted = _rewrite(repo.store, manifest, config)
    with pytest.raises(IntegrityError, match="truncated gzip"):
        verify(repo, crafted)
