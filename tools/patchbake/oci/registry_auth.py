"""Registry credentials and the ``WWW-Authenticate`` challenge.

Credentials come from ``PATCHBAKE_REGISTRY_USER``/``PATCHBAKE_REGISTRY_PASSWORD`` (checked
first, so CI can override), else from Docker's ``config.json`` (``$DOCKER_CONFIG/config.json``,
else ``~/.docker/config.json``) as the Docker CLI reads it: the host's credential helper
(``credHelpers``), else the default credential store (``credsStore``), else the ``auths``
entry. A helper is the program ``docker-credential-<name>``, asked with ``get`` and the
server address on stdin (Docker Hub's is ``https://index.docker.io/v1/``); it is run only
when a registry asks for credentials.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..errors import PatchbakeError, RegistryError
from ..fsutil import read_optional
from .registry_ref import DOCKER_HUB_HOSTS, DOCKER_HUB_SERVER


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic", lowercased
    params: dict[str, str]


_PARAM_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> Challenge | None:
    """Parse one ``WWW-Authenticate`` value: ``Bearer realm="..",service="..",scope=".."``."""
    header = header.strip()
    if not header:
        return None
    scheme, _, rest = header.partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
              for m in _PARAM_RE.finditer(rest)}
    return Challenge(scheme.lower(), params)


def _config_path(env: Mapping[str, str]) -> Path:
    base = env.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def _auth_key_host(key: str) -> str:
    # Docker writes keys as "host", "https://host" or "https://host/v1/"; compare hosts only.
    key = re.sub(r"^[a-z]+://", "", key.strip())
    host = key.split("/", 1)[0].lower()
    return "docker.io" if host in DOCKER_HUB_HOSTS else host


def _same_host(key: str, host: str) -> bool:
    return _auth_key_host(key) == _auth_key_host(host)


# (helper name, server address) -> (username, secret), or None when it holds nothing
HelperRunner = Callable[[str, str], "tuple[str, str] | None"]


def run_helper(name: str, server: str) -> tuple[str, str] | None:
    """``docker-credential-<name> get`` (the Docker credential-helper protocol)."""
    exe = f"docker-credential-{name}"
    try:
        r = proc.run([exe, "get"], input=server.encode(), check=False, timeout=60)
    except PatchbakeError as exc:
        raise RegistryError(f"Docker's config names the credential helper '{name}', but "
                            f"{exc.message}", hint=f"install {exe}, or set "
                            "PATCHBAKE_REGISTRY_USER and PATCHBAKE_REGISTRY_PASSWORD") from exc
    out = r.text.strip()
    if r.returncode != 0:
        if "credentials not found" in (out + r.stderr.decode("utf-8", "replace")).lower():
            return None
        raise RegistryError(f"{exe} get {server} exited {r.returncode}: "
                            f"{(out or r.stderr.decode('utf-8', 'replace')).strip()[:200]}")
    try:
        doc = json.loads(out)
        user, secret = doc["Username"], doc["Secret"]
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"{exe} get {server} answered something other than "
                            '{"Username": .., "Secret": ..}') from None
    if not isinstance(user, str) or not isinstance(secret, str):
        raise RegistryError(f"{exe} get {server}: Username and Secret must be strings")
    return user, secret


def _server_address(host: str) -> str:
    return DOCKER_HUB_SERVER if _auth_key_host(host) == "docker.io" else host


def _from_helpers(doc: dict[str, object], host: str,
                  helper: HelperRunner) -> Credentials | None:
    helpers = doc.get("credHelpers")
    name = None
    if isinstance(helpers, dict):
        name = next((v for k, v in helpers.items() if _same_host(k, host)), None)
    if name is None:
        name = doc.get("credsStore")
    if not isinstance(name, str) or not name:
        return None
    got = helper(name, _server_address(host))
    return Credentials(*got) if got else None


def _from_auths(doc: dict[str, object], host: str, path: Path) -> Credentials | None:
    auths = doc.get("auths")
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if not _same_host(key, host) or not isinstance(entry, dict):
            continue
        if entry.get("username") and entry.get("password") is not None:
            return Credentials(str(entry["username"]), str(entry["password"]))
        encoded = entry.get("auth")
        if isinstance(encoded, str) and encoded:
            try:
                decoded = base64.b64decode(encoded, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise RegistryError(f"the 'auth' entry for {key} in {path} is not base64") from exc
            name, sep, secret = decoded.partition(":")
            if not sep:
                raise RegistryError(f"the 'auth' entry for {key} in {path} is not user:password")
            return Credentials(name, secret)
    return None


def credentials_for(host: str, env: Mapping[str, str] | None = None, *,
                    helper: HelperRunner | None = None) -> Credentials | None:
    """Credentials for ``host`` (``HOST[:PORT]``), or None if none are configured."""
    env = os.environ if env is None else env
    user, password = env.get("PATCHBAKE_REGISTRY_USER"), env.get("PATCHBAKE_REGISTRY_PASSWORD")
    if user and password is not None:
        return Credentials(user, password)
    if user or password:
        raise RegistryError(
            "only one of PATCHBAKE_REGISTRY_USER and PATCHBAKE_REGISTRY_PASSWORD is set",
            hint="set both, or neither",
        )
    path = _config_path(env)
    data = read_optional(path, "Docker credentials file", RegistryError)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise RegistryError(f"cannot read Docker credentials from {path}: {exc}") from exc
    if not isinstance(doc, dict):
        return None
    return _from_helpers(doc, host, helper or run_helper) or _from_auths(doc, host, path)
