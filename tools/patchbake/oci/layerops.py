"""What a layer does to the tracked region (its "ops"), memoised by the layer digest.

A memo holds the events a fresh read of the layer emitted (``oci.entries``); replaying
them re-runs the view's checks, so a memoised layer is refused exactly when a fresh read
refuses it. A memo is used only after the layer's bytes hashed to its digest and diff_id
again. Contents kept in memory (under ``KEEP``) lie beside the memo, named by sha256.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import UnsafeArchiveError
from ..fsutil import cache_write
from .entries import EntryReader, read_entries
from .image import Blobs, Image
from .layerdigests import LayerDigests, check_digests
from .media import compression_of
from .tarstream import HashedBlob, LayerBytes

# /1 replayed no checks, /2 kept base64, /3 kept no RECORD contents: never reused
CACHE_FORMAT = "patchbake-layer-ops/4"


def _memo_name(desc_digest: Digest, tracked: tuple[str, ...]) -> str:
    key = hashlib.sha256("\0".join(tracked).encode()).hexdigest()[:16]
    return f"{desc_digest.hex}-{key}.json"


def cache_file(cache_dir: Path | None, desc_digest: Digest, tracked: tuple[str, ...]
                ) -> Path | None:
    return None if cache_dir is None else cache_dir / _memo_name(desc_digest, tracked)


def memoised(image: Image, tracked: tuple[str, ...], cache_dir: Path,
             layers: range | None = None) -> bool:
    """Whether every one of ``layers`` (all by default) has a memo for ``tracked`` (which
    may still fail its checks when it is loaded)."""
    return all((cache_dir / _memo_name(image.layers[i].digest, tracked)).is_file()
               for i in (range(len(image.layers)) if layers is None else layers))


def load_ops(path: Path | None, digest: Digest, diff_id: Digest) -> dict[str, Any] | None:
    """A layer's memo, its kept file contents read back from their content-addressed files
    (checked against their sha256); None when anything is missing or does not match."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if doc.get("format") != CACHE_FORMAT or doc.get("digest") != str(digest) \
            or doc.get("diff_id") != str(diff_id):
        return None
    for op in doc["ops"]:
        if op[0] == "f" and op[6] is not None:
            try:
                data = (path.parent / "kept" / op[5]).read_bytes()
            except OSError:
                return None
            if hashlib.sha256(data).hexdigest() != op[5]:
                return None
            op[6] = data
    return dict(doc)


def save_ops(path: Path, doc: dict[str, Any]) -> None:
    """Kept contents (the identity record, the tree manifest) go beside the memo as raw
    files named by their sha256: no base64 inside the JSON to decode on every verify.
    A memo only saves time: when the store cannot take it (disk full, read-only) it is
    skipped and the layer is read again next time."""
    for op in doc["ops"]:
        if op[0] == "f" and op[6] is not None:
            kept = path.parent / "kept" / op[5]
            if not kept.is_file() and cache_write(kept, op[6]) is not None:
                return  # without its kept file the memo would be refused anyway
            op[6] = op[5]
    cache_write(path, json.dumps(doc).encode())


def layer_ops(image: Image, blobs: Blobs, index: int, tracked: tuple[str, ...],
              cache_dir: Path | None = None, digests: LayerDigests | None = None
              ) -> list[list[Any]]:
    """What layer ``index`` alone does, after its digest and diff_id were checked to EOF
    and it was read as the engines read it (or refused): ``["f", path, kind, mode, size,
    sha256, base64-or-None]`` for a file or symlink set in the tracked region (a hard link
    gives its same-layer target's content), ``["r", path, children_only]`` for a whiteout
    (an opaque directory), ``["d", path]`` for a directory, ``["x", path]`` for a
    non-directory on a path above the tracked region. Verify reads the layers above the
    base with it. With ``cache_dir`` the layer is memoised like ``scan_image``'s (bytes
    still hashed); with ``digests`` too, a memoised layer's bytes are hashed and checked
    there, and the ops may be used only once ``digests.settle`` returned."""
    desc = image.layers[index]
    diff_id = image.diff_ids[index]
    cache = cache_file(cache_dir, desc.digest, tracked)
    memo = load_ops(cache, desc.digest, diff_id)
    if memo is not None and digests is not None and digests.active:
        return _plain_ops(memo["ops"])  # checked when the caller settles ``digests``
    if memo is not None:
        with blobs.open(desc.digest) as raw:
            hashed = HashedBlob(raw, compression_of(desc.media_type))
        check_digests(hashed, desc.digest, desc.size, diff_id, index)
        return _plain_ops(memo["ops"])
    if digests is not None and digests.active:  # the layers below it are reported first
        digests.check_through(index - 1)
    scanner = EntryReader(tracked, None, "")
    scanner.ops = []
    scanner.new_layer(index, desc.digest)
    count = 0
    with blobs.open(desc.digest) as raw:
        src = LayerBytes(raw, compression_of(desc.media_type))
        count, clean = read_entries(scanner, src, desc, diff_id, index, count)
    check_digests(src, desc.digest, desc.size, diff_id, index)
    if not clean:
        raise UnsafeArchiveError(f"layer {index} ({desc.digest}) has data after the end of "
                                 "its tar archive")
    events = scanner.ops
    plain = _plain_ops(events)
    if cache is not None:
        save_ops(cache, {"format": CACHE_FORMAT, "digest": str(desc.digest),
                          "diff_id": str(diff_id),
                          "entries": count, "ops": events})
    return plain


def _plain_ops(events: list[list[Any]]) -> list[list[Any]]:
    """The scanner's events as layer_ops describes them (checks and parents dropped)."""
    out: list[list[Any]] = []
    files: dict[str, list[Any]] = {}
    for op in events:
        kind = op[0]
        if kind == "f":
            data = op[6]
            if isinstance(data, bytes):
                data = base64.b64encode(data).decode()
            elif data is not None:  # a memo's kept content is named by its sha256
                data = None
            files[op[1]] = ["f", op[1], op[2], op[3], op[4], op[5], data]
            out.append(files[op[1]])
        elif kind == "s" and op[3]:
            out.append(["f", op[1], "symlink", 0o777, 0,
                        hashlib.sha256(op[2].encode()).hexdigest(), None])
        elif kind == "h" and op[2] in files:
            t = files[op[2]]
            files[op[1]] = ["f", op[1], "file", op[3], t[4], t[5], t[6]]
            out.append(files[op[1]])
        elif kind in ("w", "o"):
            out.append(["r", op[1], kind == "o"])
        elif kind == "d":
            out.append(["d", op[1]])
        elif kind == "n":
            out.append(["x", op[1]])
    return out
