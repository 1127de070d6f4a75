"""Bake binds an image to its lineage: a base whose installed vLLM is not the lineage's
pinned upstream is refused (LineageError, exit 37) -- the stand-in by its whole vllm/ tree,
a real base by its dist-info METADATA version, RECORD and Python sources. And the
revision label is read through the SOURCE parser (a forced export names two commits)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from images_support import SP, UPSTREAM, Repo, make_repo, write_tree
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.images.recipe import revision
from patchbake.entry import main
from patchbake.errors import LineageError
from patchbake.images.standin import build_standin
from patchbake.oci import layout
from patchbake.oci.media import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST
from patchbake.oci.tarwriter import file_entry, with_parents, write_layer
from patchbake.patchset.sourcerec import render_source


def _archive_of(repo: Repo, digest: Digest, name: str) -> None:
    from patchbake.oci.archive import export_docker_archive

    export_docker_archive(repo.store, digest, repo.root / f"{name}.tar", [f"{name}:1"])


def _define_archive(repo: Repo, name: str, digest: Digest, lineage: str = "") -> None:
    _archive_of(repo, digest, name)
    more = f"lineage: {lineage}\n" if lineage else ""
    repo.define(name, f"version: 1\nbase: {{source: docker-archive, name: '{name}:1', "
                f"digest: '{digest}', path: {name}.tar}}\nsite_packages: {SP}\n"
                f"mode: overlay\n{more}")


def test_a_base_of_another_upstream_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction: a patch of one upstream baked onto a base of another used to
    verify N/N (the other files were 'drift'); now bake refuses it."""
    repo = make_repo(tmp_path)
    other = {**UPSTREAM, "vllm/_version.py": b"__version__ = '0.24.0'\n",
             "vllm/sampling_params.py": b"class SamplingParams:\n    old = 1\n"}
    write_tree(repo.root / "upstream-0.24.0", other)
    p = repo.root / "pipeline.yaml"
    p.write_text(p.read_text().replace("images:\n", (
        "  v0.24.0:\n    name: topk\n    upstream: {kind: path, package: vllm, version: "
        "0.24.0, path: upstream-0.24.0}\n    patch: patch/topk-v0.24.0.patch\n"
        "    files: patch/FILES24.txt\n    source_record: patch/SOURCE24\nimages:\n"), 1))
    old = build_standin(repo.store, repo.pipeline.lineage("v0.24.0"), SP, base=repo.root)
    _define_archive(repo, "wrongbase", old.manifest.digest, lineage="v0.25.1")
    with pytest.raises(LineageError, match=r"vllm/ tree is not the pristine tree of lineage "
                       r"v0.25.1 \(vllm 0.25.1\): 2 of 6 files differ \(first: "
                       r"vllm/_version.py\)"):
        bake_image(repo.pipeline, "wrongbase", repo.store, patched=repo.patched)
    assert not (repo.root / "manifests/images/wrongbase").exists()  # nothing half-written
    # the right base under the same shape of definition bakes
    _define_archive(repo, "rightbase", repo.standin_digest, lineage="v0.25.1")
    assert bake_image(repo.pipeline, "rightbase", repo.store, patched=repo.patched).digest
    # the definition names its lineage: asking for another one is refused
    code = main(["--pipeline", str(p), "--lineage", "v0.24.0", "bake", "rightbase"])
    err = capsys.readouterr().err
    assert code == LineageError.exit_code == 37
    assert "(rightbase.yaml) bakes lineage v0.25.1; --lineage v0.24.0 names another" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("patchbake: error:")]) == 1


def _real_like_base(repo: Repo, version: str, record_fix: dict[str, bytes] | None = None,
                    py_override: dict[str, bytes] | None = None) -> Digest:
    """The stand-in's layers + a layer with vllm-<version>.dist-info (METADATA, RECORD):
    the shape of a pip-installed vLLM. Returns the manifest digest."""
    files = {k: v for k, v in UPSTREAM.items() if k.startswith("vllm/")}
    files.update(py_override or {})
    rows = []
    for k, v in sorted(files.items()):
        h = base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b"=").decode()
        rows.append(f"{k},sha256={h},{len(v)}")
    for k, v in (record_fix or {}).items():
        rows = [r for r in rows if not r.startswith(f"{k},")]
        h = base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b"=").decode()
        rows.append(f"{k},sha256={h},{len(v)}")
    dist = f"vllm-{version}.dist-info"
    rows.append(f"{dist}/RECORD,,")
    entries = [file_entry(f"{SP.strip('/')}/{k}", data=v) for k, v in files.items()]
    entries += [file_entry(f"{SP.strip('/')}/{dist}/METADATA",
                           data=f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n"
                                "Version: 9.9.9 (in the body: not a header)\n".encode()),
                file_entry(f"{SP.strip('/')}/{dist}/RECORD", data="\n".join(rows).encode())]
    data = b"".join(write_layer(with_parents(entries), 0))
    layer = repo.store.put_bytes(data)
    layer_d = str(layer)
    skeleton = json.loads(repo.store.read_blob(repo.standin_digest))["layers"][0]
    config_doc = {"architecture": "amd64", "os": "linux",
                  "config": {"Entrypoint": ["vllm", "serve"]},
                  "rootfs": {"type": "layers", "diff_ids": [skeleton["digest"], layer_d]}}
    cd, cs, _ = layout.put_json(repo.store, config_doc)
    md, _, _ = layout.put_json(repo.store, {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": str(cd), "size": cs},
        "layers": [skeleton, {"mediaType": OCI_LAYER_TAR, "digest": layer_d,
                              "size": len(data)}]})
    return md


@pytest.mark.parametrize("version, fix, override, match", [
    ("0.25.1", None, None, None),
    ("0.25.1+cu129", None, None, None),  # a local label of the pinned version
    ("0.24.0", None, None, r"installs vllm 0.24.0 \(vllm-0.24.0.dist-info\); the definition "
                           r"bakes lineage v0.25.1"),
    ("0.25.1", {"vllm/envs.py": b"other\n"}, None, r"1 problem\(s\) \(first: vllm/envs.py "
                                                    r"differs from its RECORD hash\)"),
    # METADATA and RECORD say 0.25.1, the sources are another release's
    ("0.25.1", None, {"vllm/sampling_params.py": b"class SamplingParams:\n    old = 1\n"},
     r"\(first: vllm/sampling_params.py differs from the pinned sdist\)"),
])
def test_a_real_base_is_bound_by_its_dist_info(tmp_path: Path, version: str,
                                               fix: dict[str, bytes] | None,
                                               override: dict[str, bytes] | None,
                                               match: str | None) -> None:
    repo = make_repo(tmp_path)
    digest = _real_like_base(repo, version, fix, override)
    _define_archive(repo, "real", digest)
    if match is None:
        res = bake_image(repo.pipeline, "real", repo.store, patched=repo.patched)
        cfg = Digest.parse(json.loads(repo.store.read_blob(res.digest))["config"]["digest"])
        inner = json.loads(repo.store.read_blob(cfg))["config"]
        assert inner["Entrypoint"] == ["/opt/patchbake/entrypoint.sh", "vllm", "serve"]
        assert "Cmd" not in inner
        return
    with pytest.raises(LineageError, match=match):
        bake_image(repo.pipeline, "real", repo.store, patched=repo.patched)


def test_revision_label_reads_source_through_its_parser(tmp_path: Path) -> None:
    """A forced export records the previous commit too (it sorts first in the JSON): the
    label names the commit the patch came from."""
    repo = make_repo(tmp_path)
    lin = repo.pipeline.lineage()
    source = {"lineage": "v0.25.1", "patch_sha256": repo.patched.patch_sha256,
              "forced": {"previous_commit": "1" * 40, "previous_patch_sha256": "e" * 64,
                         "reason": "drop a hunk"},
              "source": {"kind": "workspace", "repo": None, "commit": "2" * 40,
                         "pristine_commit": "3" * 40}}
    lin.source_record.parent.mkdir(parents=True, exist_ok=True)
    lin.source_record.write_bytes(render_source(source))
    assert revision(lin, repo.patched) == "2" * 40
    res = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched)
    rec = json.loads((repo.root / res.record).read_bytes())
    assert rec["labels"]["org.opencontainers.image.revision"] == "2" * 40
    # a SOURCE about another patch does not describe this image: the patch sha256 then
    lin.source_record.write_bytes(render_source({**source, "patch_sha256": "f" * 64}))
    assert revision(lin, repo.patched) == f"sha256:{repo.patched.patch_sha256}"


def test_a_rebake_supersedes_the_old_record_without_deleting_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake.images import record

    repo = make_repo(tmp_path)
    first = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    assert record.superseded(repo.root, "offline") == {}
    second = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=1)
    assert first.digest != second.digest
    sup = record.superseded(repo.root, "offline")
    assert sup == {str(first.digest): {"digest": str(first.digest),
                                       "superseded_by": str(second.digest),
                                       "record": first.record}}
    assert (repo.root / first.record).is_file()  # kept: evidence about it still verifies
    assert record.latest(repo.root, "offline").manifest_digest == second.digest
    third = bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=2)
    sup = record.superseded(repo.root, "offline")
    assert {d: r["superseded_by"] for d, r in sup.items()} == {
        str(first.digest): str(third.digest), str(second.digest): str(third.digest)}
    # going back to a bake takes it out of the index
    bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched, epoch=0)
    assert set(record.superseded(repo.root, "offline")) == {str(second.digest),
                                                             str(third.digest)}
    assert main(["--pipeline", str(repo.root / "pipeline.yaml"), "image", "ls", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["definitions"]
    assert rows[0]["latest"] == str(first.digest)
    assert rows[0]["superseded"] == sorted([str(second.digest), str(third.digest)])


def test_committed_record_names_the_forced_sources_commit() -> None:
    """patch/SOURCE on this repository was written by `patch export --force --reason`
    (it names the previous commit too): the committed bake's revision is its source."""
    from patchbake.images import record
    from patchbake.patchset.sourcerec import read_source

    repo = Path(__file__).resolve().parents[2]
    src = read_source(repo / "patch" / "SOURCE")
    assert src is not None and src.data.get("forced"), "patch/SOURCE is no longer forced"
    rec = record.latest(repo, "sm89-serving-offline")
    assert rec.patch_sha256 == src.patch_sha256
    assert rec.doc["labels"]["org.opencontainers.image.revision"] == src.commit
    assert src.commit != src.data["forced"]["previous_commit"]


def test_a_base_declared_without_vllm(tmp_path: Path) -> None:
    """Test bases with no vLLM (a Python + torch image) say so; a base that has one may
    not claim it has none."""
    repo = make_repo(tmp_path)
    skeleton = json.loads(repo.store.read_blob(repo.standin_digest))
    cd, cs, _ = layout.put_json(repo.store, {
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [skeleton["layers"][0]["digest"]]}})
    md, _, _ = layout.put_json(repo.store, {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": str(cd), "size": cs},
        "layers": [skeleton["layers"][0]]})
    _archive_of(repo, md, "novllm")
    text = (f"version: 1\nbase: {{source: docker-archive, name: 'novllm:1', digest: '{md}', "
            f"path: novllm.tar{{extra}}}}\nsite_packages: {SP}\nmode: overlay\n")
    repo.define("novllm", text.replace("{extra}", ""))
    with pytest.raises(LineageError, match="0 of 6 files|6 of 6 files differ"):
        bake_image(repo.pipeline, "novllm", repo.store, patched=repo.patched)
    repo.define("novllm2", text.replace("{extra}", ", has_vllm: false"))
    res = bake_image(repo.pipeline, "novllm2", repo.store, patched=repo.patched)
    rec = json.loads((repo.root / res.record).read_bytes())
    assert rec["tree"]["files"] == 3  # only the baked files
    _define_archive(repo, "liar", repo.standin_digest)
    (repo.root / "images/liar.yaml").write_text(
        (repo.root / "images/liar.yaml").read_text().replace("path: liar.tar}",
                                                             "path: liar.tar, has_vllm: false}"))
    with pytest.raises(LineageError, match=r"declared without vLLM \(base.has_vllm: false\) "
                                           r"but installs 6 vllm/ file\(s\)"):
        bake_image(repo.pipeline, "liar", repo.store, patched=repo.patched)


def test_record_rows_are_read_as_csv() -> None:
    """A path with a comma (vLLM's fused_moe configs: ``E=1,N=14336,...json``) is a quoted
    field in RECORD, as pip's csv writer writes it; read naively it was 'not in RECORD'."""
    from patchbake.images.tree import BaseTree, TreeFile, _record_problems

    data = b"{}\n"
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    name = "vllm/configs/E=1,N=14336,dtype=int8.json"
    tree = BaseTree({name: TreeFile("file", len(data), hashlib.sha256(data).hexdigest(), "0644")},
                    {"RECORD": f'"{name}",sha256={h},{len(data)}\r\nvllm-0.25.1.dist-info/RECORD,,\r\n'
                     .encode()}, "vllm-0.25.1.dist-info")
    assert _record_problems(tree) == []
    wrong = BaseTree(tree.files, {"RECORD": f'"{name}",sha256={h[::-1]},3\r\n'.encode()},
                     tree.dist_name)
    assert _record_problems(wrong) == [f"{name} differs from its RECORD hash"]


def test_a_real_bases_dist_info_is_read_once(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The dist-info is read with every layer streamed through once per base; later bakes
    take it from the store's memo (a bake's time does not grow with the base), and a damaged
    or foreign memo is read again, as is one whose bytes are not what the layers hold for
    those files."""
    from patchbake.images import tree

    repo = make_repo(tmp_path)
    digest = _real_like_base(repo, "0.25.1")
    _define_archive(repo, "real", digest)
    first = bake_image(repo.pipeline, "real", repo.store, patched=repo.patched, epoch=0)
    memos = list((repo.store.root / "bakes" / "layer-ops").glob("dist-info-*.json"))
    assert len(memos) == 1
    reads: list[str] = []
    real_read = tree._read_dist_info

    def counted(*args: object) -> tuple[dict[str, bytes], str | None]:
        reads.append("read")
        return real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(tree, "_read_dist_info", counted)
    again = bake_image(repo.pipeline, "real", repo.store, patched=repo.patched, epoch=1)
    assert reads == [] and again.layers[:-1] == first.layers[:-1]
    for epoch, damage in enumerate((b"{not json", json.dumps(
            {"format": "other/9", "files": {}, "dist_name": None}).encode()), start=2):
        memos[0].write_bytes(damage)
        bake_image(repo.pipeline, "real", repo.store, patched=repo.patched, epoch=epoch)
        assert reads.pop() == "read" and reads == []
    # a memo whose bytes are not the layers' (altered, or stale) is read again: it never
    # decides what the lineage check reads
    doc = json.loads(memos[0].read_bytes())
    doc["files"]["METADATA"] = base64.b64encode(b"Name: vllm\nVersion: 0.24.0\n\n").decode()
    memos[0].write_text(json.dumps(doc))
    bake_image(repo.pipeline, "real", repo.store, patched=repo.patched, epoch=4)
    assert reads == ["read"]
    assert b"0.24.0" not in base64.b64decode(json.loads(memos[0].read_bytes())["files"]["METADATA"])
