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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import startup
from .config import Lineage, Pipeline
from .errors import ImageError, IntegrityError, VerifyError
from .fsutil import atomic_write, canonical_json
from .images import definition as definitions
from .images.definition import Definition
from .images.overlay import IDENTITY_PATH, VERIFIER_PATH, Patched
from .images.refs import Resolved, resolve
from .oci.scan import View, layer_ops, scan_image
from .store import Store

PACKAGE = "vllm/"
KEEP_DIR = "opt/patchbake/"
_IGNORED_DRIFT = ("__pycache__/",)


@dataclass
class VerifyResult:
    ref: str
    kind: str
    digest: str  # manifest digest of what was verified
    config_digest: str
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
                "base_drift": self.base_drift, "digest": self.digest,
                "config_digest": self.config_digest, "ref": self.ref, "kind": self.kind,
                "problems": self.problems, "layers": self.layers, "ok": self.ok,
                "bytes_read": self.bytes_read, "seconds": self.seconds,
                "definition": self.definition, **self.extra}


@dataclass(frozen=True)
class Expected:
    """What verify takes from the repository -- the image definition and, when the image
    was recorded, its image record -- and never from the image under test."""

    definition: Definition
    record: dict[str, Any] | None
    base_diff_ids: tuple[str, ...]
    base_config: dict[str, Any] | None
    how: str  # how the definition was found

    @property
    def sp(self) -> str:
        return self.definition.sp_rel


def _find_record(pipeline: Pipeline, image: Any) -> dict[str, Any] | None:
    """The image record naming this manifest digest (or, for an engine's re-export that
    keeps the config but not the manifest, this config digest)."""
    from .images import record as records

    for name in sorted(pipeline.images):
        folder = records.records_dir(pipeline.root, name)
        exact = records.record_path(pipeline.root, name, image.manifest_digest)
        files = [exact] if exact.is_file() else sorted(folder.glob("*.json"))
        for f in files:
            if f.name == records.LATEST:
                continue
            try:
                rec = json.loads(f.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and rec.get("definition") == name and (
                    rec.get("manifest_digest") == image.manifest_digest
                    or rec.get("config_digest") == image.config_desc.digest):
                return dict(rec)
    return None


def expected_for(pipeline: Pipeline, store: Store, res: Resolved, definition: str | None,
                 site_packages: str | None = None) -> Expected:
    """The definition (and record) ``res`` is verified against; refuses to guess."""
    rec = _find_record(pipeline, res.image)
    named = res.definition or definition
    if rec is not None and named is not None and rec["definition"] != named:
        raise ImageError(f"{res.ref} ({res.image.manifest_digest}) is recorded as a bake of "
                         f"'{rec['definition']}', not of '{named}'")
    name = named or (rec["definition"] if rec else None)
    if name is None:
        raise ImageError(f"cannot tell which image definition {res.ref} "
                         f"({res.image.manifest_digest}) is verified against: no image record "
                         "names it", hint="name it: `patchbake verify REF --definition NAME`")
    defn = _definition(pipeline, name)
    if site_packages and site_packages.strip("/") != defn.sp_rel:
        raise ImageError(f"--site-packages {site_packages} disagrees with definition "
                         f"'{name}' ({defn.site_packages}); verify reads the definition's")
    how = (f"definition '{name}'" + (" (named)" if named else " (from the image record)")
           + (f", record {rec['manifest_digest']}" if rec else ", no image record"))
    base_digest = (rec.get("base") or {}).get("manifest_digest") if rec else None
    base_digest = base_digest or defn.base.platform_digest or defn.base.digest
    base = _base_image(store, base_digest, name)
    if rec is not None:
        diff_ids = tuple(x["diff_id"] for x in rec.get("layers") or [] if x.get("from") == "base")
    else:
        diff_ids = tuple(base.diff_ids) if base is not None else ()
    if not diff_ids:
        raise ImageError(f"definition '{name}': its base {base_digest} is not in the store, so "
                         "the layers above the base cannot be told",
                         hint=f"run `patchbake bake {name}` (it fetches the base) first")
    return Expected(defn, rec, diff_ids, base.config if base is not None else None, how)


_DEFINITIONS: dict[tuple[str, str, int, int], Definition] = {}


def _definition(pipeline: Pipeline, name: str) -> Definition:
    """``definitions.load``, memoised on the file's path, size and mtime (YAML parsing
    costs more than hashing a small image's layers)."""
    rel = pipeline.images.get(name)
    try:
        st = (pipeline.root / str(rel)).stat() if isinstance(rel, str) else None
    except OSError:
        st = None
    if st is None:
        return definitions.load(pipeline, name)
    key = (str(pipeline.root), name, st.st_mtime_ns, st.st_size)
    if key not in _DEFINITIONS:
        _DEFINITIONS[key] = definitions.load(pipeline, name)
    return _DEFINITIONS[key]


def _base_image(store: Store, digest: str, name: str) -> Any:
    from .oci.image import StoreBlobs, load_image

    if not store.has(digest):
        return None
    try:
        return load_image(StoreBlobs(store), digest)
    except ImageError:
        return None  # an index: the record's platform manifest is used instead


def _label_checks(res: Resolved, exp: Expected) -> list[str]:
    """Labels are the image's claims about itself: compared with the definition, never
    obeyed."""
    labels = res.image.labels
    problems = []
    want = {"dev.patchbake.site-packages": exp.definition.site_packages,
            "dev.patchbake.definition": exp.definition.name}
    for key, value in want.items():
        if key in labels and labels[key] != value:
            problems.append(f"label {key}={labels[key]!r} disagrees with the definition "
                            f"({value!r})")
    if exp.record is not None and exp.record.get("site_packages") != \
            exp.definition.site_packages:
        problems.append(f"the image record says site-packages {exp.record.get('site_packages')}"
                        f", the definition {exp.definition.site_packages}")
    n = len(exp.base_diff_ids)
    if tuple(res.image.diff_ids[:n]) != exp.base_diff_ids:
        problems.append(f"the image's first {n} layers are not the base of definition "
                        f"'{exp.definition.name}' (diff_ids differ)")
    return problems


def _site_packages(res: Resolved, pipeline: Pipeline | None, given: str | None,
                   definition: str | None = None) -> str:
    """For materialise: the site-packages of the image's definition (found by name, by
    its image record, or as a definition's pinned base), else the caller's; never the
    image's own label."""
    sp = None
    if pipeline is not None:
        rec = _find_record(pipeline, res.image)
        name = res.definition or definition or (rec["definition"] if rec else None)
        if name is not None:
            sp = definitions.load(pipeline, name).sp_rel
        else:
            bases = {definitions.load(pipeline, n).sp_rel for n in sorted(pipeline.images)
                     if res.image.manifest_digest in _base_digests(pipeline, n)}
            sp = bases.pop() if len(bases) == 1 else None
    if sp is not None and given and given.strip("/") != sp:
        raise ImageError(f"--site-packages {given} disagrees with the image definition (/{sp})")
    if sp is None and not given:
        raise ImageError(f"cannot tell where {res.ref} installs vllm: no image definition or "
                         "record names it (its own labels are not trusted)",
                         hint="pass --site-packages, or run in the repository that baked it")
    return sp or str(given).strip("/")


def _base_digests(pipeline: Pipeline, name: str) -> set[str]:
    d = definitions.load(pipeline, name)
    return {x for x in (d.base.digest, d.base.platform_digest) if x}


def _pristine_hashes(root: Path, tree_digest: str, store: Store) -> dict[str, str]:
    """sha256 of every pristine ``vllm/`` file, keyed by the tree digest and cached.

    The cache is filled only from a tree whose full digest was re-computed and matched
    ``tree_digest``, so it holds the pinned upstream's hashes even if the extracted tree
    in the store were edited later; a damaged cache file is ignored and rebuilt.
    """
    from .sources.digest import MODE_LINK, digest_entries, tree_entries

    cache = store.root / "bakes" / f"pristine-{tree_digest.removeprefix('sha256:')}.json"
    try:
        data = json.loads(cache.read_bytes())
        if data.get("tree_digest") == tree_digest and isinstance(data.get("files"), dict):
            return dict(data["files"])
    except (OSError, ValueError):
        pass
    entries = tree_entries(root)
    got = digest_entries(entries)
    if got != tree_digest:
        raise IntegrityError(f"the pristine tree at {root} hashes to {got}, its record says "
                             f"{tree_digest}", hint="run `patchbake fetch --verify`")
    files = {os.fsdecode(e.path)[len(PACKAGE):]: e.sha256 for e in entries
             if e.mode != MODE_LINK and e.path.startswith(PACKAGE.encode())}
    atomic_write(cache, canonical_json({"tree_digest": tree_digest, "files": files}))
    return files


def compare(view: View, sp: str, patched: Patched, pristine: dict[str, str],
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
    for rel, sha in sorted(pristine.items()):
        full = f"vllm/{rel}"
        if full in touched or full in deleted or full in gen:
            continue
        info = view.files.get(prefix + full)
        if info is None:
            missing.append(full)
        elif info.sha256 != sha:
            changed.append(full)
        else:
            same += 1
    for path in sorted(view.files):
        if not path.startswith(prefix + PACKAGE):
            continue
        rel = path[len(prefix):]
        if rel[len(PACKAGE):] in pristine or rel in touched or rel in gen \
                or any(x in rel for x in _IGNORED_DRIFT):
            continue
        extra.append(rel)
    drift = {"unchanged": same, "changed": changed, "missing": missing, "extra": extra,
             "excluded_generated": excluded, "counts": {"changed": len(changed),
                                                        "missing": len(missing),
                                                        "extra": len(extra)}}
    return matched, total, mismatched, drift


def verify_image(pipeline: Pipeline, ref: str, store: Store, lineage: str | Lineage | None = None,
                 *, patched: Patched | None = None, pristine_root: Path | None = None,
                 site_packages: str | None = None, definition: str | None = None,
                 progress: Callable[[int], None] | None = None,
                 use_cache: bool = True) -> VerifyResult:
    """Verify ``ref``; returns the result (check ``.ok``); raises on a tampered image.

    Where to look (site-packages, which layers are the base, which start-up hooks are
    allowed) comes from the image definition and record, never from the image's labels."""
    t0 = time.monotonic()
    lin = lineage if isinstance(lineage, Lineage) else pipeline.lineage(lineage)
    if patched is None:
        from .patchset import patched_tree

        patched = patched_tree(lin, store)
    if pristine_root is None:
        from .sources import fetch

        fetched = fetch(lin, store, base=pipeline.root)
        pristine_root, pristine_digest = fetched.root, fetched.tree_digest
    else:
        from .sources import tree_digest as compute_digest

        pristine_digest = compute_digest(pristine_root)
    with resolve(store, ref, pipeline) as res:
        exp = expected_for(pipeline, store, res, definition, site_packages)
        sp = exp.sp
        env = startup.env_of(res.image.config)
        where = startup.places(exp.definition.site_packages, env)
        tracked = (f"{sp}/{PACKAGE}", "opt/patchbake/", *where.tracked())
        view = scan_image(res.image, res.blobs, tracked, progress=progress,
                          cache_dir=None if not use_cache else store.root / "bakes" / "layer-ops")
        identity, problems = _identity_checks(view, res)
        problems = _label_checks(res, exp) + problems
        pristine = _pristine_hashes(pristine_root, pristine_digest, store)
        after = _after_base(res, exp, patched, pristine, None if not use_cache
                            else store.root / "bakes" / "layer-ops")
        after += _stale_bytecode(view, sp, patched)
        problems += _record_checks(view, exp)
        problems += startup.findings(view, where, sp, startup.allow_list(
            exp.definition.startup_allow), env, exp.base_config, res.image.config,
            _wrapped(exp.base_config)) + _wrapper_checks(view, res)
        matched, total, mismatched, drift = compare(
            view, sp, patched, pristine, lin.upstream.generated, None)
        mismatched += after
        _drift_before_overlay(drift, {m["path"] for m in after})
        baked_patch = (identity.get("patch") or {}).get("sha256") if identity else None
        if identity and baked_patch is None:
            problems.append(f"{IDENTITY_PATH} names no patch sha256: which patch was baked "
                            "cannot be checked")
        elif identity and baked_patch != patched.patch_sha256:
            problems.append(f"the image was baked from patch sha256:{baked_patch}; the fresh "
                            f"apply is of patch sha256:{patched.patch_sha256}")
        return VerifyResult(
            ref=ref, kind=res.kind, digest=res.image.manifest_digest,
            config_digest=res.image.config_desc.digest, matched=matched, total=total,
            mismatched=mismatched, base_drift=drift, problems=problems,
            layers=[{"digest": x.digest, "diff_id": x.diff_id, "size": x.size,
                     "entries": x.entries, "from": "base" if i < len(exp.base_diff_ids)
                     else "after the base"} for i, x in enumerate(view.layers)],
            identity=identity, bytes_read=view.bytes_read,
            seconds=round(time.monotonic() - t0, 3), definition=exp.definition.name,
            extra={"selected": res.chosen or _selected(res), "expected_from": exp.how})


def _selected(res: Resolved) -> str:
    return {"definition": "the definition's latest recorded bake",
            "store": "the manifest named in the store",
            "docker": "the image the engine saved",
            "docker-archive": "the one image the archive's descriptions agree on",
            "registry": "the manifest the registry served for the reference"}.get(res.kind, "")


def _after_base(res: Resolved, exp: Expected, patched: Patched, pristine: dict[str, str],
                cache_dir: Path | None) -> list[dict[str, Any]]:
    """The base is pinned by digest; above it may only be written the baked files (or a
    vllm file byte-identical to upstream), /opt/patchbake, directories, and whiteouts of
    the files the patch deletes. Anything else -- under ``vllm/`` or anywhere else (the
    interpreter, its standard library, the entrypoint's scripts) -- is a failure."""
    pkg = f"{exp.sp}/{PACKAGE}"
    touched = {f"{exp.sp}/{p}" for p in patched.files if p.startswith(PACKAGE)}
    deleted = {f"{exp.sp}/{p}" for p in patched.deleted if p.startswith(PACKAGE)}
    out: list[dict[str, Any]] = []

    def bad(i: int, path: str, found: str | None, what: str) -> None:
        shown = path[len(exp.sp) + 1:] if path.startswith(pkg) or path == pkg[:-1] \
            else "/" + path
        out.append({"path": shown, "expected": pristine.get(path[len(pkg):]) if
                    path.startswith(pkg) else None, "found": found,
                    "why": f"layer {i} (above the base) {what}"})

    for i in range(len(exp.base_diff_ids), len(res.image.layers)):
        for op in layer_ops(res.image, res.blobs, i, ("",), cache_dir):
            path = op[1]
            if op[0] == "f":
                if path in touched or path.startswith(KEEP_DIR) or (
                        path.startswith(pkg) and op[2] == "file"
                        and pristine.get(path[len(pkg):]) == op[5]):
                    continue
                bad(i, path, op[5], "writes a file outside the baked set"
                    if path.startswith(pkg) else "writes outside the baked set and "
                    "/opt/patchbake")
            elif op[0] == "r" and not (not op[2] and path in deleted):
                bad(i, path, None, "deletes what is under it; the patch does not" if op[2]
                    else "deletes it; the patch does not")
            elif op[0] == "x":
                bad(i, path, None, "replaces this directory with a non-directory")
    return out


def _stale_bytecode(view: View, sp: str, patched: Patched) -> list[dict[str, Any]]:
    """Bytecode beside a baked or deleted file: Python may run it instead of the source
    (an unchecked hash-based .pyc always wins; a sourceless .pyc imports with no .py), and
    its header cannot be checked against a source it was not compiled from."""
    owners: dict[tuple[str, str], str] = {}  # (folder, module) -> the baked/deleted file
    for rel in {*patched.files, *patched.deleted}:
        if rel.startswith(PACKAGE) and rel.endswith(".py"):
            folder, _, name = rel.rpartition("/")
            owners[(f"{sp}/{folder}", name[:-3])] = rel
    out = []
    for path in sorted(p for p in view.files if p.endswith(".pyc")):
        folder, _, name = path.rpartition("/")
        cached = folder.endswith("/__pycache__")
        key = (folder.removesuffix("/__pycache__"), name.split(".", 1)[0]) if cached \
            else (folder, name[:-4])
        if key in owners:
            out.append({"path": path[len(sp) + 1:], "expected": None,
                        "found": view.files[path].sha256,
                        "why": f"bytecode of {owners[key]} that the fresh apply did not produce"
                        if cached else "sourceless bytecode of a baked/deleted module"})
    return out


def _wrapped(base_config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The base config with the entrypoint and cmd bake gives the image."""
    if base_config is None:
        return None
    from .bake import wrapped_entrypoint

    entry, cmd = wrapped_entrypoint(base_config)
    inner = {**(base_config.get("config") or {}), "Entrypoint": entry}
    inner.pop("Cmd", None)
    return {"config": {**inner, **({"Cmd": cmd} if cmd else {})}}


def _wrapper_checks(view: View, res: Resolved) -> list[str]:
    """An entrypoint through the start-up wrapper runs it first: it must be this tool's."""
    from .images.overlay import ENTRYPOINT_PATH, entrypoint_bytes

    entry = (res.image.config.get("config") or {}).get("Entrypoint") or []
    if entry[:1] != [ENTRYPOINT_PATH]:
        return []
    got = view.files.get(ENTRYPOINT_PATH.lstrip("/"))
    want = hashlib.sha256(entrypoint_bytes()).hexdigest()
    if got is None or got.kind != "file" or got.sha256 != want:
        return [(f"{ENTRYPOINT_PATH} (the image's entrypoint) is not the start-up wrapper "
                 f"this patchbake bakes (sha256:{want})")]
    return []


def _record_checks(view: View, exp: Expected) -> list[str]:
    """The in-image identity record must be the one the repository's image record names."""
    want = (exp.record or {}).get("identity_sha256")
    got = view.files.get(IDENTITY_PATH.lstrip("/"))
    if want and (got is None or got.sha256 != want):
        return [(f"{IDENTITY_PATH} is not the identity record the image record names "
                 f"(sha256:{want})")]
    return []


def _drift_before_overlay(drift: dict[str, Any], flagged: set[str]) -> None:
    """Base drift is the base against pristine upstream: paths the layers above the base
    changed are failures listed as mismatches, not drift."""
    for kind in ("changed", "missing", "extra"):
        drift[kind] = [p for p in drift[kind]
                       if not any(p == f or p.startswith(f + "/") for f in flagged)]
        drift["counts"][kind] = len(drift[kind])


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
    return identity, problems


def materialise(store: Store, ref: str, dest: Path, *, pipeline: Pipeline | None = None,
                site_packages: str | None = None) -> Path:
    """Write the image's vLLM tree (all layers, whiteouts applied, every layer digest and
    diff_id checked) to ``dest/vllm``. ``dest`` must not exist; it appears atomically."""
    if dest.exists():
        raise ImageError(f"{dest} already exists; materialise writes a fresh directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with resolve(store, ref, pipeline) as res:
        sp = _site_packages(res, pipeline, site_packages)
        staging = Path(store.tmpdir("materialise"))
        try:
            scan_image(res.image, res.blobs, (f"{sp}/{PACKAGE}",), write_root=staging,
                       write_prefix=f"{sp}/")
            if not (staging / "vllm").is_dir():
                raise ImageError(f"{ref} has no {sp}/vllm package")
            os.replace(staging, dest) if _same_fs(staging, dest.parent) else \
                shutil.move(str(staging), str(dest))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
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
