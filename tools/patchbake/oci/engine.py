"""Docker engine backend (Docker SDK for Python): load, save, inspect, build, run.

Identities, as the engine reports them: the classic (graphdriver) store that Docker 20.10
uses names an image by its CONFIG digest ("Image ID", ``image.id``); ``RepoDigests`` holds
MANIFEST digests, and only for images pulled from or pushed to a registry. A locally built
image has no manifest digest until it is pushed. Every build and container here uses
``network_mode="none"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EngineError
from ..fsutil import atomic_writer


def _client() -> Any:
    try:
        import docker
    except ImportError:  # pragma: no cover - a declared dependency
        raise EngineError("the Docker SDK for Python is not installed (pip install docker)") from None
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - the SDK raises many kinds; all mean "no engine"
        raise EngineError(f"no Docker engine answers: {exc}",
                          hint="start one (ci/services.sh) or use the embedded backend") from None
    return client


def _errors() -> tuple[type[BaseException], ...]:
    import docker.errors

    return (docker.errors.DockerException,)


def inspect(name: str) -> tuple[str, list[str]]:
    """(image ID = config digest, repo digests = manifest digests) of an engine image."""
    client = _client()
    try:
        img = client.images.get(name)
    except _errors() as exc:
        raise EngineError(f"engine has no image {name}: {exc}") from None
    return str(img.id), list(img.attrs.get("RepoDigests") or [])


def save(name: str, dest: Path) -> Path:
    client = _client()
    try:
        img = client.images.get(name)
        with atomic_writer(dest) as f:
            for chunk in img.save(named=True):
                f.write(chunk)
    except _errors() as exc:
        raise EngineError(f"docker save {name} failed: {exc}") from None
    return dest


def load(archive: Path) -> list[str]:
    """``docker load`` an archive; returns the loaded image IDs."""
    client = _client()
    try:
        with open(archive, "rb") as f:
            images = client.images.load(f.read())
    except _errors() as exc:
        raise EngineError(f"docker load {archive} failed: {exc}") from None
    return [str(i.id) for i in images]


def tag(image_id: str, repo: str, tag_name: str) -> None:
    client = _client()
    try:
        client.images.get(image_id).tag(repo, tag_name)
    except _errors() as exc:
        raise EngineError(f"docker tag {image_id} {repo}:{tag_name} failed: {exc}") from None


def remove(name: str) -> None:
    client = _client()
    try:
        client.images.remove(name, force=True, noprune=False)
    except _errors():
        pass  # already gone


@dataclass(frozen=True)
class Built:
    image_id: str  # config digest ("Image ID")
    tag: str
    log_tail: tuple[str, ...]


def build(context: Path, tag_name: str, *, dockerfile: str = "Dockerfile",
          nocache: bool = False, buildargs: dict[str, str] | None = None) -> Built:
    """``docker build --network none`` of ``context``; returns the image ID (config digest)."""
    client = _client()
    try:
        image, logs = client.images.build(path=str(context), dockerfile=dockerfile,
                                          tag=tag_name, network_mode="none", rm=True,
                                          forcerm=True, nocache=nocache, pull=False,
                                          buildargs=buildargs or {})
    except _errors() as exc:
        log = getattr(exc, "build_log", None) or []
        tail = [str(x.get("stream", x.get("error", ""))).strip() for x in log][-5:]
        raise EngineError(f"docker build of {context} failed: {exc} | {' | '.join(tail)}") from None
    lines = [str(x.get("stream", "")).strip() for x in logs if x.get("stream")]
    return Built(str(image.id), tag_name, tuple(lines[-5:]))


@contextmanager
def container_run(image: str, argv: list[str]) -> Iterator[tuple[int, str]]:
    """Run ``argv`` in a fresh container with no network; yields (exit code, output) and
    always removes the container."""
    client = _client()
    container = None
    try:
        container = client.containers.create(image, argv, network_mode="none")
        container.start()
        status = container.wait(timeout=300)
        out = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        yield int(status.get("StatusCode", 1)), out
    except _errors() as exc:
        raise EngineError(f"docker run {image} {' '.join(argv)} failed: {exc}") from None
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except _errors():
                pass


def run(image: str, argv: list[str]) -> tuple[int, str]:
    with container_run(image, argv) as result:
        return result
