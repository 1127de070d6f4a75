"""``patchbake lock``: resolve the lineage's serving base again and write its lock file."""

from __future__ import annotations

from typing import Any

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..errors import ConfigError
from ..fsutil import atomic_write
from ..scratch import Scratch
from ..sources import lockfile, lockgen


def _changes(old: lockfile.Lock | None, new: lockfile.Lock) -> list[tuple[str, str, str]]:
    """(what, before, after) for every wheel and package that is new, gone or changed."""
    def versions(lock: lockfile.Lock | None) -> dict[str, str]:
        if lock is None:
            return {}
        return {**{f"wheel {w.name}": w.version for w in lock.wheels},
                **{f"deb {p.name}": p.version for p in lock.os.packages}}
    before, after = versions(old), versions(new)
    return [(k, before.get(k, "-"), after.get(k, "-")) for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k)]


@click.command("lock")
@pass_ctx
def lock_cmd(ctx: Ctx) -> None:
    """Resolve the serving base (pip for the wheels, mmdebstrap for Debian) into the
    lineage's lock file; print what changed."""
    lineage = ctx.lineage()
    if lineage.lock is None:
        raise ConfigError(f"pipeline.yaml: lineage '{lineage.key}' names no lock file",
                          hint=f"add `lock: images/locks/vllm-{lineage.upstream.version}.lock` "
                               "to the lineage")
    previous = lockfile.load(lineage.lock)[0] if lineage.lock.is_file() else None
    ui.step(f"resolving vllm=={lineage.upstream.version} with pip and its Debian root "
            "filesystem with mmdebstrap (about two minutes)")
    scratch = Scratch("lock-", ctx.store.root / "tmp")
    try:
        new = lockgen.generate(lineage.key, lineage.upstream.version, previous, scratch.path)
    finally:
        scratch.remove()
    data = lockfile.dump(new)
    lineage.lock.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(lineage.lock, data)
    changes = _changes(previous, new)
    summary: dict[str, Any] = {
        "lineage": lineage.key, "lock": str(lineage.lock), "digest": str(lockfile.lock_digest(data)),
        "wheels": len(new.wheels), "packages": len(new.os.packages), "resolver": new.resolver,
        "changes": [{"what": w, "before": b, "after": a} for w, b, a in changes]}
    if ctx.as_json:
        ui.emit_json(summary)
        return
    ui.kv(f"lock of lineage {lineage.key}",
          [(k, v) for k, v in summary.items() if k != "changes"])
    if changes:
        ui.table("changes", ["what", "before", "after"], changes[:60])
