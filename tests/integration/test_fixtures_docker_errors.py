"""The docker runner's refusals, against the real engine: an image without Python is a
requirement the runner cannot meet (41, with what to do); no engine answering is 34."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from fixtures_toy_image import toy_image
from patchbake.entry import main
from patchbake.store import Store

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "fixtures" / "suites"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import yaml

    store = Store.open(tmp_path / "store")
    monkeypatch.setenv("PATCHBAKE_HOME", str(store.root))
    digest, config = toy_image(store, SUITES / "trees" / "patched", name="no-python")
    suite = {"path": str(SUITES / "passing"), "runner": "docker",
             "command": ["{python}", "-m", "pytest", "-q", "--junitxml={junit}",
                         str(SUITES / "passing")]}
    pipeline = {
        "version": 1, "name": "t",
        "lineages": {"v1": {"name": "x", "patch": "p", "files": "f", "source_record": "s",
                            "upstream": {"kind": "path", "version": "1",
                                         "path": str(SUITES / "trees" / "pristine")}}},
        "suites": {"toy": suite},
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(tmp_path / "pipeline.yaml"))
    return {"digest": digest, "config": config}


def _containers(image: str) -> list[str]:
    """Containers of this image (others' suites may run beside this test)."""
    return subprocess.run(["docker", "ps", "-a", "--filter", f"ancestor={image}", "-q"],
                          capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.docker
def test_image_without_python_is_a_requirement_error(
        world: dict[str, Any], docker_engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = main(["fixtures", "run", "toy", "--image", "no-python"])
        err = capsys.readouterr().err
        assert rc == 41, err
        assert err.startswith(f"patchbake: error: image no-python ({world['digest']}) has no "
                              "python3"), err
        assert "use `--runner host`" in err and err.count("\n") == 1
        assert _containers(world["config"]) == []  # the probe's container is gone
    finally:
        subprocess.run(["docker", "rmi", "-f", world["config"]], capture_output=True,
                       check=False)


def test_no_engine_is_an_engine_error(world: dict[str, Any], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    if not shutil.which("docker"):
        pytest.skip("docker client not installed (make setup installs docker.io)")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing-listens.sock")
    rc = main(["fixtures", "run", "toy", "--image", "no-python"])
    err = capsys.readouterr().err
    assert rc == 34, err
    assert err.startswith("patchbake: error: no Docker engine answers ("), err
    assert "`make services`" in err and "`--runner host`" in err
