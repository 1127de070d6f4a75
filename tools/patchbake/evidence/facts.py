"""Facts about an image that the evidence summary quotes: patch sha256 and N/N matched.

The patch hash comes from the committed image record (or, failing that, the image's
label); N/N comes from a fresh identity verification by the images stage, run here, never
copied from an earlier log. Kept apart so the summary meets the identity stage at one seam.
"""

from __future__ import annotations

from ..config import Lineage, Pipeline
from ..digest import is_hex
from ..errors import PatchbakeError
from ..oci import image as oci_image
from ..store import Store
from ..suites.image import SuiteImage, find_record
from ..verify import baked


def patch_sha256(pipeline: Pipeline, store: Store, ref: SuiteImage) -> str | None:
    rec = find_record(pipeline.root, ref.digest)
    if rec is not None:
        return rec.patch_sha256
    try:
        img = oci_image.load_image(oci_image.StoreBlobs(store), ref.digest)
    except PatchbakeError:
        return None
    for k, v in img.labels.items():
        if k.endswith("patch.sha256"):
            return v if is_hex(v) else None
    return None


def match_counts(pipeline: Pipeline, store: Store, lineage: Lineage, ref: SuiteImage
                 ) -> tuple[int, int]:
    """(matched, total) from a fresh `patchbake verify` of the image."""
    report = baked.verify_image(pipeline, str(ref.digest), store, lineage)
    if not report.mismatched:
        # mismatches are the paragraph's to state ("Only M of N"); any other failure (an
        # identity record that lies, nothing baked) must not read as "All N matched"
        baked.raise_on_failure(report)
    return int(report.matched), int(report.total)


def patch_and_match(pipeline: Pipeline, store: Store, lineage: Lineage, ref: SuiteImage,
                    verify_files: bool) -> tuple[str | None, int | None, int | None]:
    matched, total = (match_counts(pipeline, store, lineage, ref) if verify_files
                      else (None, None))
    return patch_sha256(pipeline, store, ref), matched, total
