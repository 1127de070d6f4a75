"""The deterministic layer writer: fixed format, explicit parents, pax only when needed."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
from patchbake.errors import ImageError
from patchbake.oci.tarwriter import (
    Entry,
    file_entry,
    symlink_entry,
    whiteout_entry,
    with_parents,
    write_layer,
)


def layer(entries: list[Entry], mtime: int = 0) -> bytes:
    return b"".join(write_layer(with_parents(entries), mtime))


def test_same_entries_any_order_same_bytes() -> None:
    a = [file_entry("b/x.py", data=b"1"), file_entry("a.py", data=b"2", executable=True)]
    assert layer(a) == layer(list(reversed(a)))


def test_fields_are_normalised_and_readable() -> None:
    data = layer([file_entry("usr/lib/x.py", data=b"hello"), symlink_entry("bin/sh", "busybox"),
                  whiteout_entry("usr/lib/gone.py")], mtime=1700000000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        ms = tf.getmembers()
        assert [m.name for m in ms] == ["bin", "bin/sh", "usr", "usr/lib", "usr/lib/.wh.gone.py",
                                        "usr/lib/x.py"]
        assert {m.mtime for m in ms} == {1700000000}
        assert {(m.uid, m.gid, m.uname, m.gname) for m in ms} == {(0, 0, "", "")}
        assert tf.extractfile("usr/lib/x.py").read() == b"hello"  # type: ignore[union-attr]
        assert {m.mode for m in ms if m.isdir()} == {0o755}
    assert len(data) % 512 == 0 and data.endswith(b"\0" * 1024)


def test_long_paths_use_pax_and_round_trip() -> None:
    long = "d/" + "x" * 150 + "/" + "y" * 120 + ".py"
    data = layer([file_entry(long, data=b"z")])
    assert b"././@PaxHeader" in data
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        assert long in tf.getnames()


@pytest.mark.parametrize("bad", ["/abs", "a/../b", "a//b", "./a", ""])
def test_unclean_paths_refused(bad: str) -> None:
    with pytest.raises(ImageError, match="not a clean relative path"):
        layer([file_entry(bad, data=b"")])


def test_file_and_parent_conflict_refused() -> None:
    with pytest.raises(ImageError, match="both a file and a parent"):
        layer([file_entry("a", data=b""), file_entry("a/b", data=b"")])


def _raw_pax_layer(pax_data: bytes) -> bytes:
    """A pax 'x' header with exactly ``pax_data`` as its body, then one small file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        x = tarfile.TarInfo("PaxHeader/f")
        x.type, x.size = tarfile.XHDTYPE, len(pax_data)
        tf.addfile(x, io.BytesIO(pax_data))
        f = tarfile.TarInfo("f")
        f.size = 2
        tf.addfile(f, io.BytesIO(b"hi"))
    return buf.getvalue()


@pytest.mark.parametrize("pax", [b"0 a=b\n", b"3 a=b\n", b"x path=y\n", b"99 path=y\n",
                                 b"nospace\n", b"11 size=-1\n", b"11 size=\xc2\xb2\n"])
def test_malformed_pax_headers_are_integrity_errors(pax: bytes) -> None:
    # a zero-length record used to loop forever; others crashed with ValueError
    from patchbake.errors import IntegrityError
    from patchbake.oci.tarstream import LayerBytes, members

    src = LayerBytes(io.BytesIO(_raw_pax_layer(pax)), "none")
    try:
        with pytest.raises(IntegrityError, match="pax header"):
            for m in members(src):
                src.skip(m.size)
    finally:
        src.close()


def test_wellformed_pax_header_still_parses() -> None:
    from patchbake.oci.tarstream import LayerBytes, members

    src = LayerBytes(io.BytesIO(_raw_pax_layer(b"15 path=longer\n")), "none")
    try:
        got = []
        for m in members(src):
            got.append((m.name, m.size))
            src.skip(m.size)
    finally:
        src.close()
    assert got == [("longer", 2)]


def test_oversized_pax_header_is_refused_before_reading_it() -> None:
    from patchbake.errors import IntegrityError
    from patchbake.oci.tarstream import LayerBytes, members

    header = tarfile.TarInfo("PaxHeader/f")
    header.type, header.size = tarfile.XHDTYPE, 8 << 30  # claims 8 GiB; the blob is tiny
    src = LayerBytes(io.BytesIO(header.tobuf(tarfile.GNU_FORMAT) + bytes(1024)), "none")
    try:
        with pytest.raises(IntegrityError, match="over the .* cap"):
            list(members(src))
    finally:
        src.close()


def _pinned_entries() -> list[Entry]:
    return [file_entry("usr/lib/x.py", data=b"hello"),
            file_entry("usr/bin/tool", data=b"#!/bin/sh\n", executable=True),
            symlink_entry("bin/sh", "busybox"), whiteout_entry("usr/lib/gone.py"),
            file_entry("d/" + "x" * 150 + "/" + "y" * 120 + ".py", data=b"z")]


def test_bytes_of_existing_entries_are_pinned() -> None:
    # the writer's bytes before lazily opened entries and owners were added: a change here
    # changes every layer digest ever recorded (the stand-in's pinned digest among them)
    data = layer(_pinned_entries(), mtime=1700000000)
    assert hashlib.sha256(data).hexdigest() == \
        "19aaaceb13229bcc4e3853660f3c167daf19422a1acb79f95e60c83127a2da84"


def test_opened_entry_writes_the_same_bytes_as_data() -> None:
    lazy = Entry("usr/lib/x.py", "file", 0o644, size=5, opener=lambda: io.BytesIO(b"hello"))
    assert layer([lazy]) == layer([file_entry("usr/lib/x.py", data=b"hello")])
    short = Entry("usr/lib/x.py", "file", 0o644, size=9, opener=lambda: io.BytesIO(b"hello"))
    with pytest.raises(ImageError, match="changed size"):
        layer([short])


def test_owners_and_exact_modes_are_kept() -> None:
    data = layer([Entry("usr/bin/su", "file", 0o4755, data=b"x", size=1),
                  Entry("var/mail", "dir", 0o2775, gid=8), Entry("tmp", "dir", 0o1777),
                  Entry("etc/shadow", "file", 0o640, data=b"", gid=42)])
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        got = {m.name: (m.mode, m.uid, m.gid) for m in tf.getmembers()}
    assert got["usr/bin/su"] == (0o4755, 0, 0)
    assert got["var/mail"] == (0o2775, 0, 8)
    assert got["tmp"] == (0o1777, 0, 0)
    assert got["etc/shadow"] == (0o640, 0, 42)
