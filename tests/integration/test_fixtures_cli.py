"""End to end through the CLI: a real image in a store, materialised from its verified
layers, the suite run by the host runner, signed, verified; every refusal's exit code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fixtures_toy_image import define_toy, toy_image
from patchbake.entry import main
from patchbake.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "fixtures" / "suites"
PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"


def _suite(name: str, **over: Any) -> dict[str, Any]:
    return {"path": str(SUITES / name), "runner": "host",
            "command": ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-o", "python_files=check_*.py", "--junitxml={junit}",
                        str(SUITES / name)], **over}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import yaml

    store = Store.open(tmp_path / "store")
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    digest, config_digest = toy_image(store, SUITES / "trees" / "patched")
    pipeline = {
        "version": 1, "name": "t",
        "lineages": {"v1": {"name": "x", "patch": "p", "files": "f", "source_record": "s",
                            "upstream": {"kind": "path", "version": "1",
                                         "path": str(SUITES / "trees" / "pristine")}}},
        "suites": {"toy": _suite("passing", patch_sensitive=True, repeats=2,
                                 requires={"min_tests": 4}),
                   "toy-gpu": _suite("passing", requires={"gpu": True,
                                                          "capability": ">=8.9"}),
                   "empty": _suite("empty")},
        "signing": {"trust_policy": "policy.yaml", "evidence_dir": "evidence",
                    "key": str(tmp_path / "keys" / "signing.key")},
    }
    define_toy(tmp_path, pipeline, digest, config_digest, "toy-definition")
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(tmp_path / "pipeline.yaml"))
    return {"root": tmp_path, "digest": digest}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_run_sign_verify_summary(world: dict[str, Any], capsys: pytest.CaptureFixture[str]
                                 ) -> None:
    root, digest = world["root"], world["digest"]
    rc, out, err = cli(capsys, "--json", "fixtures", "run", "toy", "--image", "toy",
                       "--runner", "host", "--results-out", str(root / "r.json"))
    assert rc == 0, err
    result = json.loads(out)
    assert result["image"]["digest"] == digest and result["runner"] == "host"
    assert result["probes"]["patch_sensitivity"]["status"] == "ok"
    assert "pristine upstream" in result["probes"]["patch_sensitivity"]["tree"]
    assert result["probes"]["determinism"]["status"] == "ok"

    rc, out, err = cli(capsys, "--json", "keys", "generate", "--out", str(root / "keys"))
    assert rc == 0, err
    gen = json.loads(out)
    (root / "policy.yaml").write_text("version: 1\nkeys:\n" + gen["policy_entry"])
    rc, out, err = cli(capsys, "--json", "evidence", "sign", str(root / "r.json"),
                       "--image", f"toy@{digest}")
    assert rc == 0, err
    ev = Path(json.loads(out)["signed"][0]["evidence"])
    assert ev == root / "evidence" / digest.removeprefix("sha256:") / "toy.dsse.json"

    # the real pytest JUnit the statement hashes is kept beside the envelope
    junit = ev.with_name("toy.junit.xml")
    assert hashlib.sha256(junit.read_bytes()).hexdigest() == result["junit_sha256"]
    assert b"<testsuite" in junit.read_bytes()
    rc, out, err = cli(capsys, "--json", "evidence", "verify", str(ev), "--image", digest)
    assert rc == 0, err
    assert json.loads(out)["counts_as_evidence"] is True
    assert json.loads(out)["junit"] == "matches"
    kept = junit.read_bytes()
    junit.chmod(0o644)
    junit.write_bytes(kept.replace(b"<testsuite", b"<testsuite x=\"1\"", 1))
    rc, out, err = cli(capsys, "evidence", "verify", str(ev), "--image", digest)
    assert rc == 50 and "it is not the report of the signed run" in err
    junit.write_bytes(kept)

    rc, out, err = cli(capsys, "evidence", "summary", "--image", digest, "--markdown",
                       "--no-verify-files")
    assert rc == 0, err
    assert "The exact image passed 4 focused CPU tests of suite `toy`" in out
    assert "Not run: `empty` (no signed evidence for this image)" in out

    other = "sha256:" + "0" * 64
    rc, out, err = cli(capsys, "evidence", "verify", str(ev), "--image", other)
    assert rc == 50 and f"not {other}" in err
    rc, out, err = cli(capsys, "evidence", "verify", str(root / "nope.json"), "--image", digest)
    assert rc == 50 and "does not exist" in err


def test_signing_refuses_a_probe_on_a_foreign_pristine_tree(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake.sources.digest import tree_digest

    root = world["root"]
    rc, out, err = cli(capsys, "--json", "fixtures", "run", "toy", "--image", "toy",
                       "--runner", "host", "--results-out", str(root / "r.json"))
    assert rc == 0, err
    result = json.loads((root / "r.json").read_text())
    sens = result["probes"]["patch_sensitivity"]
    assert sens["vllm_tree_digest"] == str(tree_digest(SUITES / "trees" / "pristine" / "vllm"))
    rc, out, err = cli(capsys, "--json", "keys", "generate", "--out", str(root / "keys"))
    assert rc == 0, err
    (root / "policy.yaml").write_text("version: 1\nkeys:\n" + json.loads(out)["policy_entry"])
    sens["vllm_tree_digest"] = str(tree_digest(SUITES / "trees" / "patched" / "vllm"))
    (root / "r.json").write_text(json.dumps(result))
    rc, _, err = cli(capsys, "evidence", "sign", str(root / "r.json"))
    assert rc == 50 and "not the pinned upstream's" in err
    assert not (root / "evidence").exists()


def test_refusals_and_failures_exit_codes(world: dict[str, Any],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "fixtures", "run", "toy-gpu", "--image", "toy", "--runner", "host")
    import shutil

    if not shutil.which("nvidia-smi"):
        assert rc == 41 and "needs a CUDA GPU" in err
    rc, _, err = cli(capsys, "fixtures", "run", "empty", "--image", "toy", "--runner", "host")
    assert rc == 40 and "collected no tests" in err
    rc, _, err = cli(capsys, "fixtures", "run", "tyo", "--image", "toy")
    assert rc == 3 and "did you mean 'toy'" in err
    rc, _, err = cli(capsys, "evidence", "sign", str(world["root"] / "absent.json"),
                     "--key", str(world["root"] / "no.key"))
    assert rc == 50 and "does not exist" in err
