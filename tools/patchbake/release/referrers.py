"""Attaching signed statements to an image in a registry, where other tools look for them.

Each statement (evidence, benchmark, approval, the VSA) becomes an OCI 1.1 artifact
manifest: ``artifactType`` ``application/vnd.in-toto+json``, the empty config, one layer
(the DSSE envelope, ``application/vnd.dsse.envelope.v1+json``, annotated with its
predicate type) and ``subject`` = the image manifest. It is pushed by digest only.

A registry with the referrers API (``GET /v2/<repo>/referrers/<digest>`` answers an
index) then lists them under the image. One without it (distribution 2.8 answers 404)
gets two tags that point at them:

- the OCI 1.1 referrers tag schema: ``sha256-<image hex>`` names an image index whose
  descriptors are the artifact manifests (with their ``artifactType`` and annotations),
  what the referrers API would answer. It is read, extended with the descriptors it
  lacks and written back (``merge_index``): other tools' entries stay;
- cosign's tag scheme: one manifest whose layers are every envelope, tagged
  ``sha256-<image hex>.att``.

Those two are the only tags that move (by design, as in the spec and in cosign: statements
added later extend them); an image's own tags never move. ``discover`` reads them back
(readback.py verifies what it finds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import RegistryError
from ..oci import registry_blobs as blobs
from ..oci.registry import RegistryClient
from ..oci.registry_manifest import OCI_INDEX, OCI_MANIFEST, Descriptor
from ..oci.registry_ref import RegistryRef
from ..store import Store
from ..fields import Fields

ARTIFACT_TYPE = "application/vnd.in-toto+json"
DSSE_MEDIA = "application/vnd.dsse.envelope.v1+json"
EMPTY_MEDIA = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
TITLE_ANNOTATION = "org.opencontainers.image.title"


@dataclass(frozen=True)
class Statement:
    """One signed envelope to attach, with the predicate type it carries."""

    data: bytes
    predicate_type: str
    title: str  # e.g. the file name, for annotations


@dataclass(frozen=True, slots=True)
class Attached:
    """What a promotion attached (its ledger entry records it)."""

    mode: str  # "referrers" or "tag-fallback"
    manifests: tuple[Digest, ...]  # artifact manifest digests (OCI 1.1, with subject)
    att_tag: str | None  # the cosign tag when the fallback was used
    att_digest: Digest | None
    index_tag: str | None = None  # the OCI 1.1 referrers tag when the fallback was used
    index_digest: Digest | None = None

    KEYS = ("mode", "manifests", "att_tag", "att_digest")
    OPTIONAL = ("index_tag", "index_digest")  # absent from promotions made before them

    @classmethod
    def load(cls, f: Fields) -> Attached:
        return cls(f.text("mode"), f.digests("manifests"), f.opt_text("att_tag"),
                   f.opt_digest("att_digest"),
                   f.opt_text("index_tag") if f.has("index_tag") else None,
                   f.opt_digest("index_digest") if f.has("index_digest") else None)

    def dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode, "manifests": [str(d) for d in self.manifests],
            "att_tag": self.att_tag,
            "att_digest": None if self.att_digest is None else str(self.att_digest)}
        if self.index_tag is not None:
            out["index_tag"] = self.index_tag
            out["index_digest"] = None if self.index_digest is None else str(self.index_digest)
        return out


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _push_blob(client: RegistryClient, store: Store, repo: str, data: bytes,
               media: str) -> dict[str, Any]:
    desc = Descriptor(media, store.put_bytes(data), len(data))
    if not blobs.blob_present(client.http, repo, desc):
        blobs.upload_blob(client.http, store, repo, desc, None, None)
    return {"mediaType": media, "digest": str(desc.digest), "size": len(data)}


def put_manifest(client: RegistryClient, repo: str, data: bytes, media: str,
                 tag: str | None = None) -> Digest:
    """PUT by digest (or tag), then read back by digest and compare the bytes."""
    digest = Digest.of(data)
    resp = client.http.request("PUT", f"/v2/{repo}/manifests/{tag or digest}",
                               body=lambda: data, headers={"Content-Type": media}, ok=(201,),
                               scopes=[blobs.push_scope(repo)])
    resp.close()
    back, _, got = client.get_manifest(RegistryRef(client.host, repo, None, digest))
    if back != data:
        raise RegistryError(f"{repo}@{digest} reads back as other bytes ({got})")
    return digest


def supports_referrers(client: RegistryClient, repo: str, digest: Digest) -> bool:
    resp = client.http.request("GET", f"/v2/{repo}/referrers/{digest}", ok=(200, 404),
                               headers={"Accept": OCI_INDEX},
                               scopes=[blobs.pull_scope(repo)])
    try:
        if resp.status_code != 200:
            return False
        body = resp.json()
        return isinstance(body, dict) and isinstance(body.get("manifests"), list)
    except ValueError:
        return False
    finally:
        resp.close()


def artifact_manifest(client: RegistryClient, store: Store, repo: str, subject: Descriptor,
                      st: Statement) -> bytes:
    config = _push_blob(client, store, repo, EMPTY, EMPTY_MEDIA)
    layer = _push_blob(client, store, repo, st.data, DSSE_MEDIA)
    notes = {PREDICATE_ANNOTATION: st.predicate_type, TITLE_ANNOTATION: st.title}
    layer["annotations"] = notes
    # the manifest's own annotations are what a referrers list (API or tag) shows of it
    return _canon({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                   "artifactType": ARTIFACT_TYPE, "config": config, "layers": [layer],
                   "subject": {"mediaType": subject.media_type, "digest": str(subject.digest),
                               "size": subject.size},
                   "annotations": notes})


def att_tag(digest: Digest) -> str:
    return f"{digest.algorithm}-{digest.hex}.att"


def referrers_tag(digest: Digest) -> str:
    """The OCI 1.1 referrers tag schema: ``<alg>-<ref>``, ref the hex truncated to 64."""
    return f"{digest.algorithm}-{digest.hex[:64]}"


def index_descriptor(data: bytes) -> dict[str, Any]:
    """The descriptor a referrers list holds for one artifact manifest (the spec's rules:
    ``artifactType`` is the manifest's, else its config's media type; the manifest's
    annotations are copied)."""
    m = json.loads(data)
    desc: dict[str, Any] = {"mediaType": m.get("mediaType", OCI_MANIFEST),
                            "digest": str(Digest.of(data)), "size": len(data)}
    kind = m.get("artifactType") or (m.get("config") or {}).get("mediaType")
    if kind:
        desc["artifactType"] = kind
    if m.get("annotations"):
        desc["annotations"] = m["annotations"]
    return desc


def merge_index(current: bytes | None, add: list[dict[str, Any]], where: str) -> bytes | None:
    """The referrers tag's index with the descriptors in ``add`` it lacks (by digest), or
    None when it lacks none. ``current`` None (the tag is absent) starts an empty index.
    Entries already there (other tools', earlier promotions') are kept as they are; a
    tag that names anything but an image index is refused, never replaced."""
    doc: Any = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    if current is not None:
        try:
            doc = json.loads(current)
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict) or doc.get("mediaType") != OCI_INDEX \
                or doc.get("schemaVersion") != 2 or not isinstance(doc.get("manifests"), list) \
                or not all(isinstance(d, dict) for d in doc["manifests"]):
            raise RegistryError(f"{where} is not an OCI image index (a referrers list); "
                                "refusing to replace it",
                                hint="inspect what set that tag; the referrers tag schema "
                                     "reserves it for the list of the image's referrers")
    have = {d.get("digest") for d in doc["manifests"]}
    new = []
    for d in add:
        if d["digest"] not in have:
            new.append(d)
            have.add(d["digest"])
    if not new:
        return None
    doc["manifests"] = [*doc["manifests"], *new]
    return _canon(doc)


def _update_index(client: RegistryClient, repo: str, digest: Digest,
                  manifests: list[bytes]) -> Digest:
    tag = referrers_tag(digest)
    got = client.fetch_manifest(RegistryRef(client.host, repo, tag, None), tag,
                                push_scope=True, missing_ok=True)
    current = None if got is None else got[0]
    data = merge_index(current, [index_descriptor(m) for m in manifests], f"{repo}:{tag}")
    if data is None:
        assert current is not None
        return Digest.of(current)
    put_manifest(client, repo, data, OCI_INDEX)  # by digest first, then the tag
    return put_manifest(client, repo, data, OCI_INDEX, tag=tag)


def _att_manifest(client: RegistryClient, store: Store, repo: str,
                  layers: list[dict[str, Any]]) -> bytes:
    # cosign's shape: an image config whose rootfs lists the layers, the envelopes as layers
    config = {"architecture": "", "os": "", "config": {}, "created": "0001-01-01T00:00:00Z",
              "history": [{"created": "0001-01-01T00:00:00Z"}],
              "rootfs": {"type": "layers", "diff_ids": [x["digest"] for x in layers]}}
    cdesc = _push_blob(client, store, repo, _canon(config), OCI_CONFIG)
    return _canon({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cdesc,
                   "layers": layers})


def _existing_att_layers(client: RegistryClient, repo: str, tag: str) -> list[dict[str, Any]]:
    got = client.fetch_manifest(RegistryRef(client.host, repo, tag, None), tag,
                                 push_scope=True, missing_ok=True)
    if got is None:
        return []
    try:
        doc = json.loads(got[0])
    except ValueError:
        doc = None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        # another tool's tag in a shape we do not know: never replaced, never a traceback
        raise RegistryError(f"{repo}:{tag} is not a manifest with a list of layers; refusing "
                            "to replace it", hint="inspect the tag; remove it only if it is "
                                                  "not another tool's")
    return layers


def attach(client: RegistryClient, store: Store, repo: str, subject: Descriptor,
           statements: list[Statement]) -> Attached:
    """Attach every statement to ``subject`` in ``repo``; idempotent."""
    digests, bodies = [], []
    for st in statements:
        data = artifact_manifest(client, store, repo, subject, st)
        digests.append(put_manifest(client, repo, data, OCI_MANIFEST))
        bodies.append(data)
    if supports_referrers(client, repo, subject.digest):
        return Attached("referrers", tuple(digests), None, None)
    index = _update_index(client, repo, subject.digest, bodies)
    tag = att_tag(subject.digest)
    layers = _existing_att_layers(client, repo, tag)
    have = {x.get("digest") for x in layers}
    for st in statements:
        desc = _push_blob(client, store, repo, st.data, DSSE_MEDIA)
        if desc["digest"] not in have:
            desc["annotations"] = {PREDICATE_ANNOTATION: st.predicate_type,
                                   "dev.cosignproject.cosign/signature": ""}
            layers.append(desc)
            have.add(desc["digest"])
    data = _att_manifest(client, store, repo, layers)
    put_manifest(client, repo, data, OCI_MANIFEST)
    put_manifest(client, repo, data, OCI_MANIFEST, tag=tag)
    return Attached("tag-fallback", tuple(digests), tag, Digest.of(data),
                    referrers_tag(subject.digest), index)
