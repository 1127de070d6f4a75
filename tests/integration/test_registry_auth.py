"""Basic auth against the real distribution registry (htpasswd backend on loopback)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from patchbake.errors import RegistryError
from patchbake.oci.registry import RegistryClient
from patchbake.oci.registry_auth import Credentials
from patchbake.store import Store
from test_registry_real import build_image

pytestmark = [pytest.mark.integration, pytest.mark.registry]

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    crypt = pytest.importorskip("crypt", reason="needs the crypt module for a bcrypt htpasswd")

CONFIG = """version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: {root}/data
http:
  addr: 127.0.0.1:{port}
auth:
  htpasswd:
    realm: patchbake-test
    path: {root}/htpasswd
"""


@pytest.fixture(scope="module")
def auth_registry(registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Depends on `registry` only for its skip when docker-registry is not installed.
    root = tmp_path_factory.mktemp("registry-auth")
    hashed = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH))
    (root / "htpasswd").write_text(f"alice:{hashed}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "config.yml").write_text(CONFIG.format(root=root, port=port))
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if requests.get(f"http://{host}/v2/", timeout=1).status_code == 401:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        else:
            pytest.fail("auth registry did not start")
        yield host
    finally:
        proc.terminate()
        proc.wait(10)


def test_basic_auth_push_pull(auth_registry: str, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    store = Store.open(tmp_path / "s")
    img = build_image(store, "auth")
    creds = Credentials("alice", "s3cret")
    res = RegistryClient(auth_registry, auth=creds).push(store, img.digest,
                                                          f"{auth_registry}/pb/auth:v1")
    assert sorted(res.uploaded) == sorted(img.blobs)
    with pytest.raises(RegistryError, match="asks for a user name and password"):
        RegistryClient(auth_registry).pull(Store.open(tmp_path / "t"), f"{auth_registry}/pb/auth:v1")
    with pytest.raises(RegistryError, match="unauthorized after authenticating"):
        RegistryClient(auth_registry, auth=Credentials("alice", "wrong")).pull(
            Store.open(tmp_path / "u"), f"{auth_registry}/pb/auth:v1")
    monkeypatch.setenv("PATCHBAKE_REGISTRY_USER", "alice")
    monkeypatch.setenv("PATCHBAKE_REGISTRY_PASSWORD", "s3cret")
    assert RegistryClient(auth_registry).pull(Store.open(tmp_path / "v"),
                                              f"{auth_registry}/pb/auth:v1") == img.digest


def test_cli_wrong_password_exit_31(auth_registry: str, tmp_path: Path) -> None:
    env = {"PATCHBAKE_HOME": str(tmp_path / "h"), "PATCHBAKE_REGISTRY_USER": "alice",
           "PATCHBAKE_REGISTRY_PASSWORD": "nope", "DOCKER_CONFIG": str(tmp_path / "none"),
           "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "patchbake", "pull",
                        f"{auth_registry}/pb/auth:v1"], env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 31
    assert "unauthorized after authenticating" in r.stderr
    assert "check PATCHBAKE_REGISTRY_USER/PASSWORD" in r.stderr
