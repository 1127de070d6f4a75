"""Docker credential helpers, run for real: a `docker-credential-<name>` program on PATH,
asked with `get` and the server address on stdin, as the Docker CLI asks it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from patchbake.errors import RegistryError
from patchbake.oci.registry_auth import Credentials, credentials_for

pytestmark = pytest.mark.integration

HELPER = """#!/bin/sh
[ "$1" = get ] || exit 2
read -r server
echo "$server" >> "{log}"
case "$server" in
  https://index.docker.io/v1/) echo '{{"ServerURL":"x","Username":"hub-user","Secret":"hub-pw"}}' ;;
  reg.example:5000) echo '{{"ServerURL":"x","Username":"alice","Secret":"s3cret"}}' ;;
  *) echo "credentials not found in native keychain"; exit 1 ;;
esac
"""


@pytest.fixture
def helper_env(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "docker-credential-pbtest"
    exe.write_text(HELPER.format(log=tmp_path / "asked.log"))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "pbtest"}))
    return {"DOCKER_CONFIG": str(tmp_path), "PATH": f"{bindir}:{os.environ['PATH']}"}


def test_real_helper_answers(helper_env: dict[str, str], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", helper_env["PATH"])
    assert credentials_for("reg.example:5000", helper_env) == Credentials("alice", "s3cret")
    assert credentials_for("registry-1.docker.io", helper_env) == Credentials("hub-user",
                                                                              "hub-pw")
    assert credentials_for("other.example", helper_env) is None  # "not found": no creds
    asked = (tmp_path / "asked.log").read_text().splitlines()
    assert asked == ["reg.example:5000", "https://index.docker.io/v1/", "other.example"]


def test_missing_helper_says_which(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {"reg.example": "nope"}}))
    with pytest.raises(RegistryError) as info:
        credentials_for("reg.example", {"DOCKER_CONFIG": str(tmp_path)})
    assert "names the credential helper 'nope'" in info.value.message
    assert "install docker-credential-nope" in (info.value.hint or "")
