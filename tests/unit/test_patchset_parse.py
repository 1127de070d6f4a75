"""Parser of the canonical patch: the fixture, git's quoting, and every refusal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.errors import PatchError
from patchbake.patchset.diffparse import parse_patch, split_lines
from patchbake.patchset.gitbinary import apply_delta, b85_line, blob_id
from patchbake.patchset.paths import cquote, cunquote, validate_path

HEADER = (b"diff --git a/x.py b/x.py\nindex " + b"1" * 40 + b".." + b"2" * 40 +
          b" 100644\n--- a/x.py\n+++ b/x.py\n")


def test_fixture_sections_statuses_and_counts() -> None:
    p = parse_patch(fx.patch_bytes(), "canonical.patch")
    got = [(f.path, f.status, f.added, f.removed) for f in p.files]
    assert got == [("pkg/core.py", "M", 3, 2), ("pkg/gone.py", "D", 0, 1),
                   ("pkg/new.py", "A", 5, 0), ("pkg/sub/data.bin", "M", 0, 0),
                   ("pkg/sub/nonl.txt", "M", 1, 1), ("pkg/sub/run.sh", "M", 0, 0)]
    by = p.by_path()
    assert by["pkg/sub/run.sh"].old_mode == "100644" and by["pkg/sub/run.sh"].new_mode == "100755"
    assert by["pkg/sub/data.bin"].binary is not None
    assert [h.old_start for h in by["pkg/core.py"].hunks] == [11, 119]
    # "\ No newline at end of file" strips the newline of the line before it
    assert by["pkg/sub/nonl.txt"].hunks[0].new[-1] == b"gamma"
    assert (p.added, p.removed) == (9, 4)


def test_parse_agrees_with_unidiff() -> None:
    """Cross-check counts and paths with the independent parser the package depends on."""
    unidiff = pytest.importorskip("unidiff")
    ours = parse_patch(fx.patch_bytes())
    theirs = unidiff.PatchSet(fx.patch_bytes().decode("utf-8"))
    assert [f.path for f in ours.files] == [f.path for f in theirs]
    assert [(f.added, f.removed) for f in ours.files] == [(f.added, f.removed) for f in theirs]


def test_empty_patch_is_valid() -> None:
    assert parse_patch(b"").files == ()


def test_quoting_round_trip() -> None:
    raw = "ü \"q\"\\\t.txt".encode()
    q = cquote(raw)
    assert q.startswith(b'"') and cunquote(q + b" rest") == (raw, b" rest")
    assert cquote(b"plain/path.py") == b"plain/path.py"


def test_blob_id_matches_git() -> None:
    assert blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_delta_and_base85_errors() -> None:
    with pytest.raises(ValueError, match="base"):
        apply_delta(b"abc", bytes([5, 1, 0x91, 0, 1]))
    with pytest.raises(ValueError, match="length"):
        b85_line(b"!abc")


def test_split_lines_keeps_carriage_returns() -> None:
    assert split_lines(b"a\r\nb") == [b"a\r\n", b"b"]


@pytest.mark.parametrize("data, message", [
    (fx.patch_bytes().replace(b"\n", b"\r\n"), "lines end in CRLF"),
    (fx.patch_bytes()[:-1], "lacks a final newline"),
    (b"From: someone\n" + fx.patch_bytes(), "expected a 'diff --git' line"),
    (HEADER + b"@@ -1,2 +1,2 @@\n a\n-b\n", "ends early"),
    (HEADER + b"@@ -1,2 +1,2 @@\n a\n-b\n+c\n+d\n", "more lines than its header counts"),
    (HEADER + b"@@ -1,2 +1,2 @@\n a\n\n-b\n+c\n", "empty line inside the hunk"),
    (HEADER + b"@@ -1,x +1,2 @@\n", "malformed hunk header"),
    (b"diff --git a/x b/y\nsimilarity index 90%\n", "not canonical: export uses --no-renames"),
    (b"diff --git a/x b/x\nindex abc..def 100644\n", "abbreviated index line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\nBinary files a/x and b/x differ\n", "without data: export uses --binary"),
    (b"diff --git a//etc/passwd b//etc/passwd\n", "absolute path"),
    (b"diff --git a/../x b/../x\n", "'..' component"),
    (b"diff --git a/.git/config b/.git/config\n", "reaches into a .git directory"),
    (b"diff --git x y\n", "a/ and b/ prefixes"),
    (b"diff --git a/x b/x\nweird header\n", "unexpected header line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\n--- a/x\n+++ b/x\n", "no hunk after the header"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "paths disagree"),
    (b'diff --git "a/x\\q" "b/x"\n', "bad quoted path"),
    (b'diff --git "a/x" "b/x" tail\n', "trailing text after the paths"),
    (b"diff --git a/xx b/x\n", "cannot split the paths"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\n--- a/x\n@@ -1 +1 @@\n", "without a following '\\+\\+\\+' line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\n--- /dev/null\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "/dev/null side disagrees"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 + b" 100644\n@@ -1 +1 @@\n",
     "hunk without '---'/'\\+\\+\\+' header lines"),
    (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
     "without an index line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b"\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "names no file mode"),
    (HEADER + b"@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n",
     "without a preceding line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\nGIT binary patch\nliteral 3\n", "binary patch ends early"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\nGIT binary patch\nliteral 3\n!!!!\n\n", "bad base85 line"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\nGIT binary patch\nliteral 3\nD00000\n\n", "does not inflate"),
    (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
     b" 100644\nGIT binary patch\nfoo 3\n", "expected 'literal N' or 'delta N'"),
])
def test_refusals_name_the_line(data: bytes, message: str) -> None:
    with pytest.raises(PatchError, match=message) as exc:
        parse_patch(data, "t.patch")
    assert exc.value.exit_code == 20
    assert "t.patch" in str(exc.value)


def test_validate_path_rules() -> None:
    assert validate_path(b"a/b.py") == "a/b.py"
    for bad in (b"", b"a//b", b"./a", b"a/\0b"):
        with pytest.raises(PatchError):
            validate_path(bad)


def test_binary_literal_size_must_match() -> None:
    import base64
    import zlib

    raw = zlib.compress(b"abcd")
    line = bytes([64 + len(raw)]) + base64.b85encode(raw, pad=True)
    data = (b"diff --git a/x b/x\nindex " + b"1" * 40 + b".." + b"2" * 40 +
            b" 100644\nGIT binary patch\nliteral 3\n" + line + b"\n\nliteral 0\nHcmV?d00001\n\n")
    with pytest.raises(PatchError, match="binary literal holds 4 bytes, header says 3"):
        parse_patch(data)
