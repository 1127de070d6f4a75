"""Image descriptions (manifests, indexes, configs, docker-archive ``manifest.json``) read
the way the engines' Go code reads them, or refused.

Every consumer of an image decodes these documents with Go's ``encoding/json`` into
structs, and that decoder matches an object key to a struct field case-insensitively
(Unicode simple folding: ``ſ`` is ``s``, the Kelvin sign ``K`` is ``k``), letting the last
of several matching keys win; Python's ``json`` reads exact keys only. A document where the
two readings could differ (``layers`` and ``Layers``, ``rootfſ``, a key twice) is refused
here, so that what verify reads is what the engines run. Map-typed objects (``Labels``,
``annotations``, ``ExposedPorts``, ``Volumes``) are exact-key in Go too and only refuse
exact duplicates. The Go sources are cited in docs/images.md ("How image descriptions are
read").

``load`` is the one reader of these documents in the package.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

from ..errors import ImageError, PatchbakeError, shown


# --- the Go types, as shapes: a struct's JSON field names, and what each field holds -----


# eq=False: a shape is hashed by identity (its field map is a dict), for _folded_fields
@dataclass(frozen=True, slots=True, eq=False)
class Struct:
    """A Go struct: its JSON field names (json tags, or the Go name where untagged)."""

    name: str
    fields: Mapping[str, Shape]

    def field_for(self, key: str) -> str | None:
        """The field Go's decoder assigns ``key`` to (exact name first, then folded)."""
        if key in self.fields:
            return key
        return _folded_fields(self).get(go_fold(key))


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Shape


@dataclass(frozen=True, slots=True)
class MapOf:
    value: Shape


# what a field holds; None: a scalar, or an empty struct
Shape: TypeAlias = Struct | ListOf | MapOf | None
_MAP = MapOf(None)  # map[string]string, map[string]struct{}

# opencontainers/image-spec specs-go/v1/descriptor.go Platform, plus distribution's
# manifestlist PlatformSpec ("features")
PLATFORM = Struct("platform", dict.fromkeys(
    ("architecture", "os", "os.version", "os.features", "variant", "features")))
# image-spec Descriptor; docker/distribution Descriptor is a subset
DESCRIPTOR = Struct("descriptor", {
    "mediaType": None, "digest": None, "size": None, "urls": None, "annotations": _MAP,
    "data": None, "platform": PLATFORM, "artifactType": None})
# image-spec Manifest and Index (specs-go/v1/{manifest,index}.go, specs-go/versioned.go),
# distribution's schema2/ocischema/manifestlist, and containerd's unknownDocument (which
# every pulled or imported manifest is decoded into first: core/images/image.go): one shape,
# since a consumer may decode a manifest as an index or the other way round
MANIFEST = Struct("manifest", {
    "schemaVersion": None, "mediaType": None, "artifactType": None, "config": DESCRIPTOR,
    "layers": ListOf(DESCRIPTOR), "manifests": ListOf(DESCRIPTOR), "subject": DESCRIPTOR,
    "annotations": _MAP, "fsLayers": None})
# docker-image-spec HealthcheckConfig / moby api/types/container HealthConfig
_HEALTHCHECK = Struct("Healthcheck", dict.fromkeys(
    ("Test", "Interval", "Timeout", "StartPeriod", "StartInterval", "Retries")))
# image-spec ImageConfig, docker-image-spec DockerOCIImageConfig, moby container.Config
_RUN_CONFIG = Struct("container config", {
    **dict.fromkeys(("Hostname", "Domainname", "User", "AttachStdin", "AttachStdout",
                     "AttachStderr", "Tty", "OpenStdin", "StdinOnce", "Env", "Cmd",
                     "ArgsEscaped", "Image", "WorkingDir", "Entrypoint", "NetworkDisabled",
                     "MacAddress", "OnBuild", "StopSignal", "StopTimeout", "Shell")),
    "ExposedPorts": _MAP, "Volumes": _MAP, "Labels": _MAP, "Healthcheck": _HEALTHCHECK})
_ROOTFS = Struct("rootfs", dict.fromkeys(("type", "diff_ids")))
_HISTORY = Struct("history entry", dict.fromkeys(
    ("created", "created_by", "author", "comment", "empty_layer")))
# image-spec Image (config.go) and moby's image.Image + V1Image (daemon/internal/image)
CONFIG = Struct("image config", {
    **dict.fromkeys(("created", "author", "architecture", "variant", "os", "os.version",
                     "os.features", "id", "parent", "comment", "container",
                     "docker_version", "Size")),
    "config": _RUN_CONFIG, "container_config": _RUN_CONFIG, "rootfs": _ROOTFS,
    "history": ListOf(_HISTORY)})
# moby image/tarexport manifestItem: the docker-archive manifest.json is a list of these
ARCHIVE_MANIFEST = ListOf(Struct("manifest.json entry", {
    **dict.fromkeys(("Config", "RepoTags", "Layers", "Parent")),
    "LayerSources": MapOf(DESCRIPTOR)}))


# --- Go's folding ---------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _fold_rune(c: str) -> str:
    """The representative of ``c``'s simple case-folding orbit (unicode.SimpleFold):
    CaseFolding's C/S mapping, so U+017F and U+212A fold onto ASCII ``s`` and ``k``, and
    U+0130/U+0131 (no simple folding) onto nothing but themselves."""
    folded = c.casefold()
    if len(folded) != 1:  # a full (F) folding only: take the simple lower-case mapping
        folded = c.lower() if len(c.lower()) == 1 else c
    return folded.upper() if folded.isascii() else folded


def go_fold(key: str) -> str:
    """Equal for two keys exactly when Go's ``bytes.EqualFold`` says they are
    (encoding/json fold.go ``foldName``)."""
    if key.isascii():
        return key.upper()
    return "".join(_fold_rune(c) for c in key)


@lru_cache(maxsize=None)
def _folded_fields(shape: Struct) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in shape.fields:
        clash = out.setdefault(go_fold(name), name)
        assert clash == name, f"{shape.name}: fields {clash} and {name} fold alike"
    return out


# --- the loader ----------------------------------------------------------------------


class _Duplicated(dict[str, Any]):
    """An object in which a key appeared twice (marked here, refused with its path by
    ``_walk``, which knows where the object is)."""

    key = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _Duplicated(obj)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    return marked


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")  # Go's decoder rejects NaN/Infinity


_SURROGATE = re.compile("[\ud800-\udfff]")


def load(data: bytes, what: str, shape: Shape, *,
         error: type[PatchbakeError] = ImageError) -> Any:
    """``data`` decoded as one JSON document of ``shape``; ``error`` for bytes that are
    not JSON, ImageError for a document Go's decoder would read differently."""
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_pairs,
                         parse_constant=_constant)
    except (ValueError, UnicodeDecodeError) as exc:  # Go: no BOM, no UTF-16, no NaN
        raise error(f"{what} is not JSON the engines read (not valid JSON: {exc})") from None
    except RecursionError:
        raise error(f"{what} is JSON nested too deeply to read") from None
    _walk(doc, shape, what, "", surrogates=b"\\u" in data)
    return doc


def _where(path: str) -> str:
    return f"the object at {path}" if path else "the top-level object"


def _refuse(what: str, why: str) -> ImageError:
    return ImageError(f"{what}: {why}; Go's encoding/json (the engines) and this reader would "
                      "read different values, refusing the description")


def _walk(doc: Any, shape: Shape, what: str, path: str, *, surrogates: bool) -> None:
    if isinstance(doc, list):
        item = shape.item if isinstance(shape, ListOf) else None
        for i, x in enumerate(doc):
            _walk(x, item, what, f"{path}[{i}]", surrogates=surrogates)
    elif isinstance(doc, dict):
        _walk_object(doc, shape, what, path, surrogates=surrogates)
    elif surrogates and isinstance(doc, str) and _SURROGATE.search(doc):
        raise _refuse(what, f"a string at {path or 'the top level'} holds a lone UTF-16 "
                            "surrogate escape (Go reads U+FFFD there)")


def _walk_object(doc: dict[str, Any], shape: Shape, what: str, path: str, *,
                 surrogates: bool) -> None:
    if isinstance(doc, _Duplicated):
        raise _refuse(what, f"key {shown(doc.key)} appears twice in {_where(path)} (Go takes the "
                            "last)")
    if isinstance(shape, Struct):
        _check_struct(doc, shape, what, path)
    for key, value in doc.items():
        if surrogates and _SURROGATE.search(key):
            raise _refuse(what, f"key {shown(key)} in {_where(path)} holds a lone UTF-16 surrogate "
                                "escape (Go reads U+FFFD there)")
        _walk(value, _child(shape, key), what, f"{path}.{key}" if path else key,
              surrogates=surrogates)


def _child(shape: Shape, key: str) -> Shape:
    """The shape of ``key``'s value: a struct field's (matched as Go matches it), a map's
    values; None (no struct rules) for keys Go ignores."""
    if isinstance(shape, MapOf):
        return shape.value
    if isinstance(shape, Struct):
        field = shape.field_for(key)
        return shape.fields[field] if field else None
    return None


def _check_struct(doc: dict[str, Any], shape: Struct, what: str, path: str) -> None:
    """Go's decoder assigns a key to the field of that exact name, else to the field whose
    name folds alike; an unknown key is ignored. Refused: a key Go assigns to a field not
    spelt so, and two keys Go reads as one."""
    seen: dict[str, str] = {}
    for key in doc:
        folded = go_fold(key)
        if folded in seen:
            raise _refuse(what, f"keys {shown(seen[folded])} and {shown(key)} in {_where(path)} "
                                f"({shape.name}) are one key to Go (case-insensitive, the "
                                "last wins)")
        seen[folded] = key
        field = shape.field_for(key)
        if field is not None and field != key:
            raise _refuse(what, f"key {shown(key)} in {_where(path)} ({shape.name}) is the field "
                                f"{shown(field)} to Go (case-insensitive match)")


__all__ = ["ARCHIVE_MANIFEST", "CONFIG", "DESCRIPTOR", "MANIFEST", "PLATFORM", "Shape",
           "Struct", "go_fold", "load"]
