"""An image's layer blobs hashed in a background thread and checked in layer order.

A layer is trusted only after its blob was read to EOF and both digests matched: the raw
bytes' sha256 is the layer digest, the uncompressed tar's the config's diff_id.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..digest import Digest
from ..errors import ImageError, IntegrityError
from .image import Blobs, Image
from .media import compression_of
from .tarstream import HASH_READ, HashedBlob, LayerBytes
from .view import LayerReport, View


class LayerDigests:
    """Every layer blob of an image hashed front to back in one background thread while
    the caller works on the layers' memoised ops (hashlib drops the GIL as it hashes).
    ``settle`` checks each layer's digest, size and diff_id in layer order, as a fresh read
    does; a result built from memoised ops is sound only once it returned. ``cancel``
    stops the hashing (the caller then reads and hashes the layers itself)."""

    def __init__(self, image: Image, blobs: Blobs) -> None:
        self.image = image
        self.blobs = blobs
        self.entries: list[int] | None = None  # per layer, set by a deferred replay
        self._hashed: list[HashedBlob] = []
        self._failed: BaseException | None = None
        self._checked = 0  # layers [0, _checked) passed
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def __enter__(self) -> LayerDigests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    @property
    def active(self) -> bool:
        return not self._stop.is_set()

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()

    def _work(self) -> None:
        try:
            # one buffer for every blob: as big as the largest layer, up to HASH_READ
            size = min(HASH_READ, max([d.size for d in self.image.layers if d.size > 0],
                                       default=1))
            buf = memoryview(bytearray(max(size, 1 << 16)))
            for d in self.image.layers:
                compression = compression_of(d.media_type)
                with self.blobs.open(d.digest) as raw:
                    h = HashedBlob(raw, compression, self._stop, buf)
                if not h.complete:
                    return
                with self._cond:
                    self._hashed.append(h)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            with self._cond:
                self._failed = exc
                self._cond.notify_all()

    def _result(self, i: int) -> HashedBlob:
        with self._cond:
            self._cond.wait_for(lambda: len(self._hashed) > i or self._failed is not None
                                or not self._thread.is_alive())
            if len(self._hashed) > i:
                return self._hashed[i]
            if self._failed is not None:
                raise self._failed
        raise ImageError(f"layer {i} was not hashed (the hashing was cancelled)")

    def check_through(self, last: int) -> None:
        """Check layers up to ``last`` (inclusive), in order."""
        while self._checked <= last:
            i = self._checked
            desc = self.image.layers[i]
            check_digests(self._result(i), desc.digest, desc.size, self.image.diff_ids[i], i)
            self._checked += 1

    def settle(self, view: View, progress: Callable[[int], None] | None = None
               ) -> list[LayerReport]:
        """Check every layer; add the deferred layer reports to ``view``; its reports."""
        if self.entries is not None and not view.layers:
            self.check_through(len(self.image.layers) - 1)
            for i, (desc, h) in enumerate(zip(self.image.layers, self._hashed, strict=True)):
                view.layers.append(LayerReport(desc.digest, self.image.diff_ids[i],
                                               h.raw_size, self.entries[i]))
                view.bytes_read += h.raw_size
                if progress:
                    progress(h.raw_size)
        if len(view.layers) != len(self.image.layers):
            raise ImageError("not every layer of the image was checked")
        return view.layers


def check_digests(reader: LayerBytes | HashedBlob, digest: Digest, size: int,
                   diff_id: Digest,
                   i: int) -> None:
    got = Digest.from_hex(reader.raw_hash.hexdigest())
    if got != digest:
        raise IntegrityError(f"layer {i}: blob {digest} hashes to {got}: the layer's bytes "
                             "were changed")
    if reader.raw_size != size:
        raise IntegrityError(f"layer {i}: blob {digest} is {reader.raw_size} bytes; the "
                             f"manifest says {size}")
    got_diff = Digest.from_hex(reader.tar_hash.hexdigest())
    if got_diff != diff_id:
        raise IntegrityError(f"layer {i}: uncompressed tar hashes to {got_diff}; the config's "
                             f"diff_id is {diff_id} (layer swapped or config edited)")
