"""The CUDA code of one ELF object: its fatbin sections, or the object itself as a cubin.

Read with random access and nothing else: the ELF header, the section header table, the
section-name table, then the fatbin sections' headers (``fatbin``). A host object's code is
in ``.nv_fatbin`` (shared objects, executables) or ``__nv_relfatbin`` (relocatable objects);
a cubin is an ELF for the CUDA machine whose flags name its SASS architecture.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .fatbin import Code, Read, Unreadable, read_section

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
ELFOSABI_CUDA = 0x41
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF
MAX_SECTIONS = 1 << 16  # more than any linker writes; bounds the section table read
MAX_NAMES = 16 << 20  # the section-name table read in one piece


@dataclass(frozen=True, slots=True)
class ElfCode:
    """What one ELF object holds: ``codes`` from its fatbins or itself (a cubin)."""

    machine: int
    cubin: bool
    sections: tuple[str, ...]  # the fatbin sections found
    codes: tuple[Code, ...]


@dataclass(frozen=True, slots=True)
class _Header:
    fmt: str  # struct byte order
    wide: bool  # ELFCLASS64
    machine: int
    flags: int
    osabi: int
    abiversion: int
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int


def _header(read: Read, size: int) -> _Header:
    ident = read(0, 16)
    if ident[:4] != ELF_MAGIC:
        raise Unreadable("not an ELF object")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise Unreadable(f"ELF class {ident[4]} / data encoding {ident[5]} is not one of ELF's")
    fmt, wide = ("<" if ident[5] == 1 else ">"), ident[4] == 2
    rest = read(16, (64 if wide else 52) - 16)
    layout = "HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"
    (_type, machine, _ver, _entry, _phoff, shoff, flags, _ehsize, _phentsize, _phnum,
     shentsize, shnum, shstrndx) = struct.unpack(fmt + layout, rest)
    return _Header(fmt, wide, machine, flags, ident[7], ident[8], shoff, shentsize, shnum,
                   shstrndx)


def _sections(read: Read, size: int, h: _Header) -> list[tuple[int, int, int, int]]:
    """(name offset, type, file offset, size) of every section."""
    if h.shoff == 0:
        return []
    layout = "IIQQQQIIQQ" if h.wide else "IIIIIIIIII"
    entry = struct.calcsize(h.fmt + layout)
    if h.shentsize < entry:
        raise Unreadable(f"section headers of {h.shentsize} bytes (at least {entry} expected)")
    first = struct.unpack(h.fmt + layout, read(h.shoff, entry))
    count = h.shnum or first[5]  # extended numbering: section 0's size holds the count
    if count > MAX_SECTIONS or h.shoff + count * h.shentsize > size:
        raise Unreadable(f"a section table of {count} entries at {h.shoff} does not fit "
                         f"the object ({size} bytes)")
    table = read(h.shoff, count * h.shentsize)
    out = []
    for i in range(count):
        f = struct.unpack_from(h.fmt + layout, table, i * h.shentsize)
        out.append((f[0], f[1], f[4], f[5]))
    return out


def _names(read: Read, size: int, h: _Header, secs: list[tuple[int, int, int, int]],
           link0: int) -> list[str]:
    index = link0 if h.shstrndx == SHN_XINDEX else h.shstrndx
    if not secs:
        return []
    if index >= len(secs):
        raise Unreadable(f"the section-name table index {index} is past the section table")
    _, _, off, length = secs[index]
    if length > MAX_NAMES or off + length > size:
        raise Unreadable(f"the section-name table ({length} bytes at {off}) does not fit")
    table = read(off, length)
    names = []
    for name_off, _, _, _ in secs:
        end = table.find(b"\0", name_off)
        names.append(table[name_off:end if end >= 0 else len(table)].decode("latin-1"))
    return names


def cubin_arch(flags: int, osabi: int, abiversion: int) -> int:
    """A cubin's SASS architecture from ``e_flags``: bits 8-15 from the CUDA ELF ABI
    version 8 on (CUDA 12.8+), bits 0-7 before it."""
    if osabi == ELFOSABI_CUDA and abiversion >= 8:
        return (flags >> 8) & 0xFF
    return flags & 0xFF


def read_elf(read: Read, size: int, where: str) -> ElfCode:
    """The CUDA code of the ELF object of ``size`` bytes that ``read`` reads."""
    try:
        h = _header(read, size)
        if h.machine == EM_CUDA:
            arch = cubin_arch(h.flags, h.osabi, h.abiversion)
            return ElfCode(h.machine, True, (), (Code("sass", arch),))
        secs = _sections(read, size, h)
        link0 = 0
        if secs and h.shstrndx == SHN_XINDEX:
            layout = "IIQQQQIIQQ" if h.wide else "IIIIIIIIII"
            link0 = struct.unpack(h.fmt + layout, read(h.shoff, struct.calcsize(
                h.fmt + layout)))[6]
        names = _names(read, size, h, secs, link0)
        found, codes = [], []
        for name, (_, kind, off, length) in zip(names, secs, strict=True):
            if name not in FATBIN_SECTIONS or kind == SHT_NOBITS:
                continue
            if off + length > size:
                raise Unreadable(f"section {name} ({length} bytes at {off}) runs past the end")
            found.append(name)
            codes.extend(read_section(read, off, length, f"{where} {name}"))
        return ElfCode(h.machine, False, tuple(found), tuple(codes))
    except (struct.error, UnicodeDecodeError) as exc:
        raise Unreadable(f"{where}: malformed ELF ({exc})") from None
