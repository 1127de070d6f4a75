"""The real Docker engine: `docker load` of our archive, the in-image verifier in a
container with no network, `verify docker:NAME`, the engine backend, and the engine's
non-reproducibility measured (two builds of one Dockerfile -> two Image IDs)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from images_repo import cli_json, repo_copy

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.sdist]
SP = "/usr/local/lib/python3.12/dist-packages"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300,
                        check=False)
    if check and cp.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {cp.stderr}")
    return cp


@pytest.fixture
def withpy(tmp_path: Path, shared_home: Path, docker_engine: str) -> Iterator[tuple[Path, list[str]]]:
    root = repo_copy(tmp_path)
    s = cli_json(root, shared_home, "image", "standin", "--with-python")
    text = (root / "images" / "sm89-serving-offline.yaml").read_text()
    pinned = text.split("digest: ", 1)[1].split("\n", 1)[0]
    (root / "images" / "withpy.yaml").write_text(
        text.replace(pinned, s["digest"]).replace("  source: standin\n",
                                                  "  source: standin\n  variant: with-python\n"))
    p = root / "pipeline.yaml"
    p.write_text(p.read_text().replace("images:\n", "images:\n  withpy: images/withpy.yaml\n"))
    made: list[str] = []
    yield root, made
    for ref in made:
        docker("rmi", "-f", ref, check=False)


def test_archive_loads_and_verifies_in_container(withpy: tuple[Path, list[str]],
                                                 shared_home: Path, tmp_path: Path) -> None:
    root, made = withpy
    archive = tmp_path / "withpy.tar"
    res = cli_json(root, shared_home, "bake", "withpy", "--docker-archive", str(archive))
    loaded = docker("load", "-i", str(archive)).stdout
    tag = f"patchbake/withpy:{res['digest'][7:19]}"
    assert tag in loaded
    made.append(tag)
    assert docker("image", "inspect", tag, "--format", "{{.Id}}").stdout.strip() == \
        res["config_digest"]  # the engine's Image ID is our config digest

    ok = docker("run", "--rm", "--network", "none", tag, "python3", "/opt/patchbake/verify.py")
    assert ok.stdout.startswith("patchbake build: withpy | vllm 0.25.1 + dsv4-deterministic-topk")
    assert "OK: " in ok.stdout
    edited = docker("run", "--rm", "--network", "none", tag, "sh", "-c",
                    f"echo '# hand edit' >> {SP}/vllm/envs.py && "
                    "python3 /opt/patchbake/verify.py", check=False)
    assert edited.returncode == 1
    assert "MISMATCH modified" in edited.stdout
    assert edited.stdout.splitlines()[-1].startswith(
        f"patchbake: image does not match its record: modified {SP}/vllm/envs.py")

    out = cli_json(root, shared_home, "verify", f"docker:{tag}")
    assert out["matched"] == out["total"] >= 1 and out["mismatched"] == []
    assert out["config_digest"] == res["config_digest"] and out["kind"] == "docker"
    out = cli_json(root, shared_home, "verify", str(archive))
    assert out["digest"] == res["digest"] and out["matched"] == out["total"]


def _derived(tmp_path: Path, base: str, name: str, run: str, made: list[str]) -> str:
    """An image made FROM ``base`` by one RUN step (keeps the base's entrypoint)."""
    ctx = tmp_path / name
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {base}\nRUN {run}\n")
    tag = f"patchbake-test/{name}:1"
    docker("build", "--network", "none", "-q", "-t", tag, str(ctx))
    made.append(tag)
    return tag


def test_start_up_check_refuses_a_tampered_image(withpy: tuple[Path, list[str]],
                                                 shared_home: Path, tmp_path: Path) -> None:
    """PATCHBAKE_VERIFY_ON_START=1: the entrypoint wrapper runs the in-image check first
    and refuses to start on a hand-edited file, an added .pth, a dropped module (each one
    line and a non-zero exit); an unmodified image starts with its arguments unchanged."""
    root, made = withpy
    archive = tmp_path / "withpy.tar"
    res = cli_json(root, shared_home, "bake", "withpy", "--docker-archive", str(archive))
    tag = f"patchbake/withpy:{res['digest'][7:19]}"
    docker("load", "-i", str(archive))
    made.append(tag)
    on = ("-e", "PATCHBAKE_VERIFY_ON_START=1")
    argv = ["python3", "-c", "import sys; print('started', sys.argv[1:])", "a", "b c"]
    ok = docker("run", "--rm", "--network", "none", *on, tag, *argv)
    assert ok.stdout == "started ['a', 'b c']\n" and ok.stderr == ""
    off = docker("run", "--rm", "--network", "none", tag, *argv)  # opt-in: no check
    assert off.stdout == ok.stdout
    cases = {
        "edited": (f"echo '# hand edit' >> {SP}/vllm/envs.py",
                   f"modified {SP}/vllm/envs.py"),
        "pth": ("mkdir -p /usr/lib/python3/dist-packages && echo 'import os' > "
                "/usr/lib/python3/dist-packages/zz-evil.pth",
                "startup-hook /usr/lib/python3/dist-packages/zz-evil.pth"),
        "dropped": (f"rm {SP}/vllm/sampling_params.py", f"missing {SP}/vllm/sampling_params.py"),
    }
    for name, (run, reason) in cases.items():
        bad = _derived(tmp_path, tag, name, run, made)
        cp = docker("run", "--rm", "--network", "none", *on, bad, *argv, check=False)
        assert cp.returncode == 1, (name, cp.stdout, cp.stderr)
        assert "started" not in cp.stdout
        lines = cp.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"patchbake: image does not match its record: {reason}"), (name, cp.stderr)
        # without the opt-in the same image starts (the check is opt-in)
        assert docker("run", "--rm", "--network", "none", bad, *argv).stdout == ok.stdout
    # a missing record refuses too (exit 2), rather than reporting "OK 0/0"
    norec = _derived(tmp_path, tag, "norec", "rm /opt/patchbake/identity.json", made)
    cp = docker("run", "--rm", "--network", "none", *on, norec, *argv, check=False)
    assert cp.returncode == 2 and cp.stderr.startswith("patchbake: refused: no readable "
                                                       "identity record")


def test_engine_backend_builds_and_verifies(withpy: tuple[Path, list[str]],
                                            shared_home: Path) -> None:
    root, made = withpy
    res = cli_json(root, shared_home, "bake", "withpy", "--backend", "engine")
    assert res["backend"] == "engine" and res["mode"] == "overlay"
    record = json.loads((root / res["record"]).read_text())
    tag = record["engine"]["tag"]
    made += [tag, f"patchbake-base/withpy:{record['base']['manifest_digest'][7:19]}"]
    assert record["engine"]["image_id"] == res["config_digest"]
    ok = docker("run", "--rm", "--network", "none", tag, "python3", "/opt/patchbake/verify.py")
    assert "OK: " in ok.stdout
    out = cli_json(root, shared_home, "verify", f"docker:{tag}")
    assert out["matched"] == out["total"] >= 1
    again = cli_json(root, shared_home, "bake", "withpy", "--backend", "engine")
    assert again["cached"] and again["digest"] == res["digest"]  # inputs unchanged: no rebuild
    docker("rmi", "-f", tag)
    third = cli_json(root, shared_home, "bake", "withpy", "--backend", "engine")
    assert third["cached"]  # not rebuilt: loaded back from the store, same Image ID
    assert docker("image", "inspect", tag, "--format", "{{.Id}}").stdout.strip() == \
        res["config_digest"]


def test_engine_builds_are_not_reproducible(withpy: tuple[Path, list[str]], shared_home: Path,
                                           tmp_path: Path) -> None:
    """Measured, not assumed: the same Dockerfile and context built twice."""
    from patchbake.oci import engine

    root, made = withpy
    archive = tmp_path / "base.tar"
    cli_json(root, shared_home, "image", "standin", "--with-python", "--docker-archive",
             str(archive))
    base_tag = docker("load", "-i", str(archive)).stdout.split("Loaded image: ")[-1].strip()
    made.append(base_tag)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "f.py").write_text("X = 1\n")
    (ctx / "Dockerfile").write_text(f"FROM {base_tag}\nCOPY f.py {SP}/vllm/f.py\n")
    ids = []
    for i in range(2):
        built = engine.build(ctx, f"patchbake-test/repro:{i}", nocache=True)
        made.append(built.tag)
        ids.append(built.image_id)
    assert ids[0] != ids[1], "two engine builds gave one Image ID: update docs/images.md"
    cfgs = [json.loads(docker("image", "inspect", f"patchbake-test/repro:{i}").stdout)[0]
            for i in range(2)]
    assert cfgs[0]["Created"] != cfgs[1]["Created"]  # the build time is in the config
    # The base layers are shared; the COPY layer may differ too (directory mtimes are the
    # build time), so only the base part is asserted equal.
    assert cfgs[0]["RootFS"]["Layers"][:-1] == cfgs[1]["RootFS"]["Layers"][:-1]
