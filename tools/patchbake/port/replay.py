"""``patchbake port``: replay a lineage's canonical patch onto a newer upstream pin.

Every hunk gets one verdict (see :mod:`hunkmatch` and :mod:`portfile`): clean, moved,
absorbed, merged, conflict or target-gone. The result lands in a workspace made at the
NEW pristine tree (``patch workspace`` of the new lineage: its first commit is the new
pristine upstream), so the maintainer resolves what is left and exports the new
lineage with ``patchbake --lineage NEW patch export``. Port never writes a canonical
patch, and nothing of the old lineage.

When nothing needs a hand (no conflict, no target gone) the ported tree is committed;
otherwise it is left uncommitted, with conflict markers in the files, for the
maintainer to resolve and commit. The report (JSON and markdown) and the file sections
of vanished targets are kept in the workspace's ``.git/patchbake-port/``.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import PortError
from ..fsutil import atomic_write
from ..store import Store
from ..patchset.diffparse import Patch
from ..patchset.gitcmd import git
from .hunkmatch import CONFLICT, GONE, VERDICTS
from ..patchset.paths import to_bytes
from ..patchset.patched import read_lineage_patch
from .file import KEEP, FileResult, HunkVerdict, port_file
from ..patchset.renames import list_files, rename_candidates
from ..patchset.treeio import TreeReader
from ..patchset.workspace import commit_all, create_workspace
from ..sources import fetch

REPORT_DIR = "patchbake-port"
REPORT_VERSION = 1


@dataclass(frozen=True)
class PortReport:
    old_key: str
    new_key: str
    old_pin: str
    new_pin: str
    old_tree_digest: Digest
    new_tree_digest: Digest
    patch: str
    patch_sha256: str
    workspace: Path
    rows: tuple[HunkVerdict, ...]
    committed: str | None  # the commit of the ported tree, None when left for resolution
    seconds: float

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(r.verdict for r in self.rows)
        return {v: c.get(v, 0) for v in VERDICTS}

    @property
    def unresolved(self) -> int:
        return sum(1 for r in self.rows if r.verdict in (CONFLICT, GONE))

    def as_json(self) -> dict[str, Any]:
        return {"version": REPORT_VERSION, "from": {"lineage": self.old_key, "pin": self.old_pin,
                                                    "tree_digest": str(self.old_tree_digest)},
                "to": {"lineage": self.new_key, "pin": self.new_pin,
                       "tree_digest": str(self.new_tree_digest)},
                "patch": self.patch, "patch_sha256": self.patch_sha256,
                "workspace": str(self.workspace), "committed": self.committed,
                "counts": self.counts, "unresolved": self.unresolved,
                "hunks": [r.as_json() for r in self.rows]}

    def markdown(self) -> str:
        return render_markdown(self)


def _version(pin: str) -> str:
    return pin.split(" ", 1)[0]


def render_markdown(r: PortReport) -> str:
    """A section to paste into the port's pull request."""
    counts = ", ".join(f"{n} {v}" for v, n in r.counts.items() if n)
    out = [f"### Port of `{r.patch}`: {_version(r.old_pin)} -> {_version(r.new_pin)}", "",
           f"- from lineage `{r.old_key}` (tree `{r.old_tree_digest}`)",
           f"- to lineage `{r.new_key}` (tree `{r.new_tree_digest}`)",
           f"- patch sha256 `{r.patch_sha256}`",
           f"- {len(r.rows)} hunks: {counts}",
           f"- left to resolve by hand: {r.unresolved}", "",
           "| file | hunk | recorded line | verdict | new line | offset | note |",
           "|---|---:|---:|---|---:|---:|---|"]
    for h in r.rows:
        note = h.note
        if h.candidates:
            note += "; candidates: " + ", ".join(f"`{p}` ({s:.0%})" for p, s in h.candidates)
        out.append(f"| `{h.path}` | {h.hunk or '-'} | {h.recorded_line or '-'} | "
                   f"{h.verdict} | {h.line or '-'} | "
                   f"{'' if h.offset is None else f'{h.offset:+d}'} | "
                   f"{note.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def _gone_candidates(results: list[FileResult], patch: Patch, old_root: Path,
                     new_root: Path) -> None:
    gone = [r for r in results if any(h.verdict == GONE for h in r.rows)]
    if not gone:
        return
    new_only = list_files(new_root) - list_files(old_root)
    reader = TreeReader(old_root)
    for r in gone:
        old = reader(r.path)
        cands = tuple(rename_candidates(r.path, old[0], new_root, new_only)) if old else ()
        r.rows = [HunkVerdict(h.path, h.hunk, h.recorded_line, h.verdict, h.line, h.offset,
                              h.note + ("; no similar new file" if not cands else ""),
                              h.added, h.removed, cands) for h in r.rows]


def compute_port(patch: Patch, old_root: Path, new_root: Path, scratch: Path,
                 labels: tuple[str, str, str]) -> list[FileResult]:
    """Every file section's verdicts and new content; nothing is written but temp files."""
    old_reader, new_reader = TreeReader(old_root), TreeReader(new_root)
    scratch.mkdir(parents=True, exist_ok=True)
    results = [port_file(fp, old_reader(fp.path), new_reader(fp.path), scratch, labels)
               for fp in patch.files]
    _gone_candidates(results, patch, old_root, new_root)
    return results


def _write(ws: Path, results: list[FileResult]) -> None:
    base = os.fsencode(ws)
    for r in results:
        full = os.path.join(base, to_bytes(r.path))
        if r.post is KEEP:
            if r.mode and os.path.exists(full):
                os.chmod(full, 0o755 if r.mode == "100755" else 0o644)
            continue
        if r.post is None:
            if os.path.lexists(full):
                os.unlink(full)
            continue
        assert isinstance(r.post, bytes)
        os.makedirs(os.path.dirname(full), 0o755, exist_ok=True)
        with open(full, "wb") as f:
            f.write(r.post)
        os.chmod(full, 0o755 if r.mode == "100755" else 0o644)


def port(old: Any, new: Any, store: Store, workspace: Path) -> PortReport:
    """Replay ``old``'s canonical patch onto ``new``'s pin in a new ``workspace``."""
    t0 = time.perf_counter()
    workspace = Path(workspace).absolute()
    if workspace.exists() and (not workspace.is_dir() or any(workspace.iterdir())):
        raise PortError(f"{workspace} exists and is not an empty directory",
                          hint="remove it, or pass --workspace DIR for another one")
    lp = read_lineage_patch(old.patch, old.files)
    old_f, new_f = fetch(old, store), fetch(new, store)
    labels = (f"ours ({old.key} patch)", f"base ({_version(old.upstream.pin)} pristine)",
              f"theirs ({_version(new.upstream.pin)})")
    results = compute_port(lp.patch, old_f.root, new_f.root, store.root / "tmp", labels)
    ws = create_workspace(new, store, workspace, with_patch=False)
    _write(ws.path, results)
    rows = tuple(h for r in results for h in r.rows)
    committed = None
    if not any(h.verdict in (CONFLICT, GONE) for h in rows):
        msg = (f"patchbake: port {old.patch.name} to {new.upstream.pin}\n\n"
               f"from: {old.upstream.pin}\nfrom-patch-sha256: {lp.patch_sha256}\n")
        committed = commit_all(ws.path, msg, ws.base_commit)
        git(["update-ref", "refs/heads/main", committed], git_dir=ws.path / ".git")
        git(["reset", "-q"], work_tree=ws.path, git_dir=ws.path / ".git")
    report = PortReport(old.key, new.key, old.upstream.pin, new.upstream.pin,
                        old_f.tree_digest, new_f.tree_digest, old.patch.name,
                        lp.patch_sha256, ws.path, rows, committed,
                        round(time.perf_counter() - t0, 3))
    _keep_report(ws.path, report, lp.patch, results)
    return report


def _keep_report(ws: Path, report: PortReport, patch: Patch, results: list[FileResult]) -> None:
    d = ws / ".git" / REPORT_DIR
    d.mkdir(exist_ok=True)
    atomic_write(d / "report.json", (json.dumps(report.as_json(), indent=2) + "\n").encode())
    atomic_write(d / "report.md", report.markdown().encode())
    gone = {r.path for r in results if any(h.verdict == GONE for h in r.rows)}
    sections = b"".join(fp.raw for fp in patch.files if fp.path in gone)
    if sections:
        atomic_write(d / "target-gone.patch", sections)
