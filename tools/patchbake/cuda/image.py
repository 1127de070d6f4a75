"""The CUDA code of every ELF object in an image's merged filesystem.

Two steps. First every layer is streamed once by the image reader every check uses
(``oci.scan``: digests checked to EOF, whiteouts and opaque directories applied, what the
engines disagree on refused), with an ``EntryReader`` that also notes where each file's
bytes lie in its layer's tar. Then each file of the final filesystem is read where it lies:
its first four bytes, and for an ELF object only its headers, section table and fatbin
headers (``elf``, ``fatbin``). Our layers are uncompressed, so that is a seek into the
stored blob; a gzip layer (a registry base) is inflated once into a temporary file first.
The blob is trusted between the two steps as the store is trusted everywhere (content
addressed, ours).
"""

from __future__ import annotations

import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ..oci.entries import EntryReader, clean_name
from ..oci.image import Blobs, Image
from ..oci.media import compression_of
from ..oci.scan import scan_image
from ..oci.tarstream import LayerBytes, Member
from .elf import ELF_MAGIC, ElfCode, read_elf
from .fatbin import Read, Unreadable

# (path, size, its code, or why it could not be read)
Found = tuple[str, int, ElfCode | None, str]


class LocatingReader(EntryReader):
    """An ``EntryReader`` that notes each regular file's data offset in its layer's tar."""

    def __init__(self) -> None:
        super().__init__(("",), None, "")
        self.located: dict[tuple[int, str], tuple[int, int]] = {}  # (layer, path) -> (off, size)

    def _file(self, src: LayerBytes, m: Member, path: str, layer: int) -> None:
        self.located[(layer, path)] = (src.tell(), m.size)
        super()._file(src, m, path, layer)

    def _hardlink(self, path: str, m: Member, layer: int) -> None:
        super()._hardlink(path, m, layer)  # refuses a link to what this layer did not write
        where = self.located.get((layer, clean_name(m.linkname, self.where)))
        if where is not None:
            self.located[(layer, path)] = where


@contextmanager
def _seekable(blobs: Blobs, image: Image, index: int, tmp: Path) -> Iterator[BinaryIO]:
    desc = image.layers[index]
    with blobs.open(desc.digest) as raw:
        if compression_of(desc.media_type) != "gzip" and raw.seekable():
            yield raw
            return
        with tempfile.TemporaryFile(dir=tmp) as out:
            inflate = zlib.decompressobj(31) if compression_of(desc.media_type) == "gzip" \
                else None
            for chunk in iter(lambda: raw.read(1 << 20), b""):
                out.write(inflate.decompress(chunk) if inflate else chunk)
            if inflate:
                out.write(inflate.flush())
            yield out


def _window(fh: BinaryIO, base: int, size: int) -> Read:
    def read(offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > size:
            raise Unreadable(f"a read of {n} bytes at {offset} runs past the object's end "
                             f"({size} bytes)")
        fh.seek(base + offset)
        data = fh.read(n)
        if len(data) != n:
            raise Unreadable(f"the layer ends inside the object (offset {offset})")
        return data
    return read


def elf_objects(image: Image, blobs: Blobs, tmp: Path,
                progress: Callable[[int], None] | None = None) -> tuple[list[Found], int]:
    """Every ELF object of ``image``'s final filesystem with its CUDA code, by path, and
    the bytes read while streaming the layers. ``tmp``: where an inflated gzip layer is
    kept while it is read (an unlinked temporary file)."""
    reader = LocatingReader()
    view = scan_image(image, blobs, ("",), reader=reader, progress=progress)
    by_layer: dict[int, list[tuple[str, int, int]]] = {}
    for path, info in view.files.items():
        if info.kind == "file" and info.size >= 52:  # the smallest ELF header
            off, size = reader.located[(info.layer, path)]
            by_layer.setdefault(info.layer, []).append((path, off, size))
    found: list[Found] = []
    for index, files in sorted(by_layer.items()):
        with _seekable(blobs, image, index, tmp) as fh:
            for path, off, size in sorted(files, key=lambda f: f[1]):
                fh.seek(off)
                if fh.read(4) != ELF_MAGIC:
                    continue
                try:
                    found.append((path, size, read_elf(_window(fh, off, size), size, path), ""))
                except Unreadable as exc:
                    found.append((path, size, None, str(exc)))
    return sorted(found), view.bytes_read
