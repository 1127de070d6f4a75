"""A lineage's lock: every artifact of the serving base, by name, version and sha256.

``images/locks/vllm-<version>.lock`` is written by ``patchbake lock`` and never by hand. It
holds what the serving base is made of and nothing about where it came from:

- ``wheels``: the closure pip resolves for ``vllm==<version>`` on Linux x86_64 for the image's
  Python, each wheel with its file name and sha256 (pip's ``--require-hashes`` semantics);
- ``os``: the Debian root filesystem -- distribution, suite, variant, the packages asked for,
  and every package that ends up installed with version, architecture, file name and sha256.

No URL is recorded: an artifact is fetched through the index pip is configured with and the
mirror apt is configured with, and accepted only when its bytes hash to the lock. The file
is canonical JSON (sorted keys, two-space indent, one final newline); a lock that is not
byte-for-byte what :func:`dump` writes is refused, so an edit by hand is caught on load. The
lock's own sha256 is part of the image's identity (labels, record, release manifest).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import LockError
from ..fields import Fields
from ..fsutil import pretty_json, read_input, sha256_bytes

FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def _bad(message: str) -> LockError:
    return LockError(message, hint="regenerate it with `patchbake lock`")


@dataclass(frozen=True, slots=True)
class Wheel:
    """One wheel of the closure: ``name`` is the normalized project name (PEP 503)."""

    name: str
    version: str
    filename: str
    sha256: Digest

    def requirement(self) -> str:
        """The line pip's ``--require-hashes`` mode takes for exactly this file."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256.hex}"


@dataclass(frozen=True, slots=True)
class DebPackage:
    """One installed Debian package, as apt's index and ``dpkg-query`` name it."""

    name: str
    version: str
    architecture: str
    filename: str
    sha256: Digest


@dataclass(frozen=True, slots=True)
class Target:
    """The platform the wheels are resolved for: the image's Python and C library."""

    python: str  # "3.11"
    abis: tuple[str, ...]  # ("cp311", "abi3", "none")
    platforms: tuple[str, ...]  # manylinux tags the image's glibc runs, newest first
    site_packages: str  # where the wheels are installed in the image

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")


@dataclass(frozen=True, slots=True)
class OsRoot:
    """The Debian root filesystem: how it is made and what it holds."""

    distribution: str
    suite: str
    architecture: str
    variant: str
    include: tuple[str, ...]
    packages: tuple[DebPackage, ...]


@dataclass(frozen=True, slots=True)
class Lock:
    lineage: str
    requirement: str  # "vllm==0.25.1"
    resolver: str  # "pip 25.1.1": what resolved the closure
    source_date_epoch: int  # every timestamp in the base
    target: Target
    os: OsRoot
    wheels: tuple[Wheel, ...]

    def wheel(self, name: str) -> Wheel:
        for w in self.wheels:
            if w.name == name:
                return w
        raise _bad(f"the lock has no wheel named {name!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "lineage": self.lineage,
            "requirement": self.requirement,
            "resolver": self.resolver,
            "source_date_epoch": self.source_date_epoch,
            "target": {"python": self.target.python, "abis": list(self.target.abis),
                       "platforms": list(self.target.platforms),
                       "site_packages": self.target.site_packages},
            "os": {"distribution": self.os.distribution, "suite": self.os.suite,
                   "architecture": self.os.architecture, "variant": self.os.variant,
                   "include": list(self.os.include),
                   "packages": [{"name": p.name, "version": p.version,
                                 "architecture": p.architecture, "filename": p.filename,
                                 "sha256": str(p.sha256)} for p in self.os.packages]},
            "wheels": [{"name": w.name, "version": w.version, "filename": w.filename,
                        "sha256": str(w.sha256)} for w in self.wheels],
        }


def dump(lock: Lock) -> bytes:
    """The lock's canonical bytes: packages and wheels sorted by name, keys sorted."""
    ordered = Lock(lock.lineage, lock.requirement, lock.resolver, lock.source_date_epoch,
                   lock.target,
                   OsRoot(lock.os.distribution, lock.os.suite, lock.os.architecture,
                          lock.os.variant, lock.os.include,
                          tuple(sorted(lock.os.packages, key=lambda p: (p.name, p.architecture)))),
                   tuple(sorted(lock.wheels, key=lambda w: w.name)))
    return pretty_json(ordered.to_json())


def lock_digest(data: bytes) -> Digest:
    """The lock's identity: the sha256 of its bytes."""
    return Digest.from_hex(sha256_bytes(data))


def _name(f: Fields, key: str) -> str:
    value = f.text(key)
    if not _NAME.fullmatch(value):
        raise f.bad(key, "a package name")
    return value


def _wheel(f: Fields) -> Wheel:
    filename = f.text("filename")
    if "/" in filename or not filename.endswith(".whl"):
        raise f.bad("filename", "a wheel's file name")
    return Wheel(_name(f, "name"), f.text("version"), filename, f.digest("sha256"))


def _package(f: Fields) -> DebPackage:
    filename = f.text("filename")
    if "/" in filename or not filename.endswith(".deb"):
        raise f.bad("filename", "a Debian package's file name")
    return DebPackage(_name(f, "name"), f.text("version"), _name(f, "architecture"),
                      filename, f.digest("sha256"))


def loads(data: bytes, where: str) -> Lock:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _bad(f"{where}: not JSON ({exc})") from None
    f = Fields(doc, where, _bad, ("format", "lineage", "requirement", "resolver",
                                  "source_date_epoch", "target", "os", "wheels"))
    if f.integer("format") != FORMAT:
        raise f.bad("format", str(FORMAT))
    t = f.member("target", ("python", "abis", "platforms", "site_packages"))
    o = f.member("os", ("distribution", "suite", "architecture", "variant", "include",
                        "packages"))
    target = Target(t.text("python"), t.texts("abis"), t.texts("platforms"),
                    t.text("site_packages"))
    os_root = OsRoot(o.text("distribution"), o.text("suite"), o.text("architecture"),
                     o.text("variant"), o.texts("include"),
                     tuple(_package(p) for p in o.members(
                         "packages", ("name", "version", "architecture", "filename",
                                      "sha256"))))
    wheels = tuple(_wheel(w) for w in f.members("wheels", ("name", "version", "filename",
                                                            "sha256")))
    lock = Lock(f.text("lineage"), f.text("requirement"), f.text("resolver"),
                f.integer("source_date_epoch"), target, os_root, wheels)
    names = [w.name for w in wheels]
    if len(set(names)) != len(names):
        raise _bad(f"{where}: a wheel is listed twice")
    if dump(lock) != data:
        raise _bad(f"{where}: not the canonical bytes `patchbake lock` writes "
                   "(edited by hand?)")
    return lock


def load(path: Path) -> tuple[Lock, Digest]:
    """The lock at ``path`` and its digest; a missing or damaged lock is a LockError."""
    data = read_input(path, "lock file", _bad)
    return loads(data, str(path)), lock_digest(data)
