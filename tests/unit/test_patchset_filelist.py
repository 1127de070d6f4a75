"""FILES.txt: format 2 round trip, the legacy form, and refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "patchset"))
import fx
from patchbake.errors import GuardError
from patchbake.patchset.filelist import Entry, parse_filelist, render

SHA = "a" * 64


def _render(entries: list[Entry]) -> bytes:
    return render(entries, generator="patchbake 0", upstream="x==1 sha256:" + "0" * 64,
                  patch_name="p.patch", patch_sha256="b" * 64)


def test_fixture_parses_sorted_with_header() -> None:
    fl = parse_filelist(fx.files_bytes())
    assert not fl.legacy
    assert fl.header["patch"] == "canonical.patch"
    assert [e.path for e in fl.entries][:2] == ["pkg/core.py", "pkg/gone.py"]
    gone = fl.by_path()["pkg/gone.py"]
    assert (gone.status, gone.added, gone.removed, gone.sha256) == ("D", 0, 1, None)


def test_round_trip_sorts_bytewise_and_quotes() -> None:
    entries = [Entry("b/z.py", "M", 1, 2, SHA), Entry("b-a.py", "A", 3, 0, SHA),
               Entry("ü.py", "D", 0, 4, None), Entry("has  two spaces", "M", 0, 0, SHA)]
    data = _render(entries)
    fl = parse_filelist(data)
    assert [e.path for e in fl.entries] == ["b-a.py", "b/z.py", "has  two spaces", "ü.py"]
    assert fl.by_path()["ü.py"] == Entry("ü.py", "D", 0, 4, None)
    assert b'"\\303\\274.py"  D  +0  -4  -' in data
    assert b"# totals: 4 files +4 -6" in data


def test_legacy_one_path_per_line() -> None:
    fl = parse_filelist(b"# old style\nvllm/b.py\nvllm/a.py\n\n")
    assert fl.legacy and [e.path for e in fl.entries] == ["vllm/b.py", "vllm/a.py"]
    assert fl.entries[0].sha256 is None


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.replace(b"pkg/core.py  M", b"pkg/zzz.py  M"), "not sorted bytewise"),
    (lambda d: d + d.splitlines(keepends=True)[-1], "listed twice"),
    (lambda d: d.replace(b"  +3  -2", b"  3  -2"), "expected 'path  status"),
    (lambda d: d.replace(b"pkg/new.py  A", b"pkg/new.py  X"), "expected 'path  status"),
    (lambda d: d.replace(b"patchbake-files 2", b"patchbake-files 9"), "unknown format"),
    (lambda d: d.replace(b"\n", b"\r\n"), "CRLF"),
])
def test_refusals(mutate: object, message: str) -> None:
    with pytest.raises(GuardError, match=message) as exc:
        parse_filelist(mutate(fx.files_bytes()))  # type: ignore[operator]
    assert exc.value.exit_code == 21
