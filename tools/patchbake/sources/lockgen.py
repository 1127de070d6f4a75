"""``patchbake lock``: resolve a lineage's serving base into a lock (sources/lockfile.py).

The wheels are resolved by pip itself -- ``pip install --dry-run --report`` for the image's
platform -- so the index, extra indexes, find-links, certificates and constraints are the
ones pip is configured with, and the resolution is the one ``pip install vllm==<version>``
would make on that platform. The root filesystem is resolved by one ``mmdebstrap`` run
through apt's own sources (sources/debian.py); the packages it downloaded give the
versions and sha256 the lock records.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..digest import Digest
from ..errors import LockError
from ..fsutil import sha256_file
from . import debian
from .lockfile import DebPackage, Lock, OsRoot, Target, Wheel

# The defaults a first lock is made with; a refresh keeps the target and the root filesystem
# of the lock it replaces. Debian bookworm's python3 is 3.11 and its glibc 2.36, hence the
# manylinux tags; pip's own site directory for Debian's python is dist-packages.
DEFAULT_TARGET = Target(
    python="3.11", abis=("cp311", "abi3", "none"),
    platforms=tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1))
    + ("manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"),
    site_packages="/usr/local/lib/python3.11/dist-packages")
# python3 runs vLLM; gcc, libc6-dev and the Python headers are what Triton needs to build
# its launcher at run time on a GPU.
DEFAULT_OS = OsRoot(distribution="debian", suite="bookworm", architecture="amd64",
                    variant="essential",
                    include=("python3", "gcc", "libc6-dev", "libpython3.11-dev"), packages=())
DEFAULT_EPOCH = 1700000000  # 2023-11-14T22:13:20Z: fixed, so the base is the same every year


@dataclass(frozen=True, slots=True)
class Resolution:
    wheels: tuple[Wheel, ...]
    resolver: str


def _normalize(name: str) -> str:
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def pip_platform_args(target: Target) -> list[str]:
    """The options that make pip resolve and fetch for the image, not for this machine."""
    args = ["--only-binary=:all:", "--python-version", target.python, "--implementation", "cp"]
    for abi in target.abis:
        args += ["--abi", abi]
    for platform in target.platforms:
        args += ["--platform", platform]
    return args


def resolve_wheels(requirement: str, target: Target, work: Path) -> Resolution:
    """The closure pip resolves for ``requirement`` on ``target``, with each file's sha256."""
    report = work / "pip-report.json"
    proc.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
              "--quiet", "--no-input", "--target", str(work / "unused-target"),
              "--report", str(report), *pip_platform_args(target), requirement],
             env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    try:
        doc = json.loads(report.read_bytes())
    except ValueError as exc:
        raise LockError(f"pip's resolution report is not JSON: {exc}") from None
    return wheels_from_report(doc)


def wheels_from_report(doc: object) -> Resolution:
    """The wheels of a ``pip install --report`` document (pip's installation report format,
    version 1), each with the sha256 the index gave."""
    try:
        wheels = []
        for item in doc["install"]:  # type: ignore[index]
            url = item["download_info"]["url"]
            filename = url.rsplit("/", 1)[-1]
            sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
            if not filename.endswith(".whl"):
                raise LockError(f"pip resolved {filename}, which is not a wheel; the lock "
                                "holds wheels only")
            wheels.append(Wheel(_normalize(item["metadata"]["name"]),
                                item["metadata"]["version"], filename,
                                Digest.parse(f"sha256:{sha}", f"pip's hash of {filename}",
                                             LockError)))
        resolver = f"pip {doc['pip_version']}"  # type: ignore[index]
    except (KeyError, TypeError) as exc:
        raise LockError(f"pip's resolution report lacks what the lock needs ({exc!r}): "
                        "an index that gives no sha256 cannot be locked") from None
    return Resolution(tuple(sorted(wheels, key=lambda w: w.name)), resolver)


def describe_debs(debs: tuple[Path, ...],
                  installed: tuple[tuple[str, str, str], ...]) -> tuple[DebPackage, ...]:
    """The lock's packages: every installed package with the .deb it came from. A package
    installed without a matching downloaded .deb cannot be locked."""
    by_key: dict[tuple[str, str, str], Path] = {}
    for deb in debs:
        by_key[debian.deb_fields(deb)] = deb
    out = []
    for name, version, arch in installed:
        kept = by_key.get((name, version, arch))
        if kept is None:
            raise LockError(f"package {name} {version} ({arch}) was installed but its .deb "
                            "was not kept; cannot record its sha256")
        out.append(DebPackage(name, version, arch, kept.name,
                              Digest.from_hex(sha256_file(kept))))
    return tuple(out)


def resolve_os(spec: OsRoot, epoch: int, work: Path) -> OsRoot:
    """The root filesystem ``spec`` describes, with every package it installs pinned."""
    run = debian.bootstrap(spec, epoch, Path("/dev/null"), work / "os")
    return OsRoot(spec.distribution, spec.suite, spec.architecture, spec.variant,
                  spec.include, describe_debs(run.debs, run.packages))


def generate(lineage: str, version: str, previous: Lock | None, work: Path) -> Lock:
    """A fresh lock for ``vllm==version``: the previous lock's target and root filesystem
    settings (or the defaults), resolved again."""
    target = previous.target if previous else DEFAULT_TARGET
    spec = previous.os if previous else DEFAULT_OS
    epoch = previous.source_date_epoch if previous else DEFAULT_EPOCH
    requirement = f"vllm=={version}"
    wheels = resolve_wheels(requirement, target, work)
    os_root = resolve_os(spec, epoch, work)
    return Lock(lineage, requirement, wheels.resolver, epoch, target, os_root, wheels.wheels)
