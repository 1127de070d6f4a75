"""The Debian root filesystem of the serving base, made by ``mmdebstrap``.

``mmdebstrap`` resolves and installs the packages through the apt sources this machine is
configured with (no mirror is named here) and writes a tarball. Three hooks make the run
checkable: the installed package set (``dpkg-query``) and the downloaded ``.deb`` files are
copied out before the archives are emptied, so the caller can compare both with a lock
and keep the packages in the store by sha256. Packages already held (from the store) are
put in apt's archive directory first; apt re-checks them against its signed index and
downloads only what is missing.

``SOURCE_DATE_EPOCH`` sets every timestamp mmdebstrap and dpkg write; the tarball is then
re-written entry by entry by patchbake's own layer writer (images/rootfs.py), so the
layer's bytes do not depend on this machine's tar.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import LockError
from .lockfile import OsRoot

_QUERY = r"${Package}\t${Version}\t${Architecture}\n"


@dataclass(frozen=True, slots=True)
class Installed:
    """What one mmdebstrap run installed: (name, version, architecture) and the .debs."""

    packages: tuple[tuple[str, str, str], ...]
    debs: tuple[Path, ...]


def bootstrap(spec: OsRoot, epoch: int, tarball: Path, work: Path,
              held: tuple[tuple[str, Path], ...] = ()) -> Installed:
    """Run mmdebstrap for ``spec`` into ``tarball`` (``/dev/null`` to only resolve); ``work``
    receives the package list and the downloaded packages."""
    # The caller's umask reaches the tarball twice: the directory the setup hook makes, and
    # the seed directory sync-in copies over /var/cache/apt/archives (its mode included).
    # A fixed one, or two users' bases differ in that directory's mode (0700 vs 0775).
    previous = os.umask(0o022)
    try:
        return _bootstrap(spec, epoch, tarball, work, held)
    finally:
        os.umask(previous)


def _bootstrap(spec: OsRoot, epoch: int, tarball: Path, work: Path,
               held: tuple[tuple[str, Path], ...]) -> Installed:
    status = work / "installed.tsv"
    archives = work / "archives"
    seed = work / "seed"
    archives.mkdir(parents=True, exist_ok=True)
    seed.mkdir(parents=True, exist_ok=True)
    for filename, blob in held:  # (file name apt expects, the bytes held in the store)
        try:  # sync-in copies the files again, so a hard link is enough here
            os.link(blob, seed / filename)
        except OSError:
            shutil.copyfile(blob, seed / filename)
    q = shlex.quote
    argv = [
        "mmdebstrap", "--quiet", f"--variant={spec.variant}", f"--architectures={spec.architecture}",
        "--skip=essential/unlink", "--skip=download/empty",
        f"--include={','.join(spec.include)}" if spec.include else "--include=",
        # seed apt's archive directory with packages held in the store (apt re-checks them)
        "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives",
        f"--setup-hook=sync-in {q(str(seed))} /var/cache/apt/archives/",
        f"--customize-hook=chroot \"$1\" dpkg-query -W -f='{_QUERY}' > {q(str(status))}",
        f"--customize-hook=sync-out /var/cache/apt/archives {q(str(archives))}",
        "--customize-hook=rm -f \"$1\"/var/cache/apt/archives/*.deb",
        spec.suite, str(tarball),
    ]
    if not spec.include:
        argv.remove("--include=")
    proc.run(argv, env={"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8", "TZ": "UTC"})
    packages = []
    for line in status.read_text().splitlines():
        name, version, arch = line.split("\t")
        packages.append((name, version, arch))
    if not packages:
        raise LockError("mmdebstrap installed no packages; cannot describe the root filesystem")
    return Installed(tuple(sorted(packages)), tuple(sorted(archives.glob("*.deb"))))


def deb_fields(path: Path) -> tuple[str, str, str]:
    """(Package, Version, Architecture) from a .deb's control file."""
    out = proc.run(["dpkg-deb", "--show", "--showformat=${Package}\t${Version}\t${Architecture}",
                    str(path)]).text
    name, version, arch = out.split("\t")
    return name, version, arch
