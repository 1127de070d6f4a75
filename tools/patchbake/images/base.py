"""Base sources: where a definition's pinned base comes from, checked against its digest.

A layer is appended to the base's manifest and config, but bake also reads the base's
layers (its installed ``vllm/`` tree binds it to the lineage and fills the full tree
manifest): they are copied from the source (OCI layout, docker-archive, engine) or pulled
from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Lineage
from ..digest import Digest
from ..errors import ImageError, IntegrityError
from ..oci import gojson
from ..oci.image import DirBlobs, Image, StoreBlobs, load_image, parse_json, read_checked
from ..oci.media import INDEX_TYPES
from ..store import Store
from ..config.images import Definition
from ..oci import engine
from ..oci import registry
from ..oci.archive import import_docker_archive
from .servingbase import find_serving_base, lock_of
from .standin import build_standin


@dataclass(frozen=True)
class BaseImage:
    image: Image
    name: str
    pinned: Digest  # the digest the definition pins
    index_digest: Digest | None  # when the pin names a multi-arch index
    source: str

    @property
    def manifest_digest(self) -> Digest:
        return self.image.manifest_digest


def _select_platform(index: dict, platform: str, where: str) -> Digest:  # type: ignore[type-arg]
    os_name, _, arch = platform.partition("/")
    for m in index.get("manifests") or []:
        p = m.get("platform") or {}
        if p.get("os") == os_name and p.get("architecture") == arch:
            return Digest.parse(m.get("digest"), f"{where}: the {platform} entry's digest",
                                ImageError)
    raise ImageError(f"{where} has no {platform} image")


def _check_platform(defn: Definition, chosen: Digest) -> None:
    want = defn.base.platform_digest
    if want and chosen != want:
        raise IntegrityError(f"{defn.path.name}: the index's {defn.base.platform} manifest is "
                             f"{chosen}, but base.platform_digest pins {want}")


def _copy_in(store: Store, blobs: DirBlobs, digest: Digest) -> None:
    if store.has(digest):
        return
    with blobs.open(digest) as f:
        store.put_stream(iter(lambda: f.read(1 << 20), b""), expected=digest)


def _from_layout(defn: Definition, store: Store) -> BaseImage:
    root = defn.base.path
    assert root is not None
    if not (root / "oci-layout").is_file():
        raise ImageError(f"{root} is not an OCI image layout (no oci-layout file)")
    blobs = DirBlobs(root)
    pinned = defn.base.digest
    top = parse_json(read_checked(blobs, pinned, None, "base"), f"{pinned}", gojson.MANIFEST)
    index_digest = None
    manifest = pinned
    if top.get("mediaType") in INDEX_TYPES or "manifests" in top:
        index_digest = pinned
        manifest = _select_platform(top, defn.base.platform, f"index {pinned}")
        _check_platform(defn, manifest)
        store.put_bytes(read_checked(blobs, pinned, None, "index"), expected=pinned)
    image = load_image(blobs, manifest)
    for d in image.layers:  # layers verified on copy; absent ones are fetched when needed
        if blobs.has(d.digest):
            _copy_in(store, blobs, d.digest)
    _copy_in(store, blobs, image.config_desc.digest)
    _copy_in(store, blobs, manifest)
    return BaseImage(image, defn.base.name, pinned, index_digest, "oci-layout")


def _from_archive(defn: Definition, store: Store, path: Path, engine_ids: tuple[Digest, ...] = ()
                  ) -> BaseImage:
    imp = import_docker_archive(store, path)
    pinned = defn.base.digest
    if pinned not in (imp.manifest_digest, imp.config_digest, *engine_ids):
        raise IntegrityError(f"{defn.path.name}: base {defn.base.name} in {path} has manifest "
                             f"{imp.manifest_digest} and config (image ID) {imp.config_digest}; "
                             f"the definition pins {pinned}")
    image = load_image(StoreBlobs(store), imp.manifest_digest)
    return BaseImage(image, defn.base.name, pinned, None, defn.base.source)


def _from_engine(defn: Definition, store: Store) -> BaseImage:
    image_id, repo_digests = engine.inspect(defn.base.name)
    pinned = defn.base.digest
    if pinned != image_id and pinned not in repo_digests:
        raise IntegrityError(f"engine image {defn.base.name} is {image_id} (repo digests: "
                             f"{', '.join(map(str, repo_digests)) or 'none'}); the definition "
                             f"pins {pinned}")
    tmp = store.tmpdir("engine-save")
    try:
        archive = tmp / "image.tar"
        engine.save(defn.base.name, archive)
        return _from_archive(defn, store, archive, (image_id, *repo_digests))
    finally:
        store.discard(tmp)


def registry_repo(name: str) -> str:
    """``[host[:port]/]repo`` of a base name, without its tag or digest (a host's port
    is not a tag: only the last path component can carry one)."""
    repo = name.split("@")[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":")[0]
    return repo


def _from_registry(defn: Definition, store: Store) -> BaseImage:
    # layers too: bake reads the base's vllm/ tree (lineage binding, full tree manifest)
    result = registry.pull(store, f"{registry_repo(defn.base.name)}@{defn.base.digest}",
                           layers=True, platform=defn.base.platform)
    if result.index_digest:
        _check_platform(defn, result.digest)
    image = load_image(StoreBlobs(store), result.digest)
    return BaseImage(image, defn.base.name, defn.base.digest, result.index_digest, "registry")


def _from_standin(defn: Definition, store: Store, lineage: Lineage) -> BaseImage:
    built = build_standin(store, lineage, defn.site_packages, variant=defn.base.variant,
                          base=defn.repo_root)
    if built.manifest.digest != defn.base.digest:
        raise IntegrityError(
            f"{defn.path.name}: the stand-in base built here is {built.manifest.digest}, but "
            f"the definition pins {defn.base.digest}",
            hint="the sdist or the stand-in format changed; check `patchbake image standin` "
                 "and update base.digest deliberately")
    image = load_image(StoreBlobs(store), built.manifest.digest)
    return BaseImage(image, defn.base.name, defn.base.digest, None, "standin")


def _from_lock(defn: Definition, store: Store, lineage: Lineage) -> BaseImage:
    lock, _ = lock_of(lineage)
    if lock.target.site_packages != defn.site_packages:
        raise ImageError(f"{defn.path.name}: site_packages {defn.site_packages} is not where "
                         f"the lock installs the wheels ({lock.target.site_packages})")
    built = find_serving_base(store, lineage)
    if built is None:
        raise ImageError(f"{defn.path.name}: the serving base of lineage {lineage.key} is not "
                         "in the store",
                         hint=f"build it with `patchbake image base --lineage {lineage.key}` "
                              "(downloads about 5 GB the first time)")
    if built.manifest.digest != defn.base.digest:
        raise IntegrityError(
            f"{defn.path.name}: the serving base built from {lineage.lock} is "
            f"{built.manifest.digest}, but the definition pins {defn.base.digest}",
            hint="the lock or the base's writers changed; check `patchbake image base` and "
                 "update base.digest deliberately")
    image = load_image(StoreBlobs(store), built.manifest.digest)
    return BaseImage(image, defn.base.name, defn.base.digest, None, "lock")


def resolve_base(defn: Definition, store: Store, lineage: Lineage) -> BaseImage:
    """Find the definition's base, check it against the pinned digest, put it in the store."""
    src = defn.base.source
    if src == "standin":
        return _from_standin(defn, store, lineage)
    if src == "lock":
        return _from_lock(defn, store, lineage)
    if src == "oci-layout":
        return _from_layout(defn, store)
    if src == "docker-archive":
        assert defn.base.path is not None
        if not defn.base.path.is_file():
            raise ImageError(f"{defn.path.name}: base.path {defn.base.path} does not exist")
        return _from_archive(defn, store, defn.base.path)
    if src == "docker":
        return _from_engine(defn, store)
    return _from_registry(defn, store)


def describe(base: BaseImage) -> dict[str, object]:
    return {"name": base.name, "digest": str(base.pinned),
            "manifest_digest": str(base.manifest_digest),
            "index_digest": None if base.index_digest is None else str(base.index_digest),
            "config_digest": str(base.image.config_desc.digest),
            "layers": len(base.image.layers)}

