"""Finding the statements attached to an image in a registry, where other tools look.

In the order the OCI distribution spec 1.1 gives a client: the referrers API (``GET
/v2/<repo>/referrers/<digest>``), else the referrers tag schema's index (``sha256-<hex>``),
else cosign's ``sha256-<hex>.att`` tag. The first that exists is read (a referrers API
that lists nothing counts as absent: a registry upgraded since the promotion still holds
the tags). Every artifact manifest it lists is fetched by digest and every envelope by
digest (both hashed on arrival). Nothing found here is trusted: readback.py verifies it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import AttachedError, RegistryError
from ..oci import registry_blobs as blobs
from ..oci.registry import RegistryClient
from ..oci.registry_manifest import OCI_INDEX
from ..oci.registry_ref import RegistryRef
from .referrers import ARTIFACT_TYPE, PREDICATE_ANNOTATION, att_tag, referrers_tag

MAX_LISTED = 256  # artifact manifests (or cosign layers) read for one image
MAX_ENVELOPE = 16 << 20  # an SBOM envelope is the largest, well under this
MAX_TOTAL = 256 << 20  # every envelope read for one image, together


@dataclass(frozen=True, slots=True)
class Found:
    """One thing attached to the image, as the registry holds it."""

    manifest: Digest  # the artifact manifest (for cosign's tag: the .att manifest)
    artifact_type: str  # the manifest's own (cosign's tag: the in-toto type it implies)
    subject: Digest | None  # the manifest's subject; None in cosign's scheme (bound by tag)
    envelope: Digest | None  # the layer; None for an artifact that is not a statement
    media_type: str  # the layer's
    annotated: str  # the predicate type the layer's annotation claims ("" when none)
    data: bytes | None  # the layer's bytes (statements only)


@dataclass(frozen=True, slots=True)
class Discovery:
    via: str | None  # "referrers API", "referrers tag", "cosign tag"; None: nothing there
    tag: str | None  # the tag read, for the two tag schemes
    found: tuple[Found, ...]

    @property
    def source(self) -> str:
        return "nowhere" if self.via is None else f"{self.via} {self.tag or ''}".strip()


def _bad(where: str, what: str) -> AttachedError:
    return AttachedError(f"untrusted: {where} is not {what}; refusing what it lists",
                         hint="inspect what wrote it; patchbake writes OCI 1.1 artifact "
                              "manifests and the tags of docs/releases.md")


def _json(data: bytes, where: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise _bad(where, what) from None
    if not isinstance(doc, dict):
        raise _bad(where, what)
    return doc


def _digest(value: Any, where: str) -> Digest:
    return Digest.parse(value, f"{where}: a descriptor's digest", AttachedError)


def _listed(doc: dict[str, Any], where: str) -> list[Digest]:
    """The manifest digests an index (the API's answer or the tag's) lists."""
    items = doc.get("manifests")
    if doc.get("mediaType", OCI_INDEX) != OCI_INDEX or not isinstance(items, list) \
            or not all(isinstance(d, dict) for d in items):
        raise _bad(where, "an OCI image index")
    if len(items) > MAX_LISTED:
        raise AttachedError(f"untrusted: {where} lists {len(items)} referrers, more than "
                            f"{MAX_LISTED}; refusing to read them all")
    return [_digest(d.get("digest"), where) for d in items]


def _api(client: RegistryClient, repo: str, digest: Digest) -> list[Digest] | None:
    resp = client.http.request("GET", f"/v2/{repo}/referrers/{digest}", ok=(200, 404),
                               headers={"Accept": OCI_INDEX}, stream=True,
                               scopes=[blobs.pull_scope(repo)])
    if resp.status_code != 200:
        resp.close()
        return None
    body = client.http.read(resp, 4 << 20, "the referrers list")
    return _listed(_json(body, "the referrers API's answer", "an OCI image index"),
                   "the referrers API's answer") or None


def _tag(client: RegistryClient, repo: str, tag: str) -> bytes | None:
    got = client.fetch_manifest(RegistryRef(client.host, repo, tag, None), tag,
                                missing_ok=True)
    return None if got is None else got[0]


def _layers(doc: dict[str, Any], where: str) -> list[dict[str, Any]]:
    layers = doc.get("layers")
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        raise _bad(where, "a manifest with layers")
    if len(layers) > MAX_LISTED:
        raise AttachedError(f"untrusted: {where} has {len(layers)} layers, more than "
                            f"{MAX_LISTED}")
    return layers


def _envelope(client: RegistryClient, ref: RegistryRef, layer: Digest,
              read: dict[Digest, bytes]) -> bytes:
    """One envelope blob, read once per discovery whatever lists it, and all of them
    together bounded (MAX_TOTAL): whoever can push to the repository cannot make a
    verification read without end."""
    if layer not in read:
        if sum(map(len, read.values())) > MAX_TOTAL:
            raise AttachedError(f"untrusted: the statements attached to {ref.repo} exceed "
                                f"{MAX_TOTAL >> 20} MiB together; refusing to read more")
        read[layer] = client.get_blob(ref, layer, max_bytes=MAX_ENVELOPE)
    return read[layer]


def _statements(client: RegistryClient, ref: RegistryRef, manifest: Digest, kind: str,
                subject: Digest | None, layers: list[dict[str, Any]], where: str,
                read: dict[Digest, bytes]) -> list[Found]:
    out = []
    for x in layers:
        layer = _digest(x.get("digest"), where)
        notes = x.get("annotations")
        claim = notes.get(PREDICATE_ANNOTATION, "") if isinstance(notes, dict) else ""
        data = _envelope(client, ref, layer, read)
        out.append(Found(manifest, kind, subject, layer, str(x.get("mediaType", "")),
                         str(claim), data))
    return out


def _artifacts(client: RegistryClient, ref: RegistryRef, listed: list[Digest],
               read: dict[Digest, bytes]) -> list[Found]:
    out: list[Found] = []
    for m in dict.fromkeys(listed):  # each listed manifest once
        data, _, _ = client.get_manifest(ref.with_digest(m))  # by digest: hashed on arrival
        where = f"artifact manifest {m}"
        doc = _json(data, where, "a manifest")
        kind = str(doc.get("artifactType") or (doc.get("config") or {}).get("mediaType", ""))
        subj = doc.get("subject")
        subject = _digest(subj.get("digest"), where) if isinstance(subj, dict) else None
        if kind != ARTIFACT_TYPE:  # a signature, an SBOM of another tool: not a statement
            out.append(Found(m, kind, subject, None, "", "", None))
            continue
        out.extend(_statements(client, ref, m, kind, subject, _layers(doc, where), where,
                               read))
    return out


def discover(client: RegistryClient, repo: str, digest: Digest) -> Discovery:
    """What is attached to ``repo@digest``, from the first place that has a list."""
    ref = RegistryRef(client.host, repo, None, digest)
    client.get_manifest(ref)  # the image itself is there (else a RegistryError naming it)
    read: dict[Digest, bytes] = {}  # envelopes by digest, read once (see _envelope)
    listed = _api(client, repo, digest)
    if listed:
        return Discovery("referrers API", None, tuple(_artifacts(client, ref, listed, read)))
    tag = referrers_tag(digest)
    index = _tag(client, repo, tag)
    if index is not None:
        where = f"{repo}:{tag}"
        found = _artifacts(client, ref, _listed(_json(index, where, "an OCI image index"),
                                                where), read)
        return Discovery("referrers tag", tag, tuple(found))
    tag = att_tag(digest)
    att = _tag(client, repo, tag)
    if att is not None:
        where = f"{repo}:{tag}"
        layers = _layers(_json(att, where, "a manifest"), where)
        found = _statements(client, ref, Digest.of(att), ARTIFACT_TYPE, None, layers, where,
                            read)
        return Discovery("cosign tag", tag, tuple(found))
    return Discovery(None, None, ())


def predicate_types(client: RegistryClient, repo: str, digest: Digest) -> list[str]:
    """The predicate types the attached statements' annotations claim (unverified)."""
    try:
        return [f.annotated for f in discover(client, repo, digest).found if f.data]
    except AttachedError as exc:
        raise RegistryError(exc.message) from None
