"""Safe extraction of an upstream archive (tar, tar.gz/bz2/xz, zip) into a staging dir.

Refused, each with an UnsafeArchiveError naming the member and why: absolute paths, ``..``
components, duplicates, devices, fifos, hardlinks to anything but an earlier regular file,
symlinks whose target (followed through other links) leaves the tree. Set-id and sticky
bits are dropped; modes become 0644/0755 for files, 0755 for directories.

Why it cannot be tricked into writing outside the staging dir: regular files are
created with O_EXCL|O_NOFOLLOW while no symlink exists in the tree yet; symlinks are
created only after every file is written, and then each is resolved and checked.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .. import limits as limits_mod
from ..errors import ArchiveLimitError, FetchError, UnsafeArchiveError

FILE, DIR, SYMLINK, HARDLINK = "file", "dir", "symlink", "hardlink"
_COPY = 1 << 20
# what reading a damaged archive raises while a member's bytes are copied
# (RuntimeError, NotImplementedError: an encrypted zip member or an unknown compression)
_CORRUPT = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError,
            zipfile.BadZipFile, RuntimeError, NotImplementedError)


@dataclass
class Member:
    name: str  # as stored in the archive
    kind: str  # FILE, DIR, SYMLINK, HARDLINK, or a description of a refused type
    mode: int
    linkname: str = ""
    open: Callable[[], IO[bytes]] | None = None


def _unsafe(member: str, why: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(f"archive member '{member}' {why}; nothing was extracted",
                              hint="the archive is not what the pin promises: do not use it")


def normalise(name: str, member: str) -> str:
    """Archive path -> relative '/'-path, or '' for the archive root itself."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", name):
        raise _unsafe(member, "has an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _unsafe(member, "has a '..' component (path traversal)")
    return "/".join(parts)


# -- readers ------------------------------------------------------------------------------
def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    """The archive's tar stream, through a decompressor that checks the format's own
    integrity field (gzip CRC-32 and length, bzip2 and xz checks) when drained to EOF:
    tarfile's stream mode skips the gzip trailer, so a flipped byte in a stored block
    would otherwise go unnoticed."""
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


def _tar_members(path: Path) -> Iterator[Member]:  # noqa: C901 - one branch per tar member type
    try:
        # stream mode: one sequential pass, each file read before the next header
        with open(path, "rb") as raw, _decompressed(raw) as stream, \
                tarfile.open(fileobj=stream, mode="r|") as tf:
            for ti in tf:
                if ti.issparse():
                    yield Member(ti.name, "a GNU sparse file (read differently by "
                                 "different unpackers)", ti.mode)
                elif ti.isreg():
                    yield Member(ti.name, FILE, ti.mode, open=_tar_opener(tf, ti))
                elif ti.isdir():
                    yield Member(ti.name, DIR, ti.mode)
                elif ti.issym():
                    yield Member(ti.name, SYMLINK, ti.mode, ti.linkname)
                elif ti.islnk():
                    yield Member(ti.name, HARDLINK, ti.mode, ti.linkname)
                elif ti.ischr() or ti.isblk():
                    yield Member(ti.name, "a device node", ti.mode)
                elif ti.isfifo():
                    yield Member(ti.name, "a fifo", ti.mode)
                else:
                    yield Member(ti.name, f"an unsupported tar type {ti.type!r}", ti.mode)
            # drain to EOF: the decompressor verifies its checksum at the end
            while stream.read(_COPY):
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise FetchError(f"{path.name}: not a readable tar archive: {exc}",
                         hint="the archive is truncated or corrupt; fetch it again") from exc


def _tar_opener(tf: tarfile.TarFile, ti: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def opener() -> IO[bytes]:
        f = tf.extractfile(ti)
        assert f is not None  # regular members always have data
        return f
    return opener


def _zip_members(path: Path) -> Iterator[Member]:
    try:
        with zipfile.ZipFile(path) as zf:
            for zi in zf.infolist():
                # the high bits are a Unix mode only when a Unix tool wrote the entry; a
                # mode without a file-type (Python's writestr: 0o600) is a regular file
                mode = zi.external_attr >> 16 if zi.create_system == 3 else 0
                if mode and not stat.S_IFMT(mode):
                    mode |= stat.S_IFREG
                if zi.is_dir():
                    yield Member(zi.filename, DIR, mode or 0o755)
                elif stat.S_ISLNK(mode):
                    target = zf.read(zi).decode("utf-8", "surrogateescape")
                    yield Member(zi.filename, SYMLINK, mode, target)
                elif mode and not stat.S_ISREG(mode):
                    yield Member(zi.filename, f"a special file ({stat.filemode(mode)})", mode)
                else:
                    yield Member(zi.filename, FILE, mode or 0o644,
                                 open=lambda zi=zi: zf.open(zi))  # type: ignore[misc]
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"{path.name}: not a readable zip archive: {exc}") from exc


def members(path: Path) -> Iterator[Member]:
    with open(path, "rb") as f:
        magic = f.read(4)
    is_zip = magic in (b"PK\x03\x04", b"PK\x05\x06")  # a local header, or an empty zip
    return _zip_members(path) if is_zip else _tar_members(path)


# -- extraction ---------------------------------------------------------------------------
def _strip(rel: str, strip: str | None, member: str) -> str | None:
    """Remove the top-level directory; None for the top directory's own entry."""
    if strip is None:
        return rel
    if rel == strip:
        return None
    if not rel.startswith(strip + "/"):
        raise FetchError(f"archive member '{member}' is outside the top-level directory "
                         f"'{strip}'", hint="check upstream.strip in pipeline.yaml")
    return rel[len(strip) + 1:]


class _Caps:
    """Running totals against the extraction caps (limits.py); each trip has its own
    message naming the cap and the variable that raises it."""

    def __init__(self, archive: str, lim: limits_mod.Limits | None = None) -> None:
        self.archive = archive
        self.lim = lim or limits_mod.current()
        self.members = 0
        self.total = 0

    def _trip(self, what: str, value: int, cap: int, env: str) -> ArchiveLimitError:
        return ArchiveLimitError(
            f"{self.archive}: {what} ({value}) exceeds the cap of {cap}; nothing was "
            "extracted", hint=f"an upstream archive this large is suspect; raise {env} "
                              "if it is genuine")

    def member(self, name: str) -> None:
        self.members += 1
        lim = self.lim
        if self.members > lim.extract_members:
            raise self._trip("member count", self.members, lim.extract_members,
                             limits_mod.ENV["extract_members"])
        raw = name.encode("utf-8", "surrogateescape")
        if len(raw) > lim.path_bytes:
            raise self._trip(f"path length of member '{name[:60]}...' in bytes", len(raw),
                             lim.path_bytes, limits_mod.ENV["path_bytes"])
        longest = max((len(p) for p in raw.split(b"/")), default=0)
        if longest > lim.name_bytes:
            raise self._trip(f"a name in member '{name[:60]}...' in bytes", longest,
                             lim.name_bytes, limits_mod.ENV["name_bytes"])

    def copy(self, src: IO[bytes], out: IO[bytes], name: str) -> None:
        """copyfileobj, counting against the member-size and total-size caps (sizes in
        headers can lie: the bytes themselves are counted)."""
        lim = self.lim
        size = 0
        while True:
            chunk = src.read(_COPY)
            if not chunk:
                return
            size += len(chunk)
            self.total += len(chunk)
            if size > lim.extract_member_bytes:
                raise self._trip(f"the size of member '{name}'", size,
                                 lim.extract_member_bytes, limits_mod.ENV["extract_member_bytes"])
            if self.total > lim.extract_total_bytes:
                raise self._trip("the unpacked size", self.total, lim.extract_total_bytes,
                                 limits_mod.ENV["extract_total_bytes"])
            out.write(chunk)


def _write_file(dest: Path, src: IO[bytes], mode: int, member: str,
                made: set[Path] | None = None, caps: _Caps | None = None) -> None:
    """Create ``dest`` (never existing before) with ``src``'s bytes; ``made`` caches the
    directories known to exist, saving a mkdir call per file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if made is None or dest.parent not in made:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        except (FileExistsError, NotADirectoryError):
            raise _unsafe(member, "lies under a path that is a file, not a directory") from None
        if made is not None:
            made.add(dest.parent)
    try:
        fd = os.open(dest, flags, 0o600)
    except FileExistsError:
        raise _unsafe(member, "appears twice or clashes with another entry") from None
    except (NotADirectoryError, FileNotFoundError):
        raise _unsafe(member, "lies under a path that is a file, not a directory") from None
    with os.fdopen(fd, "wb") as out:
        if caps is not None:
            caps.copy(src, out, member)
        else:
            shutil.copyfileobj(src, out, _COPY)
        os.fchmod(out.fileno(), 0o755 if mode & 0o111 else 0o644)


def extract(  # noqa: C901 - one branch per member kind, each with its clash checks
        archive: Path, dest: Path, *, strip: str | None, auto_strip: bool = True,
        on_member: Callable[[int], None] | None = None) -> tuple[Path, str | None]:
    """Extract ``archive`` into the new directory ``dest``; return (tree root, strip used).

    With ``strip`` None and ``auto_strip``, a lone top-level directory is stripped (the
    sdist convention). The caller owns ``dest`` and removes it on any error.
    """
    dest.mkdir(mode=0o755)
    files: set[str] = set()  # every non-directory path taken so far
    regular: set[str] = set()  # the regular files among them (hardlink targets)
    made: set[Path] = set()  # directories known to exist
    links: list[tuple[str, str, str]] = []  # (rel, target, member name)
    caps = _Caps(archive.name)
    for m in members(archive):
        caps.member(m.name)
        rel = normalise(m.name, m.name)
        if m.kind not in (FILE, DIR, SYMLINK, HARDLINK):
            raise _unsafe(m.name, f"is {m.kind}, which a source tree must not contain")
        stripped = _strip(rel, strip, m.name) if rel else None
        if not stripped:
            continue
        target = dest / stripped
        if m.kind == DIR:
            if stripped in files:
                raise _unsafe(m.name, "is a directory with the name of a file")
            try:
                target.mkdir(parents=True, exist_ok=True, mode=0o755)
            except (FileExistsError, NotADirectoryError):
                raise _unsafe(m.name, "is a directory under or at a file's path") from None
            made.add(target)
        elif m.kind == FILE:
            assert m.open is not None
            try:
                with m.open() as src:
                    _write_file(target, src, m.mode, m.name, made, caps)
            except _CORRUPT as exc:
                raise FetchError(f"{archive.name}: not a readable archive: member "
                                 f"'{m.name}' is truncated or corrupt ({exc})") from exc
            files.add(stripped)
            regular.add(stripped)
        elif m.kind == HARDLINK:
            lrel = normalise(m.linkname, m.name)
            lstripped = _strip(lrel, strip, m.name) if lrel else None
            if not lstripped or lstripped not in regular:
                raise _unsafe(m.name, f"is a hardlink to '{m.linkname}', which is not an "
                              "earlier regular file of the tree")
            # a copy, not a link: the tree must not share inodes with anything
            with open(dest / lstripped, "rb") as src:
                _write_file(target, src, m.mode, m.name, made, caps)
            files.add(stripped)
            regular.add(stripped)
        else:
            if not m.linkname or m.linkname.startswith("/"):
                raise _unsafe(m.name, f"is a symlink to the absolute path '{m.linkname}'")
            if stripped in files:
                raise _unsafe(m.name, "appears twice or clashes with another entry")
            links.append((stripped, m.linkname, m.name))
            files.add(stripped)
        if on_member:
            on_member(1)
    if not files:
        raise FetchError(f"{archive.name}: the archive holds no files; an empty tree is not "
                         "a source", hint="the pin names the wrong file, or it is damaged")
    root, used = dest, strip
    if strip is None and auto_strip:
        top = list(dest.iterdir())
        if len(top) == 1 and top[0].is_dir() and not links_at_top(links, top[0].name):
            root, used = top[0], top[0].name
    _make_links(dest, root, links)
    _normalise_dirs(root)
    return root, used


def links_at_top(links: list[tuple[str, str, str]], name: str) -> bool:
    return any(rel == name for rel, _, _ in links)


def _make_links(dest: Path, root: Path, links: list[tuple[str, str, str]]) -> None:
    # A link under another link would be created through it (its parent directories
    # made and the link written wherever the first one points, possibly outside the
    # tree) before the resolution check below could refuse it: refuse it first.
    names = {rel for rel, _, _ in links}
    for rel, _, member in links:
        parent = rel.rpartition("/")[0]
        while parent:
            if parent in names:
                raise _unsafe(member, f"lies under the symlink '{parent}'")
            parent = parent.rpartition("/")[0]
    for rel, target, member in links:
        path = dest / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            os.symlink(target, path)
        except FileExistsError:
            raise _unsafe(member, "appears twice or clashes with another entry") from None
        except NotADirectoryError:
            raise _unsafe(member, "lies under a path that is a file, not a directory") from None
    real_root = os.path.realpath(root)
    for rel, target, member in links:
        # realpath follows every link in the chain (reading link values only, opening
        # nothing); a dangling target is resolved lexically.
        resolved = os.path.realpath(dest / rel)
        if resolved != real_root and not resolved.startswith(real_root + os.sep):
            raise _unsafe(member, f"is a symlink to '{target}', which resolves outside the "
                          "tree")


def _normalise_dirs(root: Path) -> None:
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
    os.chmod(root, 0o755)


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a local directory under the same rules as an archive (modes normalised,
    links checked, special files refused); ``.git`` is not part of a source tree."""
    dest.mkdir(mode=0o755)
    links: list[tuple[str, str, str]] = []
    base = os.fspath(src)
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        if not rel_dir:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*dirnames, *filenames]:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(full)
                if target.startswith("/"):
                    raise _unsafe(rel, f"is a symlink to the absolute path '{target}'")
                links.append((rel, target, rel))
                if name in dirnames:
                    dirnames.remove(name)  # os.walk would not descend, but be explicit
            elif stat.S_ISDIR(st.st_mode):
                (dest / rel).mkdir(mode=0o755, exist_ok=True)
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    _write_file(dest / rel, f, st.st_mode, rel)
            else:
                raise _unsafe(rel, f"is a special file ({stat.filemode(st.st_mode)}), which "
                              "a source tree must not contain")
    _make_links(dest, dest, links)
    _normalise_dirs(dest)
