"""The image's SBOM (CycloneDX) and SLSA provenance: built from the bake's record, valid
for the CycloneDX project's validator and the in-toto attestation bindings (the test
extras; skipped with a reason where they are not installed), signed at release create,
carried in the bundle and checked by ``release verify`` fail-closed."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from patchbake import config
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.errors import AttestationError
from patchbake.evidence import bakefacts, dsse, keys, policy, provenance, sbom
from patchbake.evidence.intoto import Statement
from patchbake.fsutil import pretty_json, sha256_bytes
from patchbake.images.record import ImageRecord, record_path
from patchbake.release import bundle, create, imageattest, manifest
from patchbake.release.facts import Attestation
from patchbake.sources import lockfile
from patchbake.sources.lockfile import DebPackage, Lock, OsRoot, Target, Wheel
from patchbake.store import Store
from release_support import CHANNELS, REPO, Keys, make_release, make_repo

DEFINITION = "sm89-serving-offline"
LATEST = json.loads((REPO / "manifests/images" / DEFINITION / "latest.json").read_text())
DIGEST = Digest.parse(LATEST["digest"])


def _sha(n: int) -> Digest:
    return Digest.from_hex(f"{n:02x}" * 32)


LOCK = Lock("v0.25.1", "vllm==0.25.1", "pip 25.1.1", 0,
            Target("3.11", ("cp311", "abi3", "none"), ("manylinux_2_28_x86_64",),
                   "/usr/local/lib/python3.11/dist-packages"),
            OsRoot("debian", "bookworm", "amd64", "minbase", ("python3",),
                   (DebPackage("libc6", "2.36-9+deb12u4", "amd64",
                               "libc6_2.36-9+deb12u4_amd64.deb", _sha(1)),
                    DebPackage("python3.11", "3.11.2-6", "amd64",
                               "python3.11_3.11.2-6_amd64.deb", _sha(2)))),
            (Wheel("vllm", "0.25.1", "vllm-0.25.1-cp38-abi3-manylinux1_x86_64.whl", _sha(3)),
             Wheel("torch", "2.11.0", "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                   _sha(4)),
             Wheel("typing-extensions", "4.12.2", "typing_extensions-4.12.2-py3-none-any.whl",
                   _sha(5))))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Keys]:
    root = tmp_path / "repo"
    # the signed gates only: the store-bound ones (guard, verify, ...) are integration tests
    k = make_repo(root, tmp_path / "keys", {c: CHANNELS[c] for c in ("validated",
                                                                      "sm89-stable")})
    shutil.copytree(REPO / "manifests/images" / DEFINITION,
                    root / "manifests/images" / DEFINITION)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    return root, k


def _facts(root: Path = REPO, lock: Lock | None = None) -> bakefacts.BakeFacts:
    p = config.load(root / "pipeline.yaml")
    b = bakefacts.gather(p, ImageRecord.load(record_path(root, DEFINITION, DIGEST)))
    if lock is None:
        return b
    return dataclasses.replace(b, lock=bakefacts.LockInput("images/locks/vllm-0.25.1.lock",
                                                           _sha(9), lock))


def _cyclonedx_errors(doc: dict[str, Any]) -> Any:
    validation = pytest.importorskip(
        "cyclonedx.validation.json", reason="the CycloneDX validator is a test extra: "
        "pip install -e '.[test]'")
    schema = pytest.importorskip("cyclonedx.schema")
    return validation.JsonStrictValidator(schema.SchemaVersion.V1_6).validate_str(
        json.dumps(doc))


def _in_toto_check(doc: dict[str, Any]) -> Any:
    """The in-toto attestation project's bindings: the Statement's own validate() and a
    strict parse of the predicate into its SLSA provenance v1 message (unknown fields and
    wrong types refused)."""
    pytest.importorskip("in_toto_attestation", reason="the in-toto attestation bindings "
                        "are a test extra: pip install -e '.[test]'")
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement as ItStatement
    st = ItStatement.copy_from_pb(json_format.ParseDict(doc, statement_pb2.Statement()))
    st.validate()
    return json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())


def test_the_standins_sbom_is_valid_cyclonedx_and_names_the_patched_vllm() -> None:
    b = _facts()
    doc = sbom.build(b)
    assert _cyclonedx_errors(doc) is None
    assert doc["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": DIGEST.hex}]
    base, vllm = doc["components"]  # the stand-in has these two and nothing else
    assert base["hashes"][0]["content"] == b.base_digest.hex
    ancestor = vllm["pedigree"]["ancestors"][0]
    assert ancestor["hashes"][0]["content"] == b.sdist_sha256 and ancestor["version"] == "0.25.1"
    props = {p["name"]: p["value"] for p in vllm["properties"]}
    assert props["dev.patchbake:patch-sha256"] == b.patch_sha256
    assert vllm["pedigree"]["patches"][0]["diff"]["url"] == b.patch_path
    assert sbom.build(b) == doc  # a function of the bake: same bytes every time
    assert sbom.check(doc, DIGEST, "t") == 2


def test_an_sbom_with_a_lock_lists_every_wheel_and_debian_package() -> None:
    purl = pytest.importorskip("packageurl", reason="comes with cyclonedx-python-lib")
    doc = sbom.build(_facts(lock=LOCK))
    assert _cyclonedx_errors(doc) is None
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    for w in LOCK.wheels:
        if w.name == "vllm":  # vLLM is the patched one; the wheel is its ancestor
            anc = by_ref["patched:vllm"]["pedigree"]["ancestors"]
            assert {"alg": "SHA-256", "content": w.sha256.hex} in anc[1]["hashes"]
            continue
        c = by_ref[f"pypi:{w.name}"]
        assert (c["version"], c["hashes"][0]["content"]) == (w.version, w.sha256.hex)
        parsed = purl.PackageURL.from_string(c["purl"])
        assert (parsed.type, parsed.name, parsed.version) == ("pypi", w.name, w.version)
    for p in LOCK.os.packages:
        c = by_ref[f"deb:{p.name}:{p.architecture}"]
        parsed = purl.PackageURL.from_string(c["purl"])
        assert (parsed.type, parsed.namespace, parsed.name, parsed.version) == \
            ("deb", "debian", p.name, p.version)
        assert parsed.qualifiers["arch"] == "amd64" and c["hashes"][0]["content"] == p.sha256.hex


def test_the_lineages_real_lock_gives_a_valid_sbom_of_every_artifact() -> None:
    path = REPO / "images/locks/vllm-0.25.1.lock"
    if not path.is_file():
        pytest.skip("images/locks/vllm-0.25.1.lock is not in this checkout")
    lock, digest = lockfile.load(path)
    b = dataclasses.replace(_facts(), lock=bakefacts.LockInput(
        "images/locks/vllm-0.25.1.lock", digest, lock))
    doc = sbom.build(b)
    assert _cyclonedx_errors(doc) is None
    # the base, the patched vLLM, every other wheel and every Debian package
    assert len(doc["components"]) == 2 + len(lock.wheels) - 1 + len(lock.os.packages)
    hashes = {h["content"] for c in doc["components"] for h in c.get("hashes", [])}
    assert {w.sha256.hex for w in lock.wheels if w.name != "vllm"} <= hashes
    assert {p.sha256.hex for p in lock.os.packages} <= hashes


def test_the_validators_and_the_reader_refuse_a_broken_sbom() -> None:
    doc = sbom.build(_facts())
    doc["components"][0]["hashes"][0]["content"] = "not-hex"
    assert _cyclonedx_errors(doc) is not None
    with pytest.raises(AttestationError, match="not a SHA-256 hex digest"):
        sbom.check(doc, DIGEST, "t")
    with pytest.raises(AttestationError, match="describes another image"):
        sbom.check(sbom.build(_facts()), _sha(7), "t")


def test_provenance_is_valid_for_the_in_toto_bindings_and_names_every_input() -> None:
    b = _facts(lock=LOCK)
    doc = provenance.build(b, "manifests/images/x.json").to_json()
    pb = _in_toto_check(doc)
    assert pb.build_definition.build_type == provenance.BUILD_TYPE
    assert pb.run_details.builder.id.startswith("urn:patchbake:builder:patchbake@")
    deps = {d.name: dict(d.digest) for d in pb.build_definition.resolved_dependencies}
    assert deps == {b.sdist: {"sha256": b.sdist_sha256},
                    b.patch_path: {"sha256": b.patch_sha256},
                    b.files_path: {"sha256": b.files_sha256},
                    "images/locks/vllm-0.25.1.lock": {"sha256": _sha(9).hex},
                    b.base_name: {"sha256": b.base_digest.hex}}
    assert doc["subject"][0]["digest"] == {"sha256": DIGEST.hex}
    assert doc["predicate"]["buildDefinition"]["externalParameters"] == {
        "definition": DEFINITION, "lineage": "v0.25.1"}
    doc["predicate"]["buildDefinition"]["buildTyp"] = "typo"
    with pytest.raises(Exception, match="buildTyp"):
        _in_toto_check(doc)


def test_a_record_of_another_upstream_is_refused() -> None:
    p = config.load(REPO / "pipeline.yaml")
    rec = ImageRecord.load(record_path(REPO, DEFINITION, DIGEST))
    doc = dict(rec.doc)
    doc["upstream"] = {**doc["upstream"], "pin": "vllm==0.24.0 sha256:" + "0" * 64}
    with pytest.raises(AttestationError, match="was baked from vllm==0.24.0") as e:
        bakefacts.gather(p, ImageRecord.from_json(doc, "t"))
    assert e.value.exit_code == 53


def test_image_sbom_and_provenance_commands(repo: tuple[Path, Keys], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sbom.json"
    assert main(["image", "sbom", DEFINITION, "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "CycloneDX 1.6" in table and "patched" in table and str(DIGEST) in table
    assert json.loads(out.read_text())["metadata"]["component"]["hashes"][0]["content"] \
        == DIGEST.hex
    assert main(["--json", "image", "provenance", str(DIGEST)]) == 0
    assert json.loads(capsys.readouterr().out)["predicate"]["buildDefinition"][
        "buildType"] == provenance.BUILD_TYPE
    assert main(["image", "sbom", str(_sha(7))]) == 30
    assert "has no committed image record" in capsys.readouterr().err


def test_release_create_signs_and_records_both_and_the_bundle_verifies(
        repo: tuple[Path, Keys], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, k = repo
    p = config.load(root / "pipeline.yaml")
    make_release(root, k, str(DIGEST))  # signs the evidence and approvals it needs
    made = create.create(p, Store.open(tmp_path / "store"), "validated",
                         f"{DEFINITION}@{DIGEST}", key_path=k.release)
    atts = {a.kind: a for a in made.release.manifest.attestations}
    assert sorted(atts) == ["provenance", "sbom"]
    assert atts["sbom"].signer == "release"
    again = create.create(p, Store.open(tmp_path / "store"), "validated",
                          f"{DEFINITION}@{DIGEST}", key_path=k.release)
    assert not again.new and again.release.id == made.release.id  # same bytes, same id
    vsa_inputs = {e.path for e in made.release.envelopes()}
    assert {atts["sbom"].path, atts["provenance"].path} <= vsa_inputs
    out = tmp_path / "bundle"
    assert main(["release", "export", made.release.id, "--to", str(out)]) == 0
    assert (out / atts["sbom"].path).is_file()
    capsys.readouterr()
    assert main(["--json", "release", "verify", made.release.id, "--bundle", str(out)]) == 0
    checks = {c["check"]: c["detail"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["sbom and provenance"].startswith("sbom: 2 components, signed by release")
    assert "provenance: 4 resolved dependencies" in checks["sbom and provenance"]


def _signed(root: Path, kind: str, st: Statement, key: Path) -> Attestation:
    data = pretty_json(dsse.sign(st.dump(), keys.load_private(key)).to_json())
    path = root / "manifests/evidence" / DIGEST.hex / f"{kind}-test.dsse.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Attestation(kind, path.relative_to(root).as_posix(), st.predicate_type,
                       sha256_bytes(data), keys.keyid_of(keys.load_private(key).public_key()),
                       "test")


@pytest.mark.parametrize("fault, code, message", [
    ("another-subject", 53, f"is about {_sha(7)}, not"),
    ("invalid-sbom", 53, "not a patchbake CycloneDX SBOM"),
    ("invalid-provenance", 53, "buildType must be"),
    ("evidence-key", 62, "none of which the trust policy allows"),
    ("altered", 62, "is not the sbom the release recorded"),
    ("sbom-only", 62, "not one SBOM and one provenance"),
])
def test_release_verify_refuses_a_bad_sbom_or_provenance(
        repo: tuple[Path, Keys], capsys: pytest.CaptureFixture[str],
        fault: str, code: int, message: str) -> None:
    root, k = repo
    docs = imageattest.documents(config.load(root / "pipeline.yaml"), DIGEST)
    assert docs is not None
    st_sbom, st_prov, key = docs.sbom, docs.provenance, k.release
    if fault == "another-subject":
        st_sbom = dataclasses.replace(st_sbom, subject_digest=_sha(7))
    elif fault == "invalid-sbom":
        st_sbom = dataclasses.replace(st_sbom, predicate={**st_sbom.predicate,
                                                          "bomFormat": "SPDX"})
    elif fault == "invalid-provenance":
        pred = json.loads(json.dumps(st_prov.predicate))
        pred["buildDefinition"]["buildType"] = "https://example.invalid/other"
        st_prov = dataclasses.replace(st_prov, predicate=pred)
    elif fault == "evidence-key":
        key = k.evidence
    atts = (_signed(root, "sbom", st_sbom, key), _signed(root, "provenance", st_prov,
                                                          k.release))
    rel = make_release(root, k, str(DIGEST),
                       attestations=atts[:1] if fault == "sbom-only" else atts)
    if fault == "altered":
        (root / atts[0].path).write_bytes((root / atts[0].path).read_bytes() + b" ")
    assert main(["release", "verify", rel.id]) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) <= 2


def test_the_committed_releases_verify_and_say_what_they_attest() -> None:
    """Each committed release verifies; one recorded before releases signed an SBOM says it
    has none, one recorded with them names each and its signer."""
    pol_path = REPO / "manifests/trust-policy.yaml"
    rids = sorted(p.name for p in manifest.releases_dir(REPO).iterdir() if p.is_dir())
    assert rids
    for rid in rids:
        said = dict(bundle.verify(REPO, pol_path, rid).checks)["sbom and provenance"]
        if manifest.load(REPO, rid).manifest.attestations:
            assert said.startswith("sbom: ") and "provenance: " in said, said
            assert "signed by " in said, said
        else:
            assert said.startswith("none recorded"), said
    assert policy.load(pol_path).with_role("release")
