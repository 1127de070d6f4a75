"""``check_image``: an image's ELF objects judged for a target GPU, and the gate's reading
of that report against what the image's definition declares."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from pathlib import Path

from ..digest import Digest
from ..oci.image import Blobs, Image, StoreBlobs, load_image
from ..store import Store
from .image import elf_objects
from .verdict import CudaReport, ObjectCode, Target, judge, unreadable

Outcome = tuple[str, str]  # (status, reason), as release gates return them


def exemption(exempt: Mapping[str, str], path: str) -> str | None:
    """Why the definition exempts the object at ``path`` (relative to the root): an entry
    for exactly its path, else the first entry whose pattern matches it (``*`` and ``?`` as
    fnmatch reads them, ``*`` crossing ``/``: a directory of per-architecture kernels is one
    entry). Every exempt object is still listed, with the reason."""
    shown = "/" + path
    if shown in exempt:
        return exempt[shown]
    return next((why for pattern, why in sorted(exempt.items())
                 if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(shown, pattern)),
                None)


def check_image(image: Image, blobs: Blobs, name: str, target: Target, tmp: Path,
                exempt: Mapping[str, str] | None = None,
                progress: Callable[[int], None] | None = None) -> CudaReport:
    """Every ELF object of ``image`` with its CUDA code and verdict for ``target``.
    ``exempt``: absolute path -> why that object never runs on the target (from the
    image's definition, never from the image)."""
    exempt = exempt or {}
    found, bytes_read = elf_objects(image, blobs, tmp, progress)
    objects: list[ObjectCode] = []
    for path, size, code, why in found:
        if code is None:
            objects.append(unreadable(path, size, why))
        else:
            objects.append(judge(path, size, code.codes, target, exemption(exempt, path)))
    return CudaReport(name, str(image.manifest_digest), target, tuple(objects), len(found),
                      bytes_read)


def gate_reading(report: CudaReport, expect: str) -> Outcome:
    """The cuda-code gate's decision. ``expect`` is the definition's ``cuda_code.expect``:
    "none" for an image that declares no CUDA code (the stand-in), where zero CUDA objects
    pass and any CUDA object fails; "present" (a serving image), where zero CUDA objects
    is itself a failure -- a serving image without kernels cannot serve on a GPU."""
    cuda, bad = report.cuda_objects, report.failures
    if expect == "none":
        if cuda:
            return "fail", (f"the definition declares no CUDA code, but the image holds "
                            f"{len(cuda)} CUDA object(s); first: {cuda[0].path}")
        return "pass", (f"no CUDA objects, as the definition declares "
                        f"({report.elf_objects} ELF objects)")
    if not cuda:
        return "fail", (f"no CUDA objects in the image ({report.elf_objects} ELF objects): a "
                        f"serving image for {report.target} must carry kernels")
    if bad:
        first = bad[0]
        return "fail", (f"{len(bad)} of {len(cuda)} CUDA objects have no code for "
                        f"{report.target}; first: {first.path}: {first.why}")
    return "pass", report.summary()


def check_stored(store: Store, digest: Digest, definition: str, target: Target, expect: str,
                 exempt: Mapping[str, str]) -> Outcome:
    """The gate on the image ``digest`` in ``store``, as ``definition`` declares it."""
    if not store.has(digest):
        return "fail", f"missing input: the image {digest} is not in the store"
    tmp = store.tmpdir("cuda-code")
    try:
        report = check_image(load_image(StoreBlobs(store), digest), StoreBlobs(store),
                             definition, target, tmp, exempt)
    finally:
        store.discard(tmp)
    return gate_reading(report, expect)
