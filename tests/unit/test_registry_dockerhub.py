"""Docker Hub names as the Docker CLI reads them, and credentials from Docker's config:
credential helpers (per host, then the default store), then inline auths."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.errors import RegistryError
from patchbake.oci.registry_auth import Credentials, credentials_for
from patchbake.oci.registry_ref import DOCKER_HUB_API, parse_ref

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text,repo,tag,digest", [
    ("docker.io/ubuntu:22.04", "library/ubuntu", "22.04", None),
    (f"docker.io/busybox@{D}", "library/busybox", None, D),
    ("index.docker.io/nvidia/cuda:12.8", "nvidia/cuda", "12.8", None),
    (f"docker.io/library/python:3.12@{D}", "library/python", "3.12", D),
    ("docker://docker.io/vllm/vllm-openai:v0.25.1", "vllm/vllm-openai", "v0.25.1", None),
])
def test_docker_hub_names(text: str, repo: str, tag: str | None, digest: str | None) -> None:
    r = parse_ref(text)
    assert (r.host, r.repo, r.tag, r.digest) == (DOCKER_HUB_API, repo, tag,
                                                 None if digest is None else Digest.parse(digest))


def test_other_hosts_are_left_alone() -> None:
    r = parse_ref("127.0.0.1:5000/ubuntu:1")
    assert (r.host, r.repo) == ("127.0.0.1:5000", "ubuntu")


def test_a_default_registry_of_docker_io_maps_too() -> None:
    r = parse_ref("ubuntu:22.04", default_host="docker.io")
    assert (r.host, r.repo, r.tag) == (DOCKER_HUB_API, "library/ubuntu", "22.04")


def _config(tmp_path: Path, doc: dict[str, object]) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return {"DOCKER_CONFIG": str(tmp_path)}


class Helpers:
    def __init__(self, answers: dict[tuple[str, str], tuple[str, str] | None]) -> None:
        self.answers, self.asked = answers, []  # type: ignore[var-annotated]

    def __call__(self, name: str, server: str) -> tuple[str, str] | None:
        self.asked.append((name, server))
        return self.answers.get((name, server))


def test_per_host_helper_comes_first(tmp_path: Path) -> None:
    env = _config(tmp_path, {"credHelpers": {"reg.example:5000": "pass"},
                             "credsStore": "desktop",
                             "auths": {"reg.example:5000": {"auth": "eDp5"}}})
    h = Helpers({("pass", "reg.example:5000"): ("alice", "tok")})
    assert credentials_for("reg.example:5000", env, helper=h) == Credentials("alice", "tok")
    assert h.asked == [("pass", "reg.example:5000")]


def test_default_store_for_docker_hub_uses_the_hub_server_address(tmp_path: Path) -> None:
    env = _config(tmp_path, {"credsStore": "desktop",
                             "auths": {"https://index.docker.io/v1/": {}}})
    h = Helpers({("desktop", "https://index.docker.io/v1/"): ("bob", "pw")})
    assert credentials_for(DOCKER_HUB_API, env, helper=h) == Credentials("bob", "pw")


def test_helper_with_nothing_falls_back_to_inline_auths(tmp_path: Path) -> None:
    auth = base64.b64encode(b"carol:secret").decode()
    env = _config(tmp_path, {"credsStore": "desktop",
                             "auths": {"https://index.docker.io/v1/": {"auth": auth}}})
    h = Helpers({})
    assert credentials_for(DOCKER_HUB_API, env, helper=h) == Credentials("carol", "secret")
    assert h.asked == [("desktop", "https://index.docker.io/v1/")]


def test_no_helper_configured_runs_none(tmp_path: Path) -> None:
    env = _config(tmp_path, {"auths": {}})
    h = Helpers({})
    assert credentials_for("reg.example", env, helper=h) is None and h.asked == []


def test_environment_still_wins(tmp_path: Path) -> None:
    env = {**_config(tmp_path, {"credsStore": "desktop"}),
           "PATCHBAKE_REGISTRY_USER": "ci", "PATCHBAKE_REGISTRY_PASSWORD": "x"}
    h = Helpers({})
    assert credentials_for("reg.example", env, helper=h) == Credentials("ci", "x")
    assert h.asked == []


def test_helper_failure_is_a_registry_error(tmp_path: Path) -> None:
    env = _config(tmp_path, {"credsStore": "broken"})

    def helper(name: str, server: str) -> tuple[str, str] | None:
        raise RegistryError(f"docker-credential-{name} get {server} exited 1: boom")

    with pytest.raises(RegistryError, match="docker-credential-broken get reg.example"):
        credentials_for("reg.example", env, helper=helper)
