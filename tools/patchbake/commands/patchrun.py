"""``patchbake patch check`` and ``patchbake patch export`` as plain functions.

They are timed against ``git apply --check`` and ``git diff`` (bench/bench_patch.py), so a
plain call is parsed by ``patchbake.entry`` and runs them without importing click, like
``push`` and ``pull``; ``commands/patch.py`` declares them to click and calls these. An
option added there must be added to ``entry.PLAIN_COMMANDS`` too (tests/unit/
test_cli_plain.py checks the two agree).
"""

from __future__ import annotations

from pathlib import Path

from .. import ui
from ..errors import GuardError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..entry import Ctx


def default_workspace(ctx: Ctx) -> Path:
    return ctx.pipeline.root / ".work" / f"workspace-{ctx.lineage().key}"


def fetch_pin(ctx: Ctx) -> Any:
    from ..sources import fetch

    return fetch(ctx.lineage(), ctx.store, progress=ui.progress, base=ctx.pipeline.root)


def run_check(ctx: Ctx, *, tree: bool = True, reexport: bool = True) -> Any:
    """The guard for the CLI: fetch the pin (unless ``tree`` is False), run every check."""
    from ..patchset.guard import check_lineage

    fetched = fetch_pin(ctx) if tree else None
    return check_lineage(ctx.lineage(), pristine_root=fetched.root if fetched else None,
                         tree_digest=fetched.tree_digest if fetched else None,
                         reexport=reexport)


def check(ctx: Ctx, no_tree: bool = False) -> None:
    """The lost-line guard: patch <=> FILES.txt <=> the pinned tree; re-export identical."""
    report = run_check(ctx, tree=not no_tree)
    if ctx.as_json:
        ui.emit_json(report.as_json())
    else:
        ui.kv("patch check", [("ok", report.ok), ("files", report.files),
                              ("added", report.added), ("removed", report.removed),
                              ("patch sha256", report.patch_sha256),
                              ("three-way", "yes" if report.applied else "skipped")])
        if report.problems:
            ui.table("problems", ["kind", "path", "message"],
                     [(p.kind, p.path or "-", p.message) for p in report.problems])
    if not report.ok:
        first = report.problems[0]
        raise GuardError(f"{len(report.problems)} problem(s); first: {first.message}")


def export(ctx: Ctx, from_spec: str | None = None, force: bool = False,
           reason: str | None = None) -> None:
    """Regenerate the canonical patch, FILES.txt and SOURCE from commits."""
    from ..patchset.export import export as export_patch

    if reason and not force:
        raise UsageError("--reason goes with --force")
    spec = from_spec or str(default_workspace(ctx))
    lin = ctx.lineage()
    ex = export_patch(lin, ctx.store, spec, force=force, reason=reason)
    row: dict[str, Any] = {"patch": str(ex.patch_path), "patch_sha256": ex.patch_sha256,
                           "files": ex.files, "added": ex.added, "removed": ex.removed,
                           "commit": ex.commit, "changed": ex.changed}
    # A new lineage (made by `port`) gets its series on its first export: one patch
    # per workspace commit; later, `series split` rewrites it when the user asks.
    if lin.series is not None and not (lin.series / "series").exists() \
            and Path(spec).is_dir():
        from ..patchset.series import split_series

        row["series"] = split_series(lin, ctx.store, Path(spec))
    if ctx.as_json:
        ui.emit_json(row)
    else:
        ui.kv("exported", list(row.items()))
