"""bake: an image definition + the patched tree -> an image in the store + a record.

Embedded backend (default, no daemon): append ONE deterministic layer to the base pinned
by digest; config and manifest are canonical JSON; base layers are referenced exactly as
the base manifest lists them (never recompressed or rewritten). Bakes are keyed by their
inputs, so a second bake with nothing changed reads one small file and reports "cached".
The engine backend (``images.engine_bake``) builds the same thing with ``docker build``.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

from ..config import Lineage, Pipeline
from ..config.images import Definition
from ..digest import Digest
from ..errors import ConfigError
from ..oci import layout
from ..oci.archive import export_docker_archive
from ..oci.image import Image
from ..oci.media import OCI_MANIFEST, Descriptor, layer_type_for
from ..oci.tarwriter import with_parents, write_layer
from ..patchset.patched import patched_tree
from ..store import Store, write_failure
from . import definition as definitions
from . import recipe
from . import record as records
from .base import resolve_base
from .engine_bake import bake_with_engine
from .overlay import (
    Overlay,
    Patched,
    build_overlay,
    decide_mode,
)
from .recipe import (
    BAKE_FORMAT,
    BakeResult,
    bake_key,
    build_record,
    checked_base_tree,
    image_labels,
    iso,
    revision,
    save_cache,
    wrapped_entrypoint,
)
from .record import latest_digest


def epoch_from_env() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH", "0") or "0"
    if not raw.isdigit():
        raise ConfigError(f"SOURCE_DATE_EPOCH={raw!r} is not a non-negative integer")
    return int(raw)


def _append(store: Store, base: Image, overlay: Overlay, labels: dict[str, str], epoch: int,
            created_by: str, env: dict[str, str]) -> tuple[Descriptor, Digest, Descriptor]:
    """Write the layer, config and manifest; return (manifest, config digest, layer)."""
    size = 0

    def counted() -> Any:
        nonlocal size
        for chunk in write_layer(with_parents(overlay.entries), epoch):
            size += len(chunk)
            yield chunk

    layer = Descriptor(layer_type_for(base.media_type), store.put_stream(counted()), size)
    config = copy.deepcopy(base.config)
    config["created"] = iso(epoch)
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    config["rootfs"]["diff_ids"] = [str(d) for d in (*base.diff_ids, layer.digest)]
    config["history"] = [*(config.get("history") or []), {
        "created": iso(epoch), "created_by": created_by, "comment": BAKE_FORMAT}]
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
    if env:  # the definition's variables replace the base's of the same name, in place
        kept = [e for e in inner.get("Env") or [] if e.partition("=")[0] not in env]
        inner["Env"] = kept + [f"{k}={v}" for k, v in sorted(env.items())]
    inner["Entrypoint"], cmd = wrapped_entrypoint(base.config)
    if cmd is None:
        inner.pop("Cmd", None)
    else:
        inner["Cmd"] = cmd
    cdigest, csize, _ = layout.put_json(store, config)
    manifest: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": base.media_type,
        "config": {"mediaType": base.config_desc.media_type, "digest": str(cdigest),
                   "size": csize},
        # the base's layer descriptors exactly as its manifest lists them
        "layers": [*base.manifest["layers"], layer.to_json()],
    }
    if base.media_type == OCI_MANIFEST:
        manifest["annotations"] = {k: v for k, v in labels.items()
                                   if k.startswith(("org.opencontainers.", "dev.patchbake."))}
    mdigest, msize, _ = layout.put_json(store, manifest)
    return Descriptor(base.media_type, mdigest, msize), cdigest, layer


def bake_image(pipeline: Pipeline, name: str | None, store: Store, *,
               lineage: str | None = None, patched: Patched | None = None,
               epoch: int | None = None, backend: str = "embedded",
               docker_archive: Path | None = None, record: bool = True) -> BakeResult:
    """Bake definition ``name`` (default: the offline one); see the module docstring.

    ``record=False`` writes nothing into the repository or the store's refs (the release
    gates' second, independent bake compares digests only)."""
    try:
        return _bake_image(pipeline, name, store, lineage, patched, epoch, backend,
                           docker_archive, record)
    except OSError as exc:
        err = write_failure(exc, store.root)  # full, read-only: one line, exit 13
        if err is None:
            raise
        raise err from exc


def _bake_image(pipeline: Pipeline, name: str | None, store: Store, lineage: str | None,
                patched: Patched | None, epoch: int | None, backend: str,
                docker_archive: Path | None, record: bool) -> BakeResult:
    t0 = time.monotonic()
    name = name or definitions.default_name(pipeline, lineage)
    defn = definitions.load(pipeline, name)
    lin = pipeline.lineage_for(defn, lineage)
    if patched is None:
        patched = patched_tree(lin, store)
    mode, warnings = decide_mode(defn, patched)
    epoch = epoch_from_env() if epoch is None else epoch
    if mode == "build" or backend == "engine":
        result = bake_with_engine(pipeline, defn, lin, patched, store, mode, warnings, epoch)
    else:
        result = _bake_embedded(pipeline, defn, lin, patched, store, warnings, epoch, t0,
                                record)
    if docker_archive is not None:
        export_docker_archive(store, result.digest, docker_archive,
                              [f"patchbake/{name}:{result.digest.short()}"])
        result = BakeResult(**{**result.__dict__, "docker_archive": str(docker_archive)})
    return result


def _bake_embedded(pipeline: Pipeline, defn: Definition, lin: Lineage, patched: Patched,
                   store: Store, warnings: list[str], epoch: int, t0: float,
                   record: bool = True) -> BakeResult:
    layout.ensure_layout(store)
    base = resolve_base(defn, store, lin)
    key = bake_key(defn, base, patched, epoch, "embedded", revision(lin, patched))
    rec = recipe.cached(store, key)
    cached = rec is not None
    if rec is None:
        tree = checked_base_tree(pipeline, defn, lin, base, store)
        overlay = build_overlay(defn, patched, lin, defn.base.name, base.manifest_digest, tree)
        labels = image_labels(defn, lin, patched, base, epoch)
        created_by = (f"patchbake bake {defn.name}: overlay of {len(overlay.baked)} patched "
                      f"vLLM files + /opt/patchbake")
        manifest, cdigest, layer = _append(store, base.image, overlay, labels, epoch,
                                           created_by, defn.baked_env())
        layers = [*base.image.layers, layer]
        rec = build_record(defn, lin, patched, base, manifest, cdigest,
                           [*base.image.diff_ids, layer.digest], layers, overlay, labels,
                           epoch, "embedded", "overlay")
        save_cache(store.root / "bakes" / f"{key}.json", rec, warnings)
    if not record:
        return recipe.result(rec, "", cached, warnings, t0)
    path = records.write_record(pipeline.root, rec)
    manifest_digest = Digest.parse(rec["manifest_digest"])
    desc = Descriptor(rec["manifest_media_type"], manifest_digest,
                      store.blob_path(manifest_digest).stat().st_size)
    layout.add_ref(store, defn.name, desc)
    return recipe.result(rec, path.relative_to(pipeline.root).as_posix(), cached, warnings, t0)


__all__ = ["BakeResult", "bake_image", "bake_key", "latest_digest"]
