"""What ``store fsck`` checks beyond re-hashing: every object a name or a record reaches
is there and readable.

- ``index.json`` (the store's image names) parses; every image it names has its manifest
  (or index, followed down), and each manifest its config and every layer, base layers
  included: a named image whose base layer was deleted cannot be exported or pushed.

Source records are not among them: a record that is damaged, or whose tree or archive
is gone, is rebuilt by the next ``fetch`` (it is a cache, not a name).

Re-hashing (:mod:`patchbake.storecheck`) says whether what is there is what its name
says; this says whether what must be there is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .digest import Digest, is_digest
from .errors import PatchbakeError, StoreError
from .oci import layout
from .store import Store

MAX_JSON_BYTES = 16 << 20  # a manifest, an index or a record is far smaller
MAX_DEPTH = 4  # an index of indexes this deep is a loop or an attack, not an image


def _load_json(path: Path) -> Any:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ValueError(f"over {MAX_JSON_BYTES} bytes")
    return json.loads(path.read_bytes())


def _children(doc: Any) -> Iterator[tuple[str, Any]]:
    """(role, descriptor) of what a manifest or an index names."""
    if not isinstance(doc, dict):
        return
    if isinstance(doc.get("config"), dict):
        yield "config", doc["config"]
    for i, layer in enumerate(doc.get("layers") or []):
        yield f"layer {i}", layer
    for i, m in enumerate(doc.get("manifests") or []):
        yield f"manifest {i}", m


def _walk(store: Store, digest: Digest, where: str, depth: int, out: list[str],
          follow: bool = True) -> None:
    """``digest`` must be in the store; a manifest or an index (``follow``) is read and
    what it names checked in turn."""
    path = store.blob_path(digest)
    if not path.is_file():
        out.append(f"{where}: {digest} is not in the store")
        return
    if not follow or depth > MAX_DEPTH:
        return  # a config or a layer: its presence is all that is asked here
    try:
        doc = _load_json(path)
    except (OSError, ValueError) as exc:
        out.append(f"{where}: {digest} is not readable JSON ({exc})")
        return
    for role, desc in _children(doc):
        d = desc.get("digest") if isinstance(desc, dict) else None
        if not is_digest(d):
            out.append(f"{where} > {role}: no valid digest")
            continue
        _walk(store, Digest.parse(d), f"{where} > {role}", depth + 1, out,
              follow=role.startswith("manifest"))


def named_images(store: Store, out: list[str]) -> int:
    """Check every image index.json names (an entry without a name too); problems go to
    ``out``. Returns how many entries there are."""
    if not os.path.lexists(store.root / "index.json"):
        return 0
    try:
        entries = layout.index_entries(store)
    except PatchbakeError as exc:
        out.append(f"index.json: {exc.message}")
        return 0
    for i, entry in enumerate(entries):
        name = (entry.get("annotations") or {}).get(layout.REF_NAME)
        where = f"image {name!r}" if isinstance(name, str) else f"index.json manifests[{i}]"
        d = entry.get("digest")
        if not is_digest(d):
            out.append(f"{where}: no valid digest")
            continue
        _walk(store, Digest.parse(d), where, 0, out)
    return len(entries)


def unreachable(store: Store) -> list[str]:
    """Every object a name or a record needs that is missing or unreadable."""
    out: list[str] = []
    try:
        named_images(store, out)
    except OSError as exc:
        raise StoreError(f"store {store.root} cannot be read: {exc}") from exc
    return out
