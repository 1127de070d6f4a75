"""Shared fixtures.

Unit tests (tests/unit) are hermetic: starting a process or opening a network connection
fails the test. Integration tests (tests/integration) use the real git, the vLLM sdist,
the Docker engine and the distribution registry, and carry markers saying so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler import LoadScopeScheduling

REPO = Path(__file__).resolve().parents[1]

# GPU fixture suites test the patched vLLM tree, not the tool: they run on their own
# (PATCHBAKE_TREE=... python3 -m pytest tests/gpu_suites/<suite>), never in `pytest tests`.
collect_ignore_glob = ["gpu_suites/*"]


# Under `pytest -n N` (make test: pytest-xdist) a unit of work runs whole on one worker, one
# test after another: a test module (its module fixtures are made once; its tests share
# engine tags, registry repositories and names), or these modules together, which share
# machine-wide state with each other:
SHARED_STATE = {
    # 10 GB of disk each (two fresh stores; the image in the engine): one at a time
    "integration/test_serving_base.py": "serving",
    "integration/test_serving_image_docker.py": "serving",
    "integration/test_serving_files.py": "serving",
    # the Python image that fixtures_python_image.ensure_image() builds on first use
    "integration/test_fixtures_docker.py": "fixtures-python-image",
    "integration/test_fixtures_payload_docker.py": "fixtures-python-image",
    # variants of the one baked offline image, loaded into the engine and removed by rmi -f
    "integration/test_images_consumers_docker.py": "engine-offline-variants",
    "integration/test_images_descriptions_docker.py": "engine-offline-variants",
}


def work_unit(nodeid: str) -> str:
    """The unit a test is handed out in under ``-n``: its module, or its module's group."""
    module = nodeid.split("::", 1)[0]
    return SHARED_STATE.get(module.removeprefix("tests/"), module)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's (the test extras install it)
def pytest_xdist_make_scheduler(config: pytest.Config,
                                log: Producer) -> LoadScopeScheduling | None:
    """Every --dist but ``each`` hands out these units (a test-by-test split would race), in
    the order the workers collected them: units with slow tests first (below). xdist's own
    ``loadgroup`` would need a mark in every module, and on pytest 9.2 it does not group at
    all (pytest-dev/pytest-xdist#1386)."""
    if config.getoption("dist") == "each":
        return None
    for module in SHARED_STATE:
        if not (REPO / "tests" / module).is_file():  # renamed: its group would be lost
            raise pytest.UsageError(f"tests/conftest.py: SHARED_STATE names {module}, "
                                    "which is not in tests/")
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist: untyped
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # not by size: the order collected, slow first
    return WorkUnitScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker, units holding the most ``slow`` tests first, so the longest work does
    not start last (the order within a unit is kept)."""
    if not hasattr(config, "workerinput"):
        return  # one process: the order as collected
    slow = Counter(work_unit(i.nodeid) for i in items if i.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[work_unit(item.nodeid)])


@pytest.fixture(autouse=True)
def _hermetic_units(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "tests/unit" not in str(request.node.fspath).replace(os.sep, "/"):
        return

    def no_process(*a: object, **k: object) -> None:
        raise AssertionError("unit tests are hermetic: no subprocesses")

    def no_connect(*a: object, **k: object) -> None:
        raise AssertionError("unit tests are hermetic: no network")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(socket.socket, "connect", no_connect)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty store for one test."""
    h = tmp_path / "store"
    monkeypatch.setenv("PATCHBAKE_HOME", str(h))
    return h


@pytest.fixture(scope="session")
def shared_home() -> Path:
    """The store integration tests share so the 37 MB sdist is fetched once per machine."""
    h = Path(os.environ.get("PATCHBAKE_TEST_HOME", Path.home() / ".cache" / "patchbake-tests"))
    h.mkdir(parents=True, exist_ok=True)
    return h


@pytest.fixture(scope="session")
def pipeline_path() -> Path:
    return REPO / "pipeline.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real distribution registry on 127.0.0.1, private to this test session."""
    exe = shutil.which("docker-registry")
    if not exe:
        pytest.skip("docker-registry is not installed (make setup installs Debian's docker-registry)")
    import requests

    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    cfg = root / "config.yml"
    template = (REPO / "ci" / "registry.yml.in").read_text()
    cfg.write_text(template.replace("@ROOT@", str(root / "data")).replace("@PORT@", str(port)))
    with open(root / "log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([exe, "serve", str(cfg)], stdout=subprocess.DEVNULL, stderr=log)
    url = f"127.0.0.1:{port}"
    for _ in range(100):
        try:
            if requests.get(f"http://{url}/v2/", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"registry did not start: {(root / 'log').read_text()[-500:]}")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The real Docker engine started by ci/services.sh."""
    if not shutil.which("docker"):
        pytest.skip("docker client not installed (make setup installs docker.io)")
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip("no Docker engine answers (ci/services.sh starts one)")
    return r.stdout.strip()
