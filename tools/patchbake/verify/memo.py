"""What a verify derived from an image, memoised by everything it was derived from.

A verify's findings (matched files, mismatches, base drift, problems, the identity record)
are a pure function of the image's bytes, the image definition and record, the pinned
base, the fresh apply, the pristine tree and this tool's own code. The key is a hash of
all of these: the image by its manifest digest (which pins the config and every layer's
digest and diff_id), the rest by their content, the code by the bytes of every file of the
package. A verify that finds a memo under its key still reads and hashes every layer to EOF
and checks each digest and diff_id before it returns the memo's findings; a verify that
raised writes no memo.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..config import Lineage
from ..digest import Digest
from .expected import Expected
from ..fsutil import cache_write
from ..images.overlay import Patched
from ..images.refs import Resolved
from ..store import Store

FORMAT = "patchbake-verify-memo/1"
FIELDS = ("matched", "total", "mismatched", "base_drift", "problems", "identity", "entries")
_PACKAGE = Path(__file__).resolve().parent.parent  # the whole patchbake package
_CODE: list[str] = []  # the package's digest, computed once per process


def code_digest() -> str:
    """sha256 over the path and bytes of every file of the patchbake package: any change to
    the code (a new check, a changed message, the baked verifier) is another key."""
    if not _CODE:
        h = hashlib.sha256()
        for top, dirs, files in os.walk(_PACKAGE):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(top, name)
                with open(path, "rb") as f:
                    data = f.read()
                rel = os.path.relpath(path, _PACKAGE).encode()
                h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
                h.update(data)
        _CODE.append(h.hexdigest())
    return _CODE[0]


def key(res: Resolved, exp: Expected, lin: Lineage, patched: Patched,
        pristine_digest: Digest) -> str:
    """The memo key of one verify: everything its findings are derived from."""
    doc = {"format": FORMAT, "code": code_digest(), "python": sys.version,
           "manifest": str(res.image.manifest_digest),
           "config": str(res.image.config_desc.digest),
           "definition": [exp.definition.name, exp.definition.fingerprint],
           "record": exp.record.doc if exp.record is not None else None,
           "base_diff_ids": [str(d) for d in exp.base_diff_ids], "base_config": exp.base_config,
           "patch": patched.patch_sha256, "files": patched.files,
           "deleted": sorted(patched.deleted), "pristine": str(pristine_digest),
           "generated": list(lin.upstream.generated)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _path(store: Store, memo_key: str) -> Path:
    return store.root / "bakes" / "verify" / f"{memo_key}.json"


def load(store: Store, memo_key: str, layers: int) -> dict[str, Any] | None:
    """The findings memoised under ``memo_key`` (an image of ``layers`` layers); None when
    there are none, or the file is not a memo of this key."""
    try:
        doc = json.loads(_path(store, memo_key).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != memo_key \
            or any(f not in doc for f in FIELDS):
        return None
    entries = doc["entries"]
    if not isinstance(entries, list) or len(entries) != layers \
            or not all(type(n) is int for n in entries):
        return None
    return doc


def save(store: Store, memo_key: str, findings: dict[str, Any]) -> None:
    """Write the findings of a verify that checked every layer (ASCII JSON: paths decoded
    with surrogate escapes round-trip)."""
    doc = {"format": FORMAT, "key": memo_key, **{f: findings[f] for f in FIELDS}}
    # a memo only saves time: a store that cannot take one (read-only, full) still verifies
    cache_write(_path(store, memo_key), json.dumps(doc).encode())
