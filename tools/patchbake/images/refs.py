"""Resolve a verify/materialise REF to an image and a way to read its blobs.

REF forms, tried in this order:

- a definition name from pipeline.yaml ``images:`` -> its latest recorded bake, in the store
- ``sha256:<hex>`` -> a manifest in the store; a store ref name (``patchbake image ls``)
- ``docker:NAME`` -> ``docker save`` from the engine (spooled to a private temp store)
- an existing directory with ``oci-layout`` (optionally ``DIR@sha256:<hex>``)
- an existing file -> a docker-archive tar (ours or ``docker save``'s)
- ``HOST:PORT/repo@sha256:<hex>`` (or ``:tag``) -> pulled by the registry client into a
  private temp store (every byte hash-checked on arrival)

Temporary stores live under ``<store>/tmp`` and are removed when the context exits, so a
refused image leaves nothing behind.
"""

from __future__ import annotations

import re
from functools import partial
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..config import Pipeline
from ..digest import Digest, expand, is_hex, is_short
from ..errors import ImageError
from ..fsutil import read_input
from ..oci import engine, gojson, layout, registry
from ..oci.archive import import_docker_archive
from ..oci.image import Blobs, DirBlobs, Image, StoreBlobs, load_image, parse_json
from ..store import Store
from . import record as records

_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:\d+)?/[a-z0-9._/-]+([:@].+)$")


@dataclass(frozen=True)
class Resolved:
    ref: str
    kind: str  # definition | store | docker | oci-layout | docker-archive | registry
    image: Image
    blobs: Blobs
    definition: str | None = None
    chosen: str = ""  # which manifest REF stood for, and why (an index can name several)


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A store reference as a user writes it: ``name``, ``sha256:<hex>`` or
    ``name@sha256:<hex>``, parsed once; at least one of the two is set."""

    name: str | None
    digest: Digest | None

    @classmethod
    def parse(cls, text: str, known: Callable[[], Iterable[Digest]] | None = None
              ) -> ImageRef:
        """``known``: the digests a short digest (a unique prefix of at least 12 hex
        digits, ``sha256:`` optional after '@') may expand to; without it, only full
        digests are accepted."""
        if "@" in text:
            name, _, digest = text.rpartition("@")
            return cls(name or None, _digest(digest, f"'{text}': the part after '@'", known))
        if text.startswith("sha256:"):
            return cls(None, _digest(text, "image digest", known))
        return cls(text, None)

    def __str__(self) -> str:
        return "@".join(str(p) for p in (self.name, self.digest) if p is not None)


def _digest(text: str, what: str, known: Callable[[], Iterable[Digest]] | None) -> Digest:
    if known is None or not is_short(text):
        return Digest.parse(text, what, ImageError)
    return expand(text, known(), "image digest", ImageError,
                  missing_hint="`patchbake image ls` lists the store's images")


def known_digests(store: Store | None, pipeline: Pipeline | None) -> Callable[[], set[Digest]]:
    """What a short image digest may stand for: every blob in the store, every bake the
    pipeline's image records name and every image its evidence directory holds evidence
    for (``evidence verify`` needs no store)."""
    def listing() -> set[Digest]:
        out: set[Digest] = set()
        if store is not None:
            out.update(store.blob_digests())
        if pipeline is not None:
            out.update(records.recorded_digests(pipeline.root))
            ev = pipeline.signing.evidence_dir
            out.update(Digest.from_hex(p.name) for p in (ev.iterdir() if ev.is_dir() else ())
                       if is_hex(p.name))
        return out
    return listing


def _layout_manifest(root: Path, select: str | Digest | None) -> layout.Chosen:
    data = read_input(root / "index.json", "OCI layout index", ImageError, missing=partial(
        ImageError, hint=f"{root} is not an OCI image layout (its index.json names the images)"))
    index = parse_json(data, f"{root}/index.json", gojson.MANIFEST)
    return layout.choose_manifest(DirBlobs(root), index, f"{root}/index.json", select=select)


@contextmanager
def _temp_store(store: Store) -> Iterator[Store]:
    tmp = store.tmpdir("verify")
    try:
        yield Store.open(tmp)
    finally:
        store.discard(tmp)


def store_digest(store: Store, ref: ImageRef, pipeline: Pipeline | None = None
                 ) -> tuple[str, Digest] | None:
    """(name, manifest digest) for the reference forms the store and the image records
    answer: a definition (its latest recorded bake, even when the store's index.json names
    another bake of it), ``sha256:<hex>``, ``name@sha256:<hex>``, or a name in the store's
    index.json. None for any other form; the digest is not checked against the store."""
    name, digest = ref.name, ref.digest
    if digest is None:
        assert name is not None
        recorded = records.latest_digest(pipeline, name) if pipeline is not None else None
        if recorded is not None:
            return name, recorded
        if name in layout.refs(store):
            return name, layout.lookup(store, name).digest
        return None
    if name is None:
        named = [n for n, d in layout.refs(store).items() if d.digest == digest]
        return (min(named) if named else str(digest)), digest
    return name, digest


def store_manifest(store: Store, text: str, pipeline: Pipeline | None = None) -> Digest:
    """The manifest digest of ``sha256:<hex>`` in the store, an image definition (its
    latest recorded bake) or a name in the store's index.json: what a push sends."""
    ref = ImageRef.parse(text, known_digests(store, pipeline))
    if ref.name is None and ref.digest is not None:
        return layout.lookup(store, ref.digest).digest
    named = store_digest(store, ref, pipeline) if ref.digest is None else None
    if named is not None:
        return named[1]
    raise ImageError(
        f"'{text}' is neither a manifest digest in the store, an image name in its "
        "index.json, nor an image definition with a recorded bake",
        hint="run `patchbake bake NAME` first, or give sha256:<manifest digest>",
    )


@contextmanager
def resolve(store: Store, ref: str, pipeline: Pipeline | None = None) -> Iterator[Resolved]:
    """The image REF names and a way to read its blobs (see the module docstring)."""
    if pipeline is not None and ref in pipeline.images:
        named = store_digest(store, ImageRef(ref, None), pipeline)
        assert named is not None
        digest = named[1]
        if not store.has(digest):
            raise ImageError(f"'{ref}' was last baked as {digest}, which is not in the store at "
                             f"{store.root}", hint=f"run `patchbake bake {ref}` here")
        yield Resolved(ref, "definition", load_image(StoreBlobs(store), digest),
                       StoreBlobs(store), ref)
        return
    if ref.startswith("sha256:"):
        digest = _digest(ref, "image digest", known_digests(store, pipeline))
        yield Resolved(ref, "store", load_image(StoreBlobs(store), digest), StoreBlobs(store))
        return
    if ref.startswith("docker:"):
        with _temp_store(store) as tmp:
            archive = engine.save(ref[len("docker:"):], tmp.root / "tmp" / "image.tar")
            imp = import_docker_archive(tmp, archive)
            archive.unlink()
            yield Resolved(ref, "docker", load_image(StoreBlobs(tmp), imp.manifest_digest),
                           StoreBlobs(tmp))
        return
    path_part, _, pin = ref.partition("@")
    path = Path(path_part)
    if path.is_dir():
        if not (path / "oci-layout").is_file():
            raise ImageError(f"{path} is a directory but not an OCI image layout (no oci-layout)")
        blobs = DirBlobs(path)
        select = Digest.parse(pin, f"'{ref}': the part after '@'", ImageError) \
            if pin.startswith("sha256:") else pin or None
        chosen = _layout_manifest(path, select)
        yield Resolved(ref, "oci-layout", load_image(blobs, chosen.digest), blobs,
                       chosen=chosen.why)
        return
    if path.is_file():
        with _temp_store(store) as tmp:
            imp = import_docker_archive(tmp, path)
            yield Resolved(ref, "docker-archive",
                           load_image(StoreBlobs(tmp), imp.manifest_digest), StoreBlobs(tmp))
        return
    if _REGISTRY.match(ref):
        with _temp_store(store) as tmp:
            pulled = registry.pull(tmp, ref)
            yield Resolved(ref, "registry", load_image(StoreBlobs(tmp), pulled.digest),
                           StoreBlobs(tmp))
        return
    named = store_digest(store, ImageRef(ref, None)) if "@" not in ref else None
    if named is not None:
        yield Resolved(ref, "store", load_image(StoreBlobs(store), named[1]),
                       StoreBlobs(store))
        return
    known = sorted(pipeline.images) if pipeline is not None else []
    raise ImageError(f"cannot resolve image reference '{ref}': not a definition"
                     + (f" ({', '.join(known)})" if known else "")
                     + ", digest, docker:NAME, OCI layout, archive file or registry reference")


__all__ = ["ImageRef", "Resolved", "known_digests", "resolve", "store_digest", "store_manifest"]
