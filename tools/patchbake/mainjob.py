"""The main job, end to end: fetch -> guard -> strict apply -> bake -> verify.

Returns one ``JobResult`` holding every identity of the chain, so the CLI can print the
summary as a table or JSON. Each step is named and timed; a failing step raises its own
typed error and later steps do not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .config import Pipeline
from .errors import GuardError, VerifyError
from .images.bake import bake_image
from .patchset.guard import check_lineage
from .patchset.patched import patched_tree
from .sources import fetch
from .store import Store
from .verify.baked import verify_image

T = TypeVar("T")


@dataclass
class JobResult:
    lineage: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    identity: dict[str, Any] = field(default_factory=dict)
    gates: Any = None  # the first channel's gate table for the built image (release.gates)

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "steps": self.steps, "identity": self.identity,
                "gates": self.gates.to_json() if self.gates is not None else None}


def run_main_job(pipeline: Pipeline, store: Store, *, lineage: str | None = None,
                 image: str | None = None, on_step: Callable[[str], None] | None = None,
                 progress: Any = None) -> JobResult:
    lin = pipeline.lineage(lineage)
    job = JobResult(lineage=lin.key)

    def step(name: str, fn: Callable[[], T]) -> T:
        if on_step:
            on_step(name)
        t0 = time.monotonic()
        value = fn()
        job.steps.append({"step": name, "seconds": round(time.monotonic() - t0, 3)})
        return value

    fetched = step("fetch", lambda: fetch(lin, store, progress=progress, base=pipeline.root))

    def guard() -> Any:
        report = check_lineage(lin, pristine_root=fetched.root,
                               tree_digest=fetched.tree_digest)
        if not report.ok:
            first = report.problems[0]
            raise GuardError(f"lost-line guard failed with {len(report.problems)} problem(s); "
                             f"first: {first.message}",
                             hint="run `patchbake patch check` for all of them")
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
    job.identity = {
        "upstream_pin": lin.upstream.pin,
        "archive_sha256": None if fetched.archive_sha256 is None else fetched.archive_sha256.hex,
        "pristine_tree_digest": str(fetched.tree_digest),
        "patch": lin.patch.relative_to(pipeline.root).as_posix(),
        "patch_sha256": report.patch_sha256,
        "files_sha256": patched.files_sha256,
        "patch_files": report.files,
        "patch_added": report.added,
        "patch_removed": report.removed,
        "patched_tree_digest": str(patched.tree_digest),
        "image": baked.image,
        "layer_diff_id": str(baked.diff_ids[-1]),
        "config_digest": str(baked.config_digest),
        "manifest_digest": str(baked.digest),
        "record": baked.record,
        "bake_cached": baked.cached,
        "verified": verified.summary(),
        "base_drift": verified.base_drift.get("counts", {}),
    }
    first = next(iter(pipeline.channels), None)
    if first is not None:  # the job ends with the candidate gate table (no registry needed)
        # imported here: the release stage needs cryptography, which the GPU box (it only
        # runs suites) lacks, and `patchbake --help` there loads this module
        from .release.create import gates


        job.gates = step(f"{first} gates", lambda: gates(pipeline, store, first, str(baked.digest),
                                                         lin.key, verified=verified)[0])
    return job
