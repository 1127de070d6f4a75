"""verify's memoised findings: the same result as a fresh verify, every layer still hashed
and checked, and a memo never served for another image, definition, fresh apply or code."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from images_craft import with_layer
from images_support import SP, Repo, make_repo
from patchbake.digest import Digest
from patchbake.verify import memo as verify_memo
from patchbake.images.bake import bake_image
from patchbake.errors import IntegrityError
from patchbake.verify.baked import VerifyResult, verify_image
from patchbake.oci import layerops, scan

SP_REL = SP.strip("/")


def _layer(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT,
                      errors="surrogateescape") as tf:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _image_with_findings(tmp_path: Path) -> tuple[Repo, Digest]:
    """A bake with a layer on top that writes outside the baked set, a start-up hook and
    a name that is not UTF-8: findings of several kinds for the memo to carry."""
    repo = make_repo(tmp_path)
    digest = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest
    return repo, with_layer(repo.store, digest, _layer([
        (f"{SP_REL}/vllm/extra.py", b"x = 1\n"), (f"{SP_REL}/zz.pth", b"import os\n"),
        (f"{SP_REL}/vllm/caf\udce9.py", b"y\n")]))


def _verify(repo: Repo, ref: str | Digest, **kw: Any) -> VerifyResult:
    return verify_image(repo.pipeline, ref, repo.store, patched=repo.patched,
                        definition="offline", **kw)


def _same(res: VerifyResult) -> dict[str, Any]:
    return {k: v for k, v in res.to_json().items() if k != "seconds"}


def _memos(repo: Repo) -> list[Path]:
    return sorted((repo.store.root / "bakes" / "verify").glob("*.json"))


def test_memoised_findings_are_those_of_a_fresh_verify(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.verify import baked

    repo, ref = _image_with_findings(tmp_path)
    fresh = _verify(repo, ref, use_cache=False)
    assert not fresh.ok and fresh.problems and fresh.mismatched and _memos(repo) == []
    assert any("\udce9" in m["path"] for m in fresh.mismatched)  # survives the JSON memo
    first = _verify(repo, ref)  # parses the layers, writes the memos
    (memo,) = _memos(repo)
    with monkeypatch.context() as m:
        m.setattr(baked, "scan_image", None)  # the findings come from the memo
        second = _verify(repo, ref)
    assert _same(fresh) == _same(first) == _same(second)
    assert second.bytes_read == fresh.bytes_read and len(second.layers) == 4
    memo.write_bytes(b"{}")  # not a memo of this key: verified again, and rewritten
    assert _same(_verify(repo, ref)) == _same(fresh) and json.loads(memo.read_bytes())


def test_memoised_layer_ops_give_the_findings_of_a_fresh_verify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no findings memo (another version of the code, say), every layer's ops memoised: the
    # ops are replayed while the layers are hashed in the background
    repo, ref = _image_with_findings(tmp_path)
    fresh = _verify(repo, ref, use_cache=False)
    _verify(repo, ref)
    monkeypatch.setattr(verify_memo, "load", lambda *a: None)
    monkeypatch.setattr(scan, "LayerBytes", None)  # no layer is parsed
    monkeypatch.setattr(layerops, "LayerBytes", None)
    assert _same(_verify(repo, ref)) == _same(fresh)


@pytest.mark.parametrize("memo", ["findings", "layer ops"])
@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_memoised_findings_still_hash_every_layer(tmp_path: Path, index: int, memo: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    repo, ref = _image_with_findings(tmp_path)
    for _ in range(2):
        _verify(repo, ref)
    assert len(_memos(repo)) == 1
    if memo == "layer ops":
        monkeypatch.setattr(verify_memo, "load", lambda *a: None)
    layer = Digest.parse(json.loads(repo.store.read_blob(ref))["layers"][index]["digest"])
    path = repo.store.blob_path(layer)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"layer {index}: blob .* hashes to"):
        _verify(repo, ref)


def test_memo_is_keyed_by_what_the_findings_come_from(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo, ref = _image_with_findings(tmp_path)
    hook = next(p for p in _verify(repo, ref).problems if "zz.pth" in p)
    assert _verify(repo, ref).problems.count(hook) == 1
    # another fresh apply: another key, its own findings
    other = dict(repo.patched.files)
    other["vllm/envs.py"] = "f" * 64
    patched = type(repo.patched)(**{**repo.patched.__dict__, "files": other})
    res = verify_image(repo.pipeline, ref, repo.store, patched=patched, definition="offline")
    assert any(m["path"] == "vllm/envs.py" for m in res.mismatched) and len(_memos(repo)) == 2
    # another definition (the hook allow-listed): another key
    sha = hook.rsplit("[sha256:", 1)[1].rstrip("]")
    p = repo.root / "images" / "offline.yaml"
    p.write_text(p.read_text() + f"startup_allow:\n  - path: /{SP_REL}/zz.pth\n"
                 f"    sha256: {sha}\n")
    assert hook not in _verify(repo, ref).problems and len(_memos(repo)) == 3
    # other code (a new check, a changed message): another key
    monkeypatch.setattr(verify_memo, "_CODE", ["0" * 64])
    _verify(repo, ref)
    assert len(_memos(repo)) == 4


def test_code_digest_covers_every_file_of_the_package(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    copy = tmp_path / "patchbake"
    shutil.copytree(Path(verify_memo.__file__).parent.parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(verify_memo, "_PACKAGE", copy)
    digests = []
    for edit in (None, "data/verify.py", "verify/startup_hooks.py"):
        if edit is not None:
            with open(copy / edit, "ab") as f:
                f.write(b"\n")
        monkeypatch.setattr(verify_memo, "_CODE", [])
        digests.append(verify_memo.code_digest())
    assert len(set(digests)) == 3
