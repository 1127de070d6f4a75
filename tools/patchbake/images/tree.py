"""The installed ``vllm/`` tree of an image: read from the base, checked against the
lineage, and written as the full tree manifest the in-image verifier checks.

``base_tree`` streams the base's layers (the same reader verify uses) for
``<site-packages>/vllm/`` and the ``vllm-*.dist-info`` beside it. ``check_lineage`` binds
the base to the lineage being baked (a base of another upstream is refused, with
:class:`LineageError`):

- a base without a vLLM dist-info (the stand-in) must hold exactly the lineage's pristine
  ``vllm/`` tree: same paths, same bytes;
- a base with one (a real vLLM image) must name the lineage's version in its METADATA
  (a local label, ``0.25.1+cu129``, is allowed), its RECORD must match the installed
  files, and every ``.py`` file both the base and the pristine sdist hold must be
  identical (the wheel's Python sources are the sdist's).

``manifest_bytes`` is the full tree as baked (base files, minus the patch's deletions,
plus the baked files), as canonical JSON: ``{"format", "root", "files": [[path, kind,
size, sha256, mode], ...]}`` sorted by path.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Lineage
from ..errors import ImageError, LineageError
from ..fsutil import cache_write, canonical_json
from ..oci.image import StoreBlobs
from ..oci.scan import scan_image
from ..oci.view import View
from ..sources import fetch
from ..sources.digest import MODE_LINK, digest_entries, tree_entries
from ..sources.treememo import TreeMemo
from ..store import Store
from .base import BaseImage

TREE_FORMAT = "patchbake-tree/1"
DIST_MEMO_FORMAT = "patchbake-base-dist-info/1"
TREE_PATH = "/opt/patchbake/tree.json"
PACKAGE = "vllm/"


@dataclass(frozen=True)
class TreeFile:
    kind: str  # "file" | "symlink"
    size: int
    sha256: str  # content; for a symlink, of its target
    mode: str  # "0644"


@dataclass(frozen=True)
class BaseTree:
    files: dict[str, TreeFile]  # "vllm/x.py" -> file
    dist_info: dict[str, bytes]  # "METADATA"/"RECORD" of vllm-*.dist-info, when present
    dist_name: str | None


def base_tree(base: BaseImage, store: Store, sp_rel: str) -> BaseTree:
    """The base image's installed ``vllm/`` tree (each layer read and digest-checked once, then
    replayed from its memo: see ``scan_image(stored=True)``)."""
    for d in base.image.layers:
        if not store.has(d.digest):
            raise ImageError(f"base {base.name} layer {d.digest} is not in the store; its "
                             "vllm/ tree must be read to bind the base to the lineage",
                             hint="give the base as an OCI layout or docker-archive with "
                                  "its layers, or a registry that serves them")
    tracked = (f"{sp_rel}/vllm/", f"{sp_rel}/vllm-")
    # the layers' ops memoised by layer digest; once every layer has its memo the blobs
    # are not hashed again (the store hashed them on write; `store fsck` re-checks, and
    # verify hashes every byte of the baked image). A base that installs a vLLM
    # dist-info is read again with it written out (RECORD, METADATA), once per base
    view = scan_image(base.image, StoreBlobs(store), tracked,
                      cache_dir=store.root / "bakes" / "layer-ops", stored=True)
    if not any(k.startswith(f"{sp_rel}/vllm-") for k in view.files):
        return _tree_of(view, base.name, sp_rel, {}, None)
    memo = _dist_memo_path(store, base, sp_rel)
    found = _read_dist_memo(memo)
    if found is not None and not _memo_matches(view, sp_rel, *found):
        found = None  # stale or altered: read again
    if found is None:
        found = _read_dist_info(base, store, sp_rel, tracked)
        cache_write(memo, canonical_json({
            "format": DIST_MEMO_FORMAT, "dist_name": found[1],
            "files": {k: base64.b64encode(v).decode() for k, v in found[0].items()}}))
    dist, dist_name = found
    return _tree_of(view, base.name, sp_rel, dist, dist_name)


def _memo_matches(view: View, sp_rel: str, dist: dict[str, bytes], dist_name: str | None
                  ) -> bool:
    """The memo's files are the ones the layers' view names, byte for byte (their sha256):
    a memo is a cache of bytes, never a source of them."""
    if dist_name is None or not dist:
        return False
    for name, data in dist.items():
        seen = view.files.get(f"{sp_rel}/{dist_name}/{name}")
        if seen is None or seen.kind != "file" or \
                seen.sha256 != hashlib.sha256(data).hexdigest():
            return False
    return True


def _read_dist_info(base: BaseImage, store: Store, sp_rel: str, tracked: tuple[str, ...]
                    ) -> tuple[dict[str, bytes], str | None]:
    """METADATA and RECORD of the base's ``vllm-*.dist-info``, and its name: the layers read
    again with the dist-info written out."""
    tmp = store.tmpdir("base-dist-info")
    try:
        scan_image(base.image, StoreBlobs(store), tracked, write_root=tmp,
                   write_prefix=f"{sp_rel}/vllm-")
        dists = sorted({p.name for p in tmp.iterdir() if p.name.endswith(".dist-info")}) \
            if tmp.is_dir() else []
        if len(dists) > 1:
            raise LineageError(f"base {base.name} has several vLLM dist-infos "
                               f"({', '.join('vllm-' + d for d in dists)}): which vLLM is "
                               "installed is ambiguous")
        dist: dict[str, bytes] = {}
        for name in ("METADATA", "RECORD"):
            p = tmp / dists[0] / name if dists else None
            if p is not None and p.is_file():
                dist[name] = p.read_bytes()
    finally:
        store.discard(tmp)
    return dist, f"vllm-{dists[0]}" if dists else None


def _dist_memo_path(store: Store, base: BaseImage, sp_rel: str) -> Path:
    """Where the dist-info read from ``base`` is memoised. Reading it means reading every
    layer through (a real serving base is ~10 GB): without the memo a bake's time would
    grow with the base. The key is the manifest digest, which names every layer by its
    digest, so the memo is a function of bytes the store verified when it wrote them. It is
    consulted once the layers' view is built (replayed from their ops memos, or read and
    hashed when those are gone), and its bytes are taken only when they hash to what that
    view holds for those files (``_memo_matches``): a stale or altered memo is read again."""
    key = hashlib.sha256(f"{DIST_MEMO_FORMAT}\0{base.manifest_digest}\0{sp_rel}".encode())
    return store.root / "bakes" / "layer-ops" / f"dist-info-{key.hexdigest()}.json"


def _read_dist_memo(path: Path) -> tuple[dict[str, bytes], str | None] | None:
    """The memoised dist-info; None when absent or not one this version wrote."""
    try:
        doc = json.loads(path.read_bytes())
        if doc["format"] != DIST_MEMO_FORMAT:
            return None
        dist = {str(k): base64.b64decode(v, validate=True) for k, v in doc["files"].items()}
        name = doc["dist_name"]
        return dist, None if name is None else str(name)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _tree_of(view: View, name: str, sp_rel: str, dist: dict[str, bytes],
             dist_name: str | None) -> BaseTree:
    pre = f"{sp_rel}/"
    files = {k[len(pre):]: TreeFile(v.kind, v.size, v.sha256, f"{v.mode & 0o7777:04o}")
             for k, v in view.files.items() if k.startswith(f"{pre}{PACKAGE}")}
    for k, v in files.items():
        if v.kind not in ("file", "symlink"):
            raise LineageError(f"base {name}: {pre}{k} is neither a file nor a symlink")
    return BaseTree(files, dist, dist_name)


def pristine_package(lineage: Lineage, store: Store, root: Path) -> dict[str, str]:
    """sha256 of every pristine ``vllm/`` file of the lineage's pin (the verified tree)."""
    fetched = fetch(lineage, store, base=root)
    # filled only from a tree whose full digest was re-computed and matched, so it holds
    # the pinned upstream's hashes even if the extracted tree were edited later
    cache = store.root / "bakes" / f"pristine-pkg-{fetched.tree_digest.hex}.json"
    try:
        data = json.loads(cache.read_bytes())
        if data.get("tree_digest") == str(fetched.tree_digest) and isinstance(data.get("files"), dict):
            return {str(k): str(v) for k, v in data["files"].items()}
    except (OSError, ValueError):
        pass  # absent or damaged: rebuilt below
    entries = tree_entries(fetched.root, memo=TreeMemo.for_tree(store.root, fetched.root))
    if digest_entries(entries) != fetched.tree_digest:
        raise ImageError(f"the pristine tree at {fetched.root} does not hash to "
                         f"{fetched.tree_digest}", hint="run `patchbake fetch --verify`")
    pkg = PACKAGE.encode()
    files = {e.path.decode(): ("link:" if e.mode == MODE_LINK else "") + e.sha256
             for e in entries if e.path.startswith(pkg)}
    # a cache: a store that cannot take it (full, read-only) hashes the tree again next time
    cache_write(cache, canonical_json({"tree_digest": str(fetched.tree_digest), "files": files}))
    return files


def _version(metadata: bytes) -> str | None:
    for line in metadata.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(":")
        if key.strip().lower() == "version":
            return value.strip()
    return None


def _record_problems(tree: BaseTree) -> list[str]:
    rows: dict[str, str] = {}
    # RECORD is CSV: a path with a comma (vLLM's fused_moe configs) is a quoted field
    text = tree.dist_info.get("RECORD", b"").decode("utf-8", "replace")
    for row in csv.reader(io.StringIO(text)):
        if row:
            rows[row[0]] = row[1] if len(row) > 1 else ""
    bad = []
    for rel, f in sorted(tree.files.items()):
        want = rows.get(rel)
        if want is None:
            if "/__pycache__/" not in f"/{rel}":
                bad.append(f"{rel} is installed but not in RECORD")
            continue
        if want.startswith("sha256=") and f.kind == "file":
            digest = base64.urlsafe_b64encode(bytes.fromhex(f.sha256)).rstrip(b"=").decode()
            if want[7:] != digest:
                bad.append(f"{rel} differs from its RECORD hash")
    bad += [f"{p} is in RECORD but not installed" for p in sorted(rows)
            if p.startswith(PACKAGE) and p not in tree.files]
    return bad


def check_lineage(tree: BaseTree, lineage: Lineage, pristine: dict[str, str],
                  base_name: str, has_vllm: bool = True) -> None:
    """Refuse a base whose installed vLLM is not the lineage's pin (LineageError). A
    definition that declares ``base.has_vllm: false`` (test bases) needs no vLLM there."""
    up = lineage.upstream
    what = f"lineage {lineage.key} (vllm {up.version})"
    if not has_vllm:
        if tree.files or tree.dist_name:
            raise LineageError(f"base {base_name} is declared without vLLM (base.has_vllm: "
                               f"false) but installs {len(tree.files)} vllm/ file(s)"
                               f"{' and ' + tree.dist_name if tree.dist_name else ''}")
        return
    if tree.dist_name is None:
        have = {k: ("link:" if f.kind == "symlink" else "") + f.sha256
                for k, f in tree.files.items()}
        diff = sorted(k for k in {*have, *pristine} if have.get(k) != pristine.get(k))
        if diff:
            raise LineageError(f"base {base_name}'s vllm/ tree is not the pristine tree of "
                               f"{what}: {len(diff)} of {len(pristine)} files differ (first: "
                               f"{diff[0]})", hint="bake onto a base of the lineage's "
                               "upstream pin, or name the right lineage")
        return
    version = _version(tree.dist_info.get("METADATA", b""))
    if version is None or not (version == up.version or version.startswith(f"{up.version}+")):
        raise LineageError(f"base {base_name} installs vllm {version or '(no METADATA version)'}"
                           f" ({tree.dist_name}); the definition bakes {what}",
                           hint="bake onto a base of the lineage's upstream pin")
    if "RECORD" not in tree.dist_info:
        raise LineageError(f"base {base_name}: {tree.dist_name} has no RECORD; the installed "
                           "files cannot be tied to the pinned release")
    bad = _record_problems(tree)
    generated = set(up.generated)
    bad += [f"{k} differs from the pinned sdist" for k in sorted(tree.files)
            if k.endswith(".py") and k in pristine and k not in generated
            and pristine[k] != tree.files[k].sha256]
    if bad:
        raise LineageError(f"base {base_name} (vllm {version}) is not an install of {what}: "
                           f"{len(bad)} problem(s) (first: {bad[0]})")


def full_tree(base: BaseTree, baked: list[dict[str, Any]], deleted: list[str],
              sp: str) -> dict[str, TreeFile]:
    """The ``vllm/`` tree as baked: base files, minus deletions, plus baked files."""
    pre = f"/{sp.strip('/')}/"
    files = dict(base.files)
    for d in deleted:
        files.pop(d.removeprefix(pre), None)
    for b in baked:
        files[b["path"].removeprefix(pre)] = TreeFile("file", b["size"], b["sha256"], b["mode"])
    return files


def manifest_bytes(files: dict[str, TreeFile], sp: str) -> bytes:
    root = f"/{sp.strip('/')}/{PACKAGE}"
    rows = [[k[len(PACKAGE):], f.kind, f.size, f.sha256, f.mode]
            for k, f in sorted(files.items())]
    return canonical_json({"format": TREE_FORMAT, "root": root, "files": rows}) + b"\n"


def tree_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
