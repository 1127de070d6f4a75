"""What both bake backends share: the bake key and cache, the image's labels and
entrypoint, the record a bake writes and the result it returns.

The embedded backend (``patchbake.bake``) and the engine backend (``images.engine_bake``)
both import from here, so neither imports the other's module.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import Lineage, Pipeline
from ..digest import Digest
from ..errors import PatchbakeError
from ..fsutil import canonical_json, sha256_bytes
from ..oci.media import Descriptor
from ..oci.tarwriter import FORMAT as TAR_FORMAT
from ..store import Store
from . import record as records
from .base import BaseImage, describe
from ..config.images import Definition
from ..patchset.sourcerec import read_source
from .overlay import ENTRYPOINT_PATH, Overlay, Patched, entrypoint_bytes, verifier_bytes
from .tree import BaseTree, base_tree, check_lineage, pristine_package

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
    digest: Digest  # manifest digest (what registries, signatures and evidence name)
    config_digest: Digest  # config digest (the engine's "Image ID")
    layers: tuple[Digest, ...]  # layer digests, base first, ours last
    diff_ids: tuple[Digest, ...]
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
        return {"image": self.image, "digest": str(self.digest),
                "config_digest": str(self.config_digest),
                "layers": [str(d) for d in self.layers], "record": self.record, "cached": self.cached,
                "mode": self.mode, "backend": self.backend, "baked_files": self.baked_files,
                "base": self.base, "warnings": list(self.warnings),
                "docker_archive": self.docker_archive, **self.extra}


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def revision(lineage: Lineage, patched: Patched) -> str:
    """The fork commit the SOURCE record names as this patch's source (read through its
    parser: a forced export also names the previous commit), else the patch sha256. A
    SOURCE that records another patch does not describe this one: the patch sha256 then."""
    rec = read_source(lineage.source_record)
    if rec is not None and rec.commit and rec.patch_sha256 == patched.patch_sha256:
        return rec.commit
    return str(Digest.from_hex(patched.patch_sha256))


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
        "org.opencontainers.image.base.digest": str(base.manifest_digest),
        "dev.patchbake.base.pin": str(defn.base.digest),
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
        "dev.patchbake.upstream.tree-digest": str(patched.pristine_digest),
        "dev.patchbake.patched-tree.digest": str(patched.tree_digest),
        "dev.patchbake.site-packages": defn.site_packages,
        "dev.patchbake.identity": "/opt/patchbake/identity.json",
    }
    labels.update(dict(defn.labels))
    return labels


def bake_key(defn: Definition, base: BaseImage, patched: Patched, epoch: int,
             backend: str, revision: str | None = None) -> str:
    # ``revision`` (the SOURCE record's fork commit) is baked into a label, so it keys the
    # cache too: without it a cached bake could differ from a fresh one of the same inputs
    return sha256_bytes(canonical_json({
        "format": BAKE_FORMAT, "writers": WRITERS, "definition": defn.fingerprint,
        # the name is in the image's labels and its record: two definitions with the same
        # content are two images, never one cached bake found under the other's name
        "name": defn.name,
        "base": str(base.manifest_digest), "patch": patched.patch_sha256,
        "files": patched.files_sha256, "tree": str(patched.tree_digest),
        "pristine": str(patched.pristine_digest), "epoch": epoch, "backend": backend,
        "verifier": hashlib.sha256(verifier_bytes()).hexdigest(),
        "entrypoint": hashlib.sha256(entrypoint_bytes()).hexdigest(),
        "lineage": defn.lineage,
        **({"revision": revision} if revision is not None else {}),
    }))


def build_record(defn: Definition, lineage: Lineage, patched: Patched, base: BaseImage,
                 manifest: Descriptor, config_digest: Digest, diff_ids: list[Digest],
                 layers: list[Descriptor], overlay: Overlay, labels: dict[str, str],
                 epoch: int, backend: str, mode: str) -> dict[str, Any]:
    return {
        "format": records.RECORD_FORMAT,
        "definition": defn.name,
        "backend": backend,
        "mode": mode,
        "manifest_digest": str(manifest.digest),
        "manifest_media_type": manifest.media_type,
        "config_digest": str(config_digest),
        "identities": {
            "manifest_digest": "what registries, signatures and evidence name",
            "config_digest": "the Docker engine's Image ID (classic store)",
            "diff_id": "sha256 of a layer's uncompressed tar",
        },
        "layers": [{"digest": str(d.digest), "diff_id": str(diff_ids[i]), "size": d.size,
                    "media_type": d.media_type, "from": "base" if i < len(base.image.layers)
                    else "patchbake"} for i, d in enumerate(layers)],
        "base": describe(base),
        "patch": {"name": lineage.name, "sha256": patched.patch_sha256},
        "files_sha256": patched.files_sha256,
        "upstream": {"pin": lineage.upstream.pin, "version": lineage.upstream.version,
                     "tree_digest": str(patched.pristine_digest)},
        "patched_tree_digest": str(patched.tree_digest),
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


def save_cache(path: Path, doc: dict[str, Any], warnings: list[str] | None = None) -> None:
    """Write a bake-cache entry: temp file + rename, no fsync. It is a cache (a lost or torn
    entry only means a re-bake, and entries are checked against the store before use), so
    it does not pay for durability; records and blobs do. A full or read-only disk skips
    it with a warning (when ``warnings`` is given) instead of failing the bake."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(canonical_json(doc))
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if warnings is None:
            raise
        warnings.append(f"the bake cache entry {path.name} was not written "
                        f"({exc.strerror}); the next bake redoes the work")


def cached(store: Store, key: str) -> dict[str, Any] | None:
    path = store.root / "bakes" / f"{key}.json"
    try:
        rec = json.loads(path.read_bytes())
        needed = [Digest.parse(d) for d in (rec["manifest_digest"], rec["config_digest"],
                                            rec["layers"][-1]["digest"])]
    except (OSError, ValueError, KeyError, IndexError, TypeError, PatchbakeError):
        return None  # a torn or foreign entry is a cache miss: bake again
    if not all(store.has(d) for d in needed):
        return None
    return dict(rec)


def result(rec: dict[str, Any], rec_path: str, cached: bool, warnings: list[str],
            t0: float) -> BakeResult:
    return BakeResult(
        image=rec["definition"], digest=Digest.parse(rec["manifest_digest"]),
        config_digest=Digest.parse(rec["config_digest"]),
        layers=tuple(Digest.parse(x["digest"]) for x in rec["layers"]),
        diff_ids=tuple(Digest.parse(x["diff_id"]) for x in rec["layers"]), record=rec_path, cached=cached,
        mode=rec["mode"], backend=rec["backend"], baked_files=len(rec["baked_files"]),
        base=rec["base"], warnings=tuple(warnings), seconds=round(time.monotonic() - t0, 3))
