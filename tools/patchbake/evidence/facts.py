"""Facts about an image that the evidence summary quotes: patch sha256 and N/N matched.

Kept apart so the summary depends on the identity stage through one small seam.
"""

from __future__ import annotations

from typing import Any

from ..fixtures.image import ImageRef

PATCH_LABEL_KEYS = ("org.patchbake.patch.sha256", "dev.patchbake.patch.sha256",
                    "patchbake.patch.sha256")


def patch_and_match(ctx: Any, ref: ImageRef, verify_files: bool
                    ) -> tuple[str | None, int | None, int | None]:
    patch: str | None = None
    matched: int | None = None
    total: int | None = None
    try:
        from ..oci import image as oci_image

        img = oci_image.load_image(oci_image.StoreBlobs(ctx.store), ref.digest)
        for k, v in img.labels.items():
            if k in PATCH_LABEL_KEYS or k.endswith("patch.sha256"):
                patch = v.removeprefix("sha256:")
    except Exception:  # noqa: BLE001 - image not in this store: the summary says so
        return None, None, None
    if verify_files:
        from .. import identity  # the images stage's verifier

        report = identity.verify(ctx.store, ref.digest, ctx.lineage())  # type: ignore[attr-defined]
        matched, total = int(report.matched), int(report.total)
    return patch, matched, total
