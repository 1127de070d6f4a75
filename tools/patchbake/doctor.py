"""``patchbake doctor``: what this machine has of what the commands need, each with its fix.

Every check runs (one failing does not hide the next) and gives a row: the check, ``ok``,
``missing`` (a command will fail for it) or ``warn`` (only some commands need it), what
was found, and what to do. The needed ones -- python, git, the package index with the TLS
trust pip uses, the store -- decide the exit status; the engine, the registry, the
signing key and mmdebstrap are needed only by the commands that use them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import netconfig, proc
from pathlib import Path

from .config import Pipeline, load
from .config.pipeline import find_pipeline
from .config.signing import default_private_key
from .errors import PatchbakeError
from .oci import engine
from .oci.registry import RegistryClient
from .oci.registry_ref import DEFAULT_REGISTRY_ENV
from .sources import http, index
from .store import Store

MIN_PYTHON = (3, 10)
LOW_DISK = 5 << 30  # an sdist, its trees and two images need a few GiB
SERVICES_REGISTRY = "127.0.0.1:5000"  # the loopback registry `make services` starts


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # ok | missing | warn
    detail: str
    fix: str = ""
    needed: bool = True

    def dump(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "detail": self.detail,
                "fix": self.fix or None, "needed": self.needed}


@dataclass(frozen=True, slots=True)
class Report:
    checks: tuple[Check, ...]

    @property
    def missing(self) -> list[Check]:
        return [c for c in self.checks if c.status == "missing" and c.needed]

    def dump(self) -> dict[str, Any]:
        return {"ok": not self.missing, "checks": [c.dump() for c in self.checks]}


def _python() -> Check:
    v = sys.version_info
    found = f"{v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if (v.major, v.minor) < MIN_PYTHON:
        return Check("python", "missing", found, "install Python >= 3.10 (Debian 12: python3)")
    return Check("python", "ok", found)


def _git() -> Check:
    where = proc.which("git")
    version = proc.run([where, "--version"], timeout=30).text.strip()
    return Check("git", "ok", f"{version} ({where})")


def _index(pipeline: Pipeline | None) -> Check:
    net = netconfig.read()
    net.check_files()
    url, origin = index.configured_index(net)
    session = http.new_session()
    lin = pipeline.lineage() if pipeline is not None else None
    up = lin.upstream if lin is not None else None
    if up is not None and up.kind == "index" and up.filename and up.sha256:
        index.find_file(up.package, up.filename, up.sha256, session=session)
        what = f"{up.filename} listed with the pinned sha256"
    else:
        count = len(index.find_sdists("vllm", session=session))
        what = f"vllm's project page lists {count} sdists"
    return Check("index and TLS trust", "ok",
                 f"index from {origin}; TLS trust: {net.trust()}; {what}")


def _store() -> Check:
    store = Store.open(sweep=False)
    tmp = store.tmpdir("doctor")  # proves the store is writable
    tmp.rmdir()
    free = shutil.disk_usage(store.root).free
    detail = f"{store.root} writable, {free >> 30} GiB free"
    if free < LOW_DISK:
        return Check("store", "warn", detail, "free disk space, or move the store with "
                     "PATCHBAKE_HOME; `patchbake store gc` removes what nothing names")
    return Check("store", "ok", detail, "`patchbake store fsck` re-hashes every object")


def _engine() -> Check:
    return Check("engine", "ok", f"Docker engine {engine.server_version()}", needed=False)


def _registry() -> Check:
    host = os.environ.get(DEFAULT_REGISTRY_ENV) or SERVICES_REGISTRY
    RegistryClient(host).ping()
    return Check("registry", "ok", f"{host} speaks the distribution API", needed=False)


def _signing_key(pipeline: Pipeline | None) -> Check:
    from .evidence import keys, policy

    path = pipeline.signing.private_key() if pipeline is not None else default_private_key()
    key = keys.load_private(path)
    keyid = keys.keyid_of(key.public_key())
    if pipeline is None:
        return Check("signing key", "ok", f"{path} (keyid {keyid[:16]})", needed=False)
    pol = policy.load(pipeline.signing.trust_policy)
    trusted = pol.keys.get(keyid)
    if trusted is None:
        return Check("signing key", "warn", f"{path} (keyid {keyid[:16]}) is not in "
                     f"{pipeline.signing.trust_policy.name}: what it signs does not count",
                     "add the entry `patchbake keys generate` printed to the trust policy",
                     needed=False)
    roles = ", ".join(trusted.roles) or "evidence only"
    return Check("signing key", "ok", f"{path}: '{trusted.name}' ({roles})", needed=False)


def _mmdebstrap() -> Check:
    return Check("mmdebstrap", "ok", proc.which("mmdebstrap"), needed=False)


FIXES = {
    "python": "install Python >= 3.10",
    "git": "install git (Debian: apt-get install git)",
    "index and TLS trust": "set index-url (and cert for a private CA) in pip's configuration: "
                           "`pip config list -v` shows what pip reads",
    "store": "make PATCHBAKE_HOME (default: the user cache dir) writable",
    "engine": "start a Docker engine (`make services`); needed by --runner docker and "
              "`bake --backend engine`",
    "registry": f"start one (`make services`: {SERVICES_REGISTRY}) or set "
                f"{DEFAULT_REGISTRY_ENV}; needed by push, pull and promote",
    "signing key": "`patchbake keys generate`, or set PATCHBAKE_SIGNING_KEY; needed to sign",
    "mmdebstrap": "install mmdebstrap (`make setup-system`); needed by `lock` and `image base`",
}


def _pipeline(path: str | None) -> tuple[Check, Pipeline | None]:
    """The pipeline, when there is one: doctor runs outside a repository too."""
    where = Path(path) if path else find_pipeline()
    if not where.exists():
        return Check("pipeline", "warn", f"no pipeline.yaml at {where} or above",
                     "`patchbake init --vllm VERSION` writes one (doctor, init, and "
                     "`release verify --bundle` need none)", needed=False), None
    try:
        p = load(where)
    except PatchbakeError as exc:
        return Check("pipeline", "missing", exc.one_line(), "fix it (docs/pipeline.md)"), None
    return Check("pipeline", "ok", f"{p.path} (default lineage {p.lineage().key})"), p


def diagnose(pipeline_path: str | None = None) -> Report:
    """Every check, in order; ``pipeline_path`` as --pipeline gives it (None: the nearest
    pipeline.yaml above the working directory, if any)."""
    first, pipeline = _pipeline(pipeline_path)
    checks: list[tuple[str, bool, Callable[[], Check]]] = [
        ("python", True, _python), ("git", True, _git),
        ("index and TLS trust", True, lambda: _index(pipeline)), ("store", True, _store),
        ("engine", False, _engine), ("registry", False, _registry),
        ("signing key", False, lambda: _signing_key(pipeline)),
        ("mmdebstrap", False, _mmdebstrap),
    ]
    out = [first]
    for name, needed, run in checks:
        try:
            out.append(run())
        except PatchbakeError as exc:
            out.append(Check(name, "missing" if needed else "warn", exc.one_line(),
                             FIXES[name], needed))
    return Report(tuple(out))


__all__ = ["Check", "Report", "diagnose"]
