"""patchset stage: canonical patch, FILES.txt, the lost-line guard, strict apply, series.

Public API (imported lazily so that the standard-library-only modules -- diffparse,
filelist, apply, strict, guard -- stay importable without the package's dependencies,
which ``tools/check_patch_files.py`` relies on)::

    from patchbake.patchset import patched_tree, PatchedTree
    tree = patched_tree(lineage, store)   # root, files, deleted, patch_sha256, ...
"""

from __future__ import annotations

# typing is not imported at run time: the bare guard (tools/check_patch_files.py) pays
# for every import at start-up, and these names appear in annotations only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


_LAZY = {
    "patched_tree": "patched",
    "PatchedTree": "patched",
    "read_lineage_patch": "patched",
    "parse_patch": "diffparse",
    "parse_filelist": "filelist",
    "apply_to_dir": "strict",
}

__all__ = ["PatchedTree", "apply_to_dir", "parse_filelist", "parse_patch", "patched_tree",
           "read_lineage_patch"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(name)
