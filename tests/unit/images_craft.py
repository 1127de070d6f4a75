"""Crafted images made from a real baked image (tests only): an extra layer on top, an
archive whose two descriptions differ, an OCI layout whose index names several images."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from patchbake.digest import Digest
from patchbake.oci import layout
from patchbake.oci.media import Descriptor
from patchbake.store import Store


class Pairs(list[tuple[str, Any]]):
    """A JSON object written key by key (``dumps``): keys may repeat, order is kept."""


def dumps(obj: Any) -> bytes:
    """JSON bytes of ``obj`` where ``Pairs`` objects keep repeated keys (UTF-8, no escapes)."""
    def text(o: Any) -> str:
        if isinstance(o, dict):
            o = Pairs(o.items())
        if isinstance(o, Pairs):
            return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + text(v)
                                  for k, v in o) + "}"
        if isinstance(o, list):
            return "[" + ",".join(text(x) for x in o) + "]"
        return json.dumps(o, ensure_ascii=False)
    return text(obj).encode("utf-8", "surrogatepass")


def layer(entries: list[tuple[str, bytes]], *, links: dict[str, str] | None = None) -> bytes:
    """An uncompressed layer; ``links`` adds symlinks (name -> target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
        for name, target in (links or {}).items():
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            tf.addfile(ti)
    return buf.getvalue()


def rewrite(store: Store, manifest: dict[str, Any], config: dict[str, Any] | None = None
            ) -> Digest:
    if config is not None:
        cd, cs, _ = layout.put_json(store, config)
        manifest = {**manifest, "config": {**manifest["config"], "digest": str(cd), "size": cs}}
    md, _, _ = layout.put_json(store, manifest)
    return md


def with_layer(store: Store, digest: Digest, data: bytes,
               config_edit: dict[str, Any] | None = None) -> Digest:
    """``digest`` plus one more layer (and optionally edited config fields)."""
    manifest = json.loads(store.read_blob(digest))
    config = json.loads(store.read_blob(Digest.parse(manifest["config"]["digest"])))
    layer = store.put_bytes(data)
    manifest["layers"].append(Descriptor(manifest["layers"][-1]["mediaType"], layer,
                                         len(data)).to_json())
    config["rootfs"]["diff_ids"].append(str(layer))
    for k, v in (config_edit or {}).items():
        config["config"][k] = v
    return rewrite(store, manifest, config)


def with_config(store: Store, digest: Digest, edit: dict[str, Any]) -> Digest:
    """``digest`` with edited image-config fields (``config.Labels``, ``config.Env``...)."""
    manifest = json.loads(store.read_blob(digest))
    config = json.loads(store.read_blob(Digest.parse(manifest["config"]["digest"])))
    config["config"].update(edit)
    return rewrite(store, manifest, config)


def add_member(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), 0o644
    tf.addfile(ti, io.BytesIO(data))


def two_description_archive(store: Store, good_archive: Path, other: Digest, dest: Path,
                            tag: str = "patchbake/two:latest") -> Path:
    """``good_archive`` (manifest.json + index.json of one image) with manifest.json
    re-pointed at image ``other`` (its blobs added): docker load reads ``other``, OCI
    tools read the original."""
    manifest = json.loads(store.read_blob(other))
    blobs = [Digest.parse(manifest["config"]["digest"]),
             *[Digest.parse(x["digest"]) for x in manifest["layers"]]]
    docker_manifest = [{"Config": f"blobs/sha256/{blobs[0].hex}", "RepoTags": [tag],
                        "Layers": [f"blobs/sha256/{d.hex}" for d in blobs[1:]]}]
    with tarfile.open(good_archive) as src, tarfile.open(dest, "w") as out:
        have = set()
        for m in src.getmembers():
            if m.name == "manifest.json":
                continue
            have.add(m.name)
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        for d in blobs:
            if f"blobs/sha256/{d.hex}" not in have:
                add_member(out, f"blobs/sha256/{d.hex}", store.read_blob(d))
        add_member(out, "manifest.json", json.dumps(docker_manifest).encode())
    return dest


def layout_dir(store: Store, root: Path, entries: list[dict[str, Any]],
               digests: list[Digest]) -> Path:
    """An OCI layout directory holding ``digests`` (and what they name) with ``entries``
    as index.json's manifests list."""
    for d in digests:
        data = store.read_blob(d)
        doc = json.loads(data)
        names = [d]
        if "config" in doc:
            names += [Digest.parse(doc["config"]["digest"]),
                      *[Digest.parse(x["digest"]) for x in doc["layers"]]]
        for n in names:
            p = root / "blobs" / "sha256" / n.hex
            p.parent.mkdir(parents=True, exist_ok=True)
            if not p.exists():
                p.write_bytes(store.read_blob(n))
    (root / "oci-layout").write_bytes(layout.LAYOUT_VERSION)
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": entries}))
    return root


def entry(store: Store, digest: Digest, *, media_type: str | None = None,
          platform: dict[str, str] | None = None, name: str | None = None) -> dict[str, Any]:
    data = store.read_blob(digest)
    e: dict[str, Any] = {"mediaType": media_type or json.loads(data).get("mediaType")
                         or "application/vnd.oci.image.manifest.v1+json",
                         "digest": str(digest), "size": len(data)}
    if platform:
        e["platform"] = platform
    if name:
        e["annotations"] = {layout.REF_NAME: name}
    return e
