"""Promotion against the real distribution registry (Debian's docker-registry, 2.8: no
referrers API), with a real bake, real Ed25519 keys and the real ledger.

- the statements are attached as OCI 1.1 artifact manifests with ``subject`` and, since
  this registry has no referrers API, under cosign's ``sha256-<hex>.att`` tag;
- the gate mutation matrix: each input removed, corrupted or re-signed in turn -> the
  promotion is refused with the right reason and exit code, and nothing moved;
- kill -9 at seeded random moments of a promotion (20 trials): the tag and the ledger
  agree, and a re-run completes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from patchbake.digest import Digest
from patchbake import config
from patchbake.images.bake import bake_image
from patchbake.entry import main
from patchbake.release import discover, ledger, manifest, referrers
from patchbake.release.rebake import _seed
from patchbake.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from release_support import Keys, make_repo, sign_all, write_policy

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.registry]

IMAGE = "sm89-serving-offline"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Env:
    root: Path
    keys: Keys
    store: Path
    registry: str
    digest: str
    release: str

    def ledger_bytes(self) -> bytes:
        p = manifest.releases_dir(self.root) / ledger.NAME
        return p.read_bytes() if p.exists() else b""

    def tag(self, repo: str, tag: str) -> str | None:
        r = requests.get(f"http://{self.registry}/v2/{repo}/manifests/{tag}", timeout=10,
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        return None if r.status_code == 404 else "sha256:" + hashlib.sha256(
            r.content).hexdigest()


def private_store(shared_home: Path, root: Path, where: Path) -> Store:
    """A store of this test's own (its image blobs may be corrupted), seeded with the
    shared store's pinned inputs the way the reproducible gate seeds its fresh store."""
    shared = Store.open(shared_home)
    p = config.load(root / "pipeline.yaml")
    bake_image(p, None, shared, record=False)  # base, sources and patched tree are there
    base = Digest.parse(yaml.safe_load((root / "images" / f"{IMAGE}.yaml").read_text())
                        ["base"]["digest"])
    store = Store.open(where)
    _seed(shared, store, base)
    return store


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_home: Path,
        registry: str) -> Iterator[Env]:
    yield from released(tmp_path_factory.mktemp("release"), shared_home, registry)


def released(tmp: Path, shared_home: Path, registry: str) -> Iterator[Env]:
    """A repository with a release of the offline image in ``sm89-stable`` (every kind of
    statement: evidence, benchmark, approval, SBOM, provenance, VSA), its own store."""
    root = tmp / "repo"
    k = make_repo(root, tmp / "keys")
    store = private_store(shared_home, root, tmp / "store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
        mp.setenv("PATCHBAKE_HOME", str(store.root))
        mp.setenv("PATCHBAKE_SIGNING_KEY", str(k.release))
        mp.chdir(root)
        baked = bake_image(config.load(root / "pipeline.yaml"), None, store)
        sign_all(root, k, IMAGE, str(baked.digest))
        out = subprocess.run([sys.executable, "-m", "patchbake", "--json", "release", "create",
                              "--channel", "sm89-stable", "--image", IMAGE],
                             capture_output=True, text=True, env=_env(), check=False)
        assert out.returncode == 0, out.stderr
        made = json.loads(out.stdout)
        assert made["gates"]["passed"] and made["new"]
        yield Env(root, k, store.root, registry, str(baked.digest), made["release"])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_NO_PROGRESS": "1"}


def promote(e: Env, tag: str, repo: str = "rel/app") -> tuple[int, str]:
    rc = main(["--json", "release", "promote", e.release, "--to",
               f"{e.registry}/{repo}:{tag}"])
    return rc, ""


def test_promotion_attaches_statements_with_the_tag_fallback(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "release", "promote", env.release, "--to",
                 f"{env.registry}/rel/app:1.0"]) == 0, capsys.readouterr().err
    done = json.loads(capsys.readouterr().out)
    assert done["digest"] == env.digest and not done["already"]
    att = done["attached"]
    assert att["mode"] == "tag-fallback"  # distribution 2.8 has no referrers API
    assert att["att_tag"] == env.digest.replace(":", "-") + ".att"
    assert env.tag("rel/app", "1.0") == env.digest
    assert env.tag("rel/app", att["att_tag"]) == att["att_digest"]
    client = referrers.RegistryClient(env.registry)
    assert not referrers.supports_referrers(client, "rel/app", Digest.parse(env.digest))
    types = discover.predicate_types(client, "rel/app", Digest.parse(env.digest))
    assert sorted(types) == sorted([
        "https://in-toto.io/attestation/test-result/v0.1"] * 2 + [
        "urn:patchbake:predicate:benchmark:v1", "urn:patchbake:predicate:approval:v1",
        "https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1",
        "https://slsa.dev/verification_summary/v1"])
    # each artifact manifest is an OCI 1.1 manifest whose subject is the image
    for d in att["manifests"]:
        m = requests.get(f"http://{env.registry}/v2/rel/app/manifests/{d}", timeout=10,
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
                         ).json()
        assert m["subject"]["digest"] == env.digest
        assert m["artifactType"] == "application/vnd.in-toto+json"
    entries = ledger.read(manifest.releases_dir(env.root))
    assert [x.kind for x in entries][-1] == "promotion"
    # re-running changes nothing
    before = env.ledger_bytes()
    assert main(["--json", "release", "promote", env.release, "--to",
                 f"{env.registry}/rel/app:1.0"]) == 0
    assert json.loads(capsys.readouterr().out)["already"] is True
    assert env.ledger_bytes() == before


def test_the_attached_sbom_and_provenance_validate_as_found_in_the_registry(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """What a consumer finds beside the image (the .att tag here): the signed SBOM passes
    the CycloneDX project's validator, the provenance the in-toto attestation bindings."""
    validation = pytest.importorskip("cyclonedx.validation.json",
                                     reason="a test extra: pip install -e '.[test]'")
    schema = pytest.importorskip("cyclonedx.schema")
    pytest.importorskip("in_toto_attestation", reason="a test extra: pip install -e '.[test]'")
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement as ItStatement
    assert main(["--json", "release", "promote", env.release, "--to",
                 f"{env.registry}/rel/app:1.0"]) == 0, capsys.readouterr().err
    att = json.loads(capsys.readouterr().out)["attached"]
    index = requests.get(f"http://{env.registry}/v2/rel/app/manifests/{att['att_tag']}",
                         timeout=10, headers={"Accept": "application/vnd.oci.image."
                                              "manifest.v1+json"}).json()
    found = {}
    for layer in index["layers"]:
        ptype = layer["annotations"][referrers.PREDICATE_ANNOTATION]
        blob = requests.get(f"http://{env.registry}/v2/rel/app/blobs/{layer['digest']}",
                            timeout=10).content
        found[ptype] = json.loads(base64.b64decode(json.loads(blob)["payload"]))
    bom = found["https://cyclonedx.org/bom"]
    assert bom["subject"][0]["digest"] == {"sha256": env.digest[7:]}
    assert validation.JsonStrictValidator(schema.SchemaVersion.V1_6).validate_str(
        json.dumps(bom["predicate"])) is None
    prov = found["https://slsa.dev/provenance/v1"]
    ItStatement.copy_from_pb(json_format.ParseDict(prov, statement_pb2.Statement())).validate()
    pb = json_format.ParseDict(prov["predicate"], provenance_pb2.Provenance())
    assert pb.build_definition.external_parameters["definition"] == IMAGE
    assert prov["subject"][0]["digest"] == {"sha256": env.digest[7:]}


def test_a_tag_that_names_another_image_never_moves(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    other = requests.put(f"http://{env.registry}/v2/rel/taken/blobs/uploads/", timeout=10)
    assert other.status_code in (202, 404, 405)  # only to show the registry answers
    store = Store.open(env.store)
    from patchbake.oci.registry import RegistryClient

    client = RegistryClient(env.registry)
    base = json.loads(store.read_blob(Digest.parse(env.digest)))["layers"]
    assert base  # push the stand-in base under the tag first
    base_digest = Digest.parse(yaml.safe_load((env.root / "images" / f"{IMAGE}.yaml")
                                              .read_text())["base"]["digest"])
    client.push(store, base_digest, f"{env.registry}/rel/taken:1.0")
    before = env.ledger_bytes()
    assert main(["release", "promote", env.release, "--to",
                 f"{env.registry}/rel/taken:1.0"]) == 32
    assert "refusing to move it" in capsys.readouterr().err
    assert env.tag("rel/taken", "1.0") == str(base_digest) and env.ledger_bytes() == before


# -- the gate mutation matrix ---------------------------------------------------------
def _flip(path: Path) -> None:
    env = json.loads(path.read_text())
    payload = bytearray(env["payload"].encode())
    payload[20] = ord("B") if payload[20] != ord("B") else ord("C")
    env["payload"] = payload.decode()
    path.write_text(json.dumps(env))


def _resign(e: Env, path: Path) -> None:
    from patchbake.evidence import dsse, keys

    env = dsse.parse(path.read_bytes(), str(path))
    path.write_text(json.dumps(dsse.sign(env.payload, keys.load_private(e.keys.other)
                                         ).to_json()))


def _reapprove(change: Callable[[dict[str, Any]], object], digest: str | None = None
               ) -> Callable[[Env, Path], None]:
    """Replace the approval with one the approver signed with ``change`` made to its
    predicate (and about ``digest``, if given)."""
    def mutate(e: Env, path: Path) -> None:
        from patchbake.evidence import dsse, keys

        st = json.loads(dsse.parse(path.read_bytes(), str(path)).payload)
        change(st["predicate"])
        if digest:
            st["subject"][0]["digest"] = {"sha256": digest}
        payload = json.dumps(st, sort_keys=True, separators=(",", ":")).encode()
        path.write_text(json.dumps(dsse.sign(payload, keys.load_private(e.keys.approver)
                                             ).to_json()))
    return mutate


def _release_key_approves(e: Env, p: Path) -> None:
    doc = yaml.safe_load(p.read_text())
    doc["keys"]["release"]["roles"] = ["release", "approver"]
    p.write_text(yaml.safe_dump(doc))


def _evidence(e: Env, name: str) -> Path:
    return e.root / "manifests" / "evidence" / e.digest[7:] / name


def _overlay_blob(e: Env) -> Path:
    layer = Digest.parse(json.loads(Store.open(e.store).read_blob(Digest.parse(e.digest)))
                         ["layers"][-1]["digest"])
    return Store.open(e.store).blob_path(layer)


MUTATIONS: dict[str, tuple[Callable[[Env], Path], Callable[[Env, Path], None], int, str]] = {
    "evidence removed": (lambda e: _evidence(e, "dsv4-topk-cpu.dsse.json"),
                         lambda e, p: p.unlink(), 60, "suite 'dsv4-topk-cpu': missing"),
    "evidence corrupted": (lambda e: _evidence(e, "dsv4-topk-gpu.dsse.json"),
                           lambda e, p: _flip(p), 60, "does not verify"),
    # the approval names the envelope it approved, so its gate is the first to refuse
    "evidence re-signed": (lambda e: _evidence(e, "dsv4-topk-gpu.dsse.json"), _resign, 60,
                           "is for another release: it approves manifests/evidence/"),
    "signature corrupted": (lambda e: _evidence(e, "dsv4-topk-cpu.dsse.json"),
                            lambda e, p: p.write_text(p.read_text().replace(
                                '"sig": "', '"sig": "AAAA', 1)), 60, "does not verify"),
    "evidence key untrusted": (lambda e: e.root / "manifests/trust-policy.yaml",
                               lambda e, p: write_policy(e.root, e.keys, drop="evidence"), 60,
                               "untrusted-key"),
    "trust policy corrupted": (lambda e: e.root / "manifests/trust-policy.yaml",
                               lambda e, p: p.write_text("version: [\n"), 60,
                               "trust policy"),
    "ledger line altered": (lambda e: manifest.releases_dir(e.root) / ledger.NAME,
                            lambda e, p: p.write_bytes(p.read_bytes().replace(
                                b'"channel":"sm89-stable"', b'"channel":"sm89-stablE"', 1)),
                            61, "ledger.jsonl:1"),
    "image byte": (_overlay_blob, lambda e, p: _corrupt(p), 60, "verify"),
    "patch byte": (lambda e: e.root / "patch" / "dsv4-deterministic-topk-v0.25.1.patch",
                   lambda e, p: p.write_bytes(p.read_bytes().replace(b"\n+", b"\n+ ", 1)),
                   60, "guard"),
    "benchmark figure": (lambda e: _evidence(e, "benchmark-dsv4-topk-gpu.dsse.json"),
                         lambda e, p: _flip(p), 60, "benchmark 'dsv4-topk-gpu'"),
    "approval removed": (lambda e: next(_evidence(e, "").glob("approval-*")),
                         lambda e, p: p.unlink(), 60, "0 of 1 signed approval"),
    "approval expired": (lambda e: next(_evidence(e, "").glob("approval-*")),
                         _reapprove(lambda p: p.update(issued="2026-01-01T00:00:00Z",
                                                       expires="2026-01-08T00:00:00Z")),
                         60, "expired at 2026-01-08T00:00:00Z"),
    "approval without expiry": (lambda e: next(_evidence(e, "").glob("approval-*")),
                                _reapprove(lambda p: p.pop("expires")), 60,
                                "has no expiry"),
    "approval beyond the cap": (lambda e: next(_evidence(e, "").glob("approval-*")),
                                _reapprove(lambda p: p.update(expires="2099-01-01T00:00:00Z")),
                                60, "beyond the 30-day cap"),
    "approval of another lineage": (
        lambda e: next(_evidence(e, "").glob("approval-*")),
        _reapprove(lambda p: p["release"].update(lineage="v0.33.0")),
        60, "is for another release: it approves lineage 'v0.33.0'"),
    "approval of other figures": (
        lambda e: next(_evidence(e, "").glob("approval-*")),
        _reapprove(lambda p: p["release"]["inputs"][0].update(
            sha256="0" * 64)), 60, "is for another release: it approves manifests/evidence/"),
    "approval of another image": (lambda e: next(_evidence(e, "").glob("approval-*")),
                                  _reapprove(lambda p: None, "cd" * 32), 60,
                                  "the statement is about sha256:cdcd"),
    "release key approves": (lambda e: e.root / "manifests/trust-policy.yaml",
                             _release_key_approves, 60, "approve their own release"),
    "sbom corrupted": (lambda e: next(_evidence(e, "").glob("sbom-*")),
                       lambda e, p: _flip(p), 60, "not the envelope the release recorded"),
    "provenance removed": (lambda e: next(_evidence(e, "").glob("provenance-*")),
                           lambda e, p: p.unlink(), 60, "provenance-"),
}


def _corrupt(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(p, 0o644)
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_gate_mutation_matrix_refuses_and_moves_nothing(
        env: Env, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    target, mutate, code, reason = MUTATIONS[name]
    path = target(env)
    saved = path.read_bytes()
    mode = path.stat().st_mode
    before = env.ledger_bytes()
    tag = "m-" + name.replace(" ", "-")
    try:
        mutate(env, path)
        capsys.readouterr()
        rc = main(["release", "promote", env.release, "--to", f"{env.registry}/rel/mut:{tag}"])
        err = capsys.readouterr().err
        assert rc == code, err
        assert reason in err, err
        if code == 61:
            assert env.ledger_bytes() != before  # the mutation itself; promote added nothing
        else:
            assert env.ledger_bytes() == before
        assert env.tag("rel/mut", tag) is None
    finally:
        if path.exists():
            os.chmod(path, 0o644)
        path.write_bytes(saved)
        os.chmod(path, mode)
    assert env.ledger_bytes() == before


# -- kill -9 during promotion ---------------------------------------------------------
def _state(e: Env, tag: str) -> tuple[bool, bool, bool]:
    rdir = manifest.releases_dir(e.root)
    entries = ledger.read(rdir)
    in_ledger = any(x.kind == "promotion" and (x.to or "").endswith(
        f"/rel/kill:{tag}") for x in entries)
    return e.tag("rel/kill", tag) == e.digest, in_ledger, (rdir / "promotion.pending.json"
                                                           ).exists()


@pytest.mark.slow
def test_kill_9_during_promotion_leaves_tag_and_ledger_consistent(env: Env) -> None:
    rng = random.Random(20261201)
    cmd = [sys.executable, "-m", "patchbake", "release", "promote", env.release, "--to"]
    t0 = time.monotonic()  # one full promotion, to spread the kill moments over it
    full = subprocess.run([*cmd, f"{env.registry}/rel/kill:anchor"], env=_env(),
                          capture_output=True, text=True, check=False)
    assert full.returncode == 0, full.stderr
    span = time.monotonic() - t0
    seen = set()
    for trial in range(20):
        tag = f"t{trial}"
        proc = subprocess.Popen([*cmd, f"{env.registry}/rel/kill:{tag}"], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if trial % 2:  # anywhere in the run (start-up, gates, uploads, tagging)
            time.sleep(rng.uniform(0.05, span))
        else:  # around the commit point: soon after the journal appears (or the end)
            journal = manifest.releases_dir(env.root) / "promotion.pending.json"
            while not journal.exists() and proc.poll() is None:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.05))
        proc.kill()
        proc.wait()
        tagged, recorded, pending = _state(env, tag)
        seen.add((tagged, recorded, pending))
        assert not recorded or tagged, "the ledger records a promotion whose tag is not set"
        assert not tagged or recorded or pending, "a tag was set with no record and no journal"
        rerun = subprocess.run([*cmd, f"{env.registry}/rel/kill:{tag}"], env=_env(),
                               capture_output=True, text=True, check=False)
        assert rerun.returncode == 0, rerun.stderr
        assert _state(env, tag) == (True, True, False)
    assert main(["ledger", "verify"]) == 0
    promotions = [x for x in ledger.read(manifest.releases_dir(env.root))
                  if x.kind == "promotion" and "/rel/kill:t" in (x.to or "")]
    assert len(promotions) == 20  # exactly one per tag, however often it was re-run
    print(f"kill -9 states seen (tagged, recorded, journal): {sorted(seen)}")
    shutil.rmtree(env.root / "unused", ignore_errors=True)
