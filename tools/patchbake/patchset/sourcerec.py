"""``patch/SOURCE``: where the canonical patch came from. Standard library only.

A small JSON document (sorted keys, 2-space indent)::

    {"format": "patchbake-source 1", "lineage": "v0.25.1",
     "upstream": "vllm==0.25.1 sha256:...", "tree_digest": "sha256:...",
     "patch": "<name>-v0.25.1.patch", "patch_sha256": "...", "files_sha256": "...",
     "source": {"kind": "workspace" | "repo", "repo": "<as given>" | null,
                "commit": "<40 hex>", "pristine_commit": "<40 hex>"},
     "forced": null | {"reason": "...", "previous_commit": ..., "previous_patch_sha256": ...}}

No timestamps and no machine paths for workspaces: exporting the same commit twice
writes the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ExportError
from ..fsutil import read_optional


FORMAT = "patchbake-source 1"


@dataclass(frozen=True, slots=True)
class SourceRecord:
    data: dict[str, Any]

    @property
    def patch_sha256(self) -> str | None:
        v = self.data.get("patch_sha256")
        return str(v) if v else None

    @property
    def commit(self) -> str | None:
        v = (self.data.get("source") or {}).get("commit")
        return str(v) if v else None

    @property
    def tree_digest(self) -> str | None:
        v = self.data.get("tree_digest")
        return str(v) if v else None


def read_source(path: Path) -> SourceRecord | None:
    raw = read_optional(path, "source record", ExportError)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ExportError(f"{path}: not valid JSON ({exc})",
                          hint="restore it from git; it is written by `patchbake patch export`"
                          ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExportError(f"{path}: not a patchbake source record (format {FORMAT!r})")
    for key, typ in (("patch_sha256", str), ("tree_digest", str), ("source", dict)):
        if data.get(key) is not None and not isinstance(data[key], typ):
            raise ExportError(f"{path}: '{key}' must be a {typ.__name__ if typ is str else 'mapping'}"
                              f", got {type(data[key]).__name__}",
                              hint="restore it from git; it is written by `patchbake patch export`")
    return SourceRecord(data)


def render_source(data: dict[str, Any]) -> bytes:
    return (json.dumps({"format": FORMAT, **data}, sort_keys=True, indent=2,
                       ensure_ascii=False) + "\n").encode()
