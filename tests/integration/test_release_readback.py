"""Reading back what promotion attached, against the real distribution registry (2.8: no
referrers API, so the OCI 1.1 referrers tag and cosign's tag carry the statements).

A promotion writes the referrers tag's index (others' entries kept); `release verify
--from-registry` finds every statement the release records and verifies it; then each
tampering is refused (exit 63) with its one line: a statement re-signed by an untrusted
key, the referrers tag deleted (cosign's tag is read instead, and tampered there too), a
statement removed, a statement about another image, nothing attached at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.evidence import dsse
from patchbake.oci.registry import RegistryClient
from patchbake.oci.registry_manifest import OCI_INDEX, OCI_MANIFEST, Descriptor
from patchbake.release import referrers
from patchbake.store import Store
from test_release_promote import Env, released

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.registry]

INTOTO = "application/vnd.in-toto+json"
ALL_KINDS = 7  # evidence x2, benchmark, approval, sbom, provenance, VSA
FOREIGN_SIG = "application/vnd.dev.cosign.artifact.sig.v1+json"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_home: Path,
        registry: str) -> Iterator[Env]:
    yield from released(tmp_path_factory.mktemp("readback"), shared_home, registry)


def _promote(e: Env, repo: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    rc = main(["--json", "release", "promote", e.release, "--to", f"{e.registry}/{repo}:1.0"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return dict(json.loads(out.out)["attached"])


def _verify(e: Env, repo: str, capsys: pytest.CaptureFixture[str],
            as_json: bool = True) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([*(["--json"] if as_json else []), "release", "verify",
               "--from-registry", f"{e.registry}/{repo}@{e.digest}"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _get(e: Env, repo: str, ref: str) -> requests.Response:
    return requests.get(f"http://{e.registry}/v2/{repo}/manifests/{ref}", timeout=10,
                        headers={"Accept": f"{OCI_INDEX}, {OCI_MANIFEST}"})


def _index(e: Env, repo: str) -> dict[str, object]:
    r = _get(e, repo, referrers.referrers_tag(Digest.parse(e.digest)))
    assert r.status_code == 200, r.text
    return dict(r.json())


def _put_index(e: Env, repo: str, doc: dict[str, object]) -> None:
    client = RegistryClient(e.registry)
    referrers.put_manifest(client, repo, referrers._canon(doc), OCI_INDEX,
                           tag=referrers.referrers_tag(Digest.parse(e.digest)))


def _subject(e: Env) -> Descriptor:
    data = Store.open(e.store).read_blob(Digest.parse(e.digest))
    return Descriptor(json.loads(data)["mediaType"], Digest.parse(e.digest), len(data))


def _attach_raw(e: Env, repo: str, data: bytes, ptype: str,
                subject: Descriptor | None = None) -> bytes:
    """An artifact manifest carrying ``data``, pushed by digest (listed nowhere yet)."""
    client = RegistryClient(e.registry)
    st = referrers.Statement(data, ptype, "tampered.dsse.json")
    body = referrers.artifact_manifest(client, Store.open(e.store), repo,
                                       subject or _subject(e), st)
    referrers.put_manifest(client, repo, body, OCI_MANIFEST)
    return body


def _evidence(e: Env) -> Path:
    return e.root / "manifests" / "evidence" / e.digest[7:] / "dsv4-topk-gpu.dsse.json"


def _untrusted_copy(e: Env) -> bytes:
    """The GPU evidence's very statement, signed by a key no trust policy names."""
    env = dsse.parse(_evidence(e).read_bytes(), "evidence")
    return json.dumps(dsse.sign(env.payload, Ed25519PrivateKey.generate()).to_json()).encode()


def test_promotion_writes_the_oci_referrers_tag(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    att = _promote(env, "back/ok", capsys)
    tag = env.digest.replace(":", "-")
    assert att["index_tag"] == tag and att["att_tag"] == tag + ".att"
    index = _index(env, "back/ok")
    assert index["mediaType"] == OCI_INDEX and index["schemaVersion"] == 2
    listed = index["manifests"]
    assert isinstance(listed, list)
    assert [d["digest"] for d in listed] == att["manifests"]
    served = _get(env, "back/ok", tag).content
    assert "sha256:" + hashlib.sha256(served).hexdigest() == att["index_digest"]
    for d in listed:
        assert d["mediaType"] == OCI_MANIFEST and d["artifactType"] == INTOTO
        assert d["annotations"][referrers.PREDICATE_ANNOTATION]
    rc, out, err = _verify(env, "back/ok", capsys)
    assert rc == 0, err
    got = json.loads(out)["registry"]
    assert got["source"] == f"referrers tag {tag}"
    assert (got["recorded"], got["extra"]) == (ALL_KINDS, 0)
    assert {s["status"] for s in got["statements"]} == {"recorded"}
    rc, out, err = _verify(env, "back/ok", capsys, as_json=False)
    assert rc == 0, err
    assert "VERIFIED" in out and f"{ALL_KINDS} recorded statements attached" in out
    # promoting the same release under another tag of the repository changes no list
    capsys.readouterr()
    assert main(["release", "promote", env.release, "--to",
                 f"{env.registry}/back/ok:1.1"]) == 0
    assert _index(env, "back/ok") == index


def test_the_index_keeps_entries_others_wrote(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    client = RegistryClient(env.registry)
    client.push(Store.open(env.store), Digest.parse(env.digest),
                f"{env.registry}/back/shared@{env.digest}")
    sig = referrers._canon({  # another tool's signature, already listed under the image
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": FOREIGN_SIG,
        "config": {"mediaType": referrers.EMPTY_MEDIA, "size": 2,
                   "digest": str(Digest.of(referrers.EMPTY))},
        "layers": [{"mediaType": referrers.EMPTY_MEDIA, "size": 2,
                    "digest": str(Digest.of(referrers.EMPTY))}],
        "subject": {"mediaType": _subject(env).media_type, "digest": env.digest,
                    "size": _subject(env).size}})
    referrers._push_blob(client, Store.open(env.store), "back/shared", referrers.EMPTY,
                         referrers.EMPTY_MEDIA)
    referrers.put_manifest(client, "back/shared", sig, OCI_MANIFEST)
    theirs = referrers.index_descriptor(sig)
    _put_index(env, "back/shared", {"schemaVersion": 2, "mediaType": OCI_INDEX,
                                    "manifests": [theirs]})
    att = _promote(env, "back/shared", capsys)
    listed = _index(env, "back/shared")["manifests"]
    assert isinstance(listed, list)
    assert listed[0] == theirs and [d["digest"] for d in listed[1:]] == att["manifests"]
    rc, out, err = _verify(env, "back/shared", capsys)
    assert rc == 0, err
    rows = json.loads(out)["registry"]["statements"]
    assert [r["status"] for r in rows].count("ignored") == 1
    assert f"artifactType {FOREIGN_SIG}" in [r["detail"] for r in rows]


def test_a_statement_replaced_by_an_untrusted_signature_is_refused(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _promote(env, "back/resigned", capsys)
    index = _index(env, "back/resigned")
    listed = index["manifests"]
    assert isinstance(listed, list)
    body = _attach_raw(env, "back/resigned", _untrusted_copy(env),
                       "https://in-toto.io/attestation/test-result/v0.1")
    gpu = Digest.parse(referrers.index_descriptor(body)["digest"])
    at = next(i for i, d in enumerate(listed)
              if d["annotations"][referrers.TITLE_ANNOTATION] == "dsv4-topk-gpu.dsse.json")
    listed[at] = referrers.index_descriptor(body)
    _put_index(env, "back/resigned", index)
    rc, _, err = _verify(env, "back/resigned", capsys, as_json=False)
    assert rc == 63, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("patchbake: error: untrusted: ") and gpu.hex[:16] in line
    assert "none of which the trust policy allows" in line


def test_without_the_referrers_tag_cosigns_tag_is_read_and_checked_too(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    att = _promote(env, "back/cosign", capsys)
    gone = requests.delete(f"http://{env.registry}/v2/back/cosign/manifests/"
                           f"{att['index_digest']}", timeout=10)
    assert gone.status_code == 202, gone.text
    assert _get(env, "back/cosign", str(att["index_tag"])).status_code == 404
    rc, out, err = _verify(env, "back/cosign", capsys)
    assert rc == 0, err
    got = json.loads(out)["registry"]
    assert got["source"] == f"cosign tag {att['att_tag']}" and got["recorded"] == ALL_KINDS
    # tamper there: one layer of cosign's manifest swapped for the untrusted copy
    client = RegistryClient(env.registry)
    manifest = _get(env, "back/cosign", str(att["att_tag"])).json()
    bad = _untrusted_copy(env)
    layer = referrers._push_blob(client, Store.open(env.store), "back/cosign", bad,
                                 referrers.DSSE_MEDIA)
    manifest["layers"][0] = {**manifest["layers"][0], **layer}
    referrers.put_manifest(client, "back/cosign", referrers._canon(manifest), OCI_MANIFEST,
                           tag=str(att["att_tag"]))
    rc, _, err = _verify(env, "back/cosign", capsys, as_json=False)
    assert rc == 63, err
    assert "error: untrusted: statement " in err and ", cosign tag)" in err


def test_a_statement_removed_from_the_list_is_missing(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _promote(env, "back/removed", capsys)
    index = _index(env, "back/removed")
    listed = index["manifests"]
    assert isinstance(listed, list)
    index["manifests"] = [d for d in listed if not d["annotations"][
        referrers.TITLE_ANNOTATION].startswith("benchmark-")]
    _put_index(env, "back/removed", index)
    rc, _, err = _verify(env, "back/removed", capsys, as_json=False)
    assert rc == 63, err
    assert "error: missing: benchmark-dsv4-topk-gpu.dsse.json, which release " in err
    assert "1 missing of 7" in err


def test_a_statement_about_another_image_is_a_subject_mismatch(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _promote(env, "back/subject", capsys)
    index = _index(env, "back/subject")
    listed = index["manifests"]
    assert isinstance(listed, list)
    # the real envelope, attached with the subject of another image
    other = Descriptor(OCI_MANIFEST, Digest.of(b"another image"), 13)
    body = _attach_raw(env, "back/subject", _evidence(env).read_bytes(),
                       "https://in-toto.io/attestation/test-result/v0.1", subject=other)
    _put_index(env, "back/subject", {**index, "manifests": [
        *listed, referrers.index_descriptor(body)]})
    rc, _, err = _verify(env, "back/subject", capsys, as_json=False)
    assert rc == 63, err
    assert "error: subject mismatch: " in err and str(other.digest) in err


def test_an_image_with_nothing_attached_is_refused(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    RegistryClient(env.registry).push(Store.open(env.store), Digest.parse(env.digest),
                                      f"{env.registry}/back/bare@{env.digest}")
    rc, _, err = _verify(env, "back/bare", capsys, as_json=False)
    assert rc == 63, err
    assert "error: none found: no statements are attached to " in err
    assert "release promote" in err


def test_from_registry_needs_a_digest(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["release", "verify", "--from-registry", f"{env.registry}/back/ok:1.0"]) == 2
    assert "name the image by digest" in capsys.readouterr().err
    assert main(["release", "verify"]) == 2
    assert "name the release (an id, or sha256:DIGEST), or the image with --from-registry" \
        in capsys.readouterr().err
    other = "sha256:" + "0" * 64
    assert main(["release", "verify", "--digest", other, "--from-registry",
                 f"{env.registry}/back/ok@{env.digest}"]) == 2
    assert "name two images" in capsys.readouterr().err
