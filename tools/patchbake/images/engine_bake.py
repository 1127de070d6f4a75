"""Engine backend: render images/<template>.j2, ``docker build --network none``, then read
the result back with ``docker save`` into the store and record it.

Identities: the engine names the built image by its CONFIG digest (Image ID). It has no
manifest digest until pushed; the manifest digest recorded here is the one the store holds
for the saved image (docker-archive carries no manifest), and the registry's manifest
digest is known only after ``patchbake push``. Engine builds are NOT reproducible: the
builder stamps the build time into the config (``created``, history), so two builds of the
same inputs give two Image IDs (measured in bench/bench_image.py). Bakes are still keyed
by their inputs, so an unchanged input is not rebuilt.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import jinja2

from ..config import Lineage, Pipeline
from ..digest import Digest
from ..errors import EngineError, ImageError
from ..fsutil import read_input
from ..oci import engine, layout
from ..oci.archive import export_docker_archive, import_docker_archive
from ..oci.image import StoreBlobs, load_image
from ..oci.media import Descriptor
from ..store import Store
from . import recipe
from . import record as records
from .base import BaseImage, registry_repo, resolve_base
from ..config.images import Definition
from ..oci import registry
from .overlay import Overlay, Patched, build_overlay
from .recipe import (
    BakeResult,
    bake_key,
    build_record,
    checked_base_tree,
    image_labels,
    save_cache,
    wrapped_entrypoint,
)


def render(defn: Definition, mode: str, base_ref: str, overlay: Overlay,
           labels: dict[str, str], base_config: dict[str, Any] | None = None) -> str:
    entrypoint, cmd = wrapped_entrypoint(base_config or {})
    text = read_input(defn.template, f"{defn.path.name}: template", ImageError)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    try:
        tmpl = env.from_string(text.decode("utf-8", "replace"))
        return tmpl.render(mode=mode, base_ref=base_ref, builder=defn.builder,
                           torch_cuda_arch_list=defn.torch_cuda_arch_list,
                           max_jobs=defn.max_jobs, site_packages=defn.site_packages,
                           deleted=overlay.deleted, labels=labels, entrypoint=entrypoint,
                           cmd=cmd)
    except jinja2.TemplateError as exc:
        raise ImageError(f"{defn.template.name}: cannot render: {exc}") from None


def _engine_base(defn: Definition, base: BaseImage, store: Store) -> str:
    """A reference the engine can build FROM: the engine's own image, or the base loaded
    from the store (a docker-archive export of exactly the pinned manifest)."""
    if defn.base.source == "docker":
        return defn.base.name
    tag = f"patchbake-base/{defn.name}:{base.manifest_digest.short()}"
    tmp = store.tmpdir("engine-base")
    try:
        if defn.base.source == "registry" and not all(store.has(d.digest)
                                                      for d in base.image.layers):
            registry.pull(store, f"{registry_repo(defn.base.name)}@{defn.base.digest}",
                          platform=defn.base.platform)
        archive = export_docker_archive(store, base.manifest_digest, tmp / "base.tar", [tag])
        engine.load(archive)
    finally:
        store.discard(tmp)
    return tag


def _context(root: Path, overlay: Overlay, patched: Patched, mode: str, dockerfile: str) -> None:
    for e in overlay.entries:
        if e.kind != "file" or e.path.rpartition("/")[2].startswith(".wh."):
            continue
        rel = e.path
        dest = root / ("patchbake" + rel[len("opt/patchbake"):] if rel.startswith("opt/patchbake/")
                       else "overlay/" + rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(e.data if e.data is not None else e.source.read_bytes())  # type: ignore[union-attr]
        dest.chmod(e.mode)
    if mode == "build":
        shutil.copytree(patched.root, root / "src", symlinks=True)
    (root / "Dockerfile").write_text(dockerfile, encoding="utf-8")


def _ensure_in_engine(store: Store, rec: dict[str, object]) -> None:
    """A cached engine bake whose tag was removed from the engine is loaded back from the
    store (the same config digest, so the same Image ID) instead of being rebuilt."""
    eng = rec.get("engine")
    if not isinstance(eng, dict):
        return
    try:
        engine.inspect(str(eng["tag"]))
        return
    except EngineError:
        pass
    tmp = store.tmpdir("engine-reload")
    try:
        archive = export_docker_archive(store, Digest.parse(rec["manifest_digest"]),
                                        tmp / "image.tar",
                                        [str(eng["tag"])])
        engine.load(archive)
    finally:
        store.discard(tmp)


def bake_with_engine(pipeline: Pipeline, defn: Definition, lin: Lineage, patched: Patched,
                     store: Store, mode: str, warnings: list[str], epoch: int) -> BakeResult:
    t0 = time.monotonic()
    layout.ensure_layout(store)
    base = resolve_base(defn, store, lin)
    key = bake_key(defn, base, patched, epoch, f"engine-{mode}")
    rec = recipe.cached(store, key)
    cached = rec is not None
    if rec is None:
        base_ref = _engine_base(defn, base, store)  # (a registry base's layers come too)
        tree = checked_base_tree(pipeline, defn, lin, base, store)
        overlay = build_overlay(defn, patched, lin, defn.base.name, base.manifest_digest, tree)
        labels = image_labels(defn, lin, patched, base, epoch)
        ctx = store.tmpdir("engine-ctx")
        try:
            dockerfile = render(defn, mode, base_ref, overlay, labels, base.image.config)
            _context(ctx, overlay, patched, mode, dockerfile)
            built = engine.build(ctx, f"patchbake/{defn.name}:engine-{key[:12]}")
            archive = engine.save(built.tag, ctx / "image.tar")
            imp = import_docker_archive(store, archive)
        finally:
            store.discard(ctx)
        image = load_image(StoreBlobs(store), imp.manifest_digest)
        manifest = Descriptor(image.media_type, imp.manifest_digest, len(image.manifest_bytes))
        rec = build_record(defn, lin, patched, base, manifest, imp.config_digest,
                           list(image.diff_ids), list(image.layers), overlay, labels, epoch,
                           "engine", mode)
        rec["engine"] = {"image_id": built.image_id, "tag": built.tag,
                         "note": "image_id is the config digest; the manifest digest above "
                                 "is the store's (from docker save); a registry's is known "
                                 "after push", "reproducible": False}
        save_cache(store.root / "bakes" / f"{key}.json", rec, warnings)
    else:
        _ensure_in_engine(store, rec)
    path = records.write_record(pipeline.root, rec)
    manifest_digest = Digest.parse(rec["manifest_digest"])
    layout.add_ref(store, defn.name, Descriptor(rec["manifest_media_type"], manifest_digest,
                                                store.blob_path(manifest_digest).stat().st_size))
    res = recipe.result(rec, path.relative_to(pipeline.root).as_posix(), cached, warnings, t0)
    return res
