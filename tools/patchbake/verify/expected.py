"""What verify checks an image against, taken from the repository and never from the image.

The image definition (named, or found through the image record that names the image's
digest), its record, the pinned base's layers and config, and the start-up wrapper bake
puts in front of the base's entrypoint. The image's own labels and records are compared
with these and never obeyed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..config import Pipeline
from ..digest import Digest
from ..errors import ImageError, shown
from ..images import definition as definitions
from ..config.images import Definition
from ..images import record as records
from ..images.overlay import ENTRYPOINT_PATH, entrypoint_bytes
from ..images.overlay import IDENTITY_PATH
from ..images.recipe import wrapped_entrypoint
from ..images.record import ImageRecord
from ..images.refs import Resolved
from ..oci.image import StoreBlobs, load_image
from ..oci.view import View
from ..store import Store


@dataclass(frozen=True)
class Expected:
    """What verify takes from the repository -- the image definition and, when the image
    was recorded, its image record -- and never from the image under test."""

    definition: Definition
    record: ImageRecord | None
    base_diff_ids: tuple[Digest, ...]
    base_config: dict[str, Any] | None
    how: str  # how the definition was found

    @property
    def sp(self) -> str:
        return self.definition.sp_rel


def find_record(pipeline: Pipeline, image: Any) -> ImageRecord | None:
    """The image record naming this manifest digest (or, for an engine's re-export that
    keeps the config but not the manifest, this config digest)."""
    return records.find_for_image(pipeline.root, pipeline.images, image.manifest_digest,
                                  image.config_desc.digest)


def expected_for(pipeline: Pipeline, store: Store, res: Resolved, definition: str | None,
                 site_packages: str | None = None) -> Expected:
    """The definition (and record) ``res`` is verified against; refuses to guess."""
    rec = find_record(pipeline, res.image)
    named = res.definition or definition
    if rec is not None and named is not None and rec.definition != named:
        raise ImageError(f"{res.ref} ({res.image.manifest_digest}) is recorded as a bake of "
                         f"'{rec.definition}', not of '{named}'")
    name = named or (rec.definition if rec else None)
    if name is None:
        raise ImageError(f"cannot tell which image definition {res.ref} "
                         f"({res.image.manifest_digest}) is verified against: no image record "
                         "names it", hint="name it: `patchbake verify REF --definition NAME`")
    defn = definitions.load(pipeline, name)
    if site_packages and site_packages.strip("/") != defn.sp_rel:
        raise ImageError(f"--site-packages {site_packages} disagrees with definition "
                         f"'{name}' ({defn.site_packages}); verify reads the definition's")
    how = (f"definition '{name}'" + (" (named)" if named else " (from the image record)")
           + (f", record {rec.manifest_digest}" if rec else ", no image record"))
    recorded = (rec.doc.get("base") or {}).get("manifest_digest") if rec else None
    base_digest = Digest.parse(recorded, f"{how}: base.manifest_digest", ImageError) \
        if recorded else defn.base.platform_digest or defn.base.digest
    base = base_image(store, base_digest, name)
    if rec is not None:
        diff_ids = tuple(Digest.parse(x.get("diff_id"), f"{how}: a base layer's diff_id",
                                      ImageError)
                         for x in rec.doc.get("layers") or [] if x.get("from") == "base")
    else:
        diff_ids = tuple(base.diff_ids) if base is not None else ()
    if not diff_ids:
        raise ImageError(f"definition '{name}': its base {base_digest} is not in the store, so "
                         "the layers above the base cannot be told",
                         hint=f"run `patchbake bake {name}` (it fetches the base) first")
    return Expected(defn, rec, diff_ids, base.config if base is not None else None, how)


def base_image(store: Store, digest: Digest, name: str) -> Any:
    if not store.has(digest):
        return None
    try:
        return load_image(StoreBlobs(store), digest)
    except ImageError:
        return None  # an index: the record's platform manifest is used instead


def label_checks(res: Resolved, exp: Expected) -> list[str]:
    """Labels are the image's claims about itself: compared with the definition, never
    obeyed."""
    labels = res.image.labels
    problems = []
    want = {"dev.patchbake.site-packages": exp.definition.site_packages,
            "dev.patchbake.definition": exp.definition.name}
    for key, value in want.items():
        if key in labels and labels[key] != value:
            problems.append(f"label {key}={shown(labels[key])} disagrees with the definition "
                            f"({shown(value)})")
    if exp.record is not None and exp.record.site_packages != \
            exp.definition.site_packages:
        problems.append(f"the image record says site-packages {exp.record.site_packages}"
                        f", the definition {exp.definition.site_packages}")
    n = len(exp.base_diff_ids)
    if tuple(res.image.diff_ids[:n]) != exp.base_diff_ids:
        problems.append(f"the image's first {n} layers are not the base of definition "
                        f"'{exp.definition.name}' (diff_ids differ)")
    return problems


def site_packages_for(res: Resolved, pipeline: Pipeline | None, given: str | None,
                   definition: str | None = None) -> str:
    """For materialise: the site-packages of the image's definition (found by name, by
    its image record, or as a definition's pinned base), else the caller's; never the
    image's own label."""
    sp = None
    if pipeline is not None:
        rec = find_record(pipeline, res.image)
        name = res.definition or definition or (rec.definition if rec else None)
        if name is not None:
            sp = definitions.load(pipeline, name).sp_rel
        else:
            bases = {definitions.load(pipeline, n).sp_rel for n in sorted(pipeline.images)
                     if res.image.manifest_digest in base_digests(pipeline, n)}
            sp = bases.pop() if len(bases) == 1 else None
    if sp is not None and given and given.strip("/") != sp:
        raise ImageError(f"--site-packages {given} disagrees with the image definition (/{sp})")
    if sp is None and not given:
        raise ImageError(f"cannot tell where {res.ref} installs vllm: no image definition or "
                         "record names it (its own labels are not trusted)",
                         hint="pass --site-packages, or run in the repository that baked it")
    return sp or str(given).strip("/")


def base_digests(pipeline: Pipeline, name: str) -> set[Digest]:
    d = definitions.load(pipeline, name)
    return {x for x in (d.base.digest, d.base.platform_digest) if x}


def wrapped(base_config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The base config with the entrypoint and cmd bake gives the image."""
    if base_config is None:
        return None

    entry, cmd = wrapped_entrypoint(base_config)
    inner = {**(base_config.get("config") or {}), "Entrypoint": entry}
    inner.pop("Cmd", None)
    return {"config": {**inner, **({"Cmd": cmd} if cmd else {})}}


def wrapper_checks(view: View, res: Resolved) -> list[str]:
    """An entrypoint through the start-up wrapper runs it first: it must be this tool's."""
    entry = (res.image.config.get("config") or {}).get("Entrypoint") or []
    if entry[:1] != [ENTRYPOINT_PATH]:
        return []
    got = view.files.get(ENTRYPOINT_PATH.lstrip("/"))
    want = hashlib.sha256(entrypoint_bytes()).hexdigest()
    if got is None or got.kind != "file" or got.sha256 != want:
        return [(f"{ENTRYPOINT_PATH} (the image's entrypoint) is not the start-up wrapper "
                 f"this patchbake bakes (sha256:{want})")]
    return []


def record_checks(view: View, exp: Expected) -> list[str]:
    """The in-image identity record must be the one the repository's image record names."""
    want = exp.record.doc.get("identity_sha256") if exp.record else None
    got = view.files.get(IDENTITY_PATH.lstrip("/"))
    if want and (got is None or got.sha256 != want):
        return [(f"{IDENTITY_PATH} is not the identity record the image record names "
                 f"(sha256:{want})")]
    return []


def recorded_definition(pipeline: Pipeline, manifest_digest: Digest) -> str | None:
    """The definition whose image record names this manifest digest, if any."""
    for name in sorted(pipeline.images):
        if records.record_path(pipeline.root, name, manifest_digest).is_file():
            return name
    return None


def image_definition(pipeline: Pipeline, *, definition: str | None = None,
                     manifest_digest: Digest | None = None) -> Definition | None:
    """The definition an image was baked from: the one named, else the one whose record
    names its digest; None when neither is a definition of ``pipeline`` (its lineage is then
    the requested or default one, see Pipeline.lineage_for)."""
    name = definition or (recorded_definition(pipeline, manifest_digest)
                          if manifest_digest else None)
    return definitions.load(pipeline, name) if name and name in pipeline.images else None
