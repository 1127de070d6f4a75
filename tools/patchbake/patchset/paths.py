"""Repository paths inside patches and FILES.txt: git's C quoting, and the safety rule.

Paths are kept as ``str`` decoded from UTF-8 with ``surrogateescape`` so that any byte
sequence round-trips to the file system (``os.fsencode``) unchanged. Standard library only.
"""

from __future__ import annotations

import re

from ..errors import PatchError

_ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13,
            b'"': 34, b"\\": 92}
_QUOTE_OUT = {v: b"\\" + k for k, v in _ESCAPES.items()}
_NEEDS_QUOTE = re.compile(rb'[\x00-\x1f\x7f-\xff"\\]')


def needs_quote(raw: bytes) -> bool:
    """git's ``core.quotePath=true`` rule: control bytes, DEL, non-ASCII, quote, backslash."""
    return _NEEDS_QUOTE.search(raw) is not None


def cquote(raw: bytes) -> bytes:
    """Quote like git does (octal escapes for bytes >= 0x80) when needed, else unchanged."""
    if not needs_quote(raw):
        return raw
    out = bytearray(b'"')
    for c in raw:
        if c in _QUOTE_OUT:
            out += _QUOTE_OUT[c]
        elif c < 0x20 or c >= 0x7F:
            out += b"\\%03o" % c
        else:
            out.append(c)
    out += b'"'
    return bytes(out)


def cunquote(text: bytes) -> tuple[bytes, bytes]:
    """Read one C-quoted string at the start of ``text``; return (value, rest)."""
    if not text.startswith(b'"'):
        raise ValueError("not a quoted string")
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i:i + 1]
        if c == b'"':
            return bytes(out), text[i + 1:]
        if c == b"\\":
            nxt = text[i + 1:i + 2]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            digits = text[i + 1:i + 4]
            if len(digits) == 3 and all(48 <= d <= 55 for d in digits):
                out.append(int(digits, 8))
                i += 4
                continue
            raise ValueError(f"unknown escape \\{nxt.decode('latin-1')}")
        out += c
        i += 1
    raise ValueError("unterminated quoted string")


def to_str(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def to_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def validate_path(raw: bytes, where: str = "patch") -> str:
    """Refuse absolute paths, ``..``/``.``/empty components, ``.git`` and NUL bytes.

    The patch may only name files inside the tree it is applied to; the applier also
    refuses to write through a symbolic link, which no path string can show.
    """
    text = to_str(raw)
    shown = to_str(cquote(raw))
    if not raw:
        raise PatchError(f"{where}: empty path")
    if b"\0" in raw:
        raise PatchError(f"{where}: path {shown} holds a NUL byte")
    if raw.startswith(b"/"):
        raise PatchError(f"{where}: absolute path {shown}: a patch may only touch files "
                         "inside the tree")
    parts = raw.split(b"/")
    if any(p in (b"", b".", b"..") for p in parts):
        raise PatchError(f"{where}: path {shown} has an empty, '.' or '..' component: "
                         "a patch may only touch files inside the tree")
    if any(p.lower() == b".git" for p in parts):
        raise PatchError(f"{where}: path {shown} reaches into a .git directory")
    return text
