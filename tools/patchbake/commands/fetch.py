"""``patchbake fetch``: resolve a lineage's pinned upstream into the store and print its
identity (archive sha256, tree digest, file count, where the pristine tree lies)."""

from __future__ import annotations

from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..sources import Fetched, fetch
from ..netpolicy import patience_help

FIELDS = ("lineage", "pin", "kind", "archive_sha256", "tree_digest", "files", "store_path")


def summary(lineage_key: str, f: Fetched) -> dict[str, Any]:
    """The printed and --json fields, in FIELDS order."""
    return {"lineage": lineage_key, "pin": f.pin, "kind": f.kind,
            "archive_sha256": None if f.archive_sha256 is None else f.archive_sha256.hex,
            "tree_digest": str(f.tree_digest),
            "files": f.files, "store_path": str(f.root)}


@click.command("fetch", epilog=patience_help())
@click.option("--all", "all_lineages", is_flag=True,
              help="fetch every lineage in pipeline.yaml (JSON: a 'lineages' list)")
@click.option("--verify", is_flag=True,
              help="re-hash a cached tree and fail if it no longer matches its digest")
@pass_ctx
def fetch_cmd(ctx: Ctx, all_lineages: bool, verify: bool) -> None:
    """Fetch, verify and extract the pinned upstream; print its identity."""
    pipeline = ctx.pipeline
    keys = sorted(pipeline.lineages) if all_lineages else [ctx.lineage().key]
    rows = []
    for key in keys:
        f = fetch(pipeline.lineage(key), ctx.store, progress=ui.progress,
                  base=pipeline.root, verify=verify)
        rows.append(summary(key, f))
    if ctx.as_json:
        ui.emit_json({"lineages": rows} if all_lineages else rows[0])
        return
    for row in rows:
        ui.kv(f"upstream of lineage {row['lineage']}",
              [(k, "-" if v is None else v) for k, v in row.items()])
