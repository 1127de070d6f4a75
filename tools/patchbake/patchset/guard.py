"""The lost-line guard: patch <=> FILES.txt <=> what the patch does to the pinned tree.

Standard library only: ``tools/check_patch_files.py`` runs this from a bare checkout.
Every disagreement is a :class:`Problem` with a ``kind`` that says which case it is;
the checks keep going after a problem so one run shows everything.
"""

from __future__ import annotations

import hashlib
import re
from functools import partial
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..digest import Digest, differing
from ..errors import (ApplyError, ExportError, GuardError, PatchbakeError, PatchError,
                      ToolMissingError)
from ..fsutil import read_input, read_optional
from .apply import Outcome, _AlreadyThere, apply_file
from .diffparse import Patch, parse_patch
from .filelist import FileList, parse_filelist, sort_key
from .paths import cunquote, to_str
from .reexport import Reexport, first_difference
from .sourcerec import read_source
from .treeio import TreeReader

EXPORT = "run `patchbake patch export`"
PRIORITY = ("crlf", "final-newline", "parse", "dropped", "unrecorded", "count", "hash", "apply",
            "order", "reexport", "files-missing", "files-format", "stale-files", "source",
            "upstream", "whitespace")


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    path: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Report:
    """What the guard found."""

    ok: bool
    files: int
    added: int
    removed: int
    patch_sha256: str
    problems: tuple[Problem, ...] = ()
    applied: bool = False  # the three-way part ran (a pristine tree was available)
    # a check could not run because this machine lacks a program: the cause a command
    # reports (exit 4) before any disagreement the guard found
    tool_missing: ToolMissingError | None = None

    def raise_for_problems(self, error: Callable[[str], PatchbakeError]) -> None:
        """Raise the missing tool, else ``error`` (given the summary line) if not ok."""
        if self.tool_missing is not None:
            raise self.tool_missing
        if self.problems:
            first = self.problems[0]
            raise error(f"{len(self.problems)} problem(s); first: {first.message}")

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "files": self.files, "added": self.added,
                "removed": self.removed, "patch_sha256": self.patch_sha256,
                "problems": [asdict(p) for p in self.problems]}


@dataclass(slots=True)
class _Run:
    problems: list[Problem] = field(default_factory=list)
    tool_missing: ToolMissingError | None = None

    def add(self, kind: str, path: str | None, message: str) -> None:
        self.problems.append(Problem(kind, path, message))


def _scan_raw(data: bytes, name: str, run: _Run) -> None:
    if not data:
        return
    if b"\r\n" in data[:4096] and data.split(b"\n", 1)[0].endswith(b"\r"):
        run.add("crlf", None, f"{name}: lines end in CRLF: the patch was converted by an "
                "editor or a transfer (git writes LF); restore it or " + EXPORT)
    if not data.endswith(b"\n"):
        run.add("final-newline", None, f"{name}: the patch lacks a final newline "
                "(truncated or edited?); " + EXPORT)


_WS_TRAIL = re.compile(rb"[ \t\r]+\n?$")


# Any added line that _whitespace would flag matches this (a line ending in a blank, or
# an indentation holding a space before a tab); most hunks match nothing, and one regex
# scan of their joined lines replaces a Python loop over every line.
_WS_ANY = re.compile(rb"[ \t\r]$|^[ \t]* \t", re.MULTILINE)


# What every whitespace error leaves in the patch text, on the added line's own patch
# line: a blank before a newline (the body ends in one), or a space before a tab.
_WS_MARKS = (b" \n", b"\t\n", b"\r\n", b" \t")


def _may_have_whitespace_errors(data: bytes) -> bool:
    """False only when no patch line starting with '+' holds one of ``_WS_MARKS``: then
    no added line has an error. Substring searches over the whole patch, so a clean
    patch costs a few passes of ``bytes.find`` instead of a look at every added line;
    any hit on a '+' line (a '+++' header line too) leaves the verdict to the hunks."""
    for mark in _WS_MARKS:
        at = data.find(mark)
        while at >= 0:
            if data[data.rfind(b"\n", 0, at) + 1] == 43:  # the hit's line starts with '+'
                return True
            at = data.find(mark, at + 1)
    return False


def _whitespace(patch: Patch, run: _Run) -> None:
    if _may_have_whitespace_errors(patch.data):
        _whitespace_in_hunks(patch, run)


def _whitespace_in_hunks(patch: Patch, run: _Run) -> None:
    for fp in patch.files:
        if fp.binary:
            continue
        for h in fp.hunks:
            if not _WS_ANY.search(b"".join(h.added_lines)):
                continue
            for line in h.added_lines:
                body = line[:-1] if line.endswith(b"\n") else line
                what = None
                if body and _WS_TRAIL.search(body):
                    what = "trailing whitespace" if not body.endswith(b"\r") else \
                        "a carriage return (CRLF)"
                else:
                    indent = body[:len(body) - len(body.lstrip(b" \t"))]
                    if b" \t" in indent:
                        what = "a space before a tab in the indentation"
                if what:
                    run.add("whitespace", fp.path, f"{fp.path}: whitespace error in the hunk "
                            f"at patch line {h.line_no}: an added line has {what}: "
                            f"{body.decode('utf-8', 'replace')[:60]!r}")
                    break


def _blank_at_eof(outcomes: dict[str, Outcome], run: _Run) -> None:
    def trailing_blanks(data: bytes | None) -> int:
        """Whitespace-only lines at the end (none unless it ends in a newline). Only the
        tail is looked at: the text after the last non-whitespace byte holds the rest of
        that line (up to its newline), then one newline per blank line."""
        if not data or not data.endswith(b"\n"):
            return 0
        body = data.rstrip(b" \t\n\r\x0b\x0c")  # what bytes.strip() calls whitespace
        tail = data.count(b"\n", len(body))
        return tail if not body else tail - 1

    for p, o in outcomes.items():
        if o.post is not None and b"\0" not in o.post[:8000] \
                and trailing_blanks(o.post) > trailing_blanks(o.pre):
            run.add("whitespace", p, f"{p}: whitespace error: the patch adds blank lines at "
                    "the end of the file")


_SECTION = re.compile(rb"^diff --git (?:a/(.+?) b/\1|(\".*?\") \".*\")$", re.MULTILINE)


def _paths_of_unparsable(data: bytes) -> set[str]:
    """Paths of the sections an unparsable patch still has (to name what is missing)."""
    found = set()
    for m in _SECTION.finditer(data.replace(b"\r\n", b"\n")):
        if m.group(1) is not None:
            found.add(to_str(m.group(1)))
        else:
            try:
                found.add(to_str(cunquote(m.group(2))[0][2:]))
            except ValueError:
                continue
    return found


def _compare_paths(have: set[str], fl: FileList, run: _Run) -> None:
    for p in sorted(set(fl.by_path()) - have, key=sort_key):
        run.add("dropped", p, f"{p}: work was dropped by a regeneration: FILES.txt records "
                "it but the patch has no section for it")
    for p in sorted(have - set(fl.by_path()), key=sort_key):
        run.add("unrecorded", p, f"{p}: new work not recorded: the patch touches it but "
                "FILES.txt does not list it; " + EXPORT)


def _compare(patch: Patch, fl: FileList, run: _Run) -> None:
    have = patch.by_path()
    want = fl.by_path()
    for p in sorted(set(want) - set(have), key=sort_key):
        e = want[p]
        rec = "" if fl.legacy else f" ({e.status} +{e.added} -{e.removed})"
        run.add("dropped", p, f"{p}: work was dropped by a regeneration: FILES.txt records "
                f"it{rec} but the patch no longer touches it; restore the change in the "
                "workspace, or if the drop is intended, " + EXPORT + " and review FILES.txt")
    for p in sorted(set(have) - set(want), key=sort_key):
        run.add("unrecorded", p, f"{p}: new work not recorded: the patch touches it but "
                "FILES.txt does not list it; " + EXPORT)
    if fl.legacy:
        return
    for p in sorted(set(have) & set(want), key=sort_key):
        f, e = have[p], want[p]
        got = f"{f.status} +{f.added} -{f.removed}"
        rec = f"{e.status} +{e.added} -{e.removed}"
        if got == rec:
            continue
        assert e.added is not None and e.removed is not None
        if f.status == e.status and f.added <= e.added and f.removed <= e.removed:
            run.add("dropped", p, f"{p}: work was dropped by a regeneration: FILES.txt "
                    f"records {rec}, the patch has {got} (a hunk or lines are missing)")
        elif f.status == e.status and f.added >= e.added and f.removed >= e.removed:
            run.add("unrecorded", p, f"{p}: new work not recorded: the patch has {got}, "
                    f"FILES.txt records {rec}; " + EXPORT)
        else:
            run.add("count", p, f"{p}: counts disagree: the patch has {got}, FILES.txt "
                    f"records {rec}; " + EXPORT)


def _headers(fl: FileList, patch_sha: str, pin: str | None, run: _Run) -> None:
    rec = fl.header.get("patch-sha256")
    if rec and rec != patch_sha:
        was, now = differing(rec, patch_sha, 16)
        run.add("stale-files", None, f"FILES.txt was written for another patch (patch-sha256 "
                f"{was}..., the patch is {now}...): the patch was changed "
                "without regenerating FILES.txt; " + EXPORT)
    up = fl.header.get("upstream")
    if pin and up and up != pin:
        run.add("upstream", None, f"FILES.txt was generated against {up}, the pipeline pins "
                f"{pin}; regenerate the patch for this pin")


def _apply(patch: Patch, root: Path, run: _Run,
           sink: Callable[[Outcome], None] | None = None) -> dict[str, Outcome]:
    """Apply every section; ``sink`` gets each outcome until a section fails."""
    reader = TreeReader(root)
    outcomes: dict[str, Outcome] = {}
    for fp in patch.files:
        try:
            outcomes[fp.path] = o = apply_file(fp, reader(fp.path))
        except _AlreadyThere:
            sink = None
            run.add("apply", fp.path, f"{fp.path}: the patch is reversed here: the pinned "
                    "upstream already holds its post-image")
        except ApplyError as exc:
            sink = None
            kind = "hash" if exc.reason == "hash" else "apply"
            prefix = "" if kind == "hash" else "does not apply strictly: "
            run.add(kind, fp.path, prefix + exc.one_line())
        else:
            if sink is not None:
                sink(o)
    return outcomes


def _post_hashes(fl: FileList | None, outcomes: dict[str, Outcome], run: _Run) -> None:
    if fl is not None and not fl.legacy:
        want = fl.by_path()
        for p, o in outcomes.items():
            e = want.get(p)
            got = hashlib.sha256(o.post).hexdigest() if o.post is not None else None
            if e is not None and e.sha256 != got:
                run.add("hash", p, f"{p}: post-image hash mismatch: applying the patch gives "
                        f"{got or 'deleted'}, FILES.txt records {e.sha256 or 'deleted'}")


def _content_checks(patch: Patch, fl: FileList | None, outcomes: dict[str, Outcome] | None,
                    run: _Run) -> None:
    """The checks that need only Python: post-image hashes, whitespace, blank lines."""
    if outcomes is not None:
        _post_hashes(fl, outcomes, run)
    _whitespace(patch, run)
    if outcomes is not None:
        _blank_at_eof(outcomes, run)


def _three_way(patch: Patch, fl: FileList | None, root: Path, reexport: bool, ordered: bool,
               run: _Run) -> None:
    """Apply, and re-export through git while the applier and the Python-only checks run.

    The re-export is fed each outcome as it is applied (see :class:`reexport.Reexport`):
    one git process, started with the first outcome, diffs one batch of files while the
    next is applied, and the last while the checks run. Problems come in the order the
    steps would give one after the other: the apply's, the checks', then the
    re-export's (and are then sorted by kind, stably).
    """
    if not reexport:
        _content_checks(patch, fl, _apply(patch, root, run), run)
        return
    with Reexport(batches=ordered) as rx:
        rx.expect(len(patch.files))
        outcomes = _apply(patch, root, run, rx.add)
        if len(outcomes) != len(patch.files):  # nothing to compare: no diff is started
            _content_checks(patch, fl, outcomes, run)
            return
        rx.start()
        _content_checks(patch, fl, outcomes, run)
        _reexport(patch, rx, run)


def _reexport(patch: Patch, rx: Reexport, run: _Run) -> None:
    try:
        fresh = rx.result()
    except PatchbakeError as exc:
        if isinstance(exc, ToolMissingError):
            run.tool_missing = exc
        run.add("reexport", None, f"re-export failed: {exc.one_line()}")
        return
    if fresh != patch.data:
        line, want, got = first_difference(fresh, patch.data)
        run.add("reexport", None, f"re-export from the applied tree differs from the committed "
                f"patch at line {line}: git writes {want}, the patch has {got} (hand-edited, "
                "or exported with other settings); " + EXPORT)


def check(  # noqa: C901 - every guard check in order, gathered into one report
        patch_bytes: bytes, files_bytes: bytes | None, *, patch_name: str = "patch",
        pristine_root: Path | None = None, pin: str | None = None,
        source_patch_sha256: str | None = None, reexport: bool = True,
        source_tree_digest: str | None = None, tree_digest: Digest | None = None) -> Report:
    """Run every check; the report's ``ok`` is False when any problem was found."""
    run = _Run()
    sha = hashlib.sha256(patch_bytes).hexdigest()
    _scan_raw(patch_bytes, patch_name, run)
    patch: Patch | None = None
    if not any(p.kind == "crlf" for p in run.problems):
        try:
            patch = parse_patch(patch_bytes if patch_bytes.endswith(b"\n") or not patch_bytes
                                else patch_bytes + b"\n", patch_name)
        except PatchError as exc:
            run.add("parse", None, exc.one_line())
    fl: FileList | None = None
    if files_bytes is None:
        run.add("files-missing", None, "FILES.txt is missing; " + EXPORT + " and commit it "
                "with the patch")
    else:
        try:
            fl = parse_filelist(files_bytes)
        except PatchbakeError as exc:
            run.add("files-format", None, exc.one_line())
    if fl is not None:
        _headers(fl, sha, pin, run)
    if source_patch_sha256 and source_patch_sha256 != sha:
        was, now = differing(source_patch_sha256, sha, 16)
        run.add("source", None, f"SOURCE records patch sha256 {was}..., "
                f"the patch is {now}...: it was changed without `patchbake patch export`")
    if source_tree_digest and tree_digest and source_tree_digest != str(tree_digest):
        run.add("upstream", None, f"SOURCE was exported against the tree {source_tree_digest}, "
                f"the pinned upstream is {tree_digest}; regenerate the patch for this pin")
    applied = False
    if patch is None and fl is not None and patch_bytes:
        _compare_paths(_paths_of_unparsable(patch_bytes), fl, run)
    if patch is not None:
        keys = [sort_key(f.path) for f in patch.files]
        ordered = keys == sorted(keys) and len(set(keys)) == len(keys)
        if not ordered:
            bad = next(i for i in range(1, len(keys)) if keys[i] <= keys[i - 1])
            run.add("order", patch.files[bad].path, f"file sections are not in canonical "
                    f"order ({patch.files[bad - 1].path} comes before "
                    f"{patch.files[bad].path}): the patch was edited by hand; " + EXPORT)
        if fl is not None:
            _compare(patch, fl, run)
        if pristine_root is not None:
            applied = True
            _three_way(patch, fl, pristine_root, reexport, ordered, run)
        else:
            _content_checks(patch, fl, None, run)
    # Most specific first: the one-line error the CLI prints names the first problem.
    run.problems.sort(key=lambda p: PRIORITY.index(p.kind) if p.kind in PRIORITY else 99)
    files = len(patch.files) if patch else len(fl.entries) if fl else 0
    added = patch.added if patch else 0
    removed = patch.removed if patch else 0
    return Report(not run.problems, files, added, removed, sha, tuple(run.problems), applied,
                  run.tool_missing)


def check_lineage(lineage: Any, *, pristine_root: Path | None = None,
                  tree_digest: Digest | None = None, reexport: bool = True) -> Report:
    """:func:`check` on a lineage's committed files (patch, FILES.txt, SOURCE).

    ``pristine_root`` and ``tree_digest`` come from fetching the lineage's pin (the
    caller fetches, so this module stays standard-library only); without them only the
    patch <=> FILES.txt part runs. A missing patch is an error, not a report.
    """
    data = read_input(lineage.patch, "patch", GuardError, missing=partial(
        GuardError, hint="make it with `patchbake patch workspace` and `patchbake patch export`"))
    files = read_optional(lineage.files, "file list", GuardError)
    try:
        src = read_source(lineage.source_record)
    except ExportError as exc:  # to the guard a bad SOURCE is a disagreement like any other
        raise GuardError(exc.message, hint=exc.hint) from None
    except OSError as exc:
        raise GuardError(f"{lineage.source_record} cannot be read: {exc.strerror}") from None
    return check(data, files, patch_name=lineage.patch.name, pristine_root=pristine_root,
                 pin=lineage.upstream.pin,
                 source_patch_sha256=src.patch_sha256 if src else None, reexport=reexport,
                 source_tree_digest=src.tree_digest if src else None,
                 tree_digest=tree_digest)
