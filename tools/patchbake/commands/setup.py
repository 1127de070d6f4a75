"""``patchbake init`` (a new pipeline.yaml) and ``patchbake doctor`` (what this machine
has of what the commands need); both run outside a repository."""

from __future__ import annotations

from pathlib import Path

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..errors import DoctorError


@click.command("init")
@click.option("--vllm", "version", required=True, metavar="VERSION",
              help="the vLLM release to pin (its sdist, resolved through pip's index)")
@click.option("--name", default="local-changes", show_default=True,
              help="the patch's name (patch/<name>-v<VERSION>.patch)")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path("."),
              show_default=True, help="where to write pipeline.yaml (never over one)")
@pass_ctx
def init_cmd(ctx: Ctx, version: str, name: str, directory: Path) -> None:
    """Write a new pipeline.yaml pinning a vLLM release.

    \b
    Examples:
      patchbake init --vllm 0.25.1
      patchbake init --vllm 0.33.0 --name my-fix --dir ../fork-pipeline
    Then: patchbake fetch; patchbake patch workspace; edit and commit there;
    patchbake patch export.
    """
    from ..scaffold import init_pipeline

    made = init_pipeline(directory, version, name)
    row = {"pipeline": str(made.path), "lineage": made.lineage, "sdist": made.filename,
           "sha256": made.sha256, "index": made.index_origin}
    if ctx.as_json:
        ui.emit_json(row)
        return
    ui.kv("init", list(row.items()))
    ui.say("next: `patchbake fetch`, then `patchbake patch workspace` (docs/patch.md)")


@click.command("doctor")
@pass_ctx
def doctor_cmd(ctx: Ctx) -> None:
    """Check python, git, the package index and TLS trust, the store, the engine, the
    registry, the signing key and mmdebstrap; each problem with its fix. Exit 6 when
    something every command needs is missing.

    \b
    Examples:
      patchbake doctor
      patchbake doctor --json | jq '.checks[] | select(.status != "ok")'
    """
    from ..doctor import diagnose

    report = diagnose(ctx.pipeline_path)
    if ctx.as_json:
        ui.emit_json(report.dump())
    else:
        ui.table("doctor", ["check", "status", "found", "fix"],
                 [(c.name, c.status.upper(), c.detail, c.fix or "-") for c in report.checks])
    if report.missing:
        first = report.missing[0]
        raise DoctorError(f"{len(report.missing)} needed check(s) failed; first: "
                          f"{first.name}: {first.detail}", hint=first.fix or None)
