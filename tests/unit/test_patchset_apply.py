"""Strict apply: zero fuzz, zero offset, already-applied vs reversed, paths, staging."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.errors import ApplyError
from patchbake.patchset.apply import apply_patch
from patchbake.patchset.diffparse import parse_patch
from patchbake.patchset.filelist import parse_filelist
from patchbake.patchset.strict import apply_in_memory, apply_to_dir
from patchbake.patchset.treeio import TreeReader

PATCH = parse_patch(fx.patch_bytes(), "canonical.patch")
FILES = parse_filelist(fx.files_bytes())


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_apply_to_dir_writes_verified_tree(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    applied = apply_to_dir(PATCH, fx.PRISTINE, dest, filelist=FILES)
    assert not (dest / "pkg" / "gone.py").exists()
    assert (dest / "pkg" / "new.py").read_text().startswith("NEW = 1")
    assert os.stat(dest / "pkg" / "sub" / "run.sh").st_mode & 0o100
    assert (dest / "pkg" / "sub" / "nonl.txt").read_bytes() == b"alpha\nBETA\ngamma"
    for e in FILES.entries:
        if e.sha256:
            assert _sha(dest / e.path) == e.sha256 == applied.files[e.path]
    assert applied.deleted == {"pkg/gone.py"}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging left behind


def test_apply_into_empty_dir_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    apply_to_dir(PATCH, fx.PRISTINE, tmp_path / "out", filelist=FILES)
    assert (tmp_path / "out" / "pkg" / "new.py").exists()


def test_non_empty_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(ApplyError, match="is not empty") as exc:
        apply_to_dir(PATCH, fx.PRISTINE, tmp_path / "out")
    assert exc.value.exit_code == 22


def test_offset_is_refused_and_named(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    core = tree / "pkg" / "core.py"
    core.write_text("# one line more\n" + core.read_text())
    with pytest.raises(ApplyError, match=r"does not match at line 11.*offset \+1") as exc:
        apply_patch(PATCH, TreeReader(tree), pristine=True)
    assert exc.value.reason == "context"  # type: ignore[attr-defined]


def test_changed_context_is_refused_without_fuzz(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    core = tree / "pkg" / "core.py"
    core.write_text(core.read_text().replace("def f4(x):", "def f4(y):"))
    with pytest.raises(ApplyError, match=r"hunk 1 of pkg/core.py .* expected 'def f4\(x\):'"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_already_applied_tree(tmp_path: Path) -> None:
    dest = tmp_path / "applied"
    apply_to_dir(PATCH, fx.PRISTINE, dest)
    with pytest.raises(ApplyError, match="already applied") as exc:
        apply_patch(PATCH, TreeReader(dest), pristine=False)
    assert exc.value.reason == "already-applied"  # type: ignore[attr-defined]


def test_reversed_patch_on_pristine(tmp_path: Path) -> None:
    """A patch exported backwards (patched -> pristine) finds its post-image upstream."""
    dest = tmp_path / "applied"
    apply_to_dir(PATCH, fx.PRISTINE, dest)
    with pytest.raises(ApplyError, match="the patch is reversed") as exc:
        apply_patch(PATCH, TreeReader(dest), pristine=True)
    assert exc.value.reason == "reversed"  # type: ignore[attr-defined]


def test_partly_applied(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "gone.py").unlink()
    with pytest.raises(ApplyError, match=r"partly applied \(pkg/gone.py\)"):
        apply_patch(PATCH, TreeReader(tree), pristine=False)


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    outside = tmp_path / "outside"
    (tree / "pkg" / "sub").rename(outside)
    (tree / "pkg" / "sub").symlink_to(outside)
    with pytest.raises(ApplyError, match="pkg/sub is a symbolic link") as exc:
        apply_patch(PATCH, TreeReader(tree), pristine=True)
    assert exc.value.reason == "path"  # type: ignore[attr-defined]


def test_symlinked_file_is_refused(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "core.py").unlink()
    (tree / "pkg" / "core.py").symlink_to(fx.PRISTINE / "pkg" / "core.py")
    with pytest.raises(ApplyError, match="pkg/core.py is a symbolic link"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_new_file_that_exists_differently(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "new.py").write_text("something else\n")
    with pytest.raises(ApplyError, match="new file in the patch but already exists"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_modified_file_missing(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "core.py").unlink()
    with pytest.raises(ApplyError, match="pkg/core.py is not in the tree"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_change_outside_hunks_is_refused(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    core = tree / "pkg" / "core.py"
    core.write_text(core.read_text().replace("return x + 39", "return x + 38"))
    with pytest.raises(ApplyError, match="not the file the patch was made against"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_wrong_mode_is_refused(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "core.py").chmod(0o755)
    with pytest.raises(ApplyError, match="has mode 100755, the patch expects 100644"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_binary_patch_on_other_base_is_refused(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "sub" / "data.bin").write_bytes(b"\0" * 10)
    with pytest.raises(ApplyError, match="data.bin"):
        apply_patch(PATCH, TreeReader(tree), pristine=True)


def test_filelist_hash_disagreement_is_refused() -> None:
    bad = parse_filelist(fx.files_bytes().replace(b"07426f9c", b"17426f9c"))
    with pytest.raises(ApplyError, match="post-image of pkg/core.py hashes to") as exc:
        apply_in_memory(PATCH, fx.PRISTINE, filelist=bad)
    assert exc.value.exit_code == 22


def test_dropped_hunk_fails_index_check() -> None:
    tampered = parse_patch(fx.drop_hunk(fx.patch_bytes(), "pkg/core.py", 1))
    with pytest.raises(ApplyError, match="index line records"):
        apply_in_memory(tampered, fx.PRISTINE)


def test_changed_new_start_is_refused() -> None:
    tampered = parse_patch(fx.patch_bytes().replace(b"@@ -119,7 +120,7 @@",
                                                    b"@@ -119,7 +121,7 @@"))
    with pytest.raises(ApplyError, match="records new line 121"):
        apply_in_memory(tampered, fx.PRISTINE)


def test_symlink_in_patch_is_refused() -> None:
    data = (b"diff --git a/link b/link\nnew file mode 120000\nindex " + b"0" * 40 + b".." +
            b"1" * 40 + b"\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n"
            b"\\ No newline at end of file\n")
    with pytest.raises(ApplyError, match="symbolic links and submodules are not patched"):
        apply_patch(parse_patch(data), TreeReader(fx.PRISTINE), pristine=True)


def _section(pre: bytes, post: bytes) -> bytes:
    """A git-style section whose hunks come from difflib (same range format as git)."""
    import difflib

    from patchbake.patchset.gitbinary import blob_id

    body = difflib.unified_diff(pre.decode().splitlines(True), post.decode().splitlines(True),
                                n=3)
    hunks = "".join(list(body)[2:]).encode()
    return (b"diff --git a/f.txt b/f.txt\nindex %s..%s 100644\n--- a/f.txt\n+++ b/f.txt\n"
            % (blob_id(pre).encode(), blob_id(post).encode())) + hunks


def test_random_edits_apply_exactly(tmp_path: Path) -> None:
    """Property: for random line edits, parse + strict apply reproduces the post-image,
    and the same patch on the post-image is reported as already applied."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "def f():\n", "  x\n"]),
                     max_size=40)

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(pre=lines, post=lines)
    def prop(pre: list[str], post: list[str]) -> None:
        a, b = "".join(pre).encode(), "".join(post).encode()
        if a == b:
            return
        patch = parse_patch(_section(a, b))
        got = apply_patch(patch, lambda p: (a, "100644"), pristine=True)
        assert got["f.txt"].post == b
        with pytest.raises(ApplyError):
            apply_patch(patch, lambda p: (b, "100644"), pristine=False)

    prop()
