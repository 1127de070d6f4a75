"""The store root doubles as an OCI image layout.

``<store>/oci-layout`` and ``<store>/index.json`` sit beside ``<store>/blobs/sha256/`` so
every baked image (manifest, config, layers) lives content-addressed in the store as plain
blobs, and any OCI tool can read the store directory as a layout. Manifests, configs and
layers are ordinary blobs: the registry client pushes them with ``store.open_blob(digest)``
and pulls them with ``store.put_stream(chunks, expected=digest)``.

Public functions (used by the registry helper and the CLI):

- ``ensure_layout(store)``                  write ``oci-layout`` / empty ``index.json``
- ``put_json(store, obj) -> Descriptor-ish`` store canonical JSON, return (digest, size, bytes)
- ``read_verified(store, digest, size=None) -> bytes``  blob bytes, hash (and size) checked
- ``add_ref(store, name, descriptor)``       name a manifest in index.json (atomic, locked)
- ``lookup(store, ref) -> Descriptor``       a name or a manifest Digest -> manifest descriptor
- ``refs(store) -> dict[str, Descriptor]``   every named manifest

Names are free-form strings stored as ``org.opencontainers.image.ref.name``; a name points
at one manifest, and ``add_ref`` moves it (the store is a local cache; tags that must never
move live in registries and are guarded there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import ImageError, IntegrityError, StoreError
from ..fsutil import atomic_write, canonical_json, read_optional
from ..store import Store
from . import gojson
from .image import Blobs, parse_json, read_checked
from .media import INDEX_TYPES, MANIFEST_TYPES, OCI_INDEX, OCI_MANIFEST, Descriptor

REF_NAME = "org.opencontainers.image.ref.name"
LAYOUT_VERSION = b'{"imageLayoutVersion":"1.0.0"}'
INDEX_LOCK = "oci-index"


def ensure_layout(store: Store) -> None:
    marker = store.root / "oci-layout"
    if not marker.exists():
        atomic_write(marker, LAYOUT_VERSION)
    if not (store.root / "index.json").exists():
        with store.lock(INDEX_LOCK):
            if not (store.root / "index.json").exists():
                _write_index(store, [])


def put_json(store: Store, obj: Any) -> tuple[Digest, int, bytes]:
    """Store ``obj`` as canonical JSON; return (digest, size, bytes)."""
    data = canonical_json(obj)
    return store.put_bytes(data), len(data), data


def read_verified(store: Store, digest: Digest, size: int | None = None) -> bytes:
    """Read a blob and re-hash it: a blob edited in place in the store is caught here."""
    data = store.read_blob(digest)
    got = Digest.of(data)
    if got != digest:
        raise IntegrityError(f"store blob {digest} now hashes to {got}: the store "
                             "was modified", hint="run `patchbake store fsck` and re-bake")
    if size is not None and len(data) != size:
        raise IntegrityError(f"blob {digest} is {len(data)} bytes, its descriptor says {size}")
    return data


def _read_index(store: Store) -> list[dict[str, Any]]:
    path = store.root / "index.json"
    data = read_optional(path, "store index", StoreError)
    if data is None:
        return []
    try:
        doc = gojson.load(data, str(path), gojson.MANIFEST, error=StoreError)
    except StoreError as exc:
        raise StoreError(exc.message, hint="remove it; baked images stay in blobs/ and can be "
                                           "re-named") from None
    manifests = doc.get("manifests", []) if isinstance(doc, dict) else None
    if not isinstance(manifests, list):
        raise StoreError(f"{path} has no 'manifests' list")
    # an entry that is not an object, or whose annotations are not one, names nothing
    return [m for m in manifests if isinstance(m, dict)
            and isinstance(m.get("annotations") or {}, dict)]


def _write_index(store: Store, manifests: list[dict[str, Any]]) -> None:
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    atomic_write(store.root / "index.json", canonical_json(doc))


def add_ref(store: Store, name: str, desc: Descriptor) -> None:
    """Point ``name`` at the manifest ``desc`` (replacing an older entry of that name)."""
    if not store.has(desc.digest):
        raise ImageError(f"cannot name {desc.digest}: the manifest is not in the store")
    entry = desc.to_json()
    entry["annotations"] = {**entry.get("annotations", {}), REF_NAME: name}
    if (store.root / "oci-layout").exists() and entry in _read_index(store):
        return  # already named so: nothing to write (a read-only store is enough)
    ensure_layout(store)
    with store.lock(INDEX_LOCK):
        current = _read_index(store)
        if entry in current:
            return  # already named so: no rewrite
        manifests = [m for m in current
                     if (m.get("annotations") or {}).get(REF_NAME) != name]
        manifests.append(entry)
        manifests.sort(key=lambda m: (m["annotations"].get(REF_NAME, ""), m.get("digest", "")))
        _write_index(store, manifests)


def index_entries(store: Store) -> list[dict[str, Any]]:
    """Every entry of the store's index.json, named or not (StoreError if it is broken)."""
    return _read_index(store)


def refs(store: Store) -> dict[str, Descriptor]:
    out: dict[str, Descriptor] = {}
    for i, m in enumerate(_read_index(store)):
        name = (m.get("annotations") or {}).get(REF_NAME)
        if isinstance(name, str):
            out[name] = Descriptor.from_json(m, f"index.json manifests[{i}]")
    return out


def lookup(store: Store, ref: str | Digest) -> Descriptor:
    """A ref name from index.json, or a manifest digest already in the store."""
    if isinstance(ref, Digest):
        if not store.has(ref):
            raise ImageError(f"manifest {ref} is not in the store at {store.root}",
                             hint="bake or pull it first, or `patchbake image ls` to list "
                                  "what the store holds")
        data = read_verified(store, ref)
        doc = gojson.load(data, f"{ref} in the store", gojson.MANIFEST)
        if not isinstance(doc, dict):
            raise ImageError(f"{ref} in the store is not a JSON manifest")
        mt = doc.get("mediaType") or OCI_MANIFEST
        return Descriptor(str(mt), ref, len(data))
    known = refs(store)
    if ref not in known:
        raise ImageError(f"no image named '{ref}' in the store at {store.root}",
                         hint="run `patchbake bake` first, or `patchbake image ls` to list names")
    return known[ref]


# --- choosing the one image an OCI layout's index.json describes -------------------------

DEFAULT_PLATFORM = "linux/amd64"
_MAX_NESTING = 4


@dataclass(frozen=True, slots=True)
class Chosen:
    """The manifest a layout reference stands for, and why that one (shown by verify)."""

    digest: Digest
    why: str


@dataclass(frozen=True, slots=True)
class _Candidate:
    digest: Digest
    platform: str | None  # from the index descriptor; None: look in the config
    name: str | None  # org.opencontainers.image.ref.name
    via: str  # "index.json" or "index.json > sha256:..." for a nested index


def _platform_text(plat: Any) -> str | None:
    if not isinstance(plat, dict):
        return None
    parts = [str(plat.get("os", "")), str(plat.get("architecture", "")),
             str(plat.get("variant", "") or "")]
    return "/".join(p for p in parts if p)


def _candidates(blobs: Blobs, manifests: Any, where: str, depth: int,
                inherited: str | None) -> list[_Candidate]:
    if not isinstance(manifests, list):
        raise ImageError(f"{where} has no 'manifests' list")
    out: list[_Candidate] = []
    for i, m in enumerate(manifests):
        d = Descriptor.from_json(m, f"{where} manifests[{i}]")
        name = dict(d.annotations).get(REF_NAME, inherited)
        if d.media_type in INDEX_TYPES:
            if depth >= _MAX_NESTING:
                raise ImageError(f"{where}: indexes nested more than {_MAX_NESTING} deep; "
                                 "refusing to guess which image is meant")
            doc = parse_json(read_checked(blobs, d.digest, d.size, "index"), f"index {d.digest}",
                             gojson.MANIFEST)
            out += _candidates(blobs, doc.get("manifests"), f"{where} > {d.digest}",
                               depth + 1, name)
        elif d.media_type in MANIFEST_TYPES or not d.media_type:
            out.append(_Candidate(d.digest, _platform_text(m.get("platform")), name, where))
        # any other media type (signatures, SBOMs, artifacts) is not an image to verify
    return out


def _config_platform(blobs: Blobs, digest: Digest) -> str:
    """os/arch[/variant] from the manifest's config, for descriptors that carry none."""
    mbytes = read_checked(blobs, digest, None, "manifest")
    cdesc = Descriptor.from_json(parse_json(mbytes, f"manifest {digest}", gojson.MANIFEST)
                                 .get("config"), f"manifest {digest} config")
    config = parse_json(read_checked(blobs, cdesc.digest, cdesc.size, "config"),
                        f"config {cdesc.digest}", gojson.CONFIG)
    return _platform_text(config) or "unknown"


def _matches(offered: str, want: str) -> bool:
    o, w = offered.split("/"), want.split("/")
    return o[:2] == w[:2] and (len(w) < 3 or (len(o) > 2 and o[2] == w[2]))


def _listing(cands: list[_Candidate]) -> str:
    return "; ".join(f"{str(c.digest)[:19]} ({c.platform or '?'}"
                     + (f", '{c.name}'" if c.name else "") + ")" for c in cands[:6]) \
        + (f"; +{len(cands) - 6} more" if len(cands) > 6 else "")


def choose_manifest(blobs: Blobs, index: dict[str, Any], where: str, *,
                    select: str | Digest | None = None, platform: str | None = None) -> Chosen:
    """The one image manifest ``index`` (an index.json) stands for, or a refusal.

    ``select`` is what the user named after ``@``: a manifest Digest, or a
    ``org.opencontainers.image.ref.name``. Without it the index must name exactly one image
    manifest (nested indexes followed); several are narrowed to ``platform`` (default
    linux/amd64, the platform read from the index descriptor, else from the image's config),
    and when more than one remains nothing is guessed.
    """
    cands = _candidates(blobs, index.get("manifests"), where, 0, None)
    digests = list(dict.fromkeys(c.digest for c in cands))
    if isinstance(select, Digest):
        if select in digests:
            return Chosen(select, f"named by digest; {where} lists it")
        raise ImageError(f"{where} does not list {select}; verify checks only an image the "
                         f"layout's index names (it names: {_listing(cands) or 'nothing'})")
    if select:
        named = list(dict.fromkeys(c.digest for c in cands if c.name == select))
        if len(named) == 1:
            return Chosen(named[0], f"the manifest {where} names '{select}' "
                                    "(org.opencontainers.image.ref.name)")
        raise ImageError(f"{where} names {len(named)} different manifests '{select}'; name "
                         f"one by digest (it lists: {_listing(cands) or 'nothing'})")
    if len(digests) == 1:
        return Chosen(digests[0], f"the only image manifest {cands[0].via} names")
    if not digests:
        raise ImageError(f"{where} names no image manifest")
    want = platform or DEFAULT_PLATFORM
    cands = [c if c.platform else _Candidate(c.digest, _config_platform(blobs, c.digest),
                                             c.name, c.via) for c in cands]
    fit = list(dict.fromkeys(c.digest for c in cands if _matches(c.platform or "", want)))
    if len(fit) == 1:
        via = next(c.via for c in cands if c.digest == fit[0])
        return Chosen(fit[0], f"the only {want} image among {len(digests)} manifests "
                              f"{via} names")
    raise ImageError(f"{where} names {len(digests)} image manifests ({len(fit)} for {want}): "
                     f"{_listing(cands)}; refusing to guess, name one as "
                     "DIR@sha256:<hex> or DIR@<ref.name>")
