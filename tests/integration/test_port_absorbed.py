"""``port``'s "absorbed" with the real ``git merge-file``: only a change that still takes
effect upstream is absorbed; our lines present in a weaker sense are a conflict with both
sides shown (an unreachable ``canonicalize_topk_`` call must never be reported as done).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from patchbake.patchset.diffparse import FilePatch, parse_patch
from patchbake.port.file import port_modified

pytestmark = pytest.mark.integration

BASE = """\
def select(x, k):
    scores = score(x)
    topk = pick(scores, k)
    return topk


def other(y):
    z = prep(y)
    return z
"""
A = "    topk = canonicalize_topk_(topk)\n"
B = "    check(topk)\n"
C = "    log(topk)\n"
PICK = "    topk = pick(scores, k)\n"
OURS = BASE.replace(PICK, PICK + A + B + C)
HEAD = "def select(x, k):\n    scores = score(x, k)\n"  # upstream changed the hunk's context
TAIL = BASE[BASE.index("    return topk"):]
LABELS = ("ours (patch)", "base (old)", "theirs (new)")

WEAKER = {
    "return between our lines": HEAD + PICK + A + "    if not k:\n        return topk\n"
    + B + C + TAIL,
    "our lines reordered": HEAD + PICK + C + A + B + C + TAIL,
    "our lines in another function": HEAD + PICK + "    return finish(topk)\n\n\n"
    "def finish(topk):\n" + A + B + C + TAIL,
    "our lines commented out": HEAD + PICK + '    """\n' + A + B + C + '    """\n' + TAIL,
}
TAKEN = {
    "our lines in place": HEAD + PICK + A + B + C + TAIL,
    "our lines after a blank line": HEAD + PICK + "\n" + A + B + C + TAIL,
}


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory) -> FilePatch:
    d = tmp_path_factory.mktemp("repo")

    def git(*argv: str) -> bytes:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost",
                               *argv], cwd=d, check=True, capture_output=True).stdout

    git("init", "-q")
    (d / "m.py").write_text(BASE)
    git("add", "m.py")
    git("commit", "-qm", "base")
    (d / "m.py").write_text(OURS)
    return parse_patch(git("diff", "--full-index")).files[0]


@pytest.mark.parametrize("case", sorted(WEAKER))
def test_weaker_presence_is_a_conflict_with_both_sides(section: FilePatch, tmp_path: Path,
                                                       case: str) -> None:
    res = port_modified(section, BASE.encode(), WEAKER[case].encode(), tmp_path, LABELS)
    [row] = res.rows
    assert row.verdict == "conflict", (case, row)
    assert isinstance(res.post, bytes)
    text = res.post.decode()
    ours = text[text.index("<<<<<<< ours (patch)\n"):text.index("||||||| base (old)\n")]
    theirs = text[text.index("=======\n"):text.index(">>>>>>> theirs (new)\n")]
    assert A + B + C in ours  # our change, whole, beside upstream's side
    assert A in theirs or '"""' in theirs or "finish" in theirs


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_change_in_place_upstream_is_absorbed(section: FilePatch, tmp_path: Path,
                                              case: str) -> None:
    res = port_modified(section, BASE.encode(), TAKEN[case].encode(), tmp_path, LABELS)
    [row] = res.rows
    assert row.verdict == "absorbed", (case, row)
    assert res.post == TAKEN[case].encode()


def test_a_target_file_made_binary_is_a_conflict_not_a_failure(section: FilePatch,
                                                                tmp_path: Path) -> None:
    """git merge-file refuses binary content (exit 255, once a ProcessError, exit 5): a
    hunk whose target upstream made binary is a conflict left by hand (port exits 26)."""
    theirs = (HEAD + "    blob = b'\0\1'\n" + TAIL).encode()
    res = port_modified(section, BASE.encode(), theirs, tmp_path, LABELS)
    [row] = res.rows
    assert row.verdict == "conflict" and "binary" in row.note, row
    assert res.post == theirs  # upstream's file, untouched


def test_a_new_file_where_upstream_added_a_binary_one(tmp_path: Path) -> None:
    from patchbake.patchset.gitbinary import blob_id
    from patchbake.port.file import port_file

    patch = (b"diff --git a/new.py b/new.py\nnew file mode 100644\nindex " + b"0" * 40
             + b".." + blob_id(b"x = 1\n").encode() + b"\n--- /dev/null\n+++ b/new.py\n"
             b"@@ -0,0 +1 @@\n+x = 1\n")
    [fp] = parse_patch(patch).files
    res = port_file(fp, None, (b"\0\x7fELF", "100644"), tmp_path, LABELS)
    [row] = res.rows
    assert row.verdict == "conflict" and "binary" in row.note, row
