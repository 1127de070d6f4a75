"""The main job, end to end: fetch -> guard -> strict apply -> bake -> verify.

Returns one ``JobResult`` holding every identity of the chain, so the CLI can print the
summary as a table or JSON. Each step is named and timed; a failing step raises its own
typed error and later steps do not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .config import Pipeline
from .digest import Digest
from .errors import GuardError, VerifyError
from .images.bake import bake_image
from .patchset.guard import check_lineage
from .patchset.patched import patched_tree
from .sources import fetch
from .store import Store
from .verify.baked import verify_image

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Step:
    step: str
    seconds: float

    def dump(self) -> dict[str, Any]:
        return {"step": self.step, "seconds": self.seconds}


@dataclass(frozen=True, slots=True)
class Identity:
    """Every identity of the chain the job built, upstream pin to manifest digest."""

    upstream_pin: str
    archive_sha256: str | None  # bare hex; None for a source that is no pinned archive
    pristine_tree_digest: Digest
    patch: str  # repository-relative path of the canonical patch
    patch_sha256: str
    files_sha256: str
    patch_files: int
    patch_added: int
    patch_removed: int
    patched_tree_digest: Digest
    image: str  # the image definition
    layer_diff_id: Digest
    config_digest: Digest
    manifest_digest: Digest
    record: str  # repository-relative path of the image record
    bake_cached: bool
    verified: str  # the verify summary
    base_drift: dict[str, int]  # changed / missing / extra

    def dump(self) -> dict[str, Any]:
        return {
            "upstream_pin": self.upstream_pin, "archive_sha256": self.archive_sha256,
            "pristine_tree_digest": str(self.pristine_tree_digest), "patch": self.patch,
            "patch_sha256": self.patch_sha256, "files_sha256": self.files_sha256,
            "patch_files": self.patch_files, "patch_added": self.patch_added,
            "patch_removed": self.patch_removed,
            "patched_tree_digest": str(self.patched_tree_digest), "image": self.image,
            "layer_diff_id": str(self.layer_diff_id), "config_digest": str(self.config_digest),
            "manifest_digest": str(self.manifest_digest), "record": self.record,
            "bake_cached": self.bake_cached, "verified": self.verified,
            "base_drift": self.base_drift,
        }


@dataclass(frozen=True, slots=True)
class JobResult:
    lineage: str
    steps: list[Step]
    identity: Identity
    gates: Any = None  # the first channel's gate table for the built image (release.gates)

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "steps": [s.dump() for s in self.steps],
                "identity": self.identity.dump(),
                "gates": self.gates.to_json() if self.gates is not None else None}


def run_main_job(pipeline: Pipeline, store: Store, *, lineage: str | None = None,
                 image: str | None = None, on_step: Callable[[str], None] | None = None,
                 progress: Any = None) -> JobResult:
    lin = pipeline.lineage(lineage)
    steps: list[Step] = []

    def step(name: str, fn: Callable[[], T]) -> T:
        if on_step:
            on_step(name)
        t0 = time.monotonic()
        value = fn()
        steps.append(Step(name, round(time.monotonic() - t0, 3)))
        return value

    fetched = step("fetch", lambda: fetch(lin, store, progress=progress, base=pipeline.root))

    def guard() -> Any:
        report = check_lineage(lin, pristine_root=fetched.root,
                               tree_digest=fetched.tree_digest)
        report.raise_for_problems(lambda line: GuardError(
            f"lost-line guard failed with {line}",
            hint="run `patchbake patch check` for all of them"))
        return report

    report = step("patch check", guard)
    patched = step("apply", lambda: patched_tree(lin, store))
    baked = step("bake", lambda: bake_image(pipeline, image, store, lineage=lin.key,
                                            patched=patched))
    verified = step("verify", lambda: verify_image(pipeline, baked.digest, store, lin,
                                                   patched=patched,
                                                   pristine_root=fetched.root))
    if not verified.ok:
        raise VerifyError(f"{verified.summary()} for {baked.digest}: "
                          f"{len(verified.mismatched)} mismatched, "
                          f"problems: {'; '.join(verified.problems) or 'none'}")
    identity = Identity(
        upstream_pin=lin.upstream.pin,
        archive_sha256=None if fetched.archive_sha256 is None else fetched.archive_sha256.hex,
        pristine_tree_digest=fetched.tree_digest,
        patch=lin.patch.relative_to(pipeline.root).as_posix(),
        patch_sha256=report.patch_sha256,
        files_sha256=patched.files_sha256,
        patch_files=report.files,
        patch_added=report.added,
        patch_removed=report.removed,
        patched_tree_digest=patched.tree_digest,
        image=baked.image,
        layer_diff_id=baked.diff_ids[-1],
        config_digest=baked.config_digest,
        manifest_digest=baked.digest,
        record=baked.record,
        bake_cached=baked.cached,
        verified=verified.summary(),
        base_drift=dict(verified.base_drift.get("counts", {})),
    )
    first = next(iter(pipeline.channels), None)
    table = None
    if first is not None:  # the job ends with the candidate gate table (no registry needed)
        # imported here: the release stage needs cryptography, which the GPU box (it only
        # runs suites) lacks, and `patchbake --help` there loads this module
        from .release.create import gates

        table = step(f"{first} gates", lambda: gates(pipeline, store, first, str(baked.digest),
                                                     lin.key, verified=verified)[0])
    return JobResult(lin.key, steps, identity, table)
