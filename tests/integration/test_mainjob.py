"""The README's main job against the real sdist, the real patch and the embedded bake."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.sdist]


def _run(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # this checkout's package, not whichever one pip installed
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PATCHBAKE_HOME": str(home),
           "PATCHBAKE_NO_PROGRESS": "1", "HOME": str(home), "PYTHONPATH": str(REPO / "tools")}
    return subprocess.run([sys.executable, "-m", "patchbake", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def _copy_repo(tmp_path: Path) -> Path:
    """A checkout copy: the job writes records under manifests/, not into the real one."""
    dst = tmp_path / "repo"
    dst.mkdir()
    for name in ("pipeline.yaml", "patch", "images"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst / name)
    return dst


def test_main_job_prints_the_identity_chain(shared_home: Path, tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    r = _run(["run", "--json"], shared_home, repo)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    ident = job["identity"]
    steps = [s["step"] for s in job["steps"]]
    assert steps[:5] == ["fetch", "patch check", "apply", "bake", "verify"]
    assert steps[5:] == ["candidate gates"]  # pipeline.yaml's first channel
    assert ident["archive_sha256"] == \
        "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"
    patch = next((repo / "patch").glob("*.patch"))
    import hashlib

    assert ident["patch_sha256"] == hashlib.sha256(patch.read_bytes()).hexdigest()
    assert ident["manifest_digest"].startswith("sha256:")
    counts, _, rest = ident["verified"].partition(" ")
    matched, total = counts.split("/")
    assert matched == total and int(total) >= 1
    assert rest == "baked source files matched a fresh apply"
    record = json.loads((repo / ident["record"]).read_text())
    assert record["manifest_digest"] == ident["manifest_digest"]
    # A second run changes nothing and redoes no bake.
    again = json.loads(_run(["run", "--json"], shared_home, repo).stdout)
    assert again["identity"]["manifest_digest"] == ident["manifest_digest"]
    assert again["identity"]["bake_cached"] is True


def test_main_job_stops_at_the_guard_when_a_hunk_is_dropped(shared_home: Path,
                                                            tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    patch = next((repo / "patch").glob("*.patch"))
    text = patch.read_text()
    # Drop the last hunk: FILES.txt still records its lines.
    head, _, _ = text.rpartition("\n@@ ")
    patch.write_text(head + "\n")
    r = _run(["run"], shared_home, repo)
    assert r.returncode == 21, r.stderr
    assert "lost-line guard failed" in r.stderr
    assert not (repo / "manifests").exists()


def test_main_job_without_the_patch_is_one_line(shared_home: Path, tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    next((repo / "patch").glob("*.patch")).unlink()
    r = _run(["run"], shared_home, repo)
    assert r.returncode == 21, r.stderr
    last = r.stderr.splitlines()[-1]  # after the step names, one line and no traceback
    assert last.startswith("patchbake: error: ") and "Traceback" not in r.stderr
    assert "dsv4-deterministic-topk-v0.25.1.patch does not exist" in last


def test_the_code_bakes_exactly_the_committed_images(shared_home: Path, tmp_path: Path) -> None:
    """The committed evidence is about the committed records' digests: a change to anything
    baked into the image (the in-image verifier, labels, layer writer) moves the digest and
    must come with a rebake and new evidence, never slip in unnoticed."""
    repo = _copy_repo(tmp_path)
    pipeline = (REPO / "pipeline.yaml").read_text()
    for name in ("sm89-serving-offline", "sm89-serving-offline-v0.33.0"):
        assert f"  {name}:" in pipeline
        committed = json.loads((REPO / "manifests" / "images" / name / "latest.json").read_text())
        r = _run(["--json", "bake", name], shared_home, repo)
        assert r.returncode == 0, r.stderr
        baked = json.loads(r.stdout)["digest"]
        want = committed.get("manifest_digest") or committed.get("digest")
        assert baked == want, f"{name}: the code bakes {baked}, the committed record is {want}"
        assert (REPO / "manifests" / "evidence" / want.removeprefix("sha256:")).is_dir()


@pytest.mark.sdist033
def test_lineage_picks_the_image_run_bakes(shared_home: Path, tmp_path: Path) -> None:
    """`--lineage v0.33.0 run` (or `run --lineage v0.33.0`) bakes that lineage's image, the
    definition bound to it, instead of refusing the default lineage's one."""
    repo = _copy_repo(tmp_path)
    committed = json.loads((REPO / "manifests" / "images" / "sm89-serving-offline-v0.33.0"
                            / "latest.json").read_text())
    for args in (["--lineage", "v0.33.0", "run", "--json"], ["run", "--lineage", "v0.33.0",
                                                             "--json"]):
        r = _run(args, shared_home, repo)
        assert r.returncode == 0, r.stderr
        job = json.loads(r.stdout)
        assert job["lineage"] == "v0.33.0"
        assert job["identity"]["image"] == "sm89-serving-offline-v0.33.0"
        assert job["identity"]["manifest_digest"] == (committed.get("manifest_digest")
                                                      or committed.get("digest"))
