"""The new lineage of a port: its upstream pin (by hash) and its block in pipeline.yaml.

The pin is resolved through the package index pip is configured with: the project page
of the simple API names ``<package>-<version>.tar.gz`` with its sha256, and that hash
becomes the pin (the bytes are verified against it when fetched). ``--sha256`` pins
without asking the index.

pipeline.yaml is edited as text, not re-dumped, so its comments and layout survive: the
new lineage's block is inserted at the end of the ``lineages:`` mapping, the result is
parsed and validated as a whole, and only then written (atomically).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ..config import Lineage, Upstream, parse
from ..digest import is_hex
from ..errors import ConfigError, FetchError, PortError
from ..fsutil import atomic_write, read_input
from ..sources import http
from ..sources.index import _project_files, configured_index, normalise_name

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+-]{0,63}$")


def check_names(version: str, key: str) -> None:
    if not _VERSION_RE.match(version):
        raise PortError(f"--to {version!r} is not a release version (like 0.33.0)")
    if not _KEY_RE.match(key):
        raise PortError(f"--lineage {key!r} is not a lineage key (letters, digits, '.', "
                          "'_' and '-', like v0.33.0)")


def index_sha256(package: str, filename: str) -> str:
    """The sha256 the configured index states for ``filename`` (refuses when it states none)."""
    base, origin = configured_index()
    page = base.rstrip("/") + "/" + normalise_name(package) + "/"
    what = f"index lookup of {package} (index from {origin})"
    files, _rel = _project_files(http.new_session(), page, what)
    for f in files:
        if isinstance(f, dict) and f.get("filename") == filename:
            sha = str((f.get("hashes") or {}).get("sha256") or "").lower()
            if not is_hex(sha):
                raise FetchError(f"{what}: the index states no sha256 for {filename}, so it "
                                 "cannot be pinned by hash",
                                 hint="pass --sha256 HEX with the hash of the sdist")
            return sha
    raise FetchError(f"{what}: the index lists no file '{filename}'",
                     hint="check the version given to --to")


def new_lineage(old: Lineage, root: Path, key: str, version: str, sha256: str) -> Lineage:
    """The new lineage: the old one's name and settings, the new pin, files under patch/KEY/."""
    up: Upstream = old.upstream
    filename = f"{up.package}-{version}.tar.gz"
    strip = up.strip.replace(up.version, version) if up.strip else None
    new_up = replace(up, kind="index", version=version, filename=filename, sha256=sha256,
                     url=None, path=None, repo=None, commit=None, strip=strip)
    d = root / "patch" / key
    return Lineage(key=key, name=old.name, upstream=new_up,
                   patch=d / f"{old.name}-{key}.patch", files=d / "FILES.txt",
                   source_record=d / "SOURCE", series=d / "series")


def _scalar(value: str) -> str:
    """``value`` as a YAML scalar that reads back as that string (2.0 would be a float)."""
    try:
        plain = yaml.safe_load(value) == value
    except yaml.YAMLError:
        plain = False
    return value if plain and ":" not in value and "#" not in value else f'"{value}"'


def lineage_block(lin: Lineage, root: Path, indent: str) -> str:
    up = lin.upstream
    i1, i2, i3 = indent, indent * 2, indent * 3

    def rel(p: Path | None) -> str:
        return str(Path(p).relative_to(root)) if p else ""

    q = _scalar
    lines = [f"{i1}{q(lin.key)}:", f"{i2}name: {q(lin.name)}", f"{i2}upstream:",
             f"{i3}kind: index", f"{i3}package: {q(up.package)}",
             f"{i3}version: {q(up.version)}", f"{i3}filename: {q(up.filename or '')}",
             f"{i3}sha256: {q(up.sha256 or '')}"]
    if up.strip:
        lines.append(f"{i3}strip: {q(up.strip)}")
    if up.generated:
        lines.append(f"{i3}generated: [{', '.join(q(g) for g in up.generated)}]")
    lines += [f"{i2}patch: {q(rel(lin.patch))}", f"{i2}files: {q(rel(lin.files))}",
              f"{i2}source_record: {q(rel(lin.source_record))}",
              f"{i2}series: {q(rel(lin.series))}"]
    return "\n".join(lines) + "\n"


def _insert_point(lines: list[str]) -> tuple[int, str]:
    """(index to insert before, indentation of the lineage keys)."""
    start = next((i for i, ln in enumerate(lines) if re.match(r"^lineages:\s*(#.*)?$", ln)),
                 None)
    if start is None:
        raise ConfigError("pipeline.yaml: no block-style 'lineages:' mapping to add the "
                          "new lineage to", hint="add the printed block by hand")
    end, indent = len(lines), ""
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if not ln[0].isspace():
            end = i
            break
        if not indent:
            indent = ln[:len(ln) - len(ln.lstrip())]
    indent = indent or "  "
    # blank lines and comments just above the next top-level key belong to it
    while end > start + 1 and (not lines[end - 1].strip()
                               or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end, indent


def plan_lineage_edit(pipeline_path: Path, lin: Lineage) -> tuple[str, str]:
    """(new pipeline.yaml text, the inserted block), validated; nothing is written."""
    text = read_input(pipeline_path, "pipeline", ConfigError).decode("utf-8")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    at, indent = _insert_point(lines)
    block = lineage_block(lin, pipeline_path.parent.resolve(), indent)
    new_text = "".join(lines[:at]) + block + "".join(lines[at:])
    try:
        data: Any = yaml.safe_load(new_text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{pipeline_path.name}: adding the lineage would not give valid "
                          f"YAML ({exc}); nothing was written",
                          hint="add the printed block by hand") from None
    got = parse(data, pipeline_path).lineage(lin.key)
    if got.upstream.sha256 != lin.upstream.sha256 or got.patch != lin.patch:
        raise ConfigError(f"{pipeline_path.name}: the inserted block did not read back as "
                          f"lineage {lin.key}; nothing was written",
                          hint="add the printed block by hand")
    return new_text, block


def write_pipeline(pipeline_path: Path, new_text: str) -> None:
    atomic_write(pipeline_path, new_text.encode("utf-8"))
