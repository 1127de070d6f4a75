"""Stream an image's layers without extracting them.

Each layer blob is read once, front to back: the raw bytes are hashed for the layer digest,
the (decompressed) tar bytes for the diff_id, and tar headers are parsed on the fly. Files
inside the *tracked* region (the vLLM package and /opt/patchbake) are hashed in memory;
whiteouts and opaque directories are applied to that in-memory view. A layer is trusted
only after it has been drained to EOF and both its digests matched; a bad digest, a size
mismatch or an unsafe entry raises before anything is returned.

With ``write_root`` the tracked vLLM files are also written under a staging directory
(``materialise``); symlinks, hardlinks to untracked files and devices are refused there.

The parts: ``oci.view`` (the view and its events), ``oci.entries`` (a layer's entries read
fresh), ``oci.layerops`` (a layer's events memoised), ``oci.layerdigests`` (the digest checks,
in a background thread when every layer is memoised).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ImageError, IntegrityError, UnsafeArchiveError
from .entries import EntryReader, read_entries
from .image import Blobs, Image
from .layerdigests import LayerDigests, check_digests
from .layerops import CACHE_FORMAT, cache_file, load_ops, save_ops
from .media import compression_of
from .tarstream import HashedBlob, LayerBytes
from .view import FileInfo, LayerReport, View


def scan_image(image: Image, blobs: Blobs, tracked: tuple[str, ...], *,
               write_root: Path | None = None, write_prefix: str = "",
               progress: Callable[[int], None] | None = None,
               cache_dir: Path | None = None, digests: LayerDigests | None = None,
               reader: EntryReader | None = None, stored: bool = False) -> View:
    """Stream every layer of ``image``; return the tracked region's final view.

    With ``cache_dir``, what a layer does to the tracked region (its "ops") is memoised by
    the layer digest: a later scan still reads and hashes every byte of the layer to EOF
    and checks digest and diff_id, and only when both match replays the ops instead of
    re-parsing -- the parse is a pure function of bytes that just hashed to that digest.

    With ``digests`` (hashing this image's blobs in the background) and every layer
    memoised, the view comes back before the digests are checked and with no layer
    reports: ``digests.settle(view)`` checks every layer and adds them, and nothing may be
    taken from the view before it returned.

    ``reader`` replaces the default ``EntryReader`` (a subclass that also notes where each
    file's bytes lie, ``cuda.layerfiles``); it is built for ``tracked`` by the caller.
    ``stored=True`` says ``blobs`` is the store, whose writer hashed every blob before
    naming it by its digest: with every layer memoised, the blobs are then not hashed
    again (only their sizes checked), so the scan costs what the memos cost, not what the
    layers weigh. Bake uses it for the base; verify never does.
    """
    scanner = reader or EntryReader(tracked, write_root, write_prefix)
    diff_ids = image.diff_ids
    if write_root is None and cache_dir is not None:
        replayed = _replay_stored(scanner, image, blobs, tracked, cache_dir) if stored \
            else _replay_memoised(scanner, image, blobs, tracked, cache_dir, digests,
                                  progress)
        if replayed is not None:
            return replayed
    if digests is not None:
        digests.cancel()  # read layer by layer below, each hashed as it is parsed
    for i, desc in enumerate(image.layers):
        compression = compression_of(desc.media_type)
        cache = cache_file(cache_dir, desc.digest, tracked) if write_root is None else None
        memo = load_ops(cache, desc.digest, diff_ids[i])
        with blobs.open(desc.digest) as raw:
            count = 0
            src: LayerBytes | HashedBlob
            if memo is not None:
                src = HashedBlob(raw, compression)
                clean = True
            else:
                src = LayerBytes(raw, compression)
                scanner.ops = [] if cache is not None else None
                scanner.new_layer(i, desc.digest)
                count, clean = read_entries(scanner, src, desc, diff_ids[i], i, count)
        check_digests(src, desc.digest, desc.size, diff_ids[i], i)
        if not clean:
            raise UnsafeArchiveError(f"layer {i} ({desc.digest}) has data after the end of "
                                     "its tar archive")
        if memo is not None:
            scanner.replay(memo["ops"], i, desc.digest)
            count = int(memo["entries"])
        elif cache is not None and scanner.ops is not None:
            save_ops(cache, {"format": CACHE_FORMAT, "digest": str(desc.digest),
                              "diff_id": str(diff_ids[i]), "entries": count, "ops": scanner.ops})
        scanner.ops = None
        scanner.view.layers.append(LayerReport(desc.digest, diff_ids[i], src.raw_size, count))
        scanner.view.bytes_read += src.raw_size
        if progress:
            progress(src.raw_size)
    return scanner.view


def _replay_memoised(scanner: EntryReader, image: Image, blobs: Blobs,
                     tracked: tuple[str, ...], cache_dir: Path, digests: LayerDigests | None,
                     progress: Callable[[int], None] | None) -> View | None:
    """``scan_image`` when every layer has a memo (else None): the ops replayed while the
    blobs are hashed by ``digests``, or by a ``LayerDigests`` of its own settled here."""
    memos = [load_ops(cache_file(cache_dir, d.digest, tracked), d.digest, image.diff_ids[i])
             for i, d in enumerate(image.layers)]
    if not all(m is not None for m in memos):
        return None
    if digests is not None:
        return _replay_all(scanner, image, memos, digests)  # type: ignore[arg-type]
    with LayerDigests(image, blobs) as own:
        view = _replay_all(scanner, image, memos, own)  # type: ignore[arg-type]
        own.settle(view, progress)
    return view


def _replay_stored(scanner: EntryReader, image: Image, blobs: Blobs,
                   tracked: tuple[str, ...], cache_dir: Path) -> View | None:
    """``scan_image`` of store blobs when every layer has a memo (else None): the ops
    replayed, each blob's size checked against its descriptor, no byte hashed. A memo is
    written only after its layer hashed to both the digest and the diff_id it names, and
    ``load_ops`` takes it only for that (digest, diff_id) pair."""
    memos = [load_ops(cache_file(cache_dir, d.digest, tracked), d.digest, image.diff_ids[i])
             for i, d in enumerate(image.layers)]
    if not all(m is not None for m in memos):
        return None
    for i, (desc, memo) in enumerate(zip(image.layers, memos, strict=True)):
        assert memo is not None
        with blobs.open(desc.digest) as raw:
            size = os.fstat(raw.fileno()).st_size
        if size != desc.size:
            raise IntegrityError(f"layer {i}: blob {desc.digest} is {size} bytes; the "
                                 f"manifest says {desc.size} (run `patchbake store fsck`)")
        scanner.replay(memo["ops"], i, desc.digest)
        scanner.view.layers.append(LayerReport(desc.digest, image.diff_ids[i], size,
                                               int(memo["entries"])))
    return scanner.view


def _replay_all(scanner: EntryReader, image: Image, memos: list[dict[str, Any]],
                digests: LayerDigests) -> View:
    """Every layer memoised: replay the ops in this thread while ``digests`` hashes the
    blobs in its own. A layer refused on replay is reported as a fresh read reports it:
    a changed blob at or below it first."""
    for i, memo in enumerate(memos):
        try:
            scanner.replay(memo["ops"], i, image.layers[i].digest)
        except (IntegrityError, ImageError, UnsafeArchiveError):
            digests.check_through(i)
            raise
    digests.entries = [int(m["entries"]) for m in memos]
    return scanner.view


def final_files(image: Image, blobs: Blobs) -> dict[str, FileInfo]:
    """Every regular file and symlink of the image's final filesystem (all layers, whiteouts
    applied, every layer read as the engines read it, or refused), path -> FileInfo; a
    symlink's ``sha256`` is that of its target. What the differential test compares with
    the files a real unpacker writes."""
    return scan_image(image, blobs, ("",)).files
