"""The one Docker engine client: every talk with the engine goes through here, as the
``docker`` CLI run by ``proc.run`` (the one chokepoint for processes: tool resolved first,
output captured and shown on failure, a timeout on every call).

Identities, as the engine reports them: the classic (graphdriver) store that Docker 20.10
uses names an image by its CONFIG digest ("Image ID"); ``RepoDigests`` holds MANIFEST
digests, and only for images pulled from or pushed to a registry. A locally built image has
no manifest digest until it is pushed. Every build and container here has no network.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..digest import Digest
from ..errors import EngineError, ProcessError

# the classic builder: what the engine backend's records were made with (BuildKit writes
# other history and layer bytes)
_BUILD_ENV = {"DOCKER_BUILDKIT": "0"}


def docker(args: list[str], *, what: str, timeout: float, check: bool = True,
           env: dict[str, str] | None = None) -> proc.Result:
    """``docker ARGS``; a failure is an EngineError naming ``what`` was asked."""
    try:
        return proc.run(["docker", *args], check=check, timeout=timeout, env=env)
    except ProcessError as exc:
        raise EngineError(f"{what} failed: {exc.message}",
                          hint="start an engine (ci/services.sh) or use the embedded "
                               "backend") from None


def inspect(name: str) -> tuple[Digest, list[Digest]]:
    """(image ID = config digest, repo digests = manifest digests) of an engine image."""
    r = docker(["image", "inspect", "--format", "{{json .}}", name],
               what=f"docker image inspect {name}", timeout=60, check=False)
    if r.returncode != 0:
        raise EngineError(f"engine has no image {name}: "
                          f"{r.stderr.decode('utf-8', 'replace').strip()}")
    attrs = json.loads(r.stdout)
    what = f"docker image inspect {name}:"
    return (Digest.parse(attrs.get("Id"), f"{what} Id", EngineError),
            [Digest.parse(str(d).rpartition("@")[2], f"{what} RepoDigests entry", EngineError)
             for d in attrs.get("RepoDigests") or []])


def image_id(name: str) -> Digest | None:
    """The engine's image ID for ``name``, None when it has no such image."""
    try:
        return inspect(name)[0]
    except EngineError:
        return None


def save(name: str, dest: Path) -> Path:
    """``docker save`` into ``dest``, written whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        docker(["save", "--output", str(tmp), name], what=f"docker save {name}", timeout=1800)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def load(archive: Path) -> None:
    """``docker load`` an archive."""
    docker(["load", "--input", str(archive)], what=f"docker load {archive}", timeout=1800)


def load_stream(chunks: Iterable[bytes], what: str) -> None:
    """``docker load`` a docker-archive streamed to its standard input: no copy of the image
    on disk besides the store's and the engine's (a 10 GB image needs no 10 GB archive)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        running = proc.start(["docker", "load"], stdout=out, stderr=err)
        try:
            for chunk in chunks:
                if not running.send(chunk):
                    break  # it exited early: its exit code and stderr say why
        except BaseException:
            running.stop()
            raise
        code = running.finish()
        if code != 0:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            raise EngineError(f"docker load of {what} failed (exit {code}): "
                              + " | ".join(tail),
                              hint="start an engine (ci/services.sh) and check its disk")


@dataclass(frozen=True)
class Built:
    image_id: str  # config digest ("Image ID")
    tag: str
    log_tail: tuple[str, ...]


def build(context: Path, tag_name: str, *, dockerfile: str = "Dockerfile",
          nocache: bool = False, buildargs: dict[str, str] | None = None) -> Built:
    """``docker build --network none`` of ``context``; returns the image ID (config digest)."""
    iidfile = context.parent / f".{context.name}.iid"
    args = ["build", "--network", "none", "--rm", "--force-rm", "--tag", tag_name,
            "--file", str(context / dockerfile), "--iidfile", str(iidfile)]
    if nocache:
        args.append("--no-cache")
    for k, v in sorted((buildargs or {}).items()):
        args += ["--build-arg", f"{k}={v}"]
    try:
        r = docker([*args, str(context)], what=f"docker build of {context}", timeout=3600,
                   env=_BUILD_ENV)
        image = iidfile.read_text(encoding="utf-8").strip()
    finally:
        iidfile.unlink(missing_ok=True)
    lines = [x.strip() for x in r.text.splitlines() if x.strip()]
    return Built(image, tag_name, tuple(lines[-5:]))


def has_gpus() -> bool:
    """Whether the engine has the NVIDIA runtime (containers may then get ``--gpus``)."""
    try:
        r = docker(["info", "--format", "{{json .Runtimes}}"], what="docker info", timeout=30)
    except (EngineError, ProcessError):
        return False
    return "nvidia" in r.text


def server_version() -> str:
    return docker(["version", "--format", "{{.Server.Version}}"], what="docker version",
                  timeout=30).text.strip()


def remove_container(name: str) -> None:
    """Force-remove a container; one already gone is fine."""
    docker(["rm", "--force", name], what=f"docker rm {name}", timeout=60, check=False)


def run(args: list[str], *, timeout: float, check: bool = True) -> proc.Result:
    """``docker run ARGS`` (the caller names the container); always without network. A
    program that fails or times out in the container is the caller's ProcessError."""
    return proc.run(["docker", "run", "--network", "none", *args], check=check,
                    timeout=timeout)
