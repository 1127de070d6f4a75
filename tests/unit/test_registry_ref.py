"""Registry references, the plain-http policy, challenges and credentials."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.errors import RegistryError, UsageError
from patchbake.oci.registry_auth import Credentials, credentials_for, parse_challenge
from patchbake.netpolicy import retry_after_seconds
from patchbake.oci.registry_ref import (
    RegistryRef,
    base_url,
    check_url_allowed,
    is_loopback,
    parse_ref,
)

D = "sha256:" + "ab" * 32
DIGEST = Digest.parse(D)


@pytest.mark.parametrize("text,want", [
    ("127.0.0.1:5000/vllm-sm89:0.25.1-dsv4", RegistryRef("127.0.0.1:5000", "vllm-sm89", "0.25.1-dsv4")),
    (f"ghcr.io/org/app@{D}", RegistryRef("ghcr.io", "org/app", None, DIGEST)),
    (f"localhost/a/b:t@{D}", RegistryRef("localhost", "a/b", "t", DIGEST)),
    ("docker://[::1]:5000/x:y", RegistryRef("[::1]:5000", "x", "y")),
])
def test_parse_ref(text: str, want: RegistryRef) -> None:
    assert parse_ref(text) == want


@pytest.mark.parametrize("text,msg", [
    ("vllm-sm89:latest", "names no registry host"),
    ("library/ubuntu:22.04", "names no registry host"),
    ("bad_host:5000/app:v1", "is not a host"),
    ("127.0.0.1:5000/Bad_Name:t", "not a valid repository name"),
    ("127.0.0.1:5000/app:-bad", "not a valid tag"),
    ("127.0.0.1:5000/app@sha256:1234", "is not sha256:<64 lowercase hex digits>"),
    ("127.0.0.1:5000/app", "names neither a tag nor a digest"),
])
def test_bad_refs_are_usage_errors(text: str, msg: str) -> None:
    with pytest.raises(UsageError, match=msg) as ei:
        parse_ref(text)
    assert ei.value.exit_code == 2


@pytest.mark.parametrize("host,loop", [
    ("127.0.0.1:5000", True), ("127.8.9.10", True), ("localhost:80", True), ("[::1]:5000", True),
    ("10.0.0.1:5000", False), ("192.168.1.2", False), ("example.org", False),
])
def test_loopback(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_scheme_policy() -> None:
    assert base_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert base_url("127.0.0.1:5000", insecure_loopback_http=False) == "https://127.0.0.1:5000"
    assert base_url("https://127.0.0.1:5000") == "https://127.0.0.1:5000"
    assert base_url("10.0.0.1:5000") == "https://10.0.0.1:5000"
    assert base_url("registry.example:443") == "https://registry.example:443"
    for bad in ("http://10.0.0.1:5000", "http://192.168.0.5", "http://registry.example"):
        with pytest.raises(RegistryError, match="only loopback registries") as ei:
            base_url(bad)
        assert ei.value.exit_code == 31
    with pytest.raises(RegistryError, match="scheme 'ftp'"):
        check_url_allowed("ftp://127.0.0.1/x")


def test_parse_challenge() -> None:
    ch = parse_challenge('Bearer realm="https://auth.example/token",service="reg",'
                         'scope="repository:a/b:pull,push"')
    assert ch is not None and ch.scheme == "bearer"
    assert ch.params == {"realm": "https://auth.example/token", "service": "reg",
                         "scope": "repository:a/b:pull,push"}
    basic = parse_challenge('Basic realm="x"')
    assert basic is not None and basic.scheme == "basic"
    assert parse_challenge("") is None


def test_retry_after_forms() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_credentials_from_env_win(tmp_path: Path) -> None:
    env = {"PATCHBAKE_REGISTRY_USER": "u", "PATCHBAKE_REGISTRY_PASSWORD": "p",
           "DOCKER_CONFIG": str(tmp_path)}
    assert credentials_for("h:1", env) == Credentials("u", "p")
    with pytest.raises(RegistryError, match="only one of"):
        credentials_for("h:1", {"PATCHBAKE_REGISTRY_USER": "u"})


def test_credentials_from_docker_config(tmp_path: Path) -> None:
    auth = base64.b64encode(b"bob:pw:with:colons").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "https://reg.example:5000/v1/": {"auth": auth}, "other.example": {"auth": "e30="}}}))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    assert credentials_for("reg.example:5000", env) == Credentials("bob", "pw:with:colons")
    assert credentials_for("nobody.example", env) is None
    assert "pw" not in repr(Credentials("bob", "pw"))
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"x.example": {"auth": "%%"}}}))
    with pytest.raises(RegistryError, match="is not base64"):
        credentials_for("x.example", env)


def test_no_docker_config_means_no_credentials(tmp_path: Path) -> None:
    assert credentials_for("reg.example", {"DOCKER_CONFIG": str(tmp_path / "missing")}) is None


def test_short_names_need_a_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.oci.registry import parse_pull_ref

    monkeypatch.delenv("PATCHBAKE_DEFAULT_REGISTRY", raising=False)
    with pytest.raises(UsageError, match="names no registry host") as ei:
        parse_pull_ref(f"vllm/vllm-openai@{D}")
    assert "PATCHBAKE_DEFAULT_REGISTRY=HOST" in ei.value.one_line()
    monkeypatch.setenv("PATCHBAKE_DEFAULT_REGISTRY", "mirror.example:5000")
    assert parse_pull_ref(f"vllm/vllm-openai@{D}") == RegistryRef(
        "mirror.example:5000", "vllm/vllm-openai", None, DIGEST)
    assert parse_pull_ref("ubuntu:22.04") == RegistryRef("mirror.example:5000", "library/ubuntu",
                                                         "22.04")
    assert parse_pull_ref("127.0.0.1:5000/a:b").host == "127.0.0.1:5000"
    with pytest.raises(UsageError, match="names no registry host"):
        parse_ref("vllm/vllm-openai:v1")  # pushes never take a default
