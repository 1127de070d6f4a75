"""``patchbake store fsck`` and ``patchbake store gc``: check and clean the store.

Printing lives here; the work is in ``patchbake.storecheck``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..config import find_pipeline
from ..errors import IntegrityError, StoreError
from ..store import Store
from ..storecheck import DEFAULT_GRACE_S, Report, describe, fsck, gc

JSON_VERSION = 1


def _repo(ctx: Ctx, repo: str | None) -> Path | None:
    """The repository whose records protect objects: --repo, else the pipeline's."""
    if repo:
        return Path(repo).resolve()
    p = Path(ctx.pipeline_path) if ctx.pipeline_path else find_pipeline()
    return p.resolve().parent if p.is_file() else None


def _json(rep: Report, root: Path, repo: Path | None) -> dict[str, Any]:
    return {
        "version": JSON_VERSION, "store": str(root), "repository": str(repo) if repo else None,
        "clean": rep.clean, "blobs": rep.blobs, "trees": rep.trees,
        "bad_blobs": rep.bad_blobs, "bad_trees": rep.bad_trees, "missing": rep.missing,
        "stray": rep.stray,
        "litter": rep.litter, "idle_locks": rep.idle_locks,
        "unreferenced_blobs": rep.unreferenced_blobs,
        "unreferenced_trees": rep.unreferenced_trees, "quarantined": rep.quarantined,
        "removed": rep.removed, "bytes_freed": rep.bytes_freed,
    }


def _rows(rep: Report) -> list[tuple[str, Any]]:
    return [
        ("blobs checked", rep.blobs), ("trees checked", rep.trees),
        ("hash mismatches", describe(rep.bad_blobs + rep.bad_trees) or "none"),
        ("missing or unreadable", describe(rep.missing, limit=3) or "none"),
        ("stray names in blobs/", describe(rep.stray) or "none"),
        ("litter (crashed runs)", describe(rep.litter) or "none"),
        ("idle lock files", len(rep.idle_locks)),
        ("unreferenced blobs", len(rep.unreferenced_blobs)),
        ("unreferenced trees", len(rep.unreferenced_trees)),
    ]


@click.group("store")
def store_group() -> None:
    """Check (fsck) and clean (gc) the content-addressed store."""


@store_group.command("fsck")
@click.option("--quarantine", is_flag=True,
              help="move blobs and trees that fail their hash to <store>/quarantine/")
@click.option("--no-trees", is_flag=True, help="skip re-hashing extracted trees")
@click.option("--repo", default=None, help="repository whose records name objects "
              "(default: the pipeline's directory)")
@pass_ctx
def fsck_cmd(ctx: Ctx, quarantine: bool, no_trees: bool, repo: str | None) -> None:
    """Re-hash every blob and recorded tree; report mismatches, crash litter, idle lock
    files and objects nothing names, and check that every object a name (index.json) or
    a source record needs is there. Exit 11 on a mismatch or a missing object, 13 on
    litter or stray files in blobs/."""
    store = Store.open(sweep=False)
    where = _repo(ctx, repo)
    rep = fsck(store, repo=where, trees=not no_trees, quarantine=quarantine)
    if ctx.as_json:
        ui.emit_json(_json(rep, store.root, where))
    else:
        ui.kv(f"store fsck {store.root}", _rows(rep))
    bad = rep.bad_blobs + rep.bad_trees
    if bad:
        moved = "; moved to quarantine/" if quarantine else ""
        raise IntegrityError(
            f"store {store.root}: {len(bad)} object(s) do not match their name: "
            f"{describe(bad)}{moved}",
            hint="re-fetch or re-bake what they belonged to" if quarantine else
            "run `patchbake store fsck --quarantine`, then re-fetch or re-bake")
    if rep.missing:
        raise IntegrityError(
            f"store {store.root}: {len(rep.missing)} object(s) a name or record needs are "
            f"missing or unreadable: {describe(rep.missing, limit=2)}",
            hint="re-fetch or re-bake what they belong to (a broken index.json: remove it "
                 "and name the images again)")
    if rep.litter or rep.stray:
        left = rep.litter + [f"blobs/sha256/{n}" for n in rep.stray]
        raise StoreError(f"store {store.root}: {len(left)} leftover(s) of crashed runs or "
                         f"stray files: {describe(left)}", hint="run `patchbake store gc`")


@store_group.command("gc")
@click.option("--dry-run", is_flag=True, help="list what would be removed; remove nothing")
@click.option("--grace", "grace_s", type=float, default=DEFAULT_GRACE_S, show_default=True,
              help="keep unreferenced objects younger than this many seconds (a running "
                   "bake writes layers before the manifest naming them)")
@click.option("--repo", default=None, help="repository whose records name objects "
              "(default: the pipeline's directory)")
@pass_ctx
def gc_cmd(ctx: Ctx, dry_run: bool, grace_s: float, repo: str | None) -> None:
    """Remove crash litter, idle lock files and blobs/trees that no record names (never
    pinned sources, named images, or anything a lineage, record or evidence names)."""
    store = Store.open(sweep=False)
    where = _repo(ctx, repo)
    if where is None:
        print("patchbake: warning: no pipeline.yaml found: only the store's own records "
              "protect objects (pass --repo)", file=sys.stderr)
    rep = gc(store, repo=where, grace_s=grace_s, dry_run=dry_run)
    if ctx.as_json:
        ui.emit_json(_json(rep, store.root, where))
        return
    ui.kv(f"store gc {store.root}" + (" (dry run)" if dry_run else ""), [
        ("removed" if not dry_run else "would remove",
         f"{len(rep.removed)} entries, {rep.bytes_freed} bytes"),
        ("litter", len(rep.litter)), ("idle lock files", len(rep.idle_locks)),
    ])
