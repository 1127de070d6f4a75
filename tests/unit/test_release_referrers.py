"""The OCI 1.1 referrers list (the tag schema's index, kept up to date without clobbering
others' entries), and reading back against a registry that answers the referrers API
(the in-memory one: the real one, distribution 2.8, has no such API; its tag fallbacks
are tested in tests/integration/test_release_readback.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import AttachedError, RegistryError
from patchbake.evidence import dsse, keys, policy
from patchbake.fields import Fields
from patchbake.oci.registry import RegistryClient
from patchbake.oci.registry_manifest import OCI_INDEX, OCI_MANIFEST, Descriptor
from patchbake.oci.registry_ref import RegistryRef
from patchbake.release import promote, readback, referrers
from patchbake.release.referrers import Attached, index_descriptor, merge_index
from patchbake.store import Store
from registry_fake import HOST, FakeRegistry, Seen, make_image, sha
from release_support import make_release, make_repo

SIG = "application/vnd.dev.cosign.artifact.sig.v1+json"


def _artifact(n: int, artifact_type: str | None = referrers.ARTIFACT_TYPE,
              annotations: dict[str, str] | None = None) -> bytes:
    doc: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.example.config", "size": 2,
                   "digest": sha(b"{}")},
        "layers": [{"mediaType": "text/plain", "size": 1, "digest": sha(bytes([n]))}],
        "subject": {"mediaType": OCI_MANIFEST, "size": 3, "digest": sha(b"img")}}
    if artifact_type:
        doc["artifactType"] = artifact_type
    if annotations:
        doc["annotations"] = annotations
    return json.dumps(doc).encode()


# -- the index ------------------------------------------------------------------------
def test_the_tag_is_the_digest_with_a_dash() -> None:
    d = Digest.of(b"x")
    assert referrers.referrers_tag(d) == f"sha256-{d.hex}"
    assert referrers.att_tag(d) == f"sha256-{d.hex}.att"


def test_a_descriptor_carries_artifact_type_and_annotations() -> None:
    body = _artifact(1, annotations={"in-toto.io/predicate-type": "urn:x"})
    d = index_descriptor(body)
    assert d == {"mediaType": OCI_MANIFEST, "digest": sha(body), "size": len(body),
                 "artifactType": referrers.ARTIFACT_TYPE,
                 "annotations": {"in-toto.io/predicate-type": "urn:x"}}
    # no artifactType: the config's media type stands for it (the spec's rule)
    assert index_descriptor(_artifact(2, None))["artifactType"] == \
        "application/vnd.example.config"
    assert "annotations" not in index_descriptor(_artifact(3))


def test_an_absent_tag_starts_an_empty_index() -> None:
    add = [index_descriptor(_artifact(1)), index_descriptor(_artifact(2))]
    doc = json.loads(merge_index(None, add, "r:t") or b"")
    assert doc == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": add}


def test_others_entries_are_kept_in_order_and_nothing_is_listed_twice() -> None:
    theirs = {**index_descriptor(_artifact(9, SIG)), "x-their-field": [1]}
    current = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [theirs],
                          "annotations": {"kept": "yes"}}).encode()
    mine = [index_descriptor(_artifact(1)), index_descriptor(_artifact(2))]
    doc = json.loads(merge_index(current, [*mine, mine[0]], "r:t") or b"")
    assert doc["manifests"] == [theirs, *mine]
    assert doc["annotations"] == {"kept": "yes"}
    # again: every descriptor is there, so nothing is written
    assert merge_index(json.dumps(doc).encode(), mine, "r:t") is None
    # one more: appended after the others
    more = index_descriptor(_artifact(3))
    assert json.loads(merge_index(json.dumps(doc).encode(), [more], "r:t") or b"")[
        "manifests"] == [theirs, *mine, more]


@pytest.mark.parametrize("current", [
    b"not json", b"[]", json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                    "config": {}, "layers": []}).encode(),
    json.dumps({"schemaVersion": 1, "mediaType": OCI_INDEX, "manifests": []}).encode(),
    json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": {}}).encode(),
    json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": ["x"]}).encode(),
])
def test_a_tag_that_is_no_index_is_refused_never_replaced(current: bytes) -> None:
    with pytest.raises(RegistryError, match="r:t is not an OCI image index .*refusing to "
                                            "replace it"):
        merge_index(current, [index_descriptor(_artifact(1))], "r:t")


def test_a_promotion_entry_without_the_index_fields_keeps_its_bytes() -> None:
    old = Attached("tag-fallback", (Digest.of(b"m"),), "sha256-x.att", Digest.of(b"a"))
    assert set(old.dump()) == set(Attached.KEYS)
    new = Attached("tag-fallback", (Digest.of(b"m"),), "sha256-x.att", Digest.of(b"a"),
                   "sha256-x", Digest.of(b"i"))
    for a in (old, new):
        f = Fields(a.dump(), "entry", RegistryError, Attached.KEYS, Attached.OPTIONAL)
        assert Attached.load(f) == a


# -- a registry with the referrers API ------------------------------------------------
def _referrers_api(fake: FakeRegistry) -> Any:
    """What a registry with the API answers: every manifest whose subject is the digest."""
    def answer(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        m = re.match(r"^/v2/(.+)/referrers/(sha256:[0-9a-f]{64})$", seen.path)
        if not m:
            return None
        listed = [index_descriptor(body) for ref, (body, _) in
                  fake.manifests.get(m.group(1), {}).items()
                  if ref.startswith("sha256:")
                  and (json.loads(body).get("subject") or {}).get("digest") == m.group(2)]
        return 200, {"Content-Type": OCI_INDEX}, json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed}).encode()
    return answer


@pytest.fixture
def attached(tmp_path: Path) -> tuple[Any, ...]:
    img = make_image()
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    rel = make_release(root, k, str(img.digest))
    fake = FakeRegistry()
    fake.fail = _referrers_api(fake)
    fake.seed_image("team/app", img)
    client = RegistryClient(HOST, adapter=fake)
    store = Store.open(tmp_path / "store")
    subject = Descriptor(OCI_MANIFEST, img.digest, len(img.manifest))
    done = referrers.attach(client, store, "team/app", subject, promote.statements(root, rel))
    assert (done.mode, done.att_tag, done.index_tag) == ("referrers", None, None)
    pol = policy.load(root / "manifests" / "trust-policy.yaml")
    return fake, client, store, subject, rel, pol, k


def test_with_the_api_no_tag_is_written_and_everything_reads_back(
        attached: tuple[Any, ...]) -> None:
    fake, client, _, _, rel, pol, _ = attached
    assert not any(r.startswith("sha256-") for r in fake.manifests["team/app"])
    got = readback.verify(client, _ref(rel), rel, pol)
    assert got.source == "referrers API"
    assert got.count("recorded") == 5 and got.count("extra") == 0  # 4 statements + VSA


def _ref(rel: Any) -> RegistryRef:
    return RegistryRef(HOST, "team/app", None, rel.digest)


def _sign(payload: bytes, key: Path) -> bytes:
    return json.dumps(dsse.sign(payload, keys.load_private(key)).to_json()).encode()


def _add(attached: tuple[Any, ...], data: bytes, ptype: str) -> None:
    _, client, store, subject, _, _, _ = attached
    body = referrers.artifact_manifest(client, store, "team/app", subject,
                                       referrers.Statement(data, ptype, "added.dsse.json"))
    referrers.put_manifest(client, "team/app", body, OCI_MANIFEST)


def _payload(rel: Any, name: str) -> bytes:
    path = rel.path.parents[2] / "evidence" / rel.digest.hex / name
    return dsse.parse(path.read_bytes(), name).payload


def test_a_statement_by_a_trusted_key_the_release_does_not_record_is_extra(
        attached: tuple[Any, ...]) -> None:
    _, client, _, _, rel, pol, k = attached
    # the same GPU result, signed by the other evidence key: trusted, not recorded
    _add(attached, _sign(_payload(rel, "dsv4-topk-gpu.dsse.json"), k.other),
         "https://in-toto.io/attestation/test-result/v0.1")
    got = readback.verify(client, _ref(rel), rel, pol)
    assert (got.count("recorded"), got.count("extra")) == (5, 1)
    extra = next(r for r in got.rows if r.status == "extra")
    assert extra.signer == "other" and extra.statement == "evidence dsv4-topk-gpu"


@pytest.mark.parametrize(("name", "signer", "reason"), [
    ("approval-sm89-stable-", "evidence", "none of which the trust policy allows"),
    ("benchmark-", "outsider", "none of which the trust policy allows"),
    ("dsv4-topk-cpu", "approver", "not allowed to sign suite"),
])
def test_a_statement_signed_outside_its_role_is_refused(
        attached: tuple[Any, ...], name: str, signer: str, reason: str) -> None:
    _, client, _, _, rel, pol, k = attached
    src = next((rel.path.parents[2] / "evidence" / rel.digest.hex).glob(name + "*"))
    payload = dsse.parse(src.read_bytes(), src.name).payload
    ptype = json.loads(payload)["predicateType"]
    _add(attached, _sign(payload, getattr(k, signer)), ptype)
    with pytest.raises(AttachedError, match=f"^untrusted: statement .*{reason}") as exc:
        readback.verify(client, _ref(rel), rel, pol)
    assert exc.value.exit_code == 63


def test_a_vsa_signed_by_an_evidence_key_is_refused(attached: tuple[Any, ...]) -> None:
    _, client, _, _, rel, pol, k = attached
    vsa = rel.path.parent / "vsa.dsse.json"
    payload = dsse.parse(vsa.read_bytes(), "vsa").payload
    _add(attached, _sign(payload, k.evidence), "https://slsa.dev/verification_summary/v1")
    with pytest.raises(AttachedError, match="untrusted: .*none of which the trust policy"):
        readback.verify(client, _ref(rel), rel, pol)


def test_an_annotation_that_lies_about_the_statement_is_refused(
        attached: tuple[Any, ...]) -> None:
    _, client, _, _, rel, pol, _ = attached
    real = (rel.path.parents[2] / "evidence" / rel.digest.hex / "dsv4-topk-gpu.dsse.json")
    _add(attached, real.read_bytes(), "https://slsa.dev/verification_summary/v1")
    with pytest.raises(AttachedError, match="annotated as .*verification_summary.* but "
                                            "carries a .*test-result"):
        readback.verify(client, _ref(rel), rel, pol)


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"layers": "x"}', b'{"layers": [1]}',
                                  b"not json", b'{"schemaVersion": 2}'])
def test_a_cosign_tag_of_an_unknown_shape_is_refused_not_replaced(body: bytes) -> None:
    """Promotion extends cosign's `.att` tag; one that is not a manifest with a list of
    layers (another tool's, or damaged) is refused with one line, never overwritten and
    never a traceback."""
    from patchbake.errors import RegistryError
    from patchbake.release import referrers

    class Tagged:
        host = "127.0.0.1:5000"

        def fetch_manifest(self, *_a: object, **_k: object) -> tuple[bytes, str, str]:
            return body, "application/vnd.oci.image.manifest.v1+json", "sha256:" + "0" * 64

    with pytest.raises(RegistryError, match="is not a manifest with a list of layers") as info:
        referrers._existing_att_layers(Tagged(), "r", "sha256-" + "a" * 64 + ".att")  # type: ignore[arg-type]
    assert "\n" not in info.value.one_line()


def test_what_is_read_back_is_bounded_in_total(attached: tuple[Any, ...],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever can push to the repository cannot make a verification read without end:
    each envelope is read once, and all of them together are bounded."""
    from patchbake.errors import AttachedError
    from patchbake.release import discover

    fake, client, _, _, rel, pol, _ = attached
    gets: list[str] = []
    real = client.get_blob

    def counted(ref: RegistryRef, digest: Any, **kw: Any) -> bytes:
        gets.append(str(digest))
        return real(ref, digest, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(client, "get_blob", counted)
    readback.verify(client, _ref(rel), rel, pol)
    assert gets and len(gets) == len(set(gets))
    monkeypatch.setattr(discover, "MAX_TOTAL", 1)
    with pytest.raises(AttachedError, match="together; refusing to read more") as info:
        readback.verify(client, _ref(rel), rel, pol)
    assert info.value.exit_code == 63 and "\n" not in info.value.one_line()
