"""``patchbake fetch``: resolve the lineage's pinned upstream into the store."""

from __future__ import annotations

from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..sources import Fetched, fetch


def summary(lineage_key: str, f: Fetched) -> dict[str, Any]:
    return {"lineage": lineage_key, "pin": f.pin, "kind": f.kind,
            "archive_sha256": f.archive_sha256, "tree_digest": f.tree_digest,
            "files": f.files, "store_path": str(f.root)}


def register(group: click.Group) -> None:
    @group.command("fetch")
    @click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
    @click.option("--verify", is_flag=True,
                  help="re-hash a cached tree and fail if it no longer matches its digest")
    @pass_ctx
    def fetch_cmd(ctx: Ctx, as_json: bool, verify: bool) -> None:
        """Fetch, verify and extract the pinned upstream; print its identity."""
        lineage = ctx.lineage()
        f = fetch(lineage, ctx.store, progress=ui.progress, base=ctx.pipeline.root,
                  verify=verify)
        row = summary(lineage.key, f)
        if as_json or ctx.as_json:
            ui.emit_json(row)
            return
        ui.kv(f"upstream of lineage {lineage.key}",
              [(k, "-" if v is None else v) for k, v in row.items()])
