"""Files bundles (`suites bundle --files`, `suites run --files`): an image's vLLM and chosen
distributions carried as files, checked against the image's layers when made, on the GPU
box when opened, and again when the result is signed."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import EvidenceError, ImageError, IntegrityError, SuiteError, UsageError
from patchbake.oci import layout
from patchbake.oci.media import Descriptor
from patchbake.sources.digest import tree_digest
from patchbake.store import Store
from patchbake.suites import files
from patchbake.suites.image import SuiteImage

SP = "usr/lib/python3/site-packages"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def _record(rows: dict[str, bytes]) -> bytes:
    lines = []
    for name, data in rows.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={h},{len(data)}")
    return ("\n".join(lines) + "\n").encode()


def _layer(entries: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, (data, mode) in sorted(entries.items()):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), mode
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _image(store: Store, layers: list[bytes], labels: dict[str, str]) -> Digest:
    descs, diff_ids = [], []
    for data in layers:
        d = store.put_bytes(data)
        descs.append(Descriptor(LAYER, d, len(data)).to_json())
        diff_ids.append(str(d))
    config = {"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
              "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cd, cs, _ = layout.put_json(store, config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": str(cd), "size": cs},
                "layers": descs}
    md, _, _ = layout.put_json(store, manifest)
    return md


VLLM = {"vllm/__init__.py": b"", "vllm/envs.py": b"KNOBS = []\n",
        "vllm/_C.abi3.so": b"\x7fELF compiled", "vllm/big.so": b"\x7fELF left behind"}
FOO = {"foo/__init__.py": b"FOO = 1\n"}
BAR = {"bar.py": b"BAR = 2\n"}


def _site(files_: dict[str, bytes]) -> dict[str, tuple[bytes, int]]:
    return {f"{SP}/{k}": (v, 0o755 if k.endswith(".so") else 0o644) for k, v in files_.items()}


def _store(tmp_path: Path) -> tuple[Store, SuiteImage, Digest]:
    store = Store.open(tmp_path / "store")
    layout.ensure_layout(store)
    dists = {"vllm-0.25.1.dist-info/RECORD": _record(VLLM),
             "foo-1.0.dist-info/RECORD": _record(FOO),
             "foo-1.0.dist-info/METADATA": b"Name: foo\nVersion: 1.0\n",
             "bar-2.0.dist-info/RECORD": _record(BAR),
             "bar-2.0.dist-info/METADATA": b"Name: bar\nVersion: 2.0\n"}
    base_layer = _layer({**_site(VLLM), **_site(FOO), **_site(BAR), **_site(dists),
                         "etc/os-release": (b"ID=test\n", 0o644)})
    base = _image(store, [base_layer], {})
    overlay = _layer(_site({"vllm/envs.py": b"KNOBS = ['VLLM_DSV4_DETERMINISTIC_TOPK']\n",
                            "vllm/canon.py": b"def canon(): pass\n"}))
    img = _image(store, [base_layer, overlay],
                 {files.SITE_LABEL: "/" + SP, files.BASE_LABEL: str(base)})
    return store, SuiteImage("toy", img, None), base


LEAVE = ("vllm/big.so=not used on this machine",)


def _make(tmp_path: Path, dists: tuple[str, ...] = ("foo",)) -> tuple[Store, SuiteImage, Path]:
    store, ref, _ = _store(tmp_path)
    out = tmp_path / "carry"
    files.make(store, ref, files.Selection.of(dists, LEAVE), out)
    return store, ref, out


def test_bundle_carries_the_selection_and_checks_on_open(tmp_path: Path) -> None:
    store, ref, out = _make(tmp_path)
    b = files.check(out)
    carried = sorted(p.relative_to(b.tree).as_posix() for p in b.tree.rglob("*") if p.is_file())
    assert carried == ["foo-1.0.dist-info/METADATA", "foo-1.0.dist-info/RECORD",
                       "foo/__init__.py", "vllm-0.25.1.dist-info/RECORD", "vllm/_C.abi3.so",
                       "vllm/__init__.py", "vllm/canon.py", "vllm/envs.py"]
    assert (b.tree / "vllm/envs.py").read_bytes().startswith(b"KNOBS = ['VLLM")  # patched
    assert os.stat(b.tree / "vllm/_C.abi3.so").st_mode & 0o111  # modes kept
    s = b.summary()
    assert s["image"] == str(ref.digest) and s["left"] == [
        {"path": "vllm/big.so", "reason": "not used on this machine"}]
    assert s["vllm_digest"] == str(tree_digest(b.tree / "vllm"))
    assert sorted(d for d, _ in b.doc["records"]) == [
        "bar-2.0.dist-info", "foo-1.0.dist-info", "vllm-0.25.1.dist-info"]
    # the manifest is a function of the image and the selection: the signer's rebuild agrees
    again = files.plan(store, ref, files.Selection.from_json(b.doc["selection"]))
    assert again.sha256 == b.sha256


def test_pristine_tree_is_the_base_files(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    b = files.check(out)
    tree = files.pristine_tree(b, tmp_path / "pristine")
    assert (tree / "vllm/envs.py").read_bytes() == VLLM["vllm/envs.py"]
    assert not (tree / "vllm/canon.py").exists()  # the patch adds it; the base lacks it
    assert (tree / "foo/__init__.py").is_file()  # the carried distributions come along
    assert (b.tree / "vllm/envs.py").read_bytes() != VLLM["vllm/envs.py"]  # not written through
    assert str(tree_digest(tree / "vllm")) == b.doc["pristine_vllm_digest"]


@pytest.mark.parametrize("damage", ["edit", "extra", "remove", "mode", "pristine"])
def test_a_changed_bundle_is_refused_on_open(tmp_path: Path, damage: str) -> None:
    _, _, out = _make(tmp_path)
    target = out / "tree/vllm/envs.py"
    if damage == "edit":
        target.write_bytes(b"KNOBS = ['something else']\n")
    elif damage == "extra":
        (out / "tree/vllm/sitecustomize.py").write_bytes(b"import os\n")
    elif damage == "remove":
        target.unlink()
    elif damage == "mode":
        os.chmod(out / "tree/vllm/_C.abi3.so", 0o644)
    else:
        (out / "pristine/vllm/envs.py").write_bytes(b"KNOBS = ['VLLM_DSV4_DETERMINISTIC_TOPK']\n")
    with pytest.raises(IntegrityError, match="files bundle"):
        files.check(out)


def test_selection_errors_are_one_line(tmp_path: Path) -> None:
    store, ref, _ = _store(tmp_path)
    with pytest.raises(ImageError, match="no distribution 'nope'"):
        files.plan(store, ref, files.Selection.of(["nope"], []))
    with pytest.raises(UsageError, match="no carried file"):
        files.plan(store, ref, files.Selection.of([], ["bar.py=not carried anyway"]))
    with pytest.raises(UsageError, match="PATH=REASON"):
        files.Selection.of([], ["vllm/big.so"])


def test_make_refuses_a_used_directory_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    store, ref, _ = _store(tmp_path)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        files.make(store, ref, files.Selection.of([], []), used)
    with pytest.raises(ImageError):
        files.make(store, ref, files.Selection.of(["nope"], []), tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "used"]


def test_an_image_without_base_or_site_labels_is_refused(tmp_path: Path) -> None:
    store, _, base = _store(tmp_path)
    with pytest.raises(ImageError, match="only a baked image can be carried"):
        files.plan(store, SuiteImage("base", base, None), files.Selection.of([], []))


def test_distributions_says_where_each_came_from(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    b = files.check(out)
    machine = tmp_path / "machine"
    (machine / "bar-2.0.dist-info").mkdir(parents=True)
    (machine / "bar.py").write_bytes(b"BAR = 3\n")  # another build of the same version
    (machine / "bar-2.0.dist-info/METADATA").write_bytes(b"Name: bar\nVersion: 2.0\n")
    (machine / "bar-2.0.dist-info/RECORD").write_bytes(_record({"bar.py": b"BAR = 3\n"}))
    rows = {r["name"]: r for r in files.distributions(b, [str(b.tree), str(machine)])}
    assert rows["foo"]["source"] == "image" and rows["vllm"]["source"] == "image"
    assert rows["bar"]["source"] == "machine" and rows["bar"]["differ_files"] == ["bar.py"]
    (machine / "bar.py").write_bytes(BAR["bar.py"])
    rows = {r["name"]: r for r in files.distributions(b, [str(b.tree), str(machine)])}
    assert rows["bar"]["differ"] == 0 and rows["bar"]["equal"] == 1


def test_signing_rebuilds_the_manifest_from_the_store(tmp_path: Path) -> None:
    store, ref, out = _make(tmp_path)
    b = files.check(out)
    rec = b.summary()
    files.check_signable(store, ref, rec, True, b.doc["pristine_vllm_digest"])
    for bad, reason in [({**rec, "manifest_sha256": "0" * 64}, "files-unbound"),
                        ({**rec, "image": "sha256:" + "1" * 64}, "files-unbound")]:
        with pytest.raises(EvidenceError) as exc:
            files.check_signable(store, ref, bad, True, b.doc["pristine_vllm_digest"])
        assert exc.value.reason == reason
    with pytest.raises(EvidenceError) as exc:  # the probe ran on the patched tree
        files.check_signable(store, ref, rec, True, b.doc["vllm_digest"])
    assert exc.value.reason == "foreign-pristine"
    with pytest.raises(EvidenceError) as exc:  # no probe digest recorded
        files.check_signable(store, ref, rec, True, None)
    assert exc.value.reason == "foreign-pristine"
    other = Store.open(tmp_path / "empty")
    with pytest.raises(EvidenceError) as exc:
        files.check_signable(other, ref, rec, True, b.doc["pristine_vllm_digest"])
    assert exc.value.reason == "files-unbound"


def test_manifest_is_canonical_json(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    doc = json.loads((out / "manifest.json").read_bytes())
    assert doc["format"] == files.FORMAT and doc["selection"] == {
        "dists": ["foo"], "leave": [{"path": "vllm/big.so", "reason": "not used on this machine"}]}


@pytest.mark.parametrize("edit, why", [
    (lambda d: d["files"].append(["../outside.py", "100644", "0" * 64, 1, None]), "'files'"),
    (lambda d: d["files"].append(["/etc/passwd", "100644", "0" * 64, 1, None]), "'files'"),
    (lambda d: d["pristine"].append(["vllm/../../x", "100644", "0" * 64, 1]), "'pristine'"),
    (lambda d: d["pristine"].append(["foo/__init__.py", "100644", "0" * 64, 1]), "'pristine'"),
    (lambda d: d["records"].append(["../x.dist-info", "0" * 64]), "'records'"),
    (lambda d: d.update(files={"a": 1}), "'files'"),
    (lambda d: d["files"][0].pop(), "'files'"),
    (lambda d: d.update(image="sha256:x"), "'image'"),
    (lambda d: d.update(selection=[]), "'selection'"),
    (lambda d: d.pop("pristine_vllm_digest"), "'pristine_vllm_digest'"),
])
def test_a_malformed_manifest_is_one_line_and_touches_nothing(
        tmp_path: Path, edit: Callable[[dict[str, Any]], object], why: str) -> None:
    _, _, out = _make(tmp_path)
    doc = json.loads((out / "manifest.json").read_bytes())
    edit(doc)
    (out / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(SuiteError, match=f"malformed: {why}"):
        files.check(out)


def test_not_json_is_one_line(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    (out / "manifest.json").write_text("[1, 2")
    with pytest.raises(SuiteError, match="malformed: not JSON"):
        files.check(out)


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("extra, says", [
    (["--runner", "docker"], "--files runs with the host runner"),
    (["--pristine-image", "sha256:" + "1" * 64], "--files runs with the host runner"),
])
def test_suites_run_files_refuses_other_trees(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        extra: list[str], says: str) -> None:
    from patchbake.entry import main

    _, ref, out = _make(tmp_path)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    capsys.readouterr()
    rc = main(["suites", "run", "dsv4-topk-cpu", "--image", str(ref.digest), "--files", str(out),
               *extra])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_suites_run_files_refuses_a_bundle_of_another_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    from patchbake.entry import main

    _, _, out = _make(tmp_path)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    capsys.readouterr()
    rc = main(["suites", "run", "dsv4-topk-cpu", "--image", "sha256:" + "2" * 64,
               "--files", str(out)])
    err = capsys.readouterr().err
    assert rc == 40 and "carries the files of" in err, err


def test_an_empty_directory_in_the_tree_is_refused(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    (out / "tree" / "flash_attn").mkdir()  # importable as a namespace package
    with pytest.raises(IntegrityError, match="'tree/flash_attn/' is not in its manifest"):
        files.check(out)


def test_leaving_a_directory_keeps_the_pristine_digest_consistent(tmp_path: Path) -> None:
    """A directory left behind drops the base's files below it from the pristine digest
    too, so the bundle's pristine tree rebuilds (make checks it before naming the bundle)."""
    store, ref, _ = _store(tmp_path)
    out = tmp_path / "carry"
    files.make(store, ref, files.Selection.of([], ["vllm/envs.py=kept on the machine"]), out)
    b = files.check(out)
    assert not any(r[0] == "vllm/envs.py" for r in b.doc["pristine"])
    files.pristine_tree(b, tmp_path / "pristine")


@pytest.mark.parametrize("leave", ["vllm=x", "vllm/__init__.py=x", "/vllm/=x"])
def test_leaving_vllm_itself_is_refused(leave: str) -> None:
    with pytest.raises(UsageError, match="the bundle carries vllm"):
        files.Selection.of([], [leave])


def test_a_quoted_record_path_is_carried(tmp_path: Path) -> None:
    assert files._record_paths(b'"foo/a,b.py",sha256=x,4\nfoo/c.py,,\n') == ["foo/a,b.py",
                                                                             "foo/c.py"]


def test_a_symlink_out_is_refused_before_any_work(tmp_path: Path) -> None:
    store, ref, _ = _store(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(UsageError, match="not an empty directory"):
        files.make(store, ref, files.Selection.of([], []), tmp_path / "link")


def test_signing_refuses_a_selection_it_cannot_rebuild(tmp_path: Path) -> None:
    store, ref, out = _make(tmp_path)
    rec = files.check(out).summary()
    for bad in ({**rec, "selection": {"dists": ["nope"], "leave": []}},
                {**rec, "selection": "x"}):
        with pytest.raises(EvidenceError) as exc:
            files.check_signable(store, ref, bad, False, None)
        assert exc.value.reason == "files-unbound"


def test_a_vllm_digest_that_disagrees_with_the_rows_is_refused(tmp_path: Path) -> None:
    _, _, out = _make(tmp_path)
    doc = json.loads((out / "manifest.json").read_bytes())
    doc["vllm_digest"] = "sha256:" + "3" * 64
    (out / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match="tree/vllm is sha256:"):
        files.check(out)
