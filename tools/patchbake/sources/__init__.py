"""Pinned upstream sources: resolve (index, url, path, git), verify, extract safely,
digest. The public API is three names::

    from patchbake.sources import fetch, Fetched, tree_digest
"""

from .digest import tree_digest
from .pinned import Fetched, check_tree, fetch

__all__ = ["Fetched", "check_tree", "fetch", "tree_digest"]
