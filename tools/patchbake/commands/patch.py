"""``patchbake patch workspace|export|check|apply`` and ``patchbake series verify|split``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..errors import GuardError, SeriesDependencyError, UsageError
from ..patchset.export import export
from ..patchset.guard import check_lineage
from ..patchset.patched import read_lineage_patch
from ..patchset.series import split_series, verify_series
from ..patchset.seriesdeps import verify_independent
from ..patchset.strict import apply_to_dir
from ..patchset.workspace import create_workspace
from ..sources import Fetched, fetch


def default_workspace(ctx: Ctx) -> Path:
    return ctx.pipeline.root / ".work" / f"workspace-{ctx.lineage().key}"


def fetch_pin(ctx: Ctx) -> Fetched:
    return fetch(ctx.lineage(), ctx.store, progress=ui.progress, base=ctx.pipeline.root)


def _verify_independent(ctx: Ctx) -> None:
    r = verify_independent(ctx.lineage(), ctx.store)
    if ctx.as_json:
        ui.emit_json(r.as_json())
    else:
        ui.table("series slices", ["#", "patch", "applies alone", "needs", "files"],
                 [(i, s.name, "yes" if s.alone else "no", ", ".join(s.needs) or "-",
                   len(s.files)) for i, s in enumerate(r.slices, 1)])
        ui.kv("series verify --independent", [("series digest", r.series_digest),
                                              ("canonical digest", r.canonical_digest),
                                              ("independent", r.independent)])
    dependent = [s for s in r.slices if not s.alone]
    if dependent:
        first = dependent[0]
        raise SeriesDependencyError(
            f"{len(dependent)} slice(s) do not apply alone to the pristine tree; first: "
            f"{first.name} needs {', '.join(first.needs) or 'the slices before it'} "
            f"({first.why})",
            hint="move the shared change into the slice it depends on, or merge the slices")


@click.group("patch")
def patch_group() -> None:
    """Canonical patch: workspace, export, lost-line guard, strict apply."""


@patch_group.command("workspace")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--force", is_flag=True,
              help="replace a workspace made for another pin or patch (refused while it "
                   "holds uncommitted changes or commits the patch does not reproduce)")
@pass_ctx
def workspace_cmd(ctx: Ctx, directory: Path | None, force: bool) -> None:
    """Make a git work tree: pristine upstream, then the current patch, as two commits.

    A DIRECTORY that already holds exactly that workspace (same pin and patch, nothing
    committed or changed since) is reused as it is.

    \b
    Examples:
      patchbake patch workspace .work/ws
      patchbake patch workspace .work/ws --force    # after the patch changed
    """
    dest = directory or default_workspace(ctx)
    ui.step(f"workspace for {ctx.lineage().upstream.pin} in {dest}")
    ws = create_workspace(ctx.lineage(), ctx.store, dest,
                          existing="replace" if force else "reuse")
    row = {"workspace": str(ws.path), "pristine_commit": ws.pristine_commit,
           "base_commit": ws.base_commit, "patch_sha256": ws.patch_sha256,
           "files": ws.files, "reused": ws.reused}
    if ctx.as_json:
        ui.emit_json(row)
    else:
        ui.kv("workspace", list(row.items()))


@patch_group.command("export")
@click.option("--from", "from_spec", default=None, metavar="DIR|REPO@REV",
              help="workspace directory, or a fork repository at a revision "
                   "(default: the lineage's workspace under .work/)")
@click.option("--force", is_flag=True, help="export even if work could be lost")
@click.option("--reason", default=None, help="why --force is right (recorded in SOURCE)")
@pass_ctx
def export_cmd(ctx: Ctx, from_spec: str | None, force: bool, reason: str | None) -> None:
    """Regenerate the canonical patch, FILES.txt and SOURCE from commits."""
    if reason and not force:
        raise UsageError("--reason goes with --force")
    spec = from_spec or str(default_workspace(ctx))
    lin = ctx.lineage()
    ex = export(lin, ctx.store, spec, force=force, reason=reason)
    row: dict[str, Any] = {"patch": str(ex.patch_path), "patch_sha256": ex.patch_sha256,
                           "files": ex.files, "added": ex.added, "removed": ex.removed,
                           "commit": ex.commit, "changed": ex.changed}
    # A new lineage (made by `port`) gets its series on its first export: one patch
    # per workspace commit; later, `series split` rewrites it when the user asks.
    if lin.series is not None and not (lin.series / "series").exists() \
            and Path(spec).is_dir():
        row["series"] = split_series(lin, ctx.store, Path(spec))
    if ctx.as_json:
        ui.emit_json(row)
    else:
        ui.kv("exported", list(row.items()))


@patch_group.command("check")
@click.option("--no-tree", is_flag=True,
              help="skip the checks that need the pinned upstream (apply, hashes, re-export)")
@pass_ctx
def check_cmd(ctx: Ctx, no_tree: bool) -> None:
    """The lost-line guard: patch <=> FILES.txt <=> the pinned tree; re-export identical."""
    fetched = None if no_tree else fetch_pin(ctx)
    report = check_lineage(ctx.lineage(), pristine_root=fetched.root if fetched else None,
                           tree_digest=fetched.tree_digest if fetched else None)
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
    report.raise_for_problems(GuardError)


@patch_group.command("apply")
@click.option("--to", "dest", required=True, type=click.Path(path_type=Path),
              metavar="DIR", help="new or empty directory to write the patched tree into")
@pass_ctx
def apply_cmd(ctx: Ctx, dest: Path) -> None:
    """Strictly apply the canonical patch to the pinned upstream, into DIR."""
    lin = ctx.lineage()
    lp = read_lineage_patch(lin.patch, lin.files)
    applied = apply_to_dir(lp.patch, fetch_pin(ctx).root, dest, filelist=lp.filelist)
    row = {"to": str(dest), "patch_sha256": lp.patch_sha256,
           "files": len(applied.files), "deleted": len(applied.deleted), "verified": True}
    if ctx.as_json:
        ui.emit_json(row)
    else:
        ui.kv("applied", list(row.items()))


@click.group("series")
def series_group() -> None:
    """Split series: verify it reproduces the canonical patch, or write it from commits."""


@series_group.command("verify")
@click.option("--independent", is_flag=True,
              help="also require each series patch to apply alone to the pristine tree "
                   "(and report which slices depend on which)")
@pass_ctx
def series_verify_cmd(ctx: Ctx, independent: bool) -> None:
    """Apply the series in order; its tree digest must equal the canonical patch's."""
    if independent:
        _verify_independent(ctx)
        return
    r = verify_series(ctx.lineage(), ctx.store)
    row = {"patches": len(r.patches), "paths": r.paths, "series_digest": r.series_digest,
           "canonical_digest": r.canonical_digest, "ok": True}
    if ctx.as_json:
        ui.emit_json(row)
    else:
        ui.kv("series verify", list(row.items()))


@series_group.command("split")
@click.option("--from", "from_dir", default=None, type=click.Path(path_type=Path),
              metavar="DIR", help="workspace directory (default: the lineage's workspace under .work/)")
@pass_ctx
def series_split_cmd(ctx: Ctx, from_dir: Path | None) -> None:
    """Write patch/series/ with one patch per workspace commit after the pristine one."""
    names = split_series(ctx.lineage(), ctx.store, from_dir or default_workspace(ctx))
    if ctx.as_json:
        ui.emit_json({"patches": names})
    else:
        ui.table("series", ["#", "patch"], list(enumerate(names, 1)))
