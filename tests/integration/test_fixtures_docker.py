"""Docker runner against a real image in the engine: by digest, no network, always removed.

The image is a locally built Python + pytest + CPU torch image (see
fixtures_python_image.py) with a toy ``vllm`` tree on top; it enters the store through
``docker save`` and the images stage's archive import, so the runner sees a real manifest
digest and checks the engine's image ID against the config digest it names.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_python_image import ensure_image
from patchbake.digest import Digest
from patchbake.config import suites
from patchbake.suites.docker import DockerRunner
from patchbake.suites.image import SuiteImage
from patchbake.suites.run import run_suite
from patchbake.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "fixtures" / "suites"


@pytest.fixture(scope="module")
def toy(docker_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from patchbake.oci.archive import import_docker_archive

    base = ensure_image()
    ctx = tmp_path_factory.mktemp("toyctx")
    shutil.copytree(SUITES / "trees" / "patched" / "vllm", ctx / "vllm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\nCOPY vllm /opt/toy-site/vllm\nENV PYTHONPATH=/opt/toy-site\n"
        "LABEL dev.patchbake.site-packages=/opt/toy-site\n")
    tag = f"patchbake-fixtures-toy:{ctx.name}"
    subprocess.run(["docker", "build", "--network", "none", "-q", "-t", tag, str(ctx)],
                   check=True, capture_output=True)
    store = Store.open(tmp_path_factory.mktemp("store"))
    archive = store.root / "tmp" / "toy.tar"
    subprocess.run(["docker", "save", "-o", str(archive), tag], check=True)
    imp = import_docker_archive(store, archive)
    archive.unlink()
    yield {"store": store, "ref": SuiteImage(tag, imp.manifest_digest, imp.config_digest),
           "tag": tag}
    subprocess.run(["docker", "rmi", "-f", tag], check=False, capture_output=True)


def suite(name: str, **over: Any) -> suites.Suite:
    raw = {"path": f"tests/fixtures/suites/{name}", "runner": "docker",
           "command": ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-o", "python_files=check_*.py", "--junitxml={junit}",
                       f"tests/fixtures/suites/{name}"], **over}
    return suites.parse_suite(name, raw, REPO)


def leftover_containers(toy: dict[str, Any]) -> str:
    """The toy image's containers (other tests' suites may run beside these)."""
    return subprocess.run(["docker", "ps", "-a", "--filter",
                           f"ancestor={toy['ref'].config_digest}", "-q"],
                          check=False, capture_output=True, text=True).stdout.strip()


def test_suite_runs_inside_the_exact_image(toy: dict[str, Any]) -> None:
    runner = DockerRunner(REPO, toy["store"])
    result = run_suite(suite("passing", patch_sensitive=True, repeats=2,
                             requires={"min_tests": 4}), toy["ref"], runner,
                       lambda: (SUITES / "trees" / "pristine", "toy pristine tree"))
    assert result.result == "PASSED", result.problems
    env = result.environment
    assert env["runner"] == "docker" and env["image_config_digest"] == str(toy["ref"].config_digest)
    assert env["torch"].startswith("2.") and env["cuda_available"] is False
    assert result.probes["patch_sensitivity"]["status"] == "ok"
    assert result.probes["determinism"]["status"] == "ok"
    assert leftover_containers(toy) == ""


def test_network_is_off_inside(toy: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "check_net.py").write_text(
        "import socket\n\ndef test_no_network():\n"
        "    names = [n for _, n in socket.if_nameindex()]\n"
        "    assert names == ['lo'], names\n")
    runner = DockerRunner(tmp_path, toy["store"])
    raw = {"path": str(tmp_path), "command": ["{python}", "-m", "pytest", "-q", "-p",
                                              "no:cacheprovider", "-o",
                                              "python_files=check_*.py", "--junitxml={junit}",
                                              "."]}
    result = run_suite(suites.parse_suite("net", raw, tmp_path), toy["ref"], runner)
    assert result.result == "PASSED", result.problems


def test_failures_and_empty_suites_in_docker(toy: dict[str, Any]) -> None:
    runner = DockerRunner(REPO, toy["store"])
    failed = run_suite(suite("failing"), toy["ref"], runner)
    assert failed.result == "FAILED" and len(failed.failed_tests) == 1
    empty = run_suite(suite("empty"), toy["ref"], runner)
    assert empty.problems == ("collected no tests",)
    assert leftover_containers(toy) == ""


def test_gpu_suite_refused_without_gpus(toy: dict[str, Any]) -> None:
    from patchbake.errors import RequirementError

    runner = DockerRunner(REPO, toy["store"])
    with pytest.raises(RequirementError, match="needs a CUDA GPU"):
        run_suite(suite("passing", requires={"gpu": True}), toy["ref"], runner)


def test_image_missing_from_engine_is_loaded_from_the_store(toy: dict[str, Any]) -> None:
    subprocess.run(["docker", "rmi", "-f", toy["tag"]], capture_output=True, check=True)
    runner = DockerRunner(REPO, toy["store"])
    result = run_suite(suite("passing"), toy["ref"], runner)
    assert result.result == "PASSED", result.problems


def test_engine_without_the_image_and_no_store_is_an_engine_error(toy: dict[str, Any]) -> None:
    from patchbake.errors import EngineError

    bogus = SuiteImage("x", Digest.from_hex("1" * 64), Digest.from_hex("2" * 64))
    with pytest.raises(EngineError, match="the engine has no image"):
        run_suite(suite("passing"), bogus, DockerRunner(REPO, None))
