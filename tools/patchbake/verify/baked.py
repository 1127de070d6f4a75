"""identity: prove an image's vLLM files are exactly a fresh strict apply of the patch.

``verify_image`` streams the image's layers (no extraction; every layer digest and diff_id
checked after draining to EOF), applies whiteouts in memory, then compares every baked
file with a fresh apply of the patch to the pinned source, and the base's unpatched vLLM
files with the pristine upstream (base drift). ``materialise`` writes the verified vLLM
tree of an image to a directory (the fixtures' host runner runs suites against it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import memo, startup_hooks
from .above_base import (after_base, dist_record_findings, drift_before_overlay,
                         scripts_dir, stale_bytecode)
from ..config import Lineage, Pipeline
from ..digest import Digest
from ..errors import ImageError, IntegrityError, VerifyError
from .expected import (
    Expected,
    expected_for,
    label_checks,
    record_checks,
    site_packages_for,
    wrapped,
    wrapper_checks,
)
from ..fsutil import cache_write, canonical_json
from ..images.overlay import (
    ENTRYPOINT_PATH,
    IDENTITY_PATH,
    VERIFIER_PATH,
    Patched,
    verifier_bytes,
)
from ..images.tree import TREE_PATH
from ..images.refs import Resolved, resolve
from ..images.tree import TreeFile, manifest_bytes
from ..oci.layerdigests import LayerDigests
from ..oci.layerops import memoised
from ..oci.scan import scan_image
from ..oci.view import View
from ..patchset.patched import patched_tree
from ..sources import fetch
from ..sources import tree_digest as compute_digest
from ..sources.digest import MODE_LINK, digest_entries, tree_entries
from ..sources.treememo import TreeMemo
from ..store import Store

PACKAGE = "vllm/"
_IGNORED_DRIFT = ("__pycache__/",)


@dataclass
class VerifyResult:
    ref: str
    kind: str
    digest: Digest  # manifest digest of what was verified
    config_digest: Digest
    matched: int
    total: int
    mismatched: list[dict[str, Any]]
    base_drift: dict[str, Any]
    problems: list[str]
    layers: list[dict[str, Any]]
    identity: dict[str, Any] | None
    bytes_read: int
    seconds: float
    definition: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.problems and self.total > 0

    def summary(self) -> str:
        return f"{self.matched}/{self.total} baked source files matched a fresh apply"

    def to_json(self) -> dict[str, Any]:
        return {"matched": self.matched, "total": self.total, "mismatched": self.mismatched,
                "base_drift": self.base_drift, "digest": str(self.digest),
                "config_digest": str(self.config_digest), "ref": self.ref, "kind": self.kind,
                "problems": self.problems, "layers": self.layers, "ok": self.ok,
                "bytes_read": self.bytes_read, "seconds": self.seconds,
                "definition": self.definition, **self.extra}


def _pristine_hashes(root: Path, tree_digest: Digest, store: Store) -> dict[str, str]:
    """sha256 of every pristine ``vllm/`` file, keyed by the tree digest and cached.

    The cache is filled only from a tree whose full digest was re-computed and matched
    ``tree_digest``, so it holds the pinned upstream's hashes even if the extracted tree
    in the store were edited later; a damaged cache file is ignored and rebuilt.
    """
    cache = store.root / "bakes" / f"pristine-{tree_digest.hex}.json"
    try:
        data = json.loads(cache.read_bytes())
        if data.get("tree_digest") == str(tree_digest) and isinstance(data.get("files"), dict):
            return dict(data["files"])
    except (OSError, ValueError):
        pass
    entries = tree_entries(root, memo=TreeMemo.for_tree(store.root, root))
    got = digest_entries(entries)
    if got != tree_digest:
        raise IntegrityError(f"the pristine tree at {root} hashes to {got}, its record says "
                             f"{tree_digest}", hint="run `patchbake fetch --verify`")
    files = {os.fsdecode(e.path)[len(PACKAGE):]: e.sha256 for e in entries
             if e.mode != MODE_LINK and e.path.startswith(PACKAGE.encode())}
    # a cache: a store that cannot take it (full, read-only) hashes the tree again next time
    cache_write(cache, canonical_json({"tree_digest": str(tree_digest), "files": files}))
    return files


def compare(  # noqa: C901 - two comparisons over one view: patched files, then base drift
        view: View, sp: str, patched: Patched, pristine: dict[str, str],
        generated: tuple[str, ...], last_layer: int | None
        ) -> tuple[int, int, list[dict[str, Any]], dict[str, Any]]:
    """(matched, total, mismatched, base_drift) for a scanned image."""
    prefix = f"{sp}/"
    mismatched: list[dict[str, Any]] = []
    touched = {p for p in patched.files if p.startswith(PACKAGE)}
    deleted = {p for p in patched.deleted if p.startswith(PACKAGE)}
    for rel in sorted(touched):
        info = view.files.get(prefix + rel)
        want = patched.files[rel]
        if info is None or info.kind != "file":
            mismatched.append({"path": rel, "expected": want, "found": None,
                               "why": "missing from the image"})
        elif info.sha256 != want:
            mismatched.append({"path": rel, "expected": want, "found": info.sha256,
                               "why": "content differs from a fresh apply"})
    for rel in sorted(deleted):
        if prefix + rel in view.files:
            mismatched.append({"path": rel, "expected": None,
                               "found": view.files[prefix + rel].sha256,
                               "why": "the patch deletes it, the image has it"})
    if last_layer is not None:  # files our layer carries that the patch does not touch
        for path, info in sorted(view.files.items()):
            if not path.startswith(prefix + PACKAGE) or info.layer != last_layer:
                continue
            baked_rel = path[len(prefix):]
            if baked_rel not in touched:
                mismatched.append({"path": baked_rel,
                                   "expected": pristine.get(baked_rel[len(PACKAGE):]),
                                   "found": info.sha256,
                                   "why": "baked but not touched by the patch"})
    total = len(touched) + len(deleted)
    bad = {m["path"] for m in mismatched}
    matched = len((touched | deleted) - bad)
    gen = set(generated)
    changed, missing, extra, excluded = [], [], [], sorted(gen)
    same = 0
    files = view.files
    for rel, sha in pristine.items():  # each list is sorted once it is complete
        full = PACKAGE + rel
        if full in touched or full in deleted or full in gen:
            continue
        info = files.get(prefix + full)
        if info is None:
            missing.append(full)
        elif info.sha256 != sha:
            changed.append(full)
        else:
            same += 1
    pkg, cut = prefix + PACKAGE, len(prefix) + len(PACKAGE)
    for path in files:
        if not path.startswith(pkg) or path[cut:] in pristine:
            continue
        rel = path[len(prefix):]
        if rel in touched or rel in gen or any(x in rel for x in _IGNORED_DRIFT):
            continue
        extra.append(rel)
    changed.sort()
    missing.sort()
    extra.sort()
    drift = {"unchanged": same, "changed": changed, "missing": missing, "extra": extra,
             "excluded_generated": excluded, "counts": {"changed": len(changed),
                                                        "missing": len(missing),
                                                        "extra": len(extra)}}
    return matched, total, mismatched, drift


def verify_image(pipeline: Pipeline, ref: str | Digest, store: Store, lineage: str | Lineage | None = None,
                 *, patched: Patched | None = None, pristine_root: Path | None = None,
                 site_packages: str | None = None, definition: str | None = None,
                 progress: Callable[[int], None] | None = None,
                 use_cache: bool = True) -> VerifyResult:
    """Verify ``ref``; returns the result (check ``.ok``); raises on a tampered image.

    Where to look (site-packages, which layers are the base, which start-up hooks are
    allowed) comes from the image definition and record, never from the image's labels.
    With ``use_cache`` the findings and each layer's ops are memoised (``verify_memo``,
    ``oci.layerops``); every layer is still read and hashed to EOF and checked every time."""
    t0 = time.monotonic()
    ref = str(ref)  # a manifest digest is one of the references resolve() takes
    with resolve(store, ref, pipeline) as res, _hashing(res, use_cache) as early:
        exp = expected_for(pipeline, store, res, definition, site_packages)
        # The lineage is the definition's: a fresh apply or pristine tree of another
        # upstream would verify (or fail) the image against the wrong thing.
        lin = pipeline.lineage_for(
            exp.definition, lineage.key if isinstance(lineage, Lineage) else lineage)
        patched, pristine_root, pristine_digest = _fresh_inputs(
            pipeline, lin, store, patched, pristine_root)
        memo_key = memo.key(res, exp, lin, patched, pristine_digest) if use_cache \
            else None
        recalled = memo.load(store, memo_key, len(res.image.layers)) if memo_key else None
        env = startup_hooks.env_of(res.image.config)
        where = startup_hooks.places(exp.definition.site_packages, env)
        tracked = (f"{exp.sp}/{PACKAGE}", f"{exp.sp}/vllm-", scripts_dir(exp.sp),
                   "opt/patchbake/",
                   *where.tracked(),
                   *startup_hooks.allowed_paths(exp.definition.startup_allow))
        cache_dir = store.root / "bakes" / "layer-ops" if use_cache else None
        digests = _keep_hashing(early, res, exp, tracked, cache_dir, recalled is not None)
        if recalled is not None and digests is not None:
            view, found = View(), recalled
            digests.entries = list(recalled["entries"])
        else:
            view = scan_image(res.image, res.blobs, tracked, progress=progress,
                              cache_dir=cache_dir, digests=digests)
            pristine = _pristine_hashes(pristine_root, pristine_digest, store)
            found = _findings(view, res, exp, lin, patched, pristine, where, env, cache_dir,
                              digests)
        # every layer's digest, size and diff_id: nothing above may be returned before
        layers = digests.settle(view, progress) if digests is not None else view.layers
        if memo_key is not None and recalled is None:
            memo.save(store, memo_key, {**found, "entries": [x.entries for x in layers]})
        return VerifyResult(
            ref=ref, kind=res.kind, digest=res.image.manifest_digest,
            config_digest=res.image.config_desc.digest, matched=found["matched"],
            total=found["total"], mismatched=found["mismatched"],
            base_drift=found["base_drift"], problems=found["problems"],
            layers=[{"digest": str(x.digest), "diff_id": str(x.diff_id), "size": x.size,
                     "entries": x.entries, "from": "base" if i < len(exp.base_diff_ids)
                     else "after the base"} for i, x in enumerate(layers)],
            identity=found["identity"], bytes_read=view.bytes_read,
            seconds=round(time.monotonic() - t0, 3), definition=exp.definition.name,
            extra={"selected": res.chosen or _selected(res), "expected_from": exp.how})


def _findings(view: View, res: Resolved, exp: Expected, lin: Lineage, patched: Patched,
              pristine: dict[str, str], where: startup_hooks.Places, env: dict[str, str],
              cache_dir: Path | None, digests: LayerDigests | None) -> dict[str, Any]:
    """What verify finds in a scanned image: the fields ``verify_memo`` keeps."""
    sp = exp.sp
    identity, problems = _identity_checks(view, res)
    problems = label_checks(res, exp) + problems
    after = after_base(res, exp, patched, pristine, cache_dir, digests)
    after += stale_bytecode(view, sp, patched)
    problems += record_checks(view, exp)
    record_counts, record_problems = dist_record_findings(view, sp)
    problems += record_problems
    problems += startup_hooks.findings(view, where, sp, startup_hooks.allow_list(
        exp.definition.startup_allow), env, exp.base_config, res.image.config,
        wrapped(exp.base_config), {"TORCH_CUDA_ARCH_LIST":
                                   exp.definition.torch_cuda_arch_list,
                                   **exp.definition.baked_env()}
    ) + wrapper_checks(view, res)
    matched, total, mismatched, drift = compare(
        view, sp, patched, pristine, lin.upstream.generated, None)
    mismatched += after
    drift_before_overlay(drift, {m["path"] for m in after})
    problems += _patch_checks(identity, patched)
    if identity:
        problems += identity_binding(identity, exp.definition, lin, patched)
        problems += tree_manifest_checks(view, identity, exp.definition.site_packages)
    drift["record"] = record_counts
    return {"matched": matched, "total": total, "mismatched": mismatched,
            "base_drift": drift, "problems": problems, "identity": identity}


@contextmanager
def _hashing(res: Resolved, use_cache: bool) -> Iterator[LayerDigests | None]:
    """Start hashing the image's layers at once when verify may use memos (it usually
    can: see ``_keep_hashing``); stopped on the way out, whatever happened."""
    if not use_cache:
        yield None
        return
    with LayerDigests(res.image, res.blobs) as digests:
        yield digests


def _keep_hashing(early: LayerDigests | None, res: Resolved, exp: Expected,
                  tracked: tuple[str, ...], cache_dir: Path | None, memoised_findings: bool
                  ) -> LayerDigests | None:
    """The background hashing, when the findings or every layer's ops (the region verify
    tracks, and the layers above the base whole) are memoised; otherwise it is stopped and
    None returned: the layers are parsed, each hashed as it is read."""
    above = range(len(exp.base_diff_ids), len(res.image.layers))
    if early is not None and cache_dir is not None and (memoised_findings or (
            memoised(res.image, tracked, cache_dir)
            and memoised(res.image, ("",), cache_dir, above))):
        return early
    if early is not None:
        early.cancel()
    return None


def _fresh_inputs(pipeline: Pipeline, lin: Lineage, store: Store, patched: Patched | None,
                  pristine_root: Path | None) -> tuple[Patched, Path, Digest]:
    """The fresh apply and the pristine tree (with its digest) an image is held to."""
    if patched is None:
        patched = patched_tree(lin, store)
    if pristine_root is None:
        fetched = fetch(lin, store, base=pipeline.root)
        return patched, fetched.root, fetched.tree_digest

    return patched, pristine_root, compute_digest(
        pristine_root, TreeMemo.for_tree(store.root, pristine_root))


def _patch_checks(identity: dict[str, Any] | None, patched: Patched) -> list[str]:
    baked_patch = (identity.get("patch") or {}).get("sha256") if identity else None
    if identity and baked_patch is None:
        return [f"{IDENTITY_PATH} names no patch sha256: which patch was baked cannot be "
                "checked"]
    if identity and baked_patch != patched.patch_sha256:
        return [f"the image was baked from patch sha256:{baked_patch}; the fresh apply is "
                f"of patch sha256:{patched.patch_sha256}"]
    return []


def _selected(res: Resolved) -> str:
    return {"definition": "the definition's latest recorded bake",
            "store": "the manifest named in the store",
            "docker": "the image the engine saved",
            "docker-archive": "the one image the archive's descriptions agree on",
            "registry": "the manifest the registry served for the reference"}.get(res.kind, "")


def _identity_checks(view: View, res: Resolved) -> tuple[dict[str, Any] | None, list[str]]:
    """The in-image identity record must describe the image it is in."""
    problems: list[str] = []
    info = view.files.get(IDENTITY_PATH.lstrip("/"))
    if info is None:
        return None, [f"no {IDENTITY_PATH} in the image: it was not baked by patchbake"]
    raw = view.contents.get(IDENTITY_PATH.lstrip("/"))
    try:
        identity = json.loads(raw or b"")
    except ValueError:
        return {}, [f"{IDENTITY_PATH} is not valid JSON"]
    files = identity.get("files") if isinstance(identity, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files) \
            or not isinstance(identity.get("patch", {}), dict) \
            or not isinstance(identity.get("verifier", {}), dict):
        # a record of the wrong shape is a finding about the image, not a crash
        return {}, [f"{IDENTITY_PATH} is not an identity record (wrong shape)"]
    for f in files:
        got = view.files.get(str(f.get("path", "")).lstrip("/"))
        if got is None or got.sha256 != f.get("sha256"):
            problems.append(f"identity record lists {f.get('path')} as sha256:{f.get('sha256')}"
                            f", the image has {got.sha256 if got else 'nothing'}")
    ver = identity.get("verifier") or {}
    got = view.files.get(VERIFIER_PATH.lstrip("/"))
    if got is None or got.sha256 != ver.get("sha256"):
        problems.append(f"{VERIFIER_PATH} does not match the identity record")
    # the record is the image's own word: the verifier (which the start-up check runs)
    # must also be the one this tool bakes, or a stub and a record naming it would pass
    want = hashlib.sha256(verifier_bytes()).hexdigest()
    if got is not None and got.sha256 != want:
        problems.append(f"{VERIFIER_PATH} is not the in-image verifier this patchbake bakes "
                        f"(sha256:{want}, the image has sha256:{got.sha256})")
    return identity, problems


def identity_binding(identity: dict[str, Any], defn: Any, lin: Lineage,
                     patched: Patched) -> list[str]:
    """The in-image identity record must say what the repository says, field by field, with
    or without an image record naming its hash: the in-image self-check trusts it."""
    up = lin.upstream
    want = {
        "definition": defn.name,
        "lineage": lin.key,
        "upstream.version": up.version,
        "upstream.tree_digest": str(patched.pristine_digest),
        "files_sha256": patched.files_sha256,
        "patched_tree_digest": str(patched.tree_digest),
        "site_packages": defn.site_packages,
        "base.digest": str(defn.base.digest),
        "startup_allow": [{"path": p, "sha256": h} for p, h in defn.startup_allow],
        "entrypoint": ENTRYPOINT_PATH,
        "verifier.path": VERIFIER_PATH,
        "tree.path": TREE_PATH,
    }
    problems = []
    for key, value in want.items():
        got: Any = identity
        for part in key.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if got != value:
            problems.append(f"{IDENTITY_PATH} says {key} = {json.dumps(got)}; the repository "
                            f"says {json.dumps(value)}")
    return problems


def tree_manifest_checks(view: View, identity: dict[str, Any], site_packages: str) -> list[str]:
    """``/opt/patchbake/tree.json`` (what the in-image self-check compares the installed tree
    with) must be the identity record's and list exactly the ``vllm/`` tree the engine
    unpacks: a manifest edited to match other code would let the image pass its own check."""
    info = view.files.get(TREE_PATH.lstrip("/"))
    named = (identity.get("tree") or {}).get("sha256") if isinstance(identity.get("tree"),
                                                                      dict) else None
    if info is None or info.kind != "file":
        return [f"no {TREE_PATH} in the image (the in-image check's tree manifest)"]
    problems = []
    if info.sha256 != named:
        problems.append(f"{TREE_PATH} is sha256:{info.sha256}; {IDENTITY_PATH} names "
                        f"sha256:{named}")
    pre = f"{site_packages.strip('/')}/"
    files = {k[len(pre):]: TreeFile(v.kind, v.size, v.sha256, f"{v.mode & 0o7777:04o}")
             for k, v in view.files.items() if k.startswith(pre + PACKAGE)}
    try:
        seen = hashlib.sha256(manifest_bytes(files, site_packages)).hexdigest()
    except UnicodeEncodeError:
        return [*problems, f"the vllm/ tree the image unpacks to has a path that is not UTF-8: "
                f"{TREE_PATH} cannot list it"]
    if seen != info.sha256:
        problems.append(f"{TREE_PATH} does not list the vllm/ tree the image unpacks to "
                        f"(that tree's manifest is sha256:{seen})")
    return problems


def materialise(store: Store, ref: str | Digest, dest: Path, *, pipeline: Pipeline | None = None,
                site_packages: str | None = None) -> Path:
    """Write the image's vLLM tree (all layers, whiteouts applied, every layer digest and
    diff_id checked) to ``dest/vllm``. ``dest`` must not exist; it appears atomically."""
    if dest.exists():
        raise ImageError(f"{dest} already exists; materialise writes a fresh directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with resolve(store, str(ref), pipeline) as res:
        sp = site_packages_for(res, pipeline, site_packages)
        staging = Path(store.tmpdir("materialise"))
        try:
            scan_image(res.image, res.blobs, (f"{sp}/{PACKAGE}",), write_root=staging,
                       write_prefix=f"{sp}/")
            if not (staging / "vllm").is_dir():
                raise ImageError(f"{ref} has no {sp}/vllm package")
            os.replace(staging, dest) if _same_fs(staging, dest.parent) else \
                shutil.move(str(staging), str(dest))
        except BaseException:
            store.discard(staging)
            raise
    return dest


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def raise_on_failure(result: VerifyResult) -> None:
    if result.ok:
        return
    first = result.mismatched[0] if result.mismatched else None
    detail = (f"; first: {first['path']} expected {first['expected']} found {first['found']}"
              if first else f"; {result.problems[0]}" if result.problems else "")
    raise VerifyError(f"{result.ref} ({result.digest}): {result.summary()}"
                      f"{detail}", hint="re-bake from the committed patch (`patchbake bake`)")
