"""Registry credentials and the ``WWW-Authenticate`` challenge.

Credentials come from ``PATCHBAKE_REGISTRY_USER``/``PATCHBAKE_REGISTRY_PASSWORD`` (checked
first, so CI can override) or from the ``auths`` section of Docker's ``config.json``
(``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``). Docker credential helpers
(``credsStore``/``credHelpers``) are not run: that would start processes holding secrets
on the user's behalf; log in with the environment variables instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RegistryError


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
    return key.split("/", 1)[0].lower()


def credentials_for(host: str, env: Mapping[str, str] | None = None) -> Credentials | None:
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
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RegistryError(f"cannot read Docker credentials from {path}: {exc}") from exc
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if _auth_key_host(key) != host.lower() or not isinstance(entry, dict):
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
