"""The whole path on the offline stand-in, every part real: `patchbake run` -> the CPU suite
(host runner, real pytest and torch) -> signed evidence -> `release create` -> `release
gates` -> `release promote` to the loopback registry -> `release export` -> `release
verify` from a fresh clone with no store and no registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from release_support import make_repo

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.registry]

REPO = Path(__file__).resolve().parents[2]
CHANNELS = {
    "candidate": {"gates": ["guard", "record", "verify", "reproducible"]},
    "validated": {"gates": ["evidence"], "suites": ["dsv4-topk-cpu"]},
}


def pb(root: Path, *args: str, home: Path, key: Path | None = None,
       check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_HOME": str(home),
           "PATCHBAKE_PIPELINE": str(root / "pipeline.yaml"), "PATCHBAKE_NO_PROGRESS": "1"}
    if key:
        env["PATCHBAKE_SIGNING_KEY"] = str(key)
    out = subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=root, env=env,
                         capture_output=True, text=True, check=False)
    if check:
        assert out.returncode == 0, f"{args}: {out.stderr[-2000:]}"
    return out


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.mark.slow
def test_run_to_verified_release_from_a_fresh_clone(tmp_path: Path, shared_home: Path,
                                                    registry: str) -> None:
    pytest.importorskip("torch", reason="the CPU suite needs torch (make setup-suite)")
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys", CHANNELS)

    run = json.loads(pb(root, "--json", "run", home=shared_home).stdout)
    digest = run["identity"]["manifest_digest"]
    assert run["gates"]["channel"] == "candidate" and run["gates"]["passed"], run["gates"]

    results = tmp_path / "cpu.json"
    pb(root, "fixtures", "run", "dsv4-topk-cpu", "--image", "sm89-serving-offline",
       "--runner", "host", "--results-out", str(results), home=shared_home)
    pb(root, "evidence", "sign", str(results), "--key", str(k.evidence), home=shared_home)

    gates = json.loads(pb(root, "--json", "release", "gates", "--channel", "validated",
                          "--image", "sm89-serving-offline", home=shared_home).stdout)
    assert gates["passed"] and [d["gate"] for d in gates["decisions"]] == [
        "guard", "record", "verify", "reproducible", "evidence"]
    made = json.loads(pb(root, "--json", "release", "create", "--channel", "validated",
                         "--image", "sm89-serving-offline", home=shared_home,
                         key=k.release).stdout)
    rid = made["release"]
    assert made["digest"] == digest and made["new"]
    again = json.loads(pb(root, "--json", "release", "create", "--channel", "validated",
                          "--image", "sm89-serving-offline", home=shared_home,
                          key=k.release).stdout)
    assert again["release"] == rid and not again["new"]  # idempotent

    promoted = json.loads(pb(root, "--json", "release", "promote", rid, "--to",
                             f"{registry}/path/serving:0.25.1-1", home=shared_home,
                             key=k.release).stdout)
    assert promoted["digest"] == digest
    pulled = json.loads(pb(root, "--json", "release", "verify", rid, "--image",
                           f"{registry}/path/serving:0.25.1-1", home=shared_home).stdout)
    assert pulled["checks"][-1]["check"] == "image"  # identity.verify_image on the pull
    assert "baked source files matched a fresh apply" in pulled["checks"][-1]["detail"]
    pb(root, "release", "export", rid, "--to", str(tmp_path / "bundle"), home=shared_home)

    # downstream: a fresh clone, an empty store, no registry (nothing listens there now)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "release")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    empty = tmp_path / "empty-store"
    out = json.loads(pb(clone, "--json", "release", "verify", rid, home=empty).stdout)
    assert out["digest"] == digest and out["channel"] == "validated"
    assert {c["check"] for c in out["checks"]} >= {"ledger", "VSA", "evidence", "image record",
                                                  "gates"}
    # the real bake's SBOM and provenance, signed at create, verified from a fresh clone
    signed = {c["check"]: c["detail"] for c in out["checks"]}["sbom and provenance"]
    assert signed.startswith("sbom: 2 components") and "provenance: 4 resolved" in signed
    by_digest = json.loads(pb(clone, "--json", "release", "verify", digest, home=empty).stdout)
    assert by_digest["release"] == rid
    bundled = json.loads(pb(clone, "--json", "release", "verify", rid, "--bundle",
                            str(tmp_path / "bundle"), home=empty).stdout)
    assert bundled["release"] == rid
    ledger = json.loads(pb(clone, "--json", "ledger", "verify", home=empty).stdout)
    assert [e["kind"] for e in ledger["entries"]] == ["release", "promotion"]
    assert not any(empty.glob("blobs/sha256/*")), "verify must not need or fill a store"

    # a byte of the committed evidence changes: the clone's verify says so, non-zero
    ev = next((clone / "manifests" / "evidence").rglob("*.dsse.json"))
    ev.write_text(ev.read_text().replace('"payload": "', '"payload": "e30K', 1))
    bad = pb(clone, "release", "verify", rid, home=empty, check=False)
    assert bad.returncode == 62 and "evidence" in bad.stderr
