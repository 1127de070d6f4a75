"""Git object ids and ``GIT binary patch`` data: base85 lines and delta application.

Standard library only. Git's base85 alphabet is the one :func:`base64.b85decode` uses.
"""

from __future__ import annotations

import base64
import hashlib


def blob_id(data: bytes) -> str:
    """The git (SHA-1) blob id of ``data``: what ``index OLD..NEW`` lines name."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def b85_line(line: bytes) -> bytes:
    """Decode one line of a binary patch: a length letter, then base85 in groups of 5."""
    if not line:
        raise ValueError("empty line")
    c = line[0]
    if 65 <= c <= 90:
        n = c - 64
    elif 97 <= c <= 122:
        n = c - 96 + 26
    else:
        raise ValueError(f"bad length byte {chr(c)!r}")
    body = line[1:]
    if len(body) % 5 or len(body) // 5 * 4 < n:
        raise ValueError("line length does not match its length byte")
    return base64.b85decode(body)[:n]


def _varint(delta: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(delta):
            raise ValueError("delta header truncated")
        b = delta[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def apply_delta(base: bytes, delta: bytes) -> bytes:  # noqa: C901 - git's pack delta opcodes
    """Apply a git pack delta (copy/insert opcodes) to ``base``; ValueError if it disagrees."""
    src_size, i = _varint(delta, 0)
    dst_size, i = _varint(delta, i)
    if src_size != len(base):
        raise ValueError(f"delta expects a {src_size}-byte base, file has {len(base)} bytes")
    out = bytearray()
    while i < len(delta):
        cmd = delta[i]
        i += 1
        if cmd & 0x80:
            offset = size = 0
            for bit in range(4):
                if cmd & (1 << bit):
                    offset |= delta[i] << (8 * bit)
                    i += 1
            for bit in range(3):
                if cmd & (0x10 << bit):
                    size |= delta[i] << (8 * bit)
                    i += 1
            size = size or 0x10000
            if offset + size > len(base):
                raise ValueError("delta copies past the end of the base")
            out += base[offset:offset + size]
        elif cmd:
            out += delta[i:i + cmd]
            i += cmd
        else:
            raise ValueError("delta opcode 0 is reserved")
    if len(out) != dst_size:
        raise ValueError(f"delta produced {len(out)} bytes, header says {dst_size}")
    return bytes(out)
