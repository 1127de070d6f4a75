"""Resolve a pinned sdist through the package index pip is configured with.

Which index: ``index-url`` as pip resolves it (``PIP_INDEX_URL``, else pip's
configuration files, read by :mod:`patchbake.netconfig` with pip's files and precedence),
else pip's own default, read from pip itself so no host name is written here. Only the primary index is used: extra indexes and
find-links are ignored, because a pin must resolve in exactly one place.

How: the project page ``<index>/<package>/`` of the JSON simple API (PEP 691), or of the
HTML one (PEP 503) when that is all the index speaks; the entry whose ``filename`` is
pinned; the sha256 the index states must equal the pin (the bytes are verified again
when they arrive). A ``file://`` index is read as a PEP 503 tree (``<project>/index.html``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import requests

from .. import netconfig
from ..errors import FetchError, IntegrityError
from ..fsutil import read_input
from ..netpolicy import Session
from . import http

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
# JSON preferred; an index that only speaks PEP 503 HTML (many mirrors) still answers
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


def configured_index(net: netconfig.NetworkSettings | None = None) -> tuple[str, str]:
    """(primary index URL, where it came from): pip's network settings (``net``, else
    read now), else pip's own default."""
    net = net if net is not None else netconfig.read()
    if net.index_url:
        return net.index_url, net.origin("index-url")
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        raise FetchError("no package index is configured, and pip, whose default it "
                         "would be, is not installed",
                         hint="set index-url in pip's configuration or PIP_INDEX_URL"
                         ) from None
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
        data = read_input(path, f"{what}: the index page", FetchError)
        return files_from_html(data.decode("utf-8", "replace")), path.as_uri()
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
    base, origin = (index, "given") if index else configured_index(
        session.network if isinstance(session, Session) else None)
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


def _sdist_files(package: str, session: requests.Session, index: str | None,
                 what: str) -> tuple[list[dict[str, Any]], str, str]:
    """(the sdist entries of ``package``'s project page, its URL, where the index came
    from)."""
    base, origin = (index, "given") if index else configured_index(
        session.network if isinstance(session, Session) else None)
    page = base.rstrip("/") + "/" + normalise_name(package) + "/"
    files, _ = _project_files(session, page, f"{what} (index from {origin})")
    return ([f for f in files if isinstance(f, dict)
             and str(f.get("filename", "")).endswith(".tar.gz")], page, origin)


def find_sdists(package: str, *, session: requests.Session,
                index: str | None = None) -> list[str]:
    """The sdist file names ``package``'s project page lists (``patchbake doctor``)."""
    files, _, _ = _sdist_files(package, session, index, f"index lookup of {package}")
    return [str(f["filename"]) for f in files]


def find_sdist(package: str, version: str, *, session: requests.Session,
               index: str | None = None) -> tuple[str, str, str]:
    """(file name, sha256 as the index states it, where the index came from) of
    ``package``'s sdist of ``version``: what a new pin is made of (``patchbake init``).
    The bytes are checked against that sha256 when ``fetch`` downloads them."""
    what = f"index lookup of {package} {version}"
    files, page, origin = _sdist_files(package, session, index, what)
    stems = {f"{package}-{version}", f"{normalise_name(package).replace('-', '_')}-{version}"}
    for f in files:
        name = str(f["filename"])
        if name.removesuffix(".tar.gz") in stems:
            stated = str((f.get("hashes") or {}).get("sha256") or "").lower()
            if not re.fullmatch(r"[0-9a-f]{64}", stated):
                raise FetchError(f"{what}: the index states no sha256 for {name}",
                                 hint="pin it by hand: `upstream.sha256` of the file you "
                                      "trust (docs/pipeline.md)")
            return name, stated, origin
    versions = sorted({m.group(1) for f in files for m in
                       [re.fullmatch(rf"{re.escape(package)}-(.+)\.tar\.gz",
                                     str(f["filename"]))] if m}, key=_version_key)
    raise FetchError(f"{what}: {http.redact(page)} has no sdist of version {version}"
                     + (f" (newest: {', '.join(versions[-3:])})" if versions else ""),
                     hint=f"check the version (`pip index versions {package}` lists them)")


def _version_key(v: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.\-+]", v))
