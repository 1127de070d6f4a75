"""The network settings pip is configured with, read into one frozen NetworkSettings:
index, extra indexes, TLS trust (``cert``, ``client-cert``, ``trusted-host``), proxy,
timeout. Both network clients (sources and the registry) build their Session from it
(``netpolicy.http_session``), so they trust exactly what pip trusts.

Where a value comes from, lowest precedence first, as pip resolves it:

- configuration files: global (``$XDG_CONFIG_DIRS/pip/pip.conf``, ``/etc/pip.conf``),
  user (``~/.pip/pip.conf``, ``~/.config/pip/pip.conf``; skipped when
  ``PIP_CONFIG_FILE`` names a file that exists), site (``sys.prefix/pip.conf``, the
  virtualenv's), then the file ``PIP_CONFIG_FILE`` names; a later file wins, and
  ``PIP_CONFIG_FILE=/dev/null`` skips every file;
- within the files, ``[global]``, then ``[download]``, then ``[install]`` (the pip
  commands whose traffic this is);
- ``PIP_<OPTION>`` in the environment over every file. Empty values are ignored, as pip
  ignores them.

The file locations are pip's own (``get_configuration_files``) when pip is importable,
else the same list written here. The values are read here with configparser, as pip's
``Configuration`` reads them, rather than by pip itself: this must work where pip is
not installed (a pipx venv has none) and must say which file a value came from. A unit
test holds this reader equal to pip's ``Configuration`` on the same files.

TLS trust: ``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE`` (requests prefers them to a
session's own setting, so pip does too), else pip's ``cert``, else certifi's bundle.
``SSL_CERT_FILE`` is not read, as pip does not read it.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .errors import ConfigError

SECTIONS = ("global", "download", "install")  # lowest precedence first
# pip's option name -> the names it is also known by (pip accepts any long option name)
OPTIONS: Mapping[str, tuple[str, ...]] = {
    "index-url": ("index-url", "pypi-url"),
    "extra-index-url": ("extra-index-url",),
    "cert": ("cert",),
    "client-cert": ("client-cert",),
    "trusted-host": ("trusted-host",),
    "proxy": ("proxy",),
    "timeout": ("timeout", "default-timeout"),
}
CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
CERTIFI = "certifi's bundle"


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    """What pip would use. ``index_url`` None means pip's default index;
    ``verify`` is a CA bundle file, or True for certifi's bundle."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    cert: str | None = None
    client_cert: str | None = None
    trusted_hosts: tuple[str, ...] = ()
    proxy: str | None = None
    timeout: float | None = None
    verify: str | bool = True
    # (option, where it was set): "PIP_CERT", "/etc/pip.conf [global] cert", ...
    origins: tuple[tuple[str, str], ...] = ()

    def origin(self, option: str) -> str:
        return dict(self.origins).get(option, "pip's default")

    def trust(self) -> str:
        """Where TLS trust comes from, in words."""
        if self.verify is True:
            return CERTIFI
        return f"{self.verify} (from {self.origin('verify')})"

    def is_trusted_host(self, url: str) -> bool:
        """pip's ``trusted-host``: ``host`` matches any port, ``host:port`` that one."""
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        for entry in self.trusted_hosts:
            try:
                want = urlsplit("//" + entry)
                if want.hostname == parts.hostname and want.port in (None, port):
                    return True
            except ValueError:  # not a host[:port]: pip would never match it either
                continue
        return False

    def check_files(self) -> None:
        """The files named for TLS exist (requests would only say so at the first
        request, as a transport error)."""
        for option, value in (("verify", self.verify), ("client-cert", self.client_cert)):
            if isinstance(value, str) and not Path(value).is_file():
                raise ConfigError(
                    f"the TLS file {value} (from {self.origin(option)}) does not exist",
                    hint="fix or unset it: `pip config list -v` shows where pip reads it")


def file_locations() -> tuple[list[str], list[str], list[str]]:
    """(global, user, site) configuration files, as pip itself lists them."""
    try:  # pip knows its own file locations best (they differ per platform)
        from pip._internal.configuration import get_configuration_files

        # keyed by kind: plain strings before pip 26, a str Enum equal to them since
        found = get_configuration_files()
        return (list(found.get("global", [])), list(found.get("user", [])),  # type: ignore[call-overload]
                list(found.get("site", [])))  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - no pip, or its internals moved: the usual places
        xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
        home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
        return ([*(str(Path(d) / "pip" / "pip.conf") for d in xdg), "/etc/pip.conf"],
                [str(Path.home() / ".pip" / "pip.conf"), str(home / "pip" / "pip.conf")],
                [str(Path(sys.prefix) / "pip.conf")])


def config_files() -> list[Path]:
    """pip's configuration files, lowest precedence first."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    glob, user, site = file_locations()
    if env_file and Path(env_file).exists():
        user = []
    return [Path(p) for p in (*glob, *user, *site, *([env_file] if env_file else []))]


def _normalise(key: str) -> str:
    return key.lower().replace("_", "-")


def raw_values() -> dict[str, tuple[str, str]]:
    """option -> (value, where it was set), after pip's precedence."""
    canonical = {alias: name for name, aliases in OPTIONS.items() for alias in aliases}
    files: list[tuple[str, str, str, str]] = []  # (section, key, value, file)
    for file in config_files():
        cp = configparser.RawConfigParser()
        try:
            cp.read(file, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"pip configuration file {file} is unreadable: {exc}",
                              hint="fix it, or point PIP_CONFIG_FILE elsewhere") from exc
        files += [(s, _normalise(k), v, str(file)) for s in cp.sections() for k, v in cp.items(s)]
    found: dict[str, tuple[str, str]] = {}
    for section in SECTIONS:
        for sec, key, value, path in files:
            if sec == section and key in canonical and value.strip():
                found[canonical[key]] = (value.strip(), f"{path} [{section}] {key}")
    for var, value in sorted(os.environ.items()):
        key = _normalise(var[4:]) if var.startswith("PIP_") else ""
        if key in canonical and value.strip():
            found[canonical[key]] = (value.strip(), var)
    return found


def read() -> NetworkSettings:
    """The settings pip would use now (the environment and files as they are)."""
    raw = raw_values()
    origins = {name: where for name, (_v, where) in raw.items()}

    def value(name: str) -> str | None:
        return raw[name][0] if name in raw else None

    def path(name: str) -> str | None:
        v = value(name)
        return os.path.expanduser(v) if v else None

    timeout = value("timeout")
    try:
        seconds = float(timeout) if timeout else None
    except ValueError:
        raise ConfigError(f"pip's timeout {timeout!r} (from {origins['timeout']}) is not "
                          "a number of seconds") from None
    cert = path("cert")
    verify: str | bool = True
    env_ca = next(((v, os.environ[v]) for v in CA_ENV if os.environ.get(v)), None)
    if env_ca:
        verify, origins["verify"] = env_ca[1], env_ca[0]
    elif cert:
        verify, origins["verify"] = cert, origins["cert"]
    index = value("index-url")
    return NetworkSettings(
        index_url=index.split()[0] if index else None,
        extra_index_urls=tuple((value("extra-index-url") or "").split()),
        cert=cert, client_cert=path("client-cert"),
        trusted_hosts=tuple((value("trusted-host") or "").split()),
        proxy=value("proxy"), timeout=seconds, verify=verify,
        origins=tuple(sorted(origins.items())))
