"""Resolve a pinned sdist through the package index pip is configured with.

Which index: ``PIP_INDEX_URL``, else ``index-url`` from pip's configuration files (the
same files and precedence pip uses), else pip's own default, read from pip itself so
no host name is written here. Only the primary index is used: extra indexes and
find-links are ignored, because a pin must resolve in exactly one place.

How: the JSON simple API (PEP 691) project page ``<index>/<package>/``; the entry whose
``filename`` is pinned; the sha256 the index states must equal the pin (the bytes are
verified again when they arrive).
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from pathlib import Path
from urllib.parse import urljoin

import requests

from ..errors import FetchError, IntegrityError
from . import http

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def _pip_file_locations() -> tuple[list[str], list[str], list[str]]:
    """(global, user, site) configuration files, as pip itself lists them."""
    try:  # pip knows its own file locations best (they differ per platform)
        from pip._internal.configuration import get_configuration_files, kinds

        found = get_configuration_files()
        return (list(found.get(kinds.GLOBAL, [])), list(found.get(kinds.USER, [])),
                list(found.get(kinds.SITE, [])))
    except Exception:  # noqa: BLE001 - pip's internals moved: fall back to the usual places
        xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
        home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
        return ([*(str(Path(d) / "pip" / "pip.conf") for d in xdg), "/etc/pip.conf"],
                [str(Path.home() / ".pip" / "pip.conf"), str(home / "pip" / "pip.conf")],
                [str(Path(sys.prefix) / "pip.conf")])


def _config_files() -> list[Path]:
    """pip's configuration files, lowest precedence first: global, user, site, then the
    file named by PIP_CONFIG_FILE (whose existence makes pip skip the user files)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    glob, user, site = _pip_file_locations()
    if env_file and Path(env_file).exists():
        user = []
    return [Path(p) for p in (*glob, *user, *site, *([env_file] if env_file else []))]


def configured_index() -> tuple[str, str]:
    """(primary index URL, where it came from)."""
    env = os.environ.get("PIP_INDEX_URL", "").strip()
    if env:
        return env.split()[0], "PIP_INDEX_URL"
    found: tuple[str, str] | None = None
    for path in _config_files():
        cp = configparser.RawConfigParser()
        try:
            cp.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            raise FetchError(f"pip configuration file {path} is unreadable: {exc}") from exc
        for section in ("global", "download", "install"):
            for key in ("index-url", "index_url"):
                if cp.has_option(section, key):
                    value = cp.get(section, key).strip()
                    if value:
                        found = (value.split()[0], f"{path} [{section}] {key}")
    if found:
        return found
    from pip._internal.models.index import PyPI

    return PyPI.simple_url, "pip's default"


def normalise_name(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(package: str, filename: str, sha256: str, *,
            session: requests.Session, index: str | None = None) -> str:
    """The download URL of ``filename``, after checking the index's hash against the pin."""
    base, origin = (index, "given") if index else configured_index()
    page = base.rstrip("/") + "/" + normalise_name(package) + "/"
    what = f"index lookup of {package} (index from {origin})"
    resp = http.request(session, page, what=what, headers={"Accept": JSON_TYPE})
    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip()
    if ctype != JSON_TYPE:
        raise FetchError(f"{what}: {http.redact(page)} answered '{ctype or 'no type'}', not "
                         f"the JSON simple API ({JSON_TYPE})",
                         hint="configure pip with an index that serves PEP 691 JSON")
    try:
        files = resp.json()["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FetchError(f"{what}: {http.redact(page)} is not a valid simple API page") from exc
    for f in files:
        if isinstance(f, dict) and f.get("filename") == filename:
            stated = (f.get("hashes") or {}).get("sha256")
            if stated and stated.lower() != sha256:
                raise IntegrityError(
                    f"the index states sha256:{stated} for {filename}, but the pin is "
                    f"sha256:{sha256}; nothing was downloaded",
                    hint="the index serves other bytes than pinned: check the index and "
                         "the pin in pipeline.yaml")
            return urljoin(resp.url or page, str(f.get("url", "")))
    names = sorted(str(f.get("filename")) for f in files if isinstance(f, dict))
    near = [n for n in names if n.endswith((".tar.gz", ".zip"))][-3:]
    raise FetchError(
        f"{what}: {http.redact(page)} lists no file '{filename}' ({len(names)} files"
        + (f"; newest sdists: {', '.join(near)}" if near else "") + ")",
        hint="check upstream.filename and version in pipeline.yaml, or the pip index")
