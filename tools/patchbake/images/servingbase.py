"""The serving base: a lineage's lock built into an OCI image in the store, no daemon.

``build_serving_base`` fetches every artifact the lock names (each checked against its
sha256, sources/artifacts.py), bootstraps the Debian root filesystem with mmdebstrap,
installs the wheels as pip would (images/wheelinstall.py) and writes five layers with our
own tar writer (images/baselayers.py), then an OCI config (PATH, LANG, the lock's digest,
the lineage, the upstream pin and vLLM's version as labels, ``vllm serve`` as upstream's
image runs it), a manifest and a ref ``serving-base/vllm-<version>``.

Every byte is a function of the lock and the writers' versions: two fresh stores give the
same manifest digest, whatever HOME, TZ or umask. A base is remembered under
``bakes/servingbase-<key>.json``, the key being the lock's digest and those versions; the
base source ``lock`` of an image definition finds it there (``find_serving_base``).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timezone
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..config import Lineage
from ..digest import Digest
from ..errors import ConfigError
from ..fsutil import cache_write, canonical_json, sha256_bytes
from ..oci import layout
from ..oci.media import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST, Descriptor
from ..oci.tarwriter import FORMAT as TAR_FORMAT
from ..sources import artifacts, lockfile
from ..store import Store
from . import baselayers, rootfs, wheelinstall
from .baselayers import Layer
from .standin import PATH_ENV
from .wheelinstall import Conflict, Scheme

VERSION = "patchbake-servingbase/1"
ENTRYPOINT = ["vllm", "serve"]  # upstream's vllm/vllm-openai image runs this

Step = Callable[[str], None]


def _quiet(_: object) -> None:
    pass


@dataclass(frozen=True)
class ServingBase:
    manifest: Descriptor
    config_digest: Digest
    lock_digest: Digest
    layers: tuple[Layer, ...]
    conflicts: tuple[Conflict, ...]
    record_fixed: tuple[str, ...]  # "project: member" whose wheel RECORD row was wrong
    cached: bool
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"digest": str(self.manifest.digest), "config_digest": str(self.config_digest),
                "lock_digest": str(self.lock_digest), "cached": self.cached,
                "size": sum(layer.descriptor.size for layer in self.layers),
                "layers": [layer.to_json() for layer in self.layers],
                "conflicts": [{"path": c.path, "kept": c.kept, "dropped": c.dropped}
                              for c in self.conflicts],
                "record_fixed": list(self.record_fixed),
                "seconds": round(self.seconds, 3)}


def lock_of(lineage: Lineage) -> tuple[lockfile.Lock, Digest]:
    if lineage.lock is None:
        raise ConfigError(f"pipeline.yaml: lineage '{lineage.key}' names no lock file",
                          hint=f"add `lock: images/locks/vllm-{lineage.upstream.version}.lock`"
                               " to the lineage and run `patchbake lock`")
    return lockfile.load(lineage.lock)


def base_key(lineage: Lineage, lock_digest: Digest) -> str:
    return sha256_bytes(canonical_json({
        "v": VERSION, "tar": TAR_FORMAT, "wheels": wheelinstall.VERSION,
        "rootfs": rootfs.VERSION, "lock": str(lock_digest), "lineage": lineage.key,
        "pin": lineage.upstream.pin}))


def _record_path(store: Store, key: str) -> Path:
    return store.root / "bakes" / f"servingbase-{key}.json"


def find_serving_base(store: Store, lineage: Lineage) -> ServingBase | None:
    """The base built from the lineage's lock, when it is in the store."""
    _, digest = lock_of(lineage)
    try:
        rec = json.loads(_record_path(store, base_key(lineage, digest)).read_bytes())
        desc = Descriptor(OCI_MANIFEST, Digest.parse(rec["digest"]), int(rec["manifest_size"]))
        layers = tuple(Layer(x["group"], Descriptor(OCI_LAYER_TAR, Digest.parse(x["digest"]),
                                                    int(x["size"])),
                             int(x["files"]), int(x["wheels"]), True) for x in rec["layers"])
        conflicts = tuple(Conflict(c["path"], c["kept"], c["dropped"])
                          for c in rec["conflicts"])
        config = Digest.parse(rec["config_digest"])
        fixed = tuple(str(x) for x in rec["record_fixed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(store.has(d) for d in (desc.digest, config,
                                      *(x.descriptor.digest for x in layers))):
        return None
    return ServingBase(desc, config, digest, layers, conflicts, fixed, True, 0.0)


def _os_layer(store: Store, lock: lockfile.Lock, work: Path, step: Step,
              advance: baselayers.Advance) -> Layer:
    key = baselayers.layer_key("os", {"rootfs": rootfs.VERSION, "os": lock.to_json()["os"]},
                               lock.source_date_epoch)
    found = baselayers.cached_layer(store, "os", key, 0)
    if found is not None:
        return found
    tarball = work / "rootfs.tar"
    artifacts.build_rootfs(store, lock, tarball, work, step)
    with rootfs.opened(tarball) as tf:
        plan = rootfs.plan_rootfs(tf)
        step(f"writing the root filesystem layer ({len(plan.entries)} entries; "
             f"{len(plan.dropped)} files and {plan.devices} device nodes left out)")
        layer = baselayers.write(store, "os", key, plan.entries, lock.source_date_epoch, 0,
                                 advance)
    tarball.unlink()
    return layer


def _wheel_layers(store: Store, lock: lockfile.Lock, work: Path, step: Step,
                  advance: baselayers.Advance
                  ) -> tuple[list[Layer], list[Conflict], list[str]]:
    blobs = artifacts.fetch_wheels(store, lock, work, step)
    scheme = Scheme.debian_local(lock.target.site_packages, lock.target.python)
    order = baselayers.install_order(lock.wheels)
    layers = []
    with ExitStack() as stack:
        plans = baselayers.plan_wheels(stack, order, blobs, scheme)
        conflicts = baselayers.conflicts_of(plans, order)
        fixed = [f"{w.name}: {m}" for w in order for m in plans[w.name].record_fixed]
        for group in baselayers.GROUPS[1:]:
            wheels = [w for w in order if baselayers.group_of(w.name) == group]
            key = baselayers.layer_key(group, {"scheme": scheme.__dict__, "wheels": [
                str(w.sha256) for w in wheels]}, lock.source_date_epoch)
            found = baselayers.cached_layer(store, group, key, len(wheels))
            if found is None:
                step(f"writing the {group} layer ({len(wheels)} wheels)")
                entries, _ = wheelinstall.merge([plans[w.name] for w in wheels])
                found = baselayers.write(store, group, key, entries, lock.source_date_epoch,
                                         len(wheels), advance)
            layers.append(found)
    return layers, conflicts, fixed


def _config(lineage: Lineage, lock: lockfile.Lock, lock_digest: Digest,
            layers: list[Layer]) -> dict[str, Any]:
    created = datetime.fromtimestamp(lock.source_date_epoch, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    vllm = lock.wheel("vllm").version
    return {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"Env": [PATH_ENV, "LANG=C.UTF-8"], "Entrypoint": ENTRYPOINT,
                   "WorkingDir": "/", "Labels": {
                       "org.opencontainers.image.title": f"patchbake serving base (vllm {vllm})",
                       "org.opencontainers.image.version": vllm,
                       "org.opencontainers.image.created": created,
                       "dev.patchbake.servingbase": VERSION,
                       "dev.patchbake.lock.digest": str(lock_digest),
                       "dev.patchbake.lineage": lineage.key,
                       "dev.patchbake.upstream.pin": lineage.upstream.pin,
                       "dev.patchbake.vllm.version": vllm}},
        "rootfs": {"type": "layers", "diff_ids": [str(x.descriptor.digest) for x in layers]},
        "history": [{"created": created,
                     "created_by": f"{VERSION}: {baselayers.GROUP_TITLES[x.group]}"}
                    for x in layers],
    }


def build_serving_base(store: Store, lineage: Lineage, *, step: Step = _quiet,
                       advance: baselayers.Advance = _quiet) -> ServingBase:
    """Build (or find) the serving base of ``lineage``'s lock in ``store``."""
    t0 = time.monotonic()
    found = find_serving_base(store, lineage)
    if found is not None:
        return replace(found, seconds=time.monotonic() - t0)
    lock, lock_digest = lock_of(lineage)
    layout.ensure_layout(store)
    work = store.tmpdir("servingbase")
    try:
        layers = [_os_layer(store, lock, work, step, advance)]
        wheel_layers, conflicts, fixed = _wheel_layers(store, lock, work, step, advance)
        layers += wheel_layers
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cdigest, csize, _ = layout.put_json(store, _config(lineage, lock, lock_digest, layers))
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": str(cdigest), "size": csize},
                "layers": [x.descriptor.to_json() for x in layers]}
    mdigest, msize, _ = layout.put_json(store, manifest)
    desc = Descriptor(OCI_MANIFEST, mdigest, msize)
    layout.add_ref(store, f"serving-base/vllm-{lineage.upstream.version}", desc)
    result = ServingBase(desc, cdigest, lock_digest, tuple(layers), tuple(conflicts),
                         tuple(fixed), False, time.monotonic() - t0)
    record = {**result.to_json(), "manifest_size": msize}
    cache_write(_record_path(store, base_key(lineage, lock_digest)), canonical_json(record))
    return result
