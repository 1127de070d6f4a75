"""The lost-line guard: tamper with the fixture's patch or FILES.txt, see the right message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.digest import Digest
from patchbake.patchset import guard as guard_mod
from patchbake.patchset import reexport as reexport_mod
from patchbake.patchset.diffparse import parse_patch
from patchbake.patchset.guard import Report, check

PIN = "fixture==1.0 sha256:" + "0" * 64


def run(patch: bytes | None = None, files: bytes | None = b"default", *, tree: bool = True,
        **kw: object) -> Report:
    return check(fx.patch_bytes() if patch is None else patch,
                 fx.files_bytes() if files == b"default" else files,
                 patch_name="canonical.patch", pristine_root=fx.PRISTINE if tree else None,
                 pin=PIN, reexport=False, **kw)  # type: ignore[arg-type]


def kinds(r: Report) -> list[str]:
    return [p.kind for p in r.problems]


def messages(r: Report) -> str:
    return "\n".join(p.message for p in r.problems)


def test_clean_fixture_passes() -> None:
    r = run()
    assert r.ok and r.applied and r.problems == ()
    assert (r.files, r.added, r.removed) == (6, 9, 4)
    assert set(r.as_json()) == {"ok", "files", "added", "removed", "patch_sha256", "problems"}
    json.dumps(r.as_json())


def test_drop_a_hunk() -> None:
    r = run(fx.drop_hunk(fx.patch_bytes(), "pkg/core.py", 1))
    assert not r.ok
    assert "pkg/core.py: work was dropped by a regeneration: FILES.txt records M +3 -2, " \
           "the patch has M +2 -1 (a hunk or lines are missing)" in messages(r)
    assert "hash" in kinds(r)  # the applied post-image no longer matches either


def test_drop_a_file() -> None:
    r = run(fx.drop_section(fx.patch_bytes(), "pkg/new.py"))
    assert "dropped" in kinds(r)
    assert "pkg/new.py: work was dropped by a regeneration: FILES.txt records it (A +5 -0) " \
           "but the patch no longer touches it" in messages(r)


def test_new_work_not_recorded() -> None:
    files = b"".join(ln for ln in fx.files_bytes().splitlines(keepends=True)
                     if not ln.startswith(b"pkg/new.py"))
    r = run(files=files)
    assert kinds(r) == ["unrecorded"]
    assert "pkg/new.py: new work not recorded" in messages(r)
    assert "run `patchbake patch export`" in messages(r)


def test_change_a_count_in_files_txt() -> None:
    r = run(files=fx.files_bytes().replace(b"pkg/core.py  M  +3  -2", b"pkg/core.py  M  +4  -1"))
    assert kinds(r) == ["count"]
    assert "pkg/core.py: counts disagree: the patch has M +3 -2, FILES.txt records M +4 -1" \
        in messages(r)


def test_change_a_count_in_the_patch() -> None:
    r = run(fx.patch_bytes().replace(b"@@ -11,7 +11,8 @@", b"@@ -11,7 +11,9 @@"))
    assert {"stale-files", "parse"} <= set(kinds(r))
    assert "ends early" in messages(r) or "count was changed" in messages(r)


def test_swap_two_files_sections() -> None:
    r = run(fx.swap_sections(fx.patch_bytes(), 0, 2))
    assert "order" in kinds(r)
    assert "file sections are not in canonical order (pkg/new.py comes before " \
           "pkg/gone.py): the patch was edited by hand" in messages(r)


def test_crlf_mangled() -> None:
    r = run(fx.patch_bytes().replace(b"\n", b"\r\n"))
    assert "crlf" in kinds(r)
    assert "lines end in CRLF" in messages(r)
    assert "dropped" not in kinds(r)  # the sections are all there, only mangled


def test_truncated() -> None:
    data = fx.patch_bytes()
    r = run(data[: len(data) // 2])
    assert not r.ok
    assert "final-newline" in kinds(r) or "parse" in kinds(r)
    assert "truncated" in messages(r)
    # What the truncation cut off is named, although the patch no longer parses.
    assert "pkg/sub/run.sh: work was dropped by a regeneration: FILES.txt records it but " \
           "the patch has no section for it" in messages(r)
    assert "pkg/core.py: work was dropped" not in messages(r)


def test_truncated_at_a_section_boundary() -> None:
    secs = fx.sections(fx.patch_bytes())
    r = run(b"".join(secs[:3]))
    assert kinds(r).count("dropped") == 3
    assert "pkg/sub/data.bin: work was dropped by a regeneration" in messages(r)


def test_post_image_hash_mismatch() -> None:
    r = run(files=fx.files_bytes().replace(b"07426f9c", b"17426f9c"))
    assert kinds(r) == ["hash"]
    assert "pkg/core.py: post-image hash mismatch: applying the patch gives 07426f9c" \
        in messages(r)


def test_does_not_apply_strictly(tmp_path: Path) -> None:
    tree = fx.pristine_copy(tmp_path / "t")
    (tree / "pkg" / "core.py").write_text("x = 1\n" + (tree / "pkg" / "core.py").read_text())
    r = check(fx.patch_bytes(), fx.files_bytes(), pristine_root=tree, pin=PIN, reexport=False)
    assert kinds(r) == ["apply"]
    assert "pkg/core.py" in messages(r) and "does not apply strictly" in messages(r)


def test_whitespace_errors() -> None:
    data = fx.patch_bytes().replace(b"+    # three is special\n", b"+    # three is special \n")
    r = run(data, tree=False)
    assert "whitespace" in kinds(r)
    assert "pkg/core.py: whitespace error in the hunk at patch line 5: an added line has " \
           "trailing whitespace" in messages(r)
    data = fx.patch_bytes().replace(b"+    # three is special\n", b"+ \t  # three is special\n")
    assert "space before a tab" in messages(run(data, tree=False))


def test_stale_files_and_source_record() -> None:
    data = fx.patch_bytes().replace(b"+    return x + 30  # thirty\n",
                                    b"+    return x + 30  # 30\n")
    r = run(data, tree=False, source_patch_sha256="c" * 64)
    assert kinds(r) == ["stale-files", "source"]
    assert "FILES.txt was written for another patch" in messages(r)
    assert "SOURCE records patch sha256 cccccccccccccccc" in messages(r)


def test_files_missing_and_other_pin() -> None:
    r = run(files=None, tree=False)
    assert kinds(r) == ["files-missing"]
    r = check(fx.patch_bytes(), fx.files_bytes(), pin="other==2", reexport=False)
    assert kinds(r) == ["upstream"] and "generated against fixture==1.0" in messages(r)


def test_legacy_files_compares_paths_only() -> None:
    legacy = b"".join(ln.split(b"  ")[0] + b"\n" for ln in fx.files_bytes().splitlines()
                      if not ln.startswith(b"#"))
    assert run(files=legacy).ok
    r = run(files=legacy.replace(b"pkg/new.py\n", b""))
    assert kinds(r) == ["unrecorded"]


def test_reexport_difference_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoGit:  # the re-export's interface, without git (unit tests start no process)
        def __init__(self, **kw: object) -> None:
            self.added: list[object] = []

        def __enter__(self) -> NoGit:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def expect(self, files: int) -> None:
            pass

        def add(self, outcome: object) -> None:
            self.added.append(outcome)

        def start(self) -> None:
            pass

        def result(self) -> bytes:
            assert len(self.added) == len(parse_patch(fx.patch_bytes()).files)  # each one
            return fx.patch_bytes().replace(b"@@ -11,7 +11,8 @@ def f2(x):", b"@@ -11,7 +11,8 @@")

    monkeypatch.setattr(guard_mod, "Reexport", NoGit)
    r = check(fx.patch_bytes(), fx.files_bytes(), pristine_root=fx.PRISTINE, pin=PIN)
    assert kinds(r) == ["reexport"]
    assert "re-export from the applied tree differs from the committed patch at line 5" \
        in messages(r)


def test_reexport_without_git_is_a_reported_problem(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """No git on PATH: the other checks still run, and the re-export says why it failed
    (no process is started: the tool is looked up first)."""
    from patchbake.patchset.gitcmd import memory_tmp

    scratch = memory_tmp()
    before = set(scratch.glob("patchbake-reexport.*"))
    monkeypatch.setenv("PATH", str(tmp_path))
    r = check(fx.patch_bytes(), fx.files_bytes(), pristine_root=fx.PRISTINE, pin=PIN)
    assert kinds(r) == ["reexport"]
    assert "re-export failed: 'git' is not installed" in messages(r)
    assert set(scratch.glob("patchbake-reexport.*")) <= before  # nothing left behind


A, B, C, D = ("a" * 40 + " " + "b" * 40 + "\n").encode(), ("c" * 40 + " " + "d" * 40 + "\n").encode(), \
    ("e" * 40 + " " + "f" * 40 + "\n").encode(), b"diff --git a/x b/x\n+1\n"


@pytest.mark.parametrize(("data", "pairs", "want"), [
    (A + D, [A], D),
    (A + D + B + D + C + D, [A, B, C], D * 3),
    (A + B + D + C, [A, B, C], D),  # a batch whose diff is empty
    (A, [A], b""),
    (D + A + D, [A], None),  # something before the first echo
    (A + D + C + D, [A, B, C], None),  # git skipped the second batch
    (A + D + B + D, [A, B, C], None),  # ... or the last
    (A + D, [A, B], None),
    (b"", [A], None),
])
def test_strip_echoes(data: bytes, pairs: list[bytes], want: bytes | None) -> None:
    from patchbake.errors import ProcessError

    if want is None:
        with pytest.raises(ProcessError, match="git diff-tree skipped the re-export's batch"):
            reexport_mod.strip_echoes(data, pairs)
    else:
        assert reexport_mod.strip_echoes(data, pairs) == want


def test_source_recorded_against_another_tree() -> None:
    r = run(tree=False, source_tree_digest="sha256:" + "1" * 64,
            tree_digest="sha256:" + "2" * 64)
    assert kinds(r) == ["upstream"]
    assert "SOURCE was exported against the tree sha256:1111" in messages(r)


def test_check_lineage_reads_the_committed_files(tmp_path: Path) -> None:
    """The CLI's `patch check` and the main job share this; a missing patch is an error."""
    from types import SimpleNamespace

    from patchbake.errors import GuardError
    from patchbake.patchset.guard import check_lineage

    (tmp_path / "p.patch").write_bytes(fx.patch_bytes())
    (tmp_path / "FILES.txt").write_bytes(fx.files_bytes())
    lin = SimpleNamespace(patch=tmp_path / "p.patch", files=tmp_path / "FILES.txt",
                          source_record=tmp_path / "SOURCE",
                          upstream=SimpleNamespace(pin=PIN))
    r = check_lineage(lin, pristine_root=fx.PRISTINE, reexport=False)
    assert r.ok and r.applied and r.files == 6
    (tmp_path / "SOURCE").write_text(json.dumps({
        "format": "patchbake-source 1", "patch_sha256": r.patch_sha256,
        "tree_digest": "sha256:" + "1" * 64}))
    r = check_lineage(lin, tree_digest=Digest.from_hex("2" * 64))
    assert [p.kind for p in r.problems] == ["upstream"]
    (tmp_path / "p.patch").unlink()
    with pytest.raises(GuardError, match="p.patch does not exist") as exc:
        check_lineage(lin)
    assert exc.value.exit_code == 21

