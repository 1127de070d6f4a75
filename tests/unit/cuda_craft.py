"""Crafted CUDA objects and images for the cuda-code tests: fatbin containers, a minimal
ELF64 holding them, a cubin, an image of layers in a store, and ``retarget`` (every fatbin
entry of a real object rewritten to one architecture, walked here independently of
``patchbake.cuda``)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from patchbake.digest import Digest
from patchbake.oci import layout
from patchbake.oci.media import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST, Descriptor
from patchbake.oci.tarwriter import Entry, with_parents, write_layer
from patchbake.store import Store

SASS, PTX = 2, 1
COMPRESSED, ARCH_SPECIFIC, FAMILY = 0x8000, 0x100000, 0x200000


def entry(kind: int, arch: int, flags: int = 0x11, payload: bytes = b"\xab" * 24) -> bytes:
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<IIHHI", head, 16, len(payload), 0, 0 if kind == PTX else 8,
                     9 if kind == PTX else 1, arch)
    struct.pack_into("<Q", head, 40, flags)
    return bytes(head) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf64(sections: dict[str, bytes], machine: int = 62) -> bytes:
    """A little-endian ELF64 object with ``sections`` (PROGBITS), a section-name table
    and the section header table at its end, as linkers lay them out."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    body, offsets = bytearray(64), []
    for data in [*sections.values(), names]:
        body += b"\0" * (-len(body) % 8)
        offsets.append((len(body), len(data)))
        body += data
    body += b"\0" * (-len(body) % 8)
    shoff, count = len(body), len(sections) + 2
    body += bytes(64)  # the null section
    name_at = 1
    for i, (off, size) in enumerate(offsets):
        label = ([*sections, ".shstrtab"])[i]
        kind = 3 if label == ".shstrtab" else 1
        body += struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, off, size, 0, 0, 8, 0)
        name_at += len(label) + 1
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    body[0:64] = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, 64, 56,
                                     0, 64, count, count - 1)
    return bytes(body)


def cubin(arch: int) -> bytes:
    """A CUDA ELF (ABI version 8) for ``sm_<arch>``, no sections."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, 8]) + bytes(7)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 0, arch << 8 | 0x2, 64,
                               56, 0, 64, 0, 0)


def image(store: Store, layers: Iterable[list[Entry]]) -> Digest:
    """An image of uncompressed layers in ``store``; its manifest digest."""
    descs = []
    for entries in layers:
        data = b"".join(write_layer(with_parents(entries), 0))
        descs.append(Descriptor(OCI_LAYER_TAR, store.put_bytes(data), len(data)))
    config = {"architecture": "amd64", "os": "linux", "config": {},
              "rootfs": {"type": "layers", "diff_ids": [str(d.digest) for d in descs]}}
    cd, cs, _ = layout.put_json(store, config)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": str(cd), "size": cs},
                "layers": [{"mediaType": d.media_type, "digest": str(d.digest),
                            "size": d.size} for d in descs]}
    md, _, _ = layout.put_json(store, manifest)
    return md


def retarget(data: bytes, arch: int) -> bytes:
    """``data`` (an ELF64 with a ``.nv_fatbin``) with every entry's architecture set to
    ``arch`` and its arch-specific/family flags cleared: an object built for that GPU only."""
    out = bytearray(data)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    _, count, names = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(count)]
    strtab = secs[names][4]
    for s in secs:
        if data[strtab + s[0]:data.index(b"\0", strtab + s[0])] != b".nv_fatbin":
            continue
        pos, end = s[4], s[4] + s[5]
        while pos < end:
            if data[pos:pos + 4] != b"\x50\xed\x55\xba":
                pos += 1  # zero padding between containers
                continue
            hsize, body = struct.unpack_from("<HQ", data, pos + 6)
            p, stop = pos + hsize, pos + hsize + body
            while p < stop:
                ehs, payload = struct.unpack_from("<IQ", data, p + 4)
                struct.pack_into("<I", out, p + 28, arch)
                flags, = struct.unpack_from("<Q", data, p + 40)
                struct.pack_into("<Q", out, p + 40, flags & ~(ARCH_SPECIFIC | FAMILY))
                p += ehs + payload
            pos = stop
    return bytes(out)
