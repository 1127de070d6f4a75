"""fetch(): a lineage's pinned upstream -> verified bytes -> safely extracted tree in the
store, with its tree digest recorded. Idempotent and keyed by content.

Store layout used here (beside the store's own blobs/ trees/ locks/ tmp/)::

    blobs/sha256/<archive sha256>        the archive, as pinned
    trees/<tree digest hex>/             the extracted tree (top-level dir stripped)
    sources/<key>.json                   source record: archive sha, tree digest, files

A record's key is what the pin names: the archive sha256 (+ strip) or the git commit, so
a second fetch of the same pin reads one small file and touches nothing else.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..digest import Digest, is_hex
from ..errors import FetchError, IntegrityError, PatchbakeError
from ..fsutil import CHUNK, atomic_write, canonical_json, pretty_json, sha256_bytes, sha256_file
from ..store import Store
from . import extract as ex
from . import gitsrc, http, index
from .digest import digest_entries, tree_entries
from .http import ProgressFactory

RECORD_VERSION = 1


@dataclass(frozen=True, slots=True)
class Fetched:
    archive_sha256: Digest | None  # None for a directory or git source
    tree_digest: Digest
    root: Path  # the pristine tree in the store: treat as read-only
    pin: str  # lineage.upstream.pin
    files: int = 0  # files and symlinks in the tree
    kind: str = ""
    record: Path | None = None


def _record_key(up: config.Upstream, archive: Digest | None, tree: Digest | None) -> str:
    if up.kind == "git":
        basis: dict[str, Any] = {"git": up.commit, "strip": up.strip}
    elif archive:
        basis = {"archive": archive.hex, "strip": up.strip}
    else:
        basis = {"tree": None if tree is None else str(tree), "strip": up.strip}
    return sha256_bytes(canonical_json(basis))


def _pinned(up: config.Upstream) -> Digest | None:
    """``upstream.sha256`` (bare hex, as pipeline.yaml writes it) as a Digest."""
    if not up.sha256:
        return None
    if not is_hex(up.sha256.lower()):
        raise FetchError(f"upstream.sha256 {up.sha256!r} is not 64 hex digits")
    return Digest.from_hex(up.sha256.lower())


def _record_path(store: Store, key: str) -> Path:
    return store.root / "sources" / f"{key}.json"


def _load(store: Store, key: str, up: config.Upstream) -> Fetched | None:
    p = _record_path(store, key)
    try:
        rec = json.loads(p.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # a damaged record is rebuilt, not trusted
    try:
        if rec.get("version") != RECORD_VERSION:
            return None
        tree = Digest.parse(rec["tree_digest"])
        archive = rec.get("archive_sha256")
        archive = None if archive is None else Digest.from_hex(archive)
    except (AttributeError, KeyError, TypeError, ValueError, PatchbakeError):
        return None  # a damaged record is rebuilt, not trusted
    root = store.tree_path(tree)
    if not root.is_dir():
        return None
    return Fetched(archive, tree, root, up.pin,
                   int(rec.get("files", 0)), up.kind, p)


def _save(store: Store, key: str, up: config.Upstream, archive: Digest | None, digest: Digest,
          files: int, strip: str | None, origin: str) -> Path:
    rec = {"version": RECORD_VERSION, "kind": up.kind, "package": up.package,
           "upstream_version": up.version, "pin": up.pin,
           "archive_sha256": None if archive is None else archive.hex, "tree_digest": str(digest), "files": files, "strip": strip, "origin": origin,
           "commit": up.commit, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    p = _record_path(store, key)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(p, pretty_json(rec))
    return p


def _resolve_local(spec: str, base: Path | None) -> Path:
    """A relative ``path``/``repo`` is relative to the pipeline's directory: ``base`` if
    given, else that of the pipeline.yaml config.find_pipeline() finds (nearest above the
    working directory, or PATCHBAKE_PIPELINE)."""
    p = Path(spec).expanduser()
    if p.is_absolute():
        return p
    return (base or config.find_pipeline().parent) / p


def _publish(store: Store, tree_root: Path, progress: ProgressFactory | None
             ) -> tuple[Digest, int]:
    with http.bar(progress, "tree digest", None, unit_bytes=False) as b:
        entries = tree_entries(tree_root, on_item=b.advance)
    digest = digest_entries(entries)
    placed = store.publish_tree(tree_root, digest)
    # what a record names is what is at its final place: hashed again there (another
    # process may have published this key first, or touched the tree on its way)
    with http.bar(progress, "tree digest in place", None, unit_bytes=False) as b:
        in_place = digest_entries(tree_entries(placed, on_item=b.advance))
    if in_place != digest:
        raise IntegrityError(
            f"the tree published at {placed} hashes to {in_place} in place, not to "
            f"{digest} as built; nothing was recorded",
            hint=f"something modified the store: delete {placed} and fetch again")
    return digest, len(entries)


def _extract(store: Store, archive: Path, up: config.Upstream, *, auto_strip: bool,
             progress: ProgressFactory | None) -> tuple[Digest, int, str | None]:
    """Extract into a staging dir under the store's tmp/, digest, publish atomically.
    On any failure the staging dir goes and nothing is published."""
    staging = store.tmpdir("extract")
    try:
        with http.bar(progress, "extract", None, unit_bytes=False) as b:
            root, used = ex.extract(archive, staging / "tree", strip=up.strip,
                                    auto_strip=auto_strip, on_member=b.advance)
        digest, n = _publish(store, root, progress)
        return digest, n, used
    finally:
        store.discard(staging)


def _held_intact(store: Store, pinned: Digest) -> bool:
    """Whether the store holds the pinned archive: the blob of that name is re-hashed
    first, since a name is only a claim (a blob damaged or planted under the pin's name
    must never become the pin's tree)."""
    if not store.has(pinned):
        return False
    got = sha256_file(store.blob_path(pinned))
    if got != pinned.hex:
        raise IntegrityError(
            f"store blob {pinned} holds bytes that hash to sha256:{got}, not to its name: "
            "the store is damaged", hint="run `patchbake store fsck --quarantine`, then "
            "fetch again")
    return True


def _archive_source(up: config.Upstream, store: Store, base: Path | None,
                    progress: ProgressFactory | None) -> tuple[Digest, str]:
    """Ensure the pinned archive is a blob in the store; (its digest, origin)."""
    pinned = _pinned(up)
    if up.kind == "path":
        src = _resolve_local(up.path or "", base)
        if not src.is_file():
            raise FetchError(f"path source: {src} does not exist",
                             hint="upstream.path must name a local tarball or directory")
        if pinned is not None and _held_intact(store, pinned):
            return pinned, str(src)
        with http.bar(progress, f"store {src.name}", src.stat().st_size) as b, \
                open(src, "rb") as f:
            got = store.put_stream(http.counted(iter(lambda: f.read(CHUNK), b""), b), pinned)
        return got, str(src)
    assert up.sha256 and pinned  # config requires it for index and url
    if _held_intact(store, pinned):  # e.g. a record was lost but the bytes are here
        return pinned, "store"
    session = http.new_session()
    if up.kind == "index":
        assert up.filename
        url = index.find_file(up.package, up.filename, up.sha256, session=session)
    else:
        url = up.url or ""
    what = f"download of {up.package} {up.version}"
    return http.download(url, store, pinned, what=what, progress=progress,
                         session=session), http.redact(url)


def fetch(lineage: config.Lineage, store: Store, *, progress: ProgressFactory | None = None,
          base: Path | None = None, verify: bool = False) -> Fetched:
    """Resolve ``lineage``'s upstream pin to a verified, extracted tree in ``store``.

    ``base`` resolves relative ``path``/``repo`` (default: the directory of the
    pipeline.yaml found from the working directory; the CLI passes the loaded one's). ``verify`` re-hashes a cached tree against its
    recorded digest. Safe to run concurrently: work on one pin happens under its lock.
    """
    up = lineage.upstream
    if up.kind == "path":
        src = _resolve_local(up.path or "", base)
        if src.is_dir():
            fetched = _fetch_dir(up, src, store, progress)
            if verify:
                check_tree(fetched)
            return fetched
    if up.kind == "git":
        key = _record_key(up, None, None)
    elif up.kind == "path" and not up.sha256:
        src = _resolve_local(up.path or "", base)
        if not src.is_file():
            raise FetchError(f"path source: {src} does not exist",
                             hint="upstream.path must name a local tarball or directory")
        key = _record_key(up, Digest.from_hex(sha256_file(src)), None)
    else:
        key = _record_key(up, _pinned(up), None)
    cached = _load(store, key, up)
    if cached is None:
        with store.lock(f"source-{key}"):
            cached = _load(store, key, up)  # another process may have finished it
            if cached is None:
                cached = _fetch_locked(up, key, store, base, progress)
    if verify:
        check_tree(cached)
    return cached


def _fetch_locked(up: config.Upstream, key: str, store: Store, base: Path | None,
                  progress: ProgressFactory | None) -> Fetched:
    if up.kind == "git":
        # git archive output is not canonical across git versions: it is extracted and
        # dropped, never stored as a blob; the commit id and tree digest are the identity
        staging = store.tmpdir("git")
        try:
            tar = staging / "export.tar"
            gitsrc.export(up.repo or "", up.commit or "", tar, root=base)
            digest, n, used = _extract(store, tar, up, auto_strip=False, progress=progress)
        finally:
            store.discard(staging)
        origin = f"{_resolve_local(up.repo or '', base)}@{up.commit}"
        rec = _save(store, key, up, None, digest, n, used, origin)
        return Fetched(None, digest, store.tree_path(digest), up.pin, n, up.kind, rec)
    blob, origin = _archive_source(up, store, base, progress)
    digest, n, used = _extract(store, store.blob_path(blob), up, auto_strip=True,
                               progress=progress)
    rec = _save(store, key, up, blob, digest, n, used, origin)
    return Fetched(blob, digest, store.tree_path(digest), up.pin, n, up.kind, rec)


def _fetch_dir(up: config.Upstream, src: Path, store: Store,
               progress: ProgressFactory | None) -> Fetched:
    """A directory is its own pin: hashed by tree digest (``sha256`` pins that digest)."""
    digest = digest_entries(tree_entries(src, skip_top=frozenset({b".git"})))
    pinned = _pinned(up)
    if pinned is not None and digest != pinned:
        raise IntegrityError(f"path source {src}: tree digest is {digest}, but the pin is "
                             f"{pinned}", hint="the directory changed since it "
                             "was pinned; re-pin deliberately or restore it")
    key = _record_key(up, None, digest)
    cached = _load(store, key, up)
    if cached is not None:
        return cached
    with store.lock(f"source-{key}"):
        cached = _load(store, key, up)
        if cached is not None:
            return cached

        staging = store.tmpdir("copy")
        try:
            copy = staging / "tree"
            ex.copy_tree(src, copy)
            got, n = _publish(store, copy, progress)
        finally:
            store.discard(staging)
        if got != digest:
            raise IntegrityError(f"path source {src} changed while it was copied "
                                 f"({digest} then {got}); retry when it is quiet")
        rec = _save(store, key, up, None, digest, n, None, str(src))
        return Fetched(None, digest, store.tree_path(digest), up.pin, n, up.kind, rec)


def check_tree(fetched: Fetched) -> None:
    """Re-hash a stored tree; raise IntegrityError if it no longer has its digest."""
    now = digest_entries(tree_entries(fetched.root))
    if now != fetched.tree_digest:
        raise IntegrityError(
            f"stored tree {fetched.root} hashes to {now}, recorded {fetched.tree_digest}",
            hint="something modified the store; delete that directory and fetch again")


