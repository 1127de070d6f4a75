"""Resolve a pinned sdist through the package index pip is configured with.

Which index: ``PIP_INDEX_URL``, else ``index-url`` from pip's configuration files (the
same files and precedence pip uses), else pip's own default, read from pip itself so
no host name is written here. Only the primary index is used: extra indexes and
find-links are ignored, because a pin must resolve in exactly one place.

How: the project page ``<index>/<package>/`` of the JSON simple API (PEP 691), or of the
HTML one (PEP 503) when that is all the index speaks; the entry whose ``filename`` is
pinned; the sha256 the index states must equal the pin (the bytes are verified again
when they arrive). A ``file://`` index is read as a PEP 503 tree (``<project>/index.html``).
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import requests

from ..errors import FetchError, IntegrityError
from . import http

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
# JSON preferred; an index that only speaks PEP 503 HTML (many mirrors) still answers
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


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


class _Anchors(HTMLParser):
    """The <a href> links of a PEP 503 (HTML) project page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href, self._text = dict(attrs).get("href") or "", []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def files_from_html(text: str) -> list[dict[str, Any]]:
    """PEP 503 anchors as PEP 691 file entries (filename, url, hashes from the fragment)."""
    parser = _Anchors()
    parser.feed(text)
    files = []
    for href, label in parser.links:
        url, _, fragment = href.partition("#")
        name = label or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        algo, _, value = fragment.partition("=")
        files.append({"filename": name, "url": url, "hashes": {algo: value} if value else {}})
    return files


def _project_files(session: requests.Session, page: str, what: str) -> tuple[list[Any], str]:
    """(file entries, URL they are relative to) of a project page, JSON preferred."""
    if urlsplit(page).scheme == "file":
        # a local PEP 503 tree: <index>/<project>/index.html
        path = Path(unquote(urlsplit(page).path)) / "index.html"
        try:
            return files_from_html(path.read_text(encoding="utf-8")), path.as_uri()
        except OSError as exc:
            raise FetchError(f"{what}: cannot read {path}: {exc.strerror}") from exc
    resp = http.request(session, page, what=what, headers={"Accept": ACCEPT})
    ctype = str(resp.headers.get("Content-Type", "")).split(";")[0].strip()
    base = resp.url or page
    if ctype == JSON_TYPE:
        try:
            files = resp.json()["files"]
            if not isinstance(files, list):
                raise TypeError("files is not a list")
            return files, base
        except (ValueError, KeyError, TypeError) as exc:
            raise FetchError(f"{what}: {http.redact(page)} is not a valid simple API page: "
                             f"{exc}") from exc
    if ctype in ("text/html", "application/vnd.pypi.simple.v1+html"):
        return files_from_html(resp.text), base
    raise FetchError(f"{what}: {http.redact(page)} answered '{ctype or 'no type'}', neither "
                     f"the JSON ({JSON_TYPE}) nor the HTML simple API",
                     hint="configure pip with a PEP 691 or PEP 503 package index")


def find_file(package: str, filename: str, sha256: str, *,
            session: requests.Session, index: str | None = None) -> str:
    """The download URL of ``filename``, after checking the index's hash against the pin."""
    base, origin = (index, "given") if index else configured_index()
    page = base.rstrip("/") + "/" + normalise_name(package) + "/"
    what = f"index lookup of {package} (index from {origin})"
    files, relative_to = _project_files(session, page, what)
    for f in files:
        if isinstance(f, dict) and f.get("filename") == filename:
            stated = (f.get("hashes") or {}).get("sha256")
            if stated and str(stated).lower() != sha256:
                raise IntegrityError(
                    f"the index states sha256:{stated} for {filename}, but the pin is "
                    f"sha256:{sha256}; nothing was downloaded",
                    hint="the index serves other bytes than pinned: check the index and "
                         "the pin in pipeline.yaml")
            return urljoin(relative_to, str(f.get("url", "")))
    names = sorted(str(f.get("filename")) for f in files if isinstance(f, dict))
    sdists = [n for n in names if n.endswith((".tar.gz", ".zip"))][-3:]
    raise FetchError(
        f"{what}: {http.redact(page)} lists no file '{filename}' ({len(names)} files"
        + (f"; sdists include: {', '.join(sdists)}" if sdists else "") + ")",
        hint="check upstream.filename and version in pipeline.yaml, or the pip index")
