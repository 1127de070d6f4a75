"""The CUDA code a fatbin carries, read from its container and entry headers alone.

A ``.nv_fatbin`` section (``__nv_relfatbin`` in relocatable objects) holds fatbin
containers one after another, zero padding between them. A container is a 16-byte header
(magic 0xBA55ED50, version 1, header size, size of the entries that follow) and its
entries; an entry is a header (kind 1 = PTX, 2 = ELF/SASS; the architecture; flags) and a
payload of the size the header states. Only headers are read: payloads, compressed or
not, are skipped by their size, so a 1 GB ``libtorch_cuda.so`` costs a few thousand small
reads. NVIDIA does not document the layout; the offsets below are the ones NVIDIA's own
``cuobjdump`` agrees with on vLLM's and torch's wheels (tests/integration/test_cuda_code_wheels.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

MAGIC = 0xBA55ED50
CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, payload size (offset 0)
ENTRY_MIN = 48  # an entry header holds its flags at offset 40
KIND_PTX, KIND_ELF = 1, 2
FLAG_COMPRESSED = 0x2000 | 0x8000  # LZ4 (CUDA <= 12.7) and the newer compression
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a: runs on exactly that architecture
FLAG_FAMILY = 0x200000  # sm_100f: runs on the family (same major)
MAX_ENTRIES = 1 << 20  # bounds the work a hostile section can ask for
_PAD_READ = 4096

# read(offset, n) -> exactly n bytes of the object, or raises Unreadable
Read = Callable[[int, int], bytes]


class Unreadable(Exception):
    """The bytes are not what an ELF or fatbin reader accepts; the message says where."""


@dataclass(frozen=True, slots=True, order=True)
class Code:
    """One fatbin entry (or a whole cubin): SASS for ``sm_<arch>`` or PTX for
    ``compute_<arch>``, ``variant`` "a" (arch-specific), "f" (family) or ""."""

    kind: str  # "sass" | "ptx"
    arch: int  # 89 for sm_89 / compute_89
    variant: str = ""
    compressed: bool = False
    ptx_isa: str | None = None  # PTX entries: the PTX ISA version the header states

    @property
    def label(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.arch}{self.variant}"


def _variant(flags: int) -> str:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    return "f" if flags & FLAG_FAMILY else ""


def _entry(read: Read, pos: int, end: int, where: str) -> tuple[Code | None, int]:
    """The entry at ``pos`` (None for a kind that is neither PTX nor ELF) and its end."""
    if pos + ENTRY_MIN > end:
        raise Unreadable(f"{where}: an entry header at +{pos} runs past its container")
    head = read(pos, ENTRY_MIN)
    kind, _version, header_size, payload = ENTRY.unpack_from(head)
    if header_size < ENTRY_MIN or pos + header_size + payload > end:
        raise Unreadable(f"{where}: the entry at +{pos} (header {header_size} bytes, payload "
                         f"{payload}) does not fit its container")
    minor, major, arch = struct.unpack_from("<HHI", head, 24)
    (flags,) = struct.unpack_from("<Q", head, 40)
    nxt = pos + header_size + payload
    if kind not in (KIND_PTX, KIND_ELF):
        return None, nxt
    if not 10 <= arch < 1000:
        raise Unreadable(f"{where}: the entry at +{pos} names architecture {arch}")
    ptx = kind == KIND_PTX
    return Code("ptx" if ptx else "sass", arch, _variant(flags),
                bool(flags & FLAG_COMPRESSED), f"{major}.{minor}" if ptx else None), nxt


def _skip_padding(read: Read, pos: int, end: int) -> int:
    """The first non-zero byte at or after ``pos`` (or ``end``)."""
    while pos < end:
        chunk = read(pos, min(_PAD_READ, end - pos))
        stripped = chunk.lstrip(b"\0")
        if stripped:
            return pos + len(chunk) - len(stripped)
        pos += len(chunk)
    return end


def read_section(read: Read, offset: int, size: int, where: str) -> list[Code]:
    """Every PTX and SASS entry of the fatbin containers in ``[offset, offset+size)``."""
    out: list[Code] = []
    pos, end = offset, offset + size
    while True:
        pos = _skip_padding(read, pos, end)
        if pos >= end:
            return out
        if pos + CONTAINER.size > end:
            raise Unreadable(f"{where}: {end - pos} stray bytes at +{pos - offset}")
        magic, version, header_size, body = CONTAINER.unpack(read(pos, CONTAINER.size))
        if magic != MAGIC:
            raise Unreadable(f"{where}: no fatbin container at +{pos - offset} (magic "
                             f"{magic:#010x}, not {MAGIC:#010x})")
        if version != 1 or header_size < CONTAINER.size or pos + header_size + body > end:
            raise Unreadable(f"{where}: the container at +{pos - offset} (version {version}, "
                             f"header {header_size}, size {body}) does not fit the section")
        p, stop = pos + header_size, pos + header_size + body
        while p < stop:
            code, p = _entry(read, p, stop, where)
            if code is not None:
                out.append(code)
            if len(out) > MAX_ENTRIES:
                raise Unreadable(f"{where}: more than {MAX_ENTRIES} fatbin entries")
        pos = stop
