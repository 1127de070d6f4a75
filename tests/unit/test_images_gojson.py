"""Image descriptions are read as Go's encoding/json reads them (the engines decode every
manifest, index, config and docker-archive manifest.json into structs, matching keys
case-insensitively with Unicode folding, the last match winning), or refused; and every
place that reads one (store, OCI layout, docker-archive, registry) goes through that reader."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from images_craft import Pairs, add_member, dumps, layer, layout_dir
from images_support import SP, Repo, make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.errors import ImageError, RegistryError, StoreError
from patchbake.verify.baked import verify_image
from patchbake.oci import gojson, layout
from patchbake.oci.archive import import_docker_archive
from patchbake.oci.image import StoreBlobs, load_image, parse_json
from patchbake.oci.registry_manifest import parse_manifest
from patchbake.store import Store

D = "sha256:" + "a" * 64
E = "sha256:" + "b" * 64
DESC = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": D, "size": 1}


def _manifest(*extra: tuple[str, Any], config: Any = None) -> Pairs:
    return Pairs([("schemaVersion", 2), ("mediaType", "application/vnd.oci.image.manifest.v1+json"),
                  ("config", config or {**DESC, "digest": E}), ("layers", [DESC]), *extra])


def _config(*extra: tuple[str, Any], inner: Any = None, history: Any = None) -> Pairs:
    return Pairs([("architecture", "amd64"), ("os", "linux"),
                  ("config", inner if inner is not None else {"Env": ["PATH=/usr/bin"]}),
                  ("rootfs", {"type": "layers", "diff_ids": [D]}),
                  ("history", history or [{"created_by": "x"}]), *extra])


KS = "\u212a"  # KELVIN SIGN: Go folds it onto k
LONG_S = "\u017f"  # LATIN SMALL LETTER LONG S: Go folds it onto s

REFUSED: dict[str, tuple[gojson.Shape, Any, str]] = {
    "manifest Layers after layers": (gojson.MANIFEST, _manifest(("Layers", [DESC, DESC])),
                                     "keys 'layers' and 'Layers' in the top-level object"),
    "manifest Layers alone": (gojson.MANIFEST, Pairs([("schemaVersion", 2), ("Layers", [DESC])]),
                              "key 'Layers' in the top-level object (manifest) is the field "
                              "'layers'"),
    "manifest Layer+long s": (gojson.MANIFEST, _manifest((f"layer{LONG_S}", [])),
                              f"keys 'layers' and 'layer{LONG_S}'"),
    "config descriptor Digest": (gojson.MANIFEST,
                                 _manifest(config=Pairs([*DESC.items(), ("Digest", E)])),
                                 "keys 'digest' and 'Digest' in the object at config "
                                 "(descriptor)"),
    "layer descriptor MEDIATYPE": (gojson.MANIFEST, Pairs([("layers", [DESC, Pairs(
        [*DESC.items(), ("MEDIATYPE", "x")])])]), "in the object at layers[1] (descriptor)"),
    "index platform Architecture": (gojson.MANIFEST, {"manifests": [{**DESC, "platform": Pairs(
        [("architecture", "amd64"), ("Architecture", "arm64")])}]},
        "in the object at manifests[0].platform (platform)"),
    "config RootFS after rootfs": (gojson.CONFIG, _config(("RootFS", {"diff_ids": [E]})),
                                   "keys 'rootfs' and 'RootFS' in the top-level object"),
    "config rootf+long s": (gojson.CONFIG, _config((f"rootf{LONG_S}", {"diff_ids": [E]})),
                            f"keys 'rootfs' and 'rootf{LONG_S}'"),
    "config env after Env": (gojson.CONFIG, _config(inner=Pairs(
        [("Env", ["A=1"]), ("env", ["LD_PRELOAD=/x.so"])])),
        "keys 'Env' and 'env' in the object at config (container config)"),
    "config entrypoint after Entrypoint": (gojson.CONFIG, _config(inner=Pairs(
        [("Entrypoint", ["/a"]), ("entrypoint", ["/b"])])), "keys 'Entrypoint' and 'entrypoint'"),
    "config Kelvin WorkingDir": (gojson.CONFIG, _config(inner={f"Wor{KS}ingDir": "/tmp"}),
                                 f"key 'Wor{KS}ingDir' in the object at config (container "
                                 "config) is the field 'WorkingDir'"),
    "container_config cmd": (gojson.CONFIG, _config(("container_config", Pairs(
        [("Cmd", ["a"]), ("cmd", ["b"])]))), "in the object at container_config"),
    "history Created_By": (gojson.CONFIG, _config(history=[Pairs(
        [("created_by", "a"), ("Created_By", "b")])]), "in the object at history[0]"),
    "healthcheck TEST": (gojson.CONFIG, _config(inner={"Healthcheck": {"TEST": ["x"]}}),
                         "is the field 'Test'"),
    "config Size spelt size": (gojson.CONFIG, _config(("size", 5)), "is the field 'Size'"),
    "labels key twice": (gojson.CONFIG, _config(inner={"Labels": Pairs([("a", "1"), ("a", "2")])}),
                         "key 'a' appears twice in the object at config.Labels"),
    "key twice under an unknown key": (gojson.CONFIG, _config(("x", Pairs([("k", 1), ("k", 2)]))),
                                       "key 'k' appears twice in the object at x"),
    "top-level key twice": (gojson.MANIFEST, Pairs([("layers", []), ("layers", [DESC])]),
                            "key 'layers' appears twice in the top-level object"),
    "manifest.json layers": (gojson.ARCHIVE_MANIFEST, [Pairs(
        [("Config", "c"), ("Layers", ["a"]), ("layers", ["a", "b"])])],
        "keys 'Layers' and 'layers' in the object at [0] (manifest.json entry)"),
    "manifest.json Layer+long s": (gojson.ARCHIVE_MANIFEST, [Pairs(
        [("Config", "c"), ("Layers", ["a"]), (f"Layer{LONG_S}", ["b"])])], "one key to Go"),
    "manifest.json config": (gojson.ARCHIVE_MANIFEST, [{"config": "c", "Layers": []}],
                             "key 'config' in the object at [0] (manifest.json entry) is the "
                             "field 'Config'"),
    "manifest.json LayerSources descriptor": (gojson.ARCHIVE_MANIFEST, [{
        "Config": "c", "Layers": [], "LayerSources": {D: {"digest": D, "DIGEST": E}}}],
        "(descriptor)"),
    "lone surrogate in Env": (gojson.CONFIG, _config(inner={"Env": ["A=\ud800"]}),
                              "lone UTF-16 surrogate"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_descriptions_go_reads_otherwise_are_refused(case: str) -> None:
    shape, doc, message = REFUSED[case]
    data = dumps(doc).replace(b"\xed\xa0\x80", b"\\ud800")  # the escape, not the bytes
    with pytest.raises(ImageError, match=None) as info:
        gojson.load(data, "doc", shape)
    assert message in info.value.message, info.value.message
    assert info.value.exit_code == 30 and "\n" not in info.value.one_line()
    assert info.value.message.startswith("doc: ")


ACCEPTED: dict[str, tuple[gojson.Shape, Any]] = {
    "labels differing in case (a Go map: exact keys)": (
        gojson.CONFIG, _config(inner={"Labels": {"a": "1", "A": "2", f"{LONG_S}": "3"}})),
    "annotations differing in case": (gojson.MANIFEST, _manifest(
        ("annotations", {"org.x": "1", "ORG.X": "2"}))),
    "exposed ports differing in case": (gojson.CONFIG, _config(inner={
        "ExposedPorts": {"80/tcp": {}, "80/TCP": {}}, "Volumes": {"/a": {}, "/A": {}}})),
    "dotless i is not i to Go": (gojson.CONFIG, _config(("\u0131d", "x"), ("\u0130D", "y"))),
    "keys Go ignores": (gojson.MANIFEST, _manifest(("vendor.x", 1), ("layersx", []))),
    "a character outside the BMP": (gojson.CONFIG, _config(inner={"Env": ["A=\U0001F600"]})),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_descriptions_go_reads_alike_are_accepted(case: str) -> None:
    shape, doc = ACCEPTED[case]
    data = dumps(doc)
    assert gojson.load(data, "doc", shape) == json.loads(data)


def test_escapes_are_read_as_go_reads_them() -> None:
    """Keys are compared after unescaping (as Go does), and an escaped surrogate pair is
    one character to both readers."""
    assert gojson.load(b'{"schemaVersion":2,"l\\u0061yers":[]}', "doc", gojson.MANIFEST) \
        == {"schemaVersion": 2, "layers": []}
    with pytest.raises(ImageError, match="keys 'layers' and 'L\u0061yers'|'Layers'"):
        gojson.load(b'{"layers":[],"\\u004cayers":[]}', "doc", gojson.MANIFEST)
    env = gojson.load(b'{"config":{"Env":["A=\\ud83d\\ude00"]}}', "doc", gojson.CONFIG)
    assert env["config"]["Env"] == ["A=\U0001F600"]


@pytest.mark.parametrize("data", [b'{"size": NaN}', b"\xef\xbb\xbf{}",
                                  '{"a": 1}'.encode("utf-16"), b'{"a": "\xff"}', b"{",
                                  b'{"a": 1} {"b": 2}'])
def test_bytes_go_does_not_read_as_json_are_refused(data: bytes) -> None:
    with pytest.raises(ImageError, match="is not JSON the engines read") as info:
        gojson.load(data, "config", gojson.CONFIG)
    assert "\n" not in info.value.one_line()
    with pytest.raises(RegistryError, match="not valid JSON"):
        parse_manifest(data)


def test_go_folding_matches_the_orbits_go_uses() -> None:
    fold = gojson.go_fold
    assert fold("rootf\u017f") == fold("ROOTFS") == fold("rootfs")
    assert fold("\u212aind") == fold("kind") == fold("KIND")
    assert fold("\u0131d") != fold("id") and fold("\u0130d") != fold("id")  # own orbits in Go
    assert fold("\u00b5") == fold("\u039c") == fold("\u03bc")  # micro, Mu, mu: one orbit
    assert fold("\u00df") == fold("\u1e9e") != fold("ss")  # simple, not full, folding
    # no two fields of one struct fold alike (the exact spelling decides each key)
    for shape in (gojson.MANIFEST, gojson.CONFIG, gojson.DESCRIPTOR, gojson.PLATFORM):
        assert len({fold(f) for f in shape.fields}) == len(shape.fields)


# --- every reader of descriptions goes through the loader -------------------------------

EVIL = b"import os; os.system('id')\n"


def _baked(tmp_path: Path) -> tuple[Repo, Digest]:
    repo = make_repo(tmp_path)
    return repo, bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest


def _case_variant(store: Store, digest: Digest) -> tuple[Digest, Digest]:
    """The image ``digest`` with a foreign layer that only a Go reader sees: the config
    lists its diff_id under ``RootFS``, the manifest its blob under ``Layers``."""
    manifest = json.loads(store.read_blob(digest))
    config = json.loads(store.read_blob(Digest.parse(manifest["config"]["digest"])))
    data = layer([(f"{SP.strip('/')}/vllm/envs.py", EVIL)])
    evil = str(store.put_bytes(data))
    cbytes = dumps(Pairs([*config.items(), ("RootFS", {
        "type": "layers", "diff_ids": [*config["rootfs"]["diff_ids"], evil]})]))
    cdigest = store.put_bytes(cbytes)
    mbytes = dumps(Pairs([
        *{**manifest, "config": {**manifest["config"], "digest": str(cdigest),
                                 "size": len(cbytes)}}.items(),
        ("Layers", [*manifest["layers"], {**manifest["layers"][-1], "digest": evil,
                                          "size": len(data)}])]))
    return store.put_bytes(mbytes), cdigest


def _archive(store: Store, digest: Digest, config: Digest, dest: Path) -> Path:
    manifest = json.loads(store.read_blob(digest))
    blobs = [digest, config, *[Digest.parse(x["digest"]) for x in manifest["layers"]]]
    with tarfile.open(dest, "w", format=tarfile.USTAR_FORMAT) as out:
        for d in blobs:
            add_member(out, f"blobs/sha256/{d.hex}", store.read_blob(d))
        add_member(out, "manifest.json", json.dumps([{
            "Config": f"blobs/sha256/{config.hex}", "RepoTags": ["x/y:z"],
            "Layers": [f"blobs/sha256/{x['digest'][7:]}" for x in manifest["layers"]]}]).encode())
        add_member(out, "index.json", json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": manifest["mediaType"], "digest": str(digest),
            "size": len(store.read_blob(digest))}]}).encode())
        add_member(out, "oci-layout", layout.LAYOUT_VERSION)
    return dest


def test_every_source_reads_descriptions_as_go_does(tmp_path: Path) -> None:
    repo, good = _baked(tmp_path)
    st = repo.store
    crafted, config = _case_variant(st, good)
    want = re.escape("keys 'layers' and 'Layers' in the top-level object (manifest) are one "
                     "key to Go")

    def verify(ref: str | Digest) -> Any:
        return verify_image(repo.pipeline, ref, st, patched=repo.patched, definition="offline")

    assert verify(good).ok
    with pytest.raises(ImageError, match=want):  # the store (a digest, a ref name)
        verify(crafted)
    with pytest.raises(ImageError, match=want):
        load_image(StoreBlobs(st), crafted)
    with pytest.raises(ImageError, match=want):
        layout.lookup(st, crafted)
    lay = layout_dir(st, tmp_path / "lay", [{"mediaType": "application/vnd.oci.image.manifest"
                                             ".v1+json", "digest": str(crafted),
                                             "size": len(st.read_blob(crafted))}], [crafted])
    with pytest.raises(ImageError, match=want):  # an OCI layout
        verify(str(lay))
    with pytest.raises(ImageError, match=want):  # a docker-archive
        import_docker_archive(Store.open(tmp_path / "fresh"), _archive(st, crafted, config,
                                                                       tmp_path / "a.tar"))
    with pytest.raises(ImageError, match=want):  # what the registry client fetched
        parse_manifest(st.read_blob(crafted), "application/vnd.oci.image.manifest.v1+json")
    with pytest.raises(ImageError, match="keys 'rootfs' and 'RootFS'"):  # the config alone
        parse_json(st.read_blob(config), "config", gojson.CONFIG)
    # the store's own index.json is an index too
    (st.root / "index.json").write_bytes(b'{"manifests": [], "Manifests": [{}]}')
    with pytest.raises(ImageError, match="'manifests' and 'Manifests'"):
        layout.refs(st)
    (st.root / "index.json").write_bytes(b'{"manifests": [')
    with pytest.raises(StoreError, match="not valid JSON"):
        layout.refs(st)


def test_the_modules_that_read_descriptions_use_the_loader() -> None:
    """The readers of manifests, indexes, configs and manifest.json parse JSON only through
    the loader (the json module's exact-key reading would come back with a plain
    json.loads)."""
    root = Path(__file__).resolve().parents[2] / "tools" / "patchbake"
    readers = ["oci/archive.py", "oci/archive_tar.py", "oci/image.py", "oci/layout.py",
               "oci/registry_manifest.py", "images/refs.py", "images/base.py"]
    plain = [r for r in readers if re.search(r"(?<!go)json\.loads?\(", (root / r).read_text())]
    assert plain == [], plain


def test_lone_key_from_archive_manifest_json_bytes(tmp_path: Path) -> None:
    """A docker-archive whose manifest.json spells a field another way is refused."""
    with tarfile.open(tmp_path / "odd.tar", "w", format=tarfile.USTAR_FORMAT) as out:
        add_member(out, "manifest.json", b'[{"Config": "c.json", "layers": [], "Layers": []}]')
    with pytest.raises(ImageError, match=r"odd.tar: manifest.json: key 'layers' in the object "
                       r"at \[0\] \(manifest.json entry\) is the field 'Layers'"):
        import_docker_archive(Store.open(tmp_path / "fresh"), tmp_path / "odd.tar")
