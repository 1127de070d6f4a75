"""The artifacts a lock names, in the store by sha256, each checked against the lock.

Wheels come through pip (``pip download --no-deps --require-hashes``: pip's own index
configuration, and pip checks each hash), then are hashed again as they enter the store
(``Store.put_file`` with the lock's digest: a mismatch stores nothing, exit 11). Debian
packages come through mmdebstrap (sources/debian.py); what it installed must be exactly
the lock's package set, or the lock is stale (exit 38: apt's mirror has moved on), and each
package it downloaded must hash to the lock before it is stored.

A wheel already in the store is hashed again before it is used (a blob's name is not
proof of its bytes; see docs/RELIABILITY.md).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from .. import proc
from ..digest import Digest
from ..errors import FetchError, IntegrityError, LockError, ProcessError, shown
from ..fsutil import sha256_file
from ..store import Store
from . import debian
from .lockfile import Lock, Wheel
from .lockgen import pip_platform_args

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def _held_intact(store: Store, digest: Digest) -> bool:
    if not store.has(digest):
        return False
    got = Digest.from_hex(sha256_file(store.blob_path(digest)))
    if got != digest:
        raise IntegrityError(f"store blob {digest} hashes to {got}: the store is damaged",
                             hint="run `patchbake store fsck --repair` and retry")
    return True


def _pip_download(wheels: list[Wheel], lock: Lock, into: Path) -> None:
    requirements = into / "requirements.txt"
    requirements.write_text("".join(w.requirement() + "\n" for w in wheels))
    try:
        proc.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                  "--quiet", "--no-input", "--dest", str(into), "-r", str(requirements),
                  *pip_platform_args(lock.target)],
                 env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    except ProcessError as exc:
        text = str(exc)
        expected = re.search(r"Expected sha256 ([0-9a-f]{64})", text)
        got = re.search(r"Got +([0-9a-f]{64})", text)
        if expected or "HASHES" in text.upper():
            named = next((w for w in wheels if expected and w.sha256.hex == expected[1]), None)
            what = f"{named.filename}" if named else "a wheel"
            raise IntegrityError(
                f"{what}: the index's file hashes to sha256:{got[1] if got else '?'}, the lock "
                f"says {named.sha256 if named else '(see pip)'}; nothing was stored",
                hint="if upstream replaced the file, review it and refresh with "
                     "`patchbake lock`") from None
        raise FetchError(f"pip could not download every wheel of the lock: "
                         f"{shown(text, 300)}",
                         hint="check pip's index configuration (`pip config list`)") from None


def fetch_wheels(store: Store, lock: Lock, work: Path,
                 progress: Progress = _quiet) -> dict[str, Path]:
    """Every wheel of ``lock`` in ``store``; their blob paths by project name."""
    missing = [w for w in lock.wheels if not _held_intact(store, w.sha256)]
    if missing:
        progress(f"downloading {len(missing)} of {len(lock.wheels)} wheels through pip")
        into = work / "wheels"
        into.mkdir(parents=True, exist_ok=True)
        _pip_download(missing, lock, into)
        for w in missing:
            path = into / w.filename
            if not path.is_file():
                raise FetchError(f"pip did not download {w.filename} ({w.name} {w.version})")
            store.put_file(path, expected=w.sha256)
            path.unlink()
    return {w.name: store.blob_path(w.sha256) for w in lock.wheels}


def _check_installed(lock: Lock, got: tuple[tuple[str, str, str], ...]) -> None:
    want = {(p.name, p.version, p.architecture) for p in lock.os.packages}
    have = set(got)
    if want == have:
        return
    extra = sorted(have - want)
    lost = sorted(want - have)
    first = (f"installs {extra[0][0]} {extra[0][1]}" if extra
             else f"no longer installs {lost[0][0]} {lost[0][1]}")
    raise LockError(f"the root filesystem is not the lock's: apt's sources now {first} "
                    f"({len(extra)} package(s) differ)",
                    hint="refresh the lock with `patchbake lock` and review the change")


def build_rootfs(store: Store, lock: Lock, tarball: Path, work: Path,
                 progress: Progress = _quiet) -> None:
    """The lock's Debian root filesystem as a tarball; every package checked and stored."""
    held = tuple((p.filename, store.blob_path(p.sha256)) for p in lock.os.packages
                 if _held_intact(store, p.sha256))
    progress(f"bootstrapping {lock.os.distribution} {lock.os.suite} "
             f"({len(lock.os.packages)} packages, {len(held)} held in the store)")
    run = debian.bootstrap(lock.os, lock.source_date_epoch, tarball, work / "os", held)
    _check_installed(lock, run.packages)
    by_name = {p.filename: p for p in lock.os.packages}
    for deb in run.debs:
        package = by_name.get(deb.name)
        if package is None:  # apt names a file by its own rules; match by control fields
            fields = debian.deb_fields(deb)
            package = next(p for p in lock.os.packages
                           if (p.name, p.version, p.architecture) == fields)
        store.put_file(deb, expected=package.sha256)
