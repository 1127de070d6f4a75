"""``patchbake run``: the main job end to end on the pipeline's embedded defaults."""

from __future__ import annotations

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..mainjob import run_main_job
from .release import print_table

LABELS = (
    ("upstream_pin", "upstream pin"),
    ("archive_sha256", "sdist sha256"),
    ("pristine_tree_digest", "pristine tree digest"),
    ("patch", "canonical patch"),
    ("patch_sha256", "patch sha256"),
    ("files_sha256", "FILES.txt sha256"),
    ("patch_files", "files touched"),
    ("patched_tree_digest", "patched tree digest"),
    ("image", "image definition"),
    ("layer_diff_id", "overlay layer diff_id"),
    ("config_digest", "config digest (engine image ID)"),
    ("manifest_digest", "manifest digest (what registries and evidence name)"),
    ("record", "record"),
    ("verified", "verify"),
)


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
    ui.table("steps", ["step", "seconds"], [(s["step"], s["seconds"]) for s in job.steps])
    ident = job.identity
    rows = [(label, ident[key]) for key, label in LABELS]
    touched = f"{ident['patch_files']} (+{ident['patch_added']} -{ident['patch_removed']})"
    rows[6] = ("files touched", touched)
    ui.kv(f"identity chain of lineage {job.lineage}", rows)
    ui.say(f"image {ident['image']} = {ident['manifest_digest']}")
    if job.gates is not None:
        print_table(job.gates)
