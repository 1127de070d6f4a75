"""``patchbake run``: the main job end to end on the pipeline's embedded defaults."""

from __future__ import annotations

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..mainjob import run_main_job
from .release import print_table


@click.command("run")
@click.option("--image", default=None, help="image definition to bake (default: the offline one)")
@pass_ctx
def run_cmd(ctx: Ctx, image: str | None) -> None:
    """Fetch, check, apply, bake and verify; print the identity chain."""
    job = run_main_job(ctx.pipeline, ctx.store, lineage=ctx.lineage_key, image=image,
                       on_step=lambda s: ui.step(s), progress=ui.progress)
    if ctx.as_json:
        ui.emit_json(job.to_json())
        return
    ui.table("steps", ["step", "seconds"], [(s.step, s.seconds) for s in job.steps])
    ident = job.identity
    ui.kv(f"identity chain of lineage {job.lineage}", [
        ("upstream pin", ident.upstream_pin),
        ("sdist sha256", ident.archive_sha256),
        ("pristine tree digest", ident.pristine_tree_digest),
        ("canonical patch", ident.patch),
        ("patch sha256", ident.patch_sha256),
        ("FILES.txt sha256", ident.files_sha256),
        ("files touched",
         f"{ident.patch_files} (+{ident.patch_added} -{ident.patch_removed})"),
        ("patched tree digest", ident.patched_tree_digest),
        ("image definition", ident.image),
        ("overlay layer diff_id", ident.layer_diff_id),
        ("config digest (engine image ID)", ident.config_digest),
        ("manifest digest (what registries and evidence name)", ident.manifest_digest),
        ("record", ident.record),
        ("verify", ident.verified),
    ])
    ui.say(f"image {ident.image} = {ident.manifest_digest}")
    if job.gates is not None:
        print_table(job.gates)
