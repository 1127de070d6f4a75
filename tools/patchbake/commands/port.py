"""``patchbake port --to VERSION``: replay the patch onto a newer upstream, hunk by hunk."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..config.pipeline import version_key
from ..errors import PortError, PortUnresolvedError
from ..fsutil import atomic_write, output_to
from ..port.replay import port
from ..port.pin import (
    check_names,
    index_sha256,
    new_lineage,
    plan_lineage_edit,
    write_pipeline,
)


def _source_lineage(ctx: Ctx, version: str) -> Any:
    """The lineage to port from: --lineage before `port`, else the newest older one."""
    if ctx.lineage_key:
        return ctx.lineage()
    older = [lin for lin in ctx.pipeline.lineages.values()
             if version_key(lin.upstream.version) < version_key(version)]
    if not older:
        raise PortError(f"no lineage older than {version} to port from",
                        hint="name one with `patchbake --lineage KEY port ...`")
    return max(older, key=lambda lin: version_key(lin.upstream.version))


def _target_lineage(ctx: Ctx, old: Any, version: str, key: str,
                    sha256: str | None) -> tuple[Any, str | None]:
    """(new lineage, pipeline.yaml text to write or None when it is declared already)."""
    have = ctx.pipeline.lineages.get(key)
    if have is not None:
        if have.upstream.version != version:
            raise PortError(f"lineage {key} exists and pins {have.upstream.version}, not "
                            f"{version}", hint="pass another --lineage KEY")
        return have, None
    if sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise PortError(f"--sha256 {sha256!r} is not 64 lowercase hex digits")
    filename = f"{old.upstream.package}-{version}.tar.gz"
    sha = sha256 or index_sha256(old.upstream.package, filename)
    new = new_lineage(old, ctx.pipeline.root, key, version, sha)
    text, _block = plan_lineage_edit(ctx.pipeline.path, new)
    return new, text


def _print(report: Any) -> None:
    rows = []
    for h in report.rows:
        note = h.note + ("; candidates: " + ", ".join(f"{p} ({s:.0%})" for p, s in h.candidates)
                         if h.candidates else "")
        rows.append((h.path, h.hunk or "-", h.recorded_line or "-", h.verdict,
                     h.line or "-", "" if h.offset is None else f"{h.offset:+d}", note))
    ui.table(f"port {report.patch}: {report.old_pin.split()[0]} -> {report.new_pin.split()[0]}",
             ["file", "hunk", "old line", "verdict", "new line", "offset", "note"], rows)
    ui.kv("port", [("workspace", str(report.workspace)),
                   ("counts", ", ".join(f"{n} {v}" for v, n in report.counts.items() if n)),
                   ("committed", report.committed or "no: resolve, then commit"),
                   ("seconds", report.seconds)])


@click.command("port")
@click.option("--to", "version", required=True, metavar="VERSION",
              help="upstream release to port to, e.g. 0.33.0")
@click.option("--lineage", "new_key", default=None, metavar="NEW_KEY",
              help="key of the new lineage (default: vVERSION)")
@click.option("--sha256", default=None, metavar="HEX",
              help="pin the sdist by this hash instead of asking the package index")
@click.option("--workspace", type=click.Path(path_type=Path), default=None,
              help="new directory for the workspace (default: .work/workspace-NEW_KEY)")
@click.option("--markdown", type=click.Path(path_type=Path), default=None,
              help="also write the report as a markdown section for the pull request")
@pass_ctx
def port_cmd(ctx: Ctx, version: str, new_key: str | None, sha256: str | None,
             workspace: Path | None, markdown: Path | None) -> None:
    """Replay the lineage's patch onto upstream VERSION in a workspace; report each hunk."""
    key = new_key or f"v{version}"
    check_names(version, key)
    old = _source_lineage(ctx, version)
    if old.key == key:
        raise PortError(f"lineage {key} is the one being ported; name another --lineage")
    new, pipeline_text = _target_lineage(ctx, old, version, key, sha256)
    dest = workspace or ctx.pipeline.root / ".work" / f"workspace-{key}"
    ui.step(f"port {old.key} -> {key} in {dest}")
    with output_to(dest, "--workspace"):
        report = port(old, new, ctx.store, dest)
    if pipeline_text is not None:
        write_pipeline(ctx.pipeline.path, pipeline_text)
    if markdown:
        with output_to(markdown, "--markdown"):
            atomic_write(markdown, report.markdown().encode())
    if ctx.as_json:
        doc = report.as_json()
        doc["pipeline_updated"] = pipeline_text is not None
        ui.emit_json(doc)
    else:
        _print(report)
        if pipeline_text is not None:
            ui.step(f"{ctx.pipeline.path.name}: added lineage {key}")
    if report.unresolved:
        raise PortUnresolvedError(
            f"{report.unresolved} hunk(s) need a hand (conflict or target gone) in "
            f"{report.workspace}",
            hint=f"resolve them, commit, then `patchbake --lineage {key} patch export`")
