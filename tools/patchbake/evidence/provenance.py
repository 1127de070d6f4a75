"""SLSA provenance v1 of one bake: an in-toto Statement v1 whose subject is the baked
image's manifest digest and whose predicate says how it was made.

::

    {"buildDefinition": {
        "buildType": "urn:patchbake:build-type:bake:v1",
        "externalParameters": {"definition": "sm89-serving-offline", "lineage": "v0.25.1"},
        "internalParameters": {"mode": "overlay", "sourceDateEpoch": 0,
                               "sitePackages": "/usr/local/lib/python3.12/dist-packages"},
        "resolvedDependencies": [sdist, patch, FILES.txt, lock (if any), base image]},
     "runDetails": {"builder": {"id": "urn:patchbake:builder:patchbake@0.1.0",
                                "version": {"patchbake": "0.1.0"}},
                    "metadata": {"invocationId": "<the image record's path>"}}}

The build type is ours (docs/evidence.md says what it means): a bake of ``definition``
from ``lineage``'s pinned upstream, patch and FILES.txt onto the base pinned by digest;
every input is a resolved dependency with its sha256. No time is recorded, so the same
bake gives the same statement bytes. ``check`` is patchbake's reader of such a predicate
(AttestationError); the full schema check is the in-toto attestation project's, which
the tests run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..digest import Digest
from ..errors import AttestationError
from .bakefacts import BakeFacts
from .intoto import Statement

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:patchbake:build-type:bake:v1"
BUILDER_ID = f"urn:patchbake:builder:patchbake@{__version__}"


def _dependencies(b: BakeFacts) -> list[dict[str, Any]]:
    if b.sdist_sha256 is not None:
        up = {"name": b.sdist or f"{b.package}-{b.upstream_version}",
              "uri": f"pkg:pypi/{b.package}@{b.upstream_version}",
              "digest": {"sha256": b.sdist_sha256}}
    else:
        up = {"name": f"{b.package}-{b.upstream_version}",
              "uri": f"pkg:pypi/{b.package}@{b.upstream_version}",
              "digest": {"gitCommit": str(b.git_commit)}}
    deps = [up,
            {"name": b.patch_path, "digest": {"sha256": b.patch_sha256}},
            {"name": b.files_path, "digest": {"sha256": b.files_sha256}}]
    if b.lock is not None:
        deps.append({"name": b.lock.path, "digest": {"sha256": b.lock.digest.hex}})
    deps.append({"name": b.base_name, "uri": f"oci:{b.base_name.split('@')[0]}@{b.base_digest}",
                 "digest": {"sha256": b.base_digest.hex}})
    return deps


def predicate(b: BakeFacts, record_path: str | None = None) -> dict[str, Any]:
    internal: dict[str, Any] = {"mode": b.mode, "sourceDateEpoch": b.source_date_epoch}
    if b.site_packages:
        internal["sitePackages"] = b.site_packages
    run: dict[str, Any] = {"builder": {"id": BUILDER_ID, "version": {"patchbake": __version__}}}
    if record_path:
        run["metadata"] = {"invocationId": record_path}
    return {"buildDefinition": {"buildType": BUILD_TYPE,
                                "externalParameters": {"definition": b.definition,
                                                       "lineage": b.lineage},
                                "internalParameters": internal,
                                "resolvedDependencies": _dependencies(b)},
            "runDetails": run}


def build(b: BakeFacts, record_path: str | None = None) -> Statement:
    return Statement(b.definition, b.digest, PREDICATE_TYPE, predicate(b, record_path))


def _bad(where: str, what: str) -> AttestationError:
    return AttestationError(f"{where}: not a patchbake SLSA provenance: {what}")


def check(pred: Mapping[str, Any], where: str) -> int:
    """buildType ours, a builder id, the definition and lineage named, every resolved
    dependency with a digest. Returns the number of resolved dependencies."""
    bd = pred.get("buildDefinition")
    if not isinstance(bd, dict) or bd.get("buildType") != BUILD_TYPE:
        raise _bad(where, f"buildDefinition.buildType must be {BUILD_TYPE}")
    ext = bd.get("externalParameters")
    if not isinstance(ext, dict) or not all(isinstance(ext.get(k), str)
                                            for k in ("definition", "lineage")):
        raise _bad(where, "externalParameters must name the definition and the lineage")
    deps = bd.get("resolvedDependencies")
    if not isinstance(deps, list) or not deps or not all(
            isinstance(d, dict) and isinstance(d.get("digest"), dict) and d["digest"]
            for d in deps):
        raise _bad(where, "every resolved dependency needs a digest")
    run = pred.get("runDetails")
    builder = run.get("builder") if isinstance(run, dict) else None
    if not isinstance(builder, dict) or not str(builder.get("id", "")).startswith(
            "urn:patchbake:builder:"):
        raise _bad(where, "runDetails.builder.id must be patchbake's")
    return len(deps)


def subject_check(st: Statement, digest: Digest, where: str) -> None:
    if st.subject_digest != digest:
        raise AttestationError(f"{where}: the statement is about {st.subject_digest}, not "
                               f"{digest}")


__all__ = ["BUILDER_ID", "BUILD_TYPE", "PREDICATE_TYPE", "build", "check", "predicate",
           "subject_check"]
