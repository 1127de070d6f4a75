"""bake: an image definition + the patched tree -> an image in the store + a record.

Embedded backend (default, no daemon): append ONE deterministic layer to the base pinned
by digest; config and manifest are canonical JSON; base layers are referenced exactly as
the base manifest lists them (never recompressed or rewritten). Bakes are keyed by their
inputs, so a second bake with nothing changed reads one small file and reports "cached".
The engine backend (``images.engine_bake``) builds the same thing with ``docker build``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .config import Lineage, Pipeline
from .errors import ConfigError, LineageError
from .fsutil import canonical_json, sha256_bytes
from .images import definition as definitions
from .images import record as records
from .images.base import BaseImage, describe, resolve_base
from .images.definition import Definition
from .images.overlay import (ENTRYPOINT_PATH, Overlay, Patched, build_overlay, decide_mode,
                             entrypoint_bytes, verifier_bytes)
from .images.tree import BaseTree, base_tree, check_lineage, pristine_package
from .oci import layout
from .oci.image import Image
from .oci.media import OCI_MANIFEST, Descriptor, layer_type_for
from .oci.tarwriter import FORMAT as TAR_FORMAT
from .oci.tarwriter import with_parents, write_layer
from .store import Store

BAKE_FORMAT = "patchbake-bake/2"
# Format identifiers, not program versions: each names exactly how bytes are written, so a
# record (write-once) stays identical across patchbake releases that write the same bytes.
WRITERS = {
    "tar": TAR_FORMAT,
    "layer_compression": "none (uncompressed layer media type; no zlib in the bytes)",
    "json": "canonical JSON: sorted keys, compact separators, UTF-8",
}


@dataclass(frozen=True)
class BakeResult:
    image: str  # definition name
    digest: str  # manifest digest (what registries, signatures and evidence name)
    config_digest: str  # config digest (the engine's "Image ID")
    layers: tuple[str, ...]  # layer digests, base first, ours last
    diff_ids: tuple[str, ...]
    record: str  # repository-relative path of the record
    cached: bool
    mode: str
    backend: str
    baked_files: int
    base: dict[str, Any]
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    docker_archive: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "config_digest": self.config_digest,
                "layers": list(self.layers), "record": self.record, "cached": self.cached,
                "mode": self.mode, "backend": self.backend, "baked_files": self.baked_files,
                "base": self.base, "warnings": list(self.warnings),
                "docker_archive": self.docker_archive, **self.extra}


def epoch_from_env() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH", "0") or "0"
    if not raw.isdigit():
        raise ConfigError(f"SOURCE_DATE_EPOCH={raw!r} is not a non-negative integer")
    return int(raw)


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def revision(lineage: Lineage, patched: Patched) -> str:
    """The fork commit the SOURCE record names as this patch's source (read through its
    parser: a forced export also names the previous commit), else the patch sha256. A
    SOURCE that records another patch does not describe this one: the patch sha256 then."""
    from .patchset.sourcerec import read_source

    rec = read_source(lineage.source_record)
    if rec is not None and rec.commit and rec.patch_sha256 == patched.patch_sha256:
        return rec.commit
    return f"sha256:{patched.patch_sha256}"


def wrapped_entrypoint(base_config: dict[str, Any]) -> tuple[list[str], list[str] | None]:
    """The image's entrypoint: the start-up check wrapper, then the base's own entrypoint
    (its cmd is kept), so ``docker run IMAGE ARGS`` reaches the same program with the
    same arguments; the wrapper checks only with PATCHBAKE_VERIFY_ON_START=1."""
    inner = base_config.get("config") or {}
    entry = [str(x) for x in (inner.get("Entrypoint") or [])]
    if entry[:1] == [ENTRYPOINT_PATH]:
        entry = entry[1:]  # a base that is itself a patchbake image: wrap once
    cmd = inner.get("Cmd")
    return [ENTRYPOINT_PATH, *entry], ([str(x) for x in cmd] if cmd else None)


def bind_lineage(defn: Definition, pipeline: Pipeline, requested: str | None) -> Lineage:
    """The lineage a definition bakes: the one it names; another one asked for is refused."""
    if defn.lineage and requested and requested != defn.lineage:
        raise LineageError(f"{defn.path.name} bakes lineage {defn.lineage}; --lineage "
                           f"{requested} names another upstream",
                           hint="bake a definition of that lineage")
    return pipeline.lineage(requested or defn.lineage or None)


def checked_base_tree(pipeline: Pipeline, defn: Definition, lin: Lineage, base: BaseImage,
                      store: Store) -> BaseTree:
    """The base's installed vllm/ tree, refused (LineageError) unless it is the lineage's."""
    tree = base_tree(base, store, defn.sp_rel)
    check_lineage(tree, lin, pristine_package(lin, store, pipeline.root), defn.base.name,
                  defn.base.has_vllm)
    return tree


def image_labels(defn: Definition, lineage: Lineage, patched: Patched, base: BaseImage,
                 epoch: int) -> dict[str, str]:
    up = lineage.upstream
    source = defn.source or lineage.patch.name
    labels = {
        "org.opencontainers.image.title": defn.name,
        "org.opencontainers.image.base.name": defn.base.name,
        "org.opencontainers.image.base.digest": base.manifest_digest,
        "dev.patchbake.base.pin": defn.base.digest,
        "org.opencontainers.image.revision": revision(lineage, patched),
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.version":
            f"{up.version}+{lineage.name}.{patched.patch_sha256[:12]}",
        "org.opencontainers.image.created": iso(epoch),
        "dev.patchbake.definition": defn.name,
        "dev.patchbake.patch.sha256": patched.patch_sha256,
        "dev.patchbake.files.sha256": patched.files_sha256,
        "dev.patchbake.upstream.pin": up.pin,
        "dev.patchbake.lineage": lineage.key,
        "dev.patchbake.upstream.tree-digest": patched.pristine_digest,
        "dev.patchbake.patched-tree.digest": patched.tree_digest,
        "dev.patchbake.site-packages": defn.site_packages,
        "dev.patchbake.identity": "/opt/patchbake/identity.json",
    }
    labels.update(dict(defn.labels))
    return labels


def bake_key(defn: Definition, base: BaseImage, patched: Patched, epoch: int,
             backend: str) -> str:
    return sha256_bytes(canonical_json({
        "format": BAKE_FORMAT, "writers": WRITERS, "definition": defn.fingerprint,
        "base": base.manifest_digest, "patch": patched.patch_sha256,
        "files": patched.files_sha256, "tree": patched.tree_digest,
        "pristine": patched.pristine_digest, "epoch": epoch, "backend": backend,
        "verifier": hashlib.sha256(verifier_bytes()).hexdigest(),
        "entrypoint": hashlib.sha256(entrypoint_bytes()).hexdigest(),
        "lineage": defn.lineage,
    }))


def _append(store: Store, base: Image, overlay: Overlay, labels: dict[str, str], epoch: int,
            created_by: str) -> tuple[Descriptor, str, Descriptor]:
    """Write the layer, config and manifest; return (manifest, config digest, layer)."""
    size = 0

    def counted() -> Any:
        nonlocal size
        for chunk in write_layer(with_parents(overlay.entries), epoch):
            size += len(chunk)
            yield chunk

    layer_hex = store.put_stream(counted())
    layer = Descriptor(layer_type_for(base.media_type), f"sha256:{layer_hex}", size)
    config = copy.deepcopy(base.config)
    config["created"] = iso(epoch)
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    config["rootfs"]["diff_ids"] = [*base.diff_ids, layer.digest]
    config["history"] = [*(config.get("history") or []), {
        "created": iso(epoch), "created_by": created_by, "comment": BAKE_FORMAT}]
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
    inner["Entrypoint"], cmd = wrapped_entrypoint(base.config)
    if cmd is None:
        inner.pop("Cmd", None)
    else:
        inner["Cmd"] = cmd
    cdigest, csize, _ = layout.put_json(store, config)
    manifest: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": base.media_type,
        "config": {"mediaType": base.config_desc.media_type, "digest": cdigest, "size": csize},
        # the base's layer descriptors exactly as its manifest lists them
        "layers": [*base.manifest["layers"], layer.to_json()],
    }
    if base.media_type == OCI_MANIFEST:
        manifest["annotations"] = {k: v for k, v in labels.items()
                                   if k.startswith(("org.opencontainers.", "dev.patchbake."))}
    mdigest, msize, _ = layout.put_json(store, manifest)
    return Descriptor(base.media_type, mdigest, msize), cdigest, layer


def build_record(defn: Definition, lineage: Lineage, patched: Patched, base: BaseImage,
                 manifest: Descriptor, config_digest: str, diff_ids: list[str],
                 layers: list[Descriptor], overlay: Overlay, labels: dict[str, str],
                 epoch: int, backend: str, mode: str) -> dict[str, Any]:
    return {
        "format": records.RECORD_FORMAT,
        "definition": defn.name,
        "backend": backend,
        "mode": mode,
        "manifest_digest": manifest.digest,
        "manifest_media_type": manifest.media_type,
        "config_digest": config_digest,
        "identities": {
            "manifest_digest": "what registries, signatures and evidence name",
            "config_digest": "the Docker engine's Image ID (classic store)",
            "diff_id": "sha256 of a layer's uncompressed tar",
        },
        "layers": [{"digest": d.digest, "diff_id": diff_ids[i], "size": d.size,
                    "media_type": d.media_type, "from": "base" if i < len(base.image.layers)
                    else "patchbake"} for i, d in enumerate(layers)],
        "base": describe(base),
        "patch": {"name": lineage.name, "sha256": patched.patch_sha256},
        "files_sha256": patched.files_sha256,
        "upstream": {"pin": lineage.upstream.pin, "version": lineage.upstream.version,
                     "tree_digest": patched.pristine_digest},
        "patched_tree_digest": patched.tree_digest,
        "site_packages": defn.site_packages,
        "baked_files": overlay.baked,
        "deleted": overlay.deleted,
        "identity_sha256": hashlib.sha256(overlay.identity_bytes).hexdigest(),
        "tree": {"sha256": overlay.tree_sha256, "files": overlay.tree_files,
                 "lineage": lineage.key},
        "labels": labels,
        "source_date_epoch": epoch,
        "writers": WRITERS,
    }


def save_cache(path: Path, doc: dict[str, Any]) -> None:
    """Write a bake-cache entry: temp file + rename, no fsync. It is a cache (a lost or torn
    entry only means a re-bake, and entries are checked against the store before use), so
    it does not pay for durability; records and blobs do."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(canonical_json(doc))
    os.replace(tmp, path)


def _cached(store: Store, key: str) -> dict[str, Any] | None:
    path = store.root / "bakes" / f"{key}.json"
    try:
        rec = json.loads(path.read_bytes())
        needed = (rec["manifest_digest"], rec["config_digest"], rec["layers"][-1]["digest"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None  # a torn or foreign entry is a cache miss: bake again
    if not all(isinstance(d, str) and store.has(d) for d in needed):
        return None
    return dict(rec)


def _result(rec: dict[str, Any], rec_path: str, cached: bool, warnings: list[str],
            t0: float) -> BakeResult:
    return BakeResult(
        image=rec["definition"], digest=rec["manifest_digest"],
        config_digest=rec["config_digest"], layers=tuple(x["digest"] for x in rec["layers"]),
        diff_ids=tuple(x["diff_id"] for x in rec["layers"]), record=rec_path, cached=cached,
        mode=rec["mode"], backend=rec["backend"], baked_files=len(rec["baked_files"]),
        base=rec["base"], warnings=tuple(warnings), seconds=round(time.monotonic() - t0, 3))


def bake_image(pipeline: Pipeline, name: str | None, store: Store, *,
               lineage: str | None = None, patched: Patched | None = None,
               epoch: int | None = None, backend: str = "embedded",
               docker_archive: Path | None = None) -> BakeResult:
    """Bake definition ``name`` (default: the offline one); see the module docstring."""
    t0 = time.monotonic()
    name = name or definitions.default_name(pipeline)
    defn = definitions.load(pipeline, name)
    lin = bind_lineage(defn, pipeline, lineage)
    if patched is None:
        from .patchset import patched_tree

        patched = patched_tree(lin, store)
    mode, warnings = decide_mode(defn, patched)
    epoch = epoch_from_env() if epoch is None else epoch
    if mode == "build" or backend == "engine":
        from .images.engine_bake import bake_with_engine

        result = bake_with_engine(pipeline, defn, lin, patched, store, mode, warnings, epoch)
    else:
        result = _bake_embedded(pipeline, defn, lin, patched, store, warnings, epoch, t0)
    if docker_archive is not None:
        from .oci.archive import export_docker_archive

        export_docker_archive(store, result.digest, docker_archive,
                              [f"patchbake/{name}:{result.digest[7:19]}"])
        result = BakeResult(**{**result.__dict__, "docker_archive": str(docker_archive)})
    return result


def _bake_embedded(pipeline: Pipeline, defn: Definition, lin: Lineage, patched: Patched,
                   store: Store, warnings: list[str], epoch: int, t0: float) -> BakeResult:
    layout.ensure_layout(store)
    base = resolve_base(defn, store, lin)
    key = bake_key(defn, base, patched, epoch, "embedded")
    rec = _cached(store, key)
    cached = rec is not None
    if rec is None:
        tree = checked_base_tree(pipeline, defn, lin, base, store)
        overlay = build_overlay(defn, patched, lin, defn.base.name, base.manifest_digest, tree)
        labels = image_labels(defn, lin, patched, base, epoch)
        created_by = (f"patchbake bake {defn.name}: overlay of {len(overlay.baked)} patched "
                      f"vLLM files + /opt/patchbake")
        manifest, cdigest, layer = _append(store, base.image, overlay, labels, epoch,
                                           created_by)
        layers = [*base.image.layers, layer]
        rec = build_record(defn, lin, patched, base, manifest, cdigest,
                           [*base.image.diff_ids, layer.digest], layers, overlay, labels,
                           epoch, "embedded", "overlay")
        save_cache(store.root / "bakes" / f"{key}.json", rec)
    path = records.write_record(pipeline.root, rec)
    desc = Descriptor(rec["manifest_media_type"], rec["manifest_digest"],
                      store.blob_path(rec["manifest_digest"]).stat().st_size)
    layout.add_ref(store, defn.name, desc)
    return _result(rec, path.relative_to(pipeline.root).as_posix(), cached, warnings, t0)


def latest_digest(ctx_or_pipeline: Any, name: str) -> str | None:
    """Manifest digest of definition ``name``'s latest recorded bake (None: not a
    definition). Accepts a Pipeline or the CLI's Ctx (used by push/verify/evidence)."""
    pipeline = getattr(ctx_or_pipeline, "pipeline", ctx_or_pipeline)
    if name not in pipeline.images:
        return None
    return str(records.latest(pipeline.root, name)["manifest_digest"])
