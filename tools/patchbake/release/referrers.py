"""Attaching signed statements to an image in a registry, where other tools look for them.

Each statement (evidence, benchmark, approval, the VSA) becomes an OCI 1.1 artifact
manifest: ``artifactType`` ``application/vnd.in-toto+json``, the empty config, one layer
(the DSSE envelope, ``application/vnd.dsse.envelope.v1+json``, annotated with its
predicate type) and ``subject`` = the image manifest. It is pushed by digest only.

A registry with the referrers API (``GET /v2/<repo>/referrers/<digest>`` answers an
index) then lists them under the image. One without it (distribution 2.8 answers 404)
gets cosign's tag scheme as well: one manifest whose layers are every envelope, tagged
``sha256-<image hex>.att``. That tag is the one tag that moves (cosign's own scheme:
attestations added later extend it); an image's own tags never move.
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

    KEYS = ("mode", "manifests", "att_tag", "att_digest")

    @classmethod
    def load(cls, f: Fields) -> Attached:
        return cls(f.text("mode"), f.digests("manifests"), f.opt_text("att_tag"),
                   f.opt_digest("att_digest"))

    def dump(self) -> dict[str, Any]:
        return {"mode": self.mode, "manifests": [str(d) for d in self.manifests],
                "att_tag": self.att_tag,
                "att_digest": None if self.att_digest is None else str(self.att_digest)}


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
    layer["annotations"] = {PREDICATE_ANNOTATION: st.predicate_type,
                            "org.opencontainers.image.title": st.title}
    return _canon({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                   "artifactType": ARTIFACT_TYPE, "config": config, "layers": [layer],
                   "subject": {"mediaType": subject.media_type, "digest": str(subject.digest),
                               "size": subject.size}})


def att_tag(digest: Digest) -> str:
    return f"{digest.algorithm}-{digest.hex}.att"


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
        layers = json.loads(got[0]).get("layers") or []
    except ValueError:
        raise RegistryError(f"{repo}:{tag} is not a manifest; refusing to replace it") from None
    return [x for x in layers if isinstance(x, dict)]


def attach(client: RegistryClient, store: Store, repo: str, subject: Descriptor,
           statements: list[Statement]) -> Attached:
    """Attach every statement to ``subject`` in ``repo``; idempotent."""
    digests = []
    for st in statements:
        data = artifact_manifest(client, store, repo, subject, st)
        digests.append(put_manifest(client, repo, data, OCI_MANIFEST))
    if supports_referrers(client, repo, subject.digest):
        return Attached("referrers", tuple(digests), None, None)
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
    return Attached("tag-fallback", tuple(digests), tag, Digest.of(data))


def find_attached(client: RegistryClient, repo: str, digest: Digest) -> list[str]:
    """Predicate types attached to ``digest``: via referrers, else via the .att tag."""
    r = RegistryRef(client.host, repo, None, digest)
    if supports_referrers(client, repo, digest):
        resp = client.http.request("GET", f"/v2/{repo}/referrers/{digest}",
                                   headers={"Accept": OCI_INDEX},
                                   scopes=[blobs.pull_scope(repo)])
        found = resp.json().get("manifests", [])
        resp.close()
        out: list[str] = []
        for d in found:
            child = Digest.parse(d.get("digest"), f"{repo}: a referrer's digest", RegistryError)
            m = json.loads(client.get_manifest(r.with_digest(child))[0])
            out.extend(x.get("annotations", {}).get(PREDICATE_ANNOTATION, "")
                       for x in m.get("layers", []))
        return out
    return [x.get("annotations", {}).get(PREDICATE_ANNOTATION, "")
            for x in _existing_att_layers(client, repo, att_tag(digest))]
