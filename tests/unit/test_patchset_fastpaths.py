"""The guard's fast paths give the reference results on every input, well formed or not.

(And the re-export pack's deltas make the post-images the applier made.)

The hunk parser, the applier and the whitespace check each try a C-level shortcut first
and fall back to the line-by-line reference (the code the shortcut replaced) on anything
that is not plainly well formed. These properties run both on generated patches and
files, then on the same inputs mangled (lines dropped, doubled or re-tagged, counts and
start lines moved, newline markers added, files edited), and require the same result or
the same error, message included.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import random
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.errors import PatchbakeError
from patchbake.patchset import apply as apply_mod
from patchbake.patchset import diffparse, guard
from patchbake.patchset.diffparse import Hunk, parse_patch
from patchbake.patchset.gitbinary import apply_delta, blob_id
from patchbake.patchset.gitobjects import Pack, _stored_entry, delta_of

LINES = ["a\n", "b\n", "c\n", "\n", "def f():\n", "  x\n", "x \n", "x\t\n", " \tx\n", "y\r\n",
         "\\n\n", "+z\n", "-z\n", "@@ q\n"]


@contextmanager
def reference(module: object) -> Iterator[None]:
    """Run ``module`` with its fast path off (the reference behaviour)."""
    saved = module._FAST  # type: ignore[attr-defined]
    module._FAST = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module._FAST = saved  # type: ignore[attr-defined]


def outcome(fn: Callable[[], object]) -> tuple[str, object]:
    try:
        return "ok", fn()
    except PatchbakeError as exc:
        return type(exc).__name__, (exc.message, exc.hint, getattr(exc, "reason", None))


def section(pre: bytes, post: bytes, path: str = "f.txt") -> bytes:
    """A git-style section (difflib hunks, with git's no-newline markers)."""
    body = list(difflib.unified_diff(pre.decode().splitlines(True),
                                     post.decode().splitlines(True), n=3))[2:]
    text = "".join(ln if ln.endswith("\n") or ln.startswith("@@")
                   else ln + "\n\\ No newline at end of file\n" for ln in body)
    head = (f"diff --git a/{path} b/{path}\nindex {blob_id(pre)}..{blob_id(post)} 100644\n"
            f"--- a/{path}\n+++ b/{path}\n")
    return (head + text).encode()


def mangle(data: bytes, rng: random.Random, edits: int) -> bytes:
    lines = data.splitlines(True)
    for _ in range(edits):
        if not lines:
            break
        i = rng.randrange(len(lines))
        what = rng.randrange(7)
        if what == 0:
            del lines[i]
        elif what == 1:
            lines.insert(i, lines[i])
        elif what == 2:
            lines[i] = rng.choice([b" ", b"+", b"-", b"\\", b"@", b"x", b""]) + lines[i][1:]
        elif what == 3:
            lines.insert(i, b"\\ No newline at end of file\n")
        elif what == 4:
            lines.insert(i, b"\n")
        elif what == 5 and (m := diffparse.HUNK_RE.match(lines[i].rstrip(b"\n"))):
            nums = [int(m.group(k) or 1) for k in (1, 2, 3, 4)]
            k = rng.randrange(4)
            nums[k] = max(0, nums[k] + rng.choice([-2, -1, 1, 2]))
            lines[i] = b"@@ -%d,%d +%d,%d @@" % tuple(nums) + m.group(5) + b"\n"
        else:
            lines[i] = lines[i].rstrip(b"\n")
    return b"".join(lines)


file_text = st.lists(st.sampled_from(LINES), max_size=30).map(lambda ls: "".join(ls))


def _no_eol(text: str, cut: bool) -> bytes:
    return (text[:-1] if cut and text.endswith("\n") else text).encode()


def _parse_both(data: bytes) -> None:
    fast = outcome(lambda: parse_patch(data, "t.patch"))
    with reference(diffparse):
        ref = outcome(lambda: parse_patch(data, "t.patch"))
    assert fast == ref


def _no_hunk_walked(data: bytes) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diffparse, "_hunk_lines", None)
        parse_patch(data, "t.patch")


def test_hunk_parser_fast_path_equals_reference() -> None:
    @settings(max_examples=400, deadline=None)
    @given(pre=file_text, post=file_text, cut_pre=st.booleans(),
                      cut_post=st.booleans(), seed=st.integers(0, 2**32),
                      edits=st.integers(0, 4))
    def prop(pre: str, post: str, cut_pre: bool, cut_post: bool, seed: int,
             edits: int) -> None:
        a, b = _no_eol(pre, cut_pre), _no_eol(post, cut_post)
        data = section(a, b) + section(b, a, "g.txt") if a != b else section(a, b"z\n")
        if not edits and b"\n\\" not in data:  # well formed, no markers: no hunk is walked
            _no_hunk_walked(data)
        _parse_both(mangle(data, random.Random(seed), edits))

    prop()


def test_hunk_parser_fast_path_on_the_fixture_mangled() -> None:
    rng = random.Random(20250)
    for n in range(400):
        _parse_both(mangle(fx.patch_bytes(), rng, 1 + n % 3))


def _moved(h: Hunk, rng: random.Random) -> Hunk:
    field = rng.choice(["old_start", "new_start", "old_count", "new_count"])
    return dataclasses.replace(
        h, **{field: max(0, getattr(h, field) + rng.choice([-2, -1, 1]))})


def _fast(hunks: list[Hunk], data: bytes) -> bytes | None:
    edits = apply_mod._edits(hunks, data)
    return None if edits is None else apply_mod.edited(data, edits)


def _apply_both(hunks: list[Hunk], data: bytes) -> None:
    fast = outcome(lambda: apply_mod.apply_hunks("f.txt", hunks, data))
    with reference(apply_mod):
        ref = outcome(lambda: apply_mod.apply_hunks("f.txt", hunks, data))
    assert fast == ref, (hunks, data)


def test_apply_fast_path_equals_reference() -> None:
    @settings(max_examples=400, deadline=None)
    @given(pre=file_text, post=file_text, cut_pre=st.booleans(),
                      cut_post=st.booleans(), base_edits=st.integers(0, 3),
                      moves=st.integers(0, 2), seed=st.integers(0, 2**32))
    def prop(pre: str, post: str, cut_pre: bool, cut_post: bool, base_edits: int, moves: int,
             seed: int) -> None:
        a, b = _no_eol(pre, cut_pre), _no_eol(post, cut_post)
        if a == b:
            return
        hunks = list(parse_patch(section(a, b)).files[0].hunks)
        rng = random.Random(seed)
        base = mangle(a, rng, base_edits) if base_edits else a
        for _ in range(moves):
            k = rng.randrange(len(hunks))
            hunks[k] = _moved(hunks[k], rng)
        swap = rng.random() < 0.2 and len(hunks) > 1
        if swap:
            hunks = [hunks[1], hunks[0], *hunks[2:]]
        _apply_both(hunks, base)
        if not (base_edits or moves or swap):
            assert _fast(hunks, base) == b  # a clean apply takes the fast path

    prop()


def _hunk(start: int, old: tuple[bytes, ...], new: tuple[bytes, ...],
          count: int | None = None) -> Hunk:
    return Hunk(start, len(old) if count is None else count, start, len(new), 1, old, new,
                (), 0, 0)


def test_apply_fast_path_on_odd_hunks() -> None:
    """Hunks no parser makes: an old line without its newline before the last one, an
    empty last line, a count that disagrees with the lines, repeated blocks."""
    h = _hunk
    cases = [
        ([h(1, (b"a", b"b\n"), (b"c\n",))], b"ab\nx\n"),
        ([h(1, (b"a\n", b""), (b"c\n",))], b"a\nb\n"),
        ([h(1, (b"a\n", b""), (b"c\n",))], b"a\n"),
        ([h(1, (b"a\n",), (b"c\n",), count=2)], b"a\nb\n"),
        ([h(3, (b"a\n", b"a\n"), (b"b\n",))], b"a\na\na\na\n"),
        ([h(2, (b"a\n", b"a\n"), (b"b\n",))], b"a\na\na\na\n"),
        ([h(2, (b"a\n",), (b"b\n",)), h(1, (b"a\n",), (b"b\n",))], b"a\na\n"),
        ([h(2, (b"a\n",), (b"b\n",))], b"a\nxa\n"),
        ([h(1, (b"a",), (b"b",))], b"a\n"),
        ([h(1, (b"a",), (b"b",))], b"a"),
        ([h(0, (), (b"b\n",))], b""),
        ([h(0, (), (b"b\n",))], b"a\n"),
        ([h(5, (), (b"b\n",))], b"a\n"),
    ]
    for hunks, data in cases:
        _apply_both(hunks, data)
    # an occurrence before the hunk's line is passed over, not taken
    assert _fast(*cases[4]) == b"a\na\nb\n"


def test_whitespace_prefilter_never_hides_an_error() -> None:
    @settings(max_examples=300, deadline=None)
    @given(pre=file_text, post=file_text, seed=st.integers(0, 2**32),
                      edits=st.integers(0, 3))
    def prop(pre: str, post: str, seed: int, edits: int) -> None:
        a, b = pre.encode(), post.encode()
        data = mangle(section(a, b) if a != b else section(a, b"z \n"), random.Random(seed),
                      edits)
        try:
            patch = parse_patch(data)
        except PatchbakeError:
            return
        fast, ref = guard._Run(), guard._Run()
        guard._whitespace(patch, fast)
        guard._whitespace_in_hunks(patch, ref)
        assert fast.problems == ref.problems

    prop()


@pytest.mark.parametrize("size", [0, 1, 65534, 65535, 65536, 131070, 131071, 200000])
def test_stored_pack_entry_is_a_zlib_stream_of_the_data(size: int) -> None:
    data = random.Random(size).randbytes(size)
    pieces = _stored_entry(b"\x30", data)
    stream = b"".join(bytes(p) for p in pieces[1:])
    assert zlib.decompress(stream) == data
    assert stream[:2] == b"\x78\x01"


def test_delta_of_edits_makes_the_edited_bytes() -> None:
    rng = random.Random(7)
    for _ in range(300):
        base = rng.randbytes(rng.choice([0, 1, 100, 0xFFFF, 0x10000, 0x10001, 0x30000]))
        edits: list[tuple[int, int] | bytes] = []
        pos = 0
        while pos < len(base) and rng.random() < 0.9:
            a = rng.randrange(pos, len(base) + 1)
            b = rng.randrange(a, len(base) + 1)
            if rng.random() < 0.3:
                b = min(len(base), a + rng.choice([0xFFFF, 0x10000, 0x10001, 0x20000]))
            edits.append((a, b))
            pos = b
            if rng.random() < 0.5:
                edits.append(rng.randbytes(rng.choice([0, 1, 127, 128, 300])))
        post = apply_mod.edited(base, tuple(edits))
        assert apply_delta(base, delta_of(len(base), tuple(edits), len(post))) == post


def test_outcome_edits_make_the_post_image() -> None:
    from patchbake.patchset.strict import apply_in_memory

    outcomes = apply_in_memory(parse_patch(fx.patch_bytes()), fx.PRISTINE)
    with_edits = [o for o in outcomes.values() if o.edits is not None]
    assert with_edits
    for o in with_edits:
        assert o.pre is not None and apply_mod.edited(o.pre, o.edits) == o.post  # type: ignore[arg-type]


def _objects_of(pack: bytes) -> dict[str, bytes]:
    """Every object of a pack by id, OFS_DELTA entries resolved against their base."""
    assert pack[:4] == b"PACK" and hashlib.sha1(pack[:-20]).digest() == pack[-20:]
    count = struct.unpack(">I", pack[8:12])[0]
    at: dict[int, tuple[int, bytes]] = {}  # offset -> (type, content)
    out: dict[str, bytes] = {}
    pos = 12
    for _ in range(count):
        start, byte = pos, pack[pos]
        kind, size, shift = (byte >> 4) & 7, byte & 0x0F, 4
        pos += 1
        while byte & 0x80:
            byte = pack[pos]
            size |= (byte & 0x7F) << shift
            shift += 7
            pos += 1
        base = None
        if kind == 6:
            byte = pack[pos]
            dist = byte & 0x7F
            pos += 1
            while byte & 0x80:
                byte = pack[pos]
                dist = ((dist + 1) << 7) | (byte & 0x7F)
                pos += 1
            base = at[start - dist]
        d = zlib.decompressobj()
        data = d.decompress(pack[pos:])
        assert len(data) == size
        pos = len(pack) - len(d.unused_data)
        if base is not None:
            kind, data = base[0], apply_delta(base[1], data)
        at[start] = (kind, data)
        name = {2: b"tree", 3: b"blob"}[kind]
        out[hashlib.sha1(b"%s %d\0" % (name, len(data)) + data).hexdigest()] = data
    assert pos == len(pack) - 20
    return out


def test_pack_with_deltas_holds_the_post_images(tmp_path: Path) -> None:
    p = Pack()
    pre = b"".join(b"line %d\n" % i for i in range(30000))
    edits = ((0, 1000), b"inserted\n" * 40, (1200, len(pre) - 10), b"tail\n", (len(pre) - 5,
                                                                             len(pre)))
    post = apply_mod.edited(pre, edits)
    base = p.add(b"blob", pre)
    got = p.add_delta(base, delta_of(len(pre), edits, len(post)), blob_id(post))
    p.add_delta(base, b"not used: the id is there", got)  # once per id
    with pytest.raises(ValueError, match="not in the pack"):
        p.add_delta("0" * 40, b"", "1" * 40)
    p.write(tmp_path)
    (packf,) = (tmp_path / "pack").glob("*.pack")
    objs = _objects_of(packf.read_bytes())
    assert objs == {base: pre, got: post}
