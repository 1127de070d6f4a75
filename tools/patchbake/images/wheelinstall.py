"""A wheel installed the way pip installs it, as layer entries (the binary distribution
format, PEP 427 and its successor spec on packaging.python.org).

- files at the wheel's root, and ``<dist>.data/purelib|platlib/``, go to site-packages;
- ``<dist>.data/scripts/`` goes to ``/usr/local/bin`` (0755), a first line ``#!python``
  (or ``#!pythonw``) rewritten to the image's interpreter;
- ``<dist>.data/headers/`` to ``/usr/local/include/python3.X/<dist>/``, ``<dist>.data/data/``
  to ``/usr/local/`` (Debian's ``posix_local`` scheme, where pip installs as root);
- every ``console_scripts`` and ``gui_scripts`` entry point becomes pip's launcher script
  (distlib's template, the one pip writes) in ``/usr/local/bin``;
- ``INSTALLER`` says ``patchbake``; ``RECORD`` is rewritten to list what was installed
  (paths relative to site-packages, urlsafe-base64 sha256 without padding, size; its own
  line empty; CRLF rows, sorted, as pip's csv writer writes them);
- a file's execute bit comes from the zip's external attributes (0755, else 0644).

Members are not extracted: each is an entry opened lazily from the zip when the layer is
written, and its bytes are checked against the wheel's own RECORD as they stream (the wheel
file itself is pinned by sha256 in the lock; RECORD pins each member inside it). No ``.pyc``
is compiled (docs/images.md says why). A member path that is absolute or has ``..`` is
refused (UnsafeArchiveError).
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import posixpath
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import ImageError, IntegrityError, UnsafeArchiveError
from ..oci.tarwriter import Entry

INSTALLER = b"patchbake\n"
VERSION = "patchbake-wheelinstall/1"
_DATA_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
_ENTRY_POINT = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+))?\s*(\[.*\])?\s*$")
_SCRIPT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
# distlib's ScriptMaker template, which pip uses for console and gui scripts
_LAUNCHER = """# -*- coding: utf-8 -*-
import re
import sys
from {module} import {import_name}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({func}())
"""


@dataclass(frozen=True)
class Scheme:
    """Where the parts of a wheel go, as layer paths (no leading '/')."""

    site_packages: str  # "usr/local/lib/python3.11/dist-packages"
    scripts: str
    headers: str
    data: str
    interpreter: str  # "/usr/bin/python3"

    @classmethod
    def debian_local(cls, site_packages: str, python: str) -> Scheme:
        return cls(site_packages.strip("/"), "usr/local/bin",
                   f"usr/local/include/python{python}", "usr/local", "/usr/bin/python3")


@dataclass(frozen=True)
class Installed:
    """One installed file: its layer entry and its hash (hex sha256)."""

    entry: Entry
    sha256: str


@dataclass(frozen=True)
class WheelInstall:
    project: str  # as the .dist-info directory spells it ("torch")
    files: tuple[Installed, ...]
    record_fixed: tuple[str, ...] = ()  # members whose RECORD size was wrong (re-hashed)


def _b64(hexdigest: str) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode()


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).hex()


def _safe(name: str, wheel: str) -> str:
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or "\0" in name or ".." in parts \
            or any(p in ("", ".") for p in parts[:-1]):
        raise UnsafeArchiveError(f"wheel {wheel}: member {name!r} is not a safe relative "
                                 "path (absolute, '..' or empty components); refusing it")
    return name


class _Checked:
    """A zip member's stream that fails at EOF unless its bytes are RECORD's."""

    def __init__(self, raw: IO[bytes], sha256: str, what: str):
        self._raw, self._want, self._what = raw, sha256, what
        self._hash = hashlib.sha256()

    def read(self, n: int = -1, /) -> bytes:
        chunk = self._raw.read(n)
        self._hash.update(chunk)
        if not chunk and self._hash.hexdigest() != self._want:
            raise IntegrityError(f"{self._what} does not match its wheel's RECORD hash")
        return chunk

    def __enter__(self) -> _Checked:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()


def _record(zf: zipfile.ZipFile, dist_info: str, wheel: str) -> dict[str, tuple[str, int]]:
    """The wheel's RECORD: path -> (sha256 hex, size) for rows that carry a sha256."""
    try:
        text = zf.read(f"{dist_info}/RECORD").decode("utf-8")
    except KeyError:
        raise ImageError(f"wheel {wheel} has no {dist_info}/RECORD") from None
    rows: dict[str, tuple[str, int]] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 3 and row[1].startswith("sha256=") and row[2].isdigit():
            rows[row[0]] = (_unb64(row[1][7:]), int(row[2]))
    return rows


def _dist_info(names: list[str], wheel: str) -> str:
    tops = {n.split("/", 1)[0] for n in names if "/" in n}
    found = sorted(t for t in tops if t.endswith(".dist-info"))
    if len(found) != 1:
        raise ImageError(f"wheel {wheel} has {len(found)} .dist-info directories; it needs "
                         "exactly one")
    return found[0]


def _destination(name: str, data_dir: str, scheme: Scheme, project: str,
                 wheel: str) -> tuple[str, str]:
    """(layer path, scheme key) of a member."""
    if not name.startswith(f"{data_dir}/"):
        return f"{scheme.site_packages}/{name}", "purelib"
    key, _, rest = name[len(data_dir) + 1:].partition("/")
    if key not in _DATA_KEYS or not rest:
        raise ImageError(f"wheel {wheel}: {name} is in an unknown .data directory {key!r}")
    root = {"purelib": scheme.site_packages, "platlib": scheme.site_packages,
            "scripts": scheme.scripts, "headers": f"{scheme.headers}/{project}",
            "data": scheme.data}[key]
    return f"{root}/{rest}", key


def _script(data: bytes, interpreter: str) -> bytes:
    first, nl, rest = data.partition(b"\n")
    for marker in (b"#!pythonw", b"#!python"):
        if first.startswith(marker):
            return b"#!" + interpreter.encode() + first[len(marker):] + nl + rest
    return data


def _launchers(text: str, scheme: Scheme, wheel: str) -> list[tuple[str, bytes]]:
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise ImageError(f"wheel {wheel}: entry_points.txt does not parse ({exc})") from None
    out = []
    for section in ("console_scripts", "gui_scripts"):
        if not parser.has_section(section):
            continue
        for name, value in parser.items(section):
            m = _ENTRY_POINT.match(value.strip())
            if not _SCRIPT_NAME.fullmatch(name) or m is None or not m["attr"]:
                raise ImageError(f"wheel {wheel}: entry point {name} = {value!r} is not "
                                 "'name = module:function'")
            body = f"#!{scheme.interpreter}\n" + _LAUNCHER.format(
                module=m["module"], import_name=m["attr"].split(".")[0], func=m["attr"])
            out.append((f"{scheme.scripts}/{name}", body.encode()))
    return out


def _memory(path: str, data: bytes, executable: bool) -> Installed:
    return Installed(Entry(path, "file", 0o755 if executable else 0o644, data=data,
                           size=len(data)), hashlib.sha256(data).hexdigest())


def _hashed(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    h = hashlib.sha256()
    with zf.open(info) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str,
            row: tuple[str, int] | None, wheel: str) -> tuple[Installed, bool]:
    """The member as an entry, and whether its RECORD row was wrong (and replaced)."""
    executable = bool((info.external_attr >> 16) & 0o111)
    if row is None:
        if not info.filename.endswith(("/RECORD.jws", "/RECORD.p7s")):
            raise IntegrityError(f"wheel {wheel}: {info.filename} is not in its RECORD")
        return _memory(path, zf.read(info), executable), False  # signatures: not in RECORD
    fixed = row[1] != info.file_size
    if fixed:
        # a RECORD row whose size is not the member's is the wheel's own mistake (the wheel
        # file is pinned by sha256, so these bytes are the pinned ones): hash what is there
        # and install that, reported rather than refused (pip does not check RECORD at all)
        row = (_hashed(zf, info), info.file_size)
    want = row[0]
    what = f"wheel {wheel}: {info.filename}"
    return Installed(Entry(path, "file", 0o755 if executable else 0o644, size=info.file_size,
                           opener=lambda: _Checked(zf.open(info), want, what)), want), fixed


def install_wheel(zf: zipfile.ZipFile, wheel: str, scheme: Scheme) -> WheelInstall:
    """The files pip would install for the wheel open as ``zf`` (named ``wheel``)."""
    infos = [i for i in zf.infolist() if not i.is_dir()]
    for i in infos:
        _safe(i.filename, wheel)
    dist_info = _dist_info([i.filename for i in infos], wheel)
    project = dist_info.removesuffix(".dist-info").rsplit("-", 1)[0]
    data_dir = dist_info.removesuffix(".dist-info") + ".data"
    record = _record(zf, dist_info, wheel)
    files: list[Installed] = []
    fixed: list[str] = []
    for info in infos:
        name = info.filename
        if name == f"{dist_info}/RECORD" or name == f"{dist_info}/INSTALLER":
            continue
        path, key = _destination(name, data_dir, scheme, project, wheel)
        row = record.get(name)
        if key == "scripts":
            data = zf.read(info)
            if row is not None and hashlib.sha256(data).hexdigest() != row[0]:
                raise IntegrityError(f"wheel {wheel}: {name} does not match its RECORD hash")
            files.append(_memory(path, _script(data, scheme.interpreter), True))
        else:
            installed, was_fixed = _member(zf, info, path, row, wheel)
            files.append(installed)
            if was_fixed:
                fixed.append(name)
    ep = f"{dist_info}/entry_points.txt"
    if ep in zf.namelist():
        files += [_memory(p, body, True)
                  for p, body in _launchers(zf.read(ep).decode("utf-8"), scheme, wheel)]
    sp = scheme.site_packages
    files.append(_memory(f"{sp}/{dist_info}/INSTALLER", INSTALLER, False))
    files.append(_memory(f"{sp}/{dist_info}/RECORD", record_bytes(files, sp, dist_info), False))
    return WheelInstall(project, tuple(files), tuple(fixed))


def record_bytes(files: list[Installed], site_packages: str, dist_info: str) -> bytes:
    """RECORD as pip writes it: paths relative to site-packages, sorted, CRLF rows."""
    rows = [(posixpath.relpath(f.entry.path, site_packages), f"sha256={_b64(f.sha256)}",
             str(f.entry.size)) for f in files]
    rows.append((f"{dist_info}/RECORD", "", ""))
    out = io.StringIO()
    csv.writer(out).writerows(sorted(rows))
    return out.getvalue().encode("utf-8")


@contextmanager
def opened(path: Path, wheel: str) -> Iterator[zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ImageError(f"wheel {wheel} ({path}) cannot be read as a zip: {exc}") from None
    with zf:
        yield zf


@dataclass(frozen=True)
class Conflict:
    path: str  # layer path
    kept: str  # project whose file is installed
    dropped: str  # project whose file is overwritten


def merge(installs: list[WheelInstall]) -> tuple[list[Entry], list[Conflict]]:
    """The entries of wheels installed one after the other in the given order.

    Two wheels writing the same path with the same bytes and mode (``nvidia/__init__.py``
    of the nvidia-* wheels): one entry. Different bytes: the later wheel's file stays, as
    when pip installs them in that order, and the pair is reported; the earlier wheel's
    RECORD keeps its own hash for the path (what pip leaves too)."""
    chosen: dict[str, tuple[Installed, str]] = {}
    conflicts: list[Conflict] = []
    for inst in installs:
        for f in inst.files:
            before = chosen.get(f.entry.path)
            if before is not None:
                if (before[0].sha256, before[0].entry.mode) == (f.sha256, f.entry.mode):
                    continue
                conflicts.append(Conflict(f.entry.path, inst.project, before[1]))
            chosen[f.entry.path] = (f, inst.project)
    return [f.entry for f, _ in chosen.values()], conflicts
