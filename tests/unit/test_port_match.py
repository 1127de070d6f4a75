"""Port's exact hunk matching, the merge-block check, the report and the pipeline edit
(hermetic: the parts of port that need no git)."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.config import load
from patchbake.errors import ConfigError
from patchbake.patchset.diffparse import Hunk
from patchbake.port.hunkmatch import (apply_at, find_all, first_difference, match_hunk,
                                          non_overlapping)
from patchbake.port.merge3 import already_upstream, resolve_absorbed
from patchbake.port.file import HunkVerdict
from patchbake.port.pin import new_lineage, plan_lineage_edit


def L(*xs: str) -> list[bytes]:
    return [f"{x}\n".encode() for x in xs]


def hunk(old_start: int, old: list[bytes], new: list[bytes]) -> Hunk:
    added = [x for x in new if x not in old]
    return Hunk(old_start, len(old), old_start, len(new), 1, tuple(old), tuple(new),
                tuple(added), len(added), len(old) - (len(new) - len(added)))


H = hunk(3, L("b", "c", "d"), L("b", "C", "d"))  # lines 3..5 of a 9-line file
OLD_LEN = 9


def test_clean_at_recorded_line_and_other_places_noted() -> None:
    lines = L("x", "y", "b", "c", "d", "z", "b", "c", "d")
    m = match_hunk(H, lines, OLD_LEN)
    assert (m.verdict, m.pos) == ("clean", 2)
    assert m.note == "pre-image also at line 7"


def test_moved_reports_offset() -> None:
    m = match_hunk(H, L("new", "new", "x", "y", "b", "c", "d", "z"), OLD_LEN)
    assert (m.verdict, m.pos) == ("moved", 4)
    assert "offset +2 from the recorded line 3" in m.note


def test_ambiguous_pre_image_is_never_picked() -> None:
    m = match_hunk(H, L("b", "c", "d", "q", "q", "q", "b", "c", "d"), OLD_LEN)
    assert m.verdict is None and m.pos is None
    assert m.note.startswith("ambiguous: the pre-image is at lines 1, 7")


def test_absorbed_when_only_the_post_image_is_there() -> None:
    m = match_hunk(H, L("x", "b", "C", "d"), OLD_LEN)
    assert (m.verdict, m.pos) == ("absorbed", 1)


def test_ambiguous_post_image_goes_to_the_merge() -> None:
    m = match_hunk(H, L("b", "C", "d", "b", "C", "d"), OLD_LEN)
    assert m.verdict is None and "post-image is at lines 1, 4" in m.note


def test_hunk_at_end_of_file_must_match_at_the_end() -> None:
    h = hunk(4, L("d", "e", "f"), L("d", "e", "f", "g"))  # reached the end of a 6-line file
    assert match_hunk(h, L("a", "b", "c", "d", "e", "f"), 6).verdict == "clean"
    m = match_hunk(h, L("a", "b", "c", "d", "e", "f", "other"), 6)
    assert m.verdict is None and "not at the end of the new file" in m.note


def test_hunk_at_start_of_file_must_match_at_the_start() -> None:
    h = hunk(1, L("a", "b", "c"), L("A", "b", "c"))
    m = match_hunk(h, L("new", "a", "b", "c", "x"), 10)
    assert m.verdict is None and "not at the start of the new file" in m.note


def test_nothing_found_is_left_to_the_merge() -> None:
    m = match_hunk(H, L("x", "y", "z"), OLD_LEN)
    assert m.verdict is None and "context changed" in m.note


def test_apply_at_and_overlaps() -> None:
    lines = L("a", "b", "c", "d", "e")
    h = hunk(2, L("b", "c"), L("b", "X", "c"))
    assert apply_at(lines, [(1, h)]) == L("a", "b", "X", "c", "d", "e")
    keep, clash = non_overlapping([(1, 1, h), (2, 2, h)])
    assert [k for _p, k, _h in keep] == [1] and [k for _p, k, _h in clash] == [2]
    assert find_all(lines, tuple(L("c", "d"))) == [2]
    assert first_difference(L("a", "b"), L("a", "c")) == 1
    assert first_difference(L("a"), L("a")) is None


def test_already_upstream_block_check() -> None:
    # ours: c -> X; upstream: c -> X and d -> Y beside it
    assert already_upstream(L("X", "d"), L("c", "d"), L("X", "Y"))
    # ours inserts S; upstream inserts a blank line and S
    assert already_upstream(L("S"), [], [b"\n", b"S\n"])
    # upstream wrote something else: a real conflict
    assert not already_upstream(L("X", "d"), L("c", "d"), L("Z", "Y"))
    # upstream kept the line ours removes: a real conflict
    assert not already_upstream(L("d"), L("c", "d"), L("c", "Y"))


def test_already_upstream_needs_the_change_in_place() -> None:
    """Our added lines merely present in upstream's side are not our change taking
    effect: each case is a conflict (the old subsequence check called them absorbed)."""
    ours, base = L("A", "B", "C"), L()
    assert already_upstream(ours, base, L("A", "B", "C"))
    assert already_upstream(ours, base, L("", "A", "B", "C"))  # a blank line before
    assert not already_upstream(ours, base, L("A", "return", "B", "C"))
    assert not already_upstream(ours, base, L("C", "A", "B", "C"))  # C moved before A
    assert not already_upstream(ours, base, L("return f()", "def f():", "A", "B", "C"))
    assert not already_upstream(ours, base, L('"""', "A", "B", "C", '"""'))
    assert not already_upstream(ours, base, L("# A", "# B", "# C"))
    # a deletion: nothing upstream wrote may stand where ours removed the line
    assert already_upstream(L("a", "d"), L("a", "c", "d"), L("a", "d"))
    assert not already_upstream(L("a", "d"), L("a", "c", "d"), L("a", "c2", "d"))


def test_resolve_absorbed_keeps_upstream_side_or_refuses() -> None:
    labels = ("ours (a)", "base (b)", "theirs (c)")
    merged = b"".join(L("a", "<<<<<<< ours (a)", "X", "d", "||||||| base (b)", "c", "d",
                        "=======", "X", "Y", ">>>>>>> theirs (c)", "e"))
    assert resolve_absorbed(merged, labels) == L("a", "X", "Y", "e")
    real = merged.replace(b"=======\nX\n", b"=======\nZ\n")
    assert resolve_absorbed(real, labels) is None


def test_report_row_json() -> None:
    row = HunkVerdict("p.py", 2, 22, "moved", 21, -1, "note", 1, 1, (("q.py", 0.9),))
    assert row.as_json() == {"file": "p.py", "hunk": 2, "recorded_line": 22,
                             "verdict": "moved", "line": 21, "offset": -1, "note": "note",
                             "added": 1, "removed": 1,
                             "candidates": [{"path": "q.py", "similarity": 0.9}]}


PIPE = """\
version: 1
name: t
# lineages, one per pin
lineages:
    v1.0:
        # the first one
        name: fix
        upstream: {kind: index, package: pkg, version: "1.0", filename: pkg-1.0.tar.gz,
                   sha256: %s, strip: pkg-1.0, generated: [pkg/_version.py]}
        patch: patch/fix-v1.0.patch
        files: patch/FILES.txt
        source_record: patch/SOURCE

# images of this instance
images: {}
""" % ("a" * 64)


def test_pipeline_edit_keeps_comments_and_indent(tmp_path: Path) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPE)
    old = load(p).lineage("v1.0")
    new = new_lineage(old, tmp_path, "v2.0", "2.0", "b" * 64)
    assert new.patch == tmp_path / "patch" / "v2.0" / "fix-v2.0.patch"
    assert new.upstream.strip == "pkg-2.0" and new.upstream.generated == ("pkg/_version.py",)
    text, block = plan_lineage_edit(p, new)
    assert block.startswith("    v2.0:\n        name: fix\n        upstream:\n")
    assert text.startswith(PIPE.split("\n# images")[0] + block)
    assert text.endswith("\n# images of this instance\nimages: {}\n")
    assert p.read_text() == PIPE  # planning writes nothing
    p.write_text(text)
    got = load(p).lineage("v2.0")
    assert got.upstream.sha256 == "b" * 64 and got.series == tmp_path / "patch/v2.0/series"


def test_pipeline_edit_refuses_flow_style_lineages(tmp_path: Path) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPE)
    old = load(p).lineage("v1.0")
    p.write_text("version: 1\nname: t\nlineages: {v1.0: {name: fix}}\n")
    with pytest.raises(ConfigError, match="no block-style 'lineages:' mapping"):
        plan_lineage_edit(p, new_lineage(old, tmp_path, "v2.0", "2.0", "b" * 64))
