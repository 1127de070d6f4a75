"""Where blobs were seen on each registry, so a push can mount instead of upload.

Cross-repository mount needs a repository on the same registry that already holds the
blob; the registry will not tell us which one. Each push and pull notes the repositories
its blobs are in, per registry host, under ``<store>/registry/<host>.json``. The record is
only a hint: a stale entry costs one refused mount (the registry then opens an ordinary
upload session, which we use), never a wrong push.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..digest import Digest
from ..errors import RegistryError
from ..fsutil import atomic_write, pretty_json, read_optional
from ..store import Store

VERSION = 1
KEEP_REPOS = 4  # per blob; the most recent first


def _path(store: Store, host: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", host.lower())
    return store.root / "registry" / f"{safe}.json"


def _load(path: Path) -> dict[str, list[str]]:
    try:
        doc = json.loads(read_optional(path, "mount hints", RegistryError) or b"{}")
    except (RegistryError, ValueError):
        return {}  # a missing or damaged hint file only costs mounts
    blobs = doc.get("blobs") if isinstance(doc, dict) and doc.get("version") == VERSION else None
    if not isinstance(blobs, dict):
        return {}
    return {k: [r for r in v if isinstance(r, str)] for k, v in blobs.items()
            if isinstance(v, list)}


def repos_holding(store: Store, host: str, digest: Digest) -> list[str]:
    """Repositories on ``host`` last seen holding ``digest``, most recent first."""
    return list(_load(_path(store, host)).get(str(digest), []))


def note_blobs(store: Store, host: str, repo: str, digests: Iterable[Digest]) -> None:
    """Record that ``repo`` on ``host`` holds ``digests``."""
    wanted = list(dict.fromkeys(str(d) for d in digests))
    if not wanted:
        return
    path = _path(store, host)
    with store.lock(f"registry-{host}"):
        blobs = _load(path)
        changed = False
        for d in wanted:
            repos = blobs.get(d, [])
            if repos[:1] == [repo]:
                continue
            blobs[d] = ([repo] + [r for r in repos if r != repo])[:KEEP_REPOS]
            changed = True
        if changed:
            atomic_write(path, pretty_json({"version": VERSION, "host": host, "blobs": blobs}))
