"""mmdebstrap's root filesystem tarball re-written entry by entry by our layer writer.

The tarball is read (it is ours: made by sources/debian.py from packages checked against
the lock) and every entry becomes a layer entry that keeps what matters at run time and
drops what only records when and where it was made:

- exact modes (setuid, setgid, sticky) and numeric uid/gid are kept; names are not (the
  writer leaves uname/gname empty; the engines use the numbers);
- hard links become copies of their target (the writer has no link entries; a handful of
  files, so the cost is small);
- device nodes and fifos are dropped: the engine provides ``/dev``;
- mtimes become the lock's SOURCE_DATE_EPOCH (the writer writes one mtime for all);
- xattrs are not carried (the writer writes none);
- the files in :data:`DROPPED` are left out, each for the reason given there (found by
  building the root filesystem twice and comparing; docs/images.md lists them).
"""

from __future__ import annotations

import fnmatch
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import ImageError, UnsafeArchiveError
from ..oci.tarwriter import Entry

VERSION = "patchbake-rootfs/1"

# (pattern, why): fnmatch patterns over a non-directory entry's path ('*' crosses '/').
DROPPED: tuple[tuple[str, str], ...] = (
    ("var/log/*", "logs of the bootstrap (dpkg, apt, alternatives): timestamps, timings"),
    ("var/cache/ldconfig/aux-cache", "ldconfig's cache of inode numbers and ctimes"),
    ("var/cache/debconf/*-old", "debconf's backups of its own databases"),
    ("var/lib/dpkg/*-old", "dpkg's backups of status and available"),
    ("etc/*-", "shadow-utils' backups (passwd-, group-, shadow-, gshadow-)"),
    ("etc/machine-id", "a random identity of the machine; the engine provides none"),
    ("etc/apt/sources.list", "names the mirror of the machine that built it"),
    ("etc/apt/sources.list.d/*", "names the mirror of the machine that built it"),
    ("etc/hostname", "the build machine's host name"),
    ("etc/resolv.conf", "the build machine's resolver; the engine writes its own"),
    ("var/cache/apt/*.bin", "apt's binary caches of the package lists"),
    ("var/lib/apt/lists/*", "the package lists of the mirror that was used"),
)


@dataclass(frozen=True)
class RootfsPlan:
    entries: tuple[Entry, ...]
    dropped: tuple[str, ...]  # paths left out by DROPPED
    devices: int  # device nodes and fifos left out


def _clean(name: str) -> str:
    path = "" if name in (".", "./") else name.removeprefix("./").strip("/")
    if path.startswith("/") or ".." in path.split("/") or "\0" in path:
        raise UnsafeArchiveError(f"root filesystem tarball entry {name!r} is not a safe path")
    return path


def dropped_reason(path: str) -> str | None:
    for pattern, why in DROPPED:
        if fnmatch.fnmatchcase(path, pattern):
            return why
    return None


def _file(tf: tarfile.TarFile, path: str, member: tarfile.TarInfo,
          content: tarfile.TarInfo) -> Entry:
    def opener() -> IO[bytes]:
        f = tf.extractfile(content)
        if f is None:  # a regular member always has a file object
            raise ImageError(f"root filesystem tarball: {content.name} has no content")
        return f
    return Entry(path, "file", member.mode & 0o7777, size=content.size, opener=opener,
                 uid=member.uid, gid=member.gid)


def plan_rootfs(tf: tarfile.TarFile) -> RootfsPlan:
    """The layer entries of the root filesystem in ``tf`` (kept open while writing)."""
    entries: list[Entry] = []
    files: dict[str, tarfile.TarInfo] = {}
    dropped: list[str] = []
    devices = 0
    for m in tf.getmembers():
        path = _clean(m.name)
        if not path:
            continue  # the root directory itself: the image's, not the layer's
        if not m.isdir() and dropped_reason(path) is not None:  # directories stay
            dropped.append(path)
            continue
        if m.isdir():
            entries.append(Entry(path, "dir", m.mode & 0o7777, uid=m.uid, gid=m.gid))
        elif m.isreg():
            files[path] = m
            entries.append(_file(tf, path, m, m))
        elif m.issym():
            entries.append(Entry(path, "symlink", 0o777, target=m.linkname, uid=m.uid,
                                 gid=m.gid))
        elif m.islnk():
            target = files.get(_clean(m.linkname))
            if target is None:
                raise ImageError(f"root filesystem tarball: hard link {m.name} points at "
                                 f"{m.linkname}, which is not an earlier regular file")
            entries.append(_file(tf, path, m, target))
        elif m.ischr() or m.isblk() or m.isfifo():
            devices += 1
        else:
            raise ImageError(f"root filesystem tarball: {m.name} has unsupported type "
                             f"{m.type!r}")
    return RootfsPlan(tuple(entries), tuple(dropped), devices)


@contextmanager
def opened(tarball: Path) -> Iterator[tarfile.TarFile]:
    try:
        tf = tarfile.open(tarball, "r:")
    except (tarfile.TarError, OSError) as exc:
        raise ImageError(f"{tarball} is not an uncompressed tar: {exc}") from None
    with tf:
        yield tf
