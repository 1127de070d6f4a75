"""The layers above the pinned base: what they may write, and bytecode beside baked files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .expected import Expected
from ..images import distrecord
from ..images.overlay import ENTRYPOINT_PATH, IDENTITY_PATH, VERIFIER_PATH, Patched
from ..images.tree import TREE_PATH
from ..images.refs import Resolved
from ..oci.layerdigests import LayerDigests
from ..oci.layerops import layer_ops
from ..oci.view import View

PACKAGE = "vllm/"
KEEP_DIR = "opt/patchbake/"
# what bake writes there, each content-checked by verify (wrapper, verifier, identity record
# bound to the repository, tree manifest equal to the unpacked tree); nothing else: a
# settings file there could be named by a variable a program reads at start
KEEP_FILES = frozenset(p.lstrip("/") for p in (ENTRYPOINT_PATH, IDENTITY_PATH, VERIFIER_PATH,
                                               TREE_PATH))


def is_dist_record(path: str, sp: str) -> bool:
    """The vLLM distribution's RECORD, which a bake rewrites with the baked files' hashes
    (verify then checks every row of it against the image: ``record_findings``)."""
    folder, _, name = path.rpartition("/")
    return name == "RECORD" and folder.startswith(f"{sp}/vllm-") \
        and folder.endswith(".dist-info") and folder.count("/") == sp.count("/") + 1


def scripts_dir(sp: str) -> str:
    """Where the installer put the distribution's console scripts: ``<prefix>/bin`` of the
    site-packages' prefix (``usr/local/lib/python3.11/dist-packages`` -> ``usr/local/bin``)."""
    return f"{sp.split('/lib/python')[0]}/bin/" if "/lib/python" in sp else "usr/bin/"


def dist_record_findings(view: View, sp: str) -> tuple[dict[str, int], list[str]]:
    """Every row of the vLLM distribution's RECORD checked against the image (a base with
    no dist-info -- the stand-in -- has none: no rows, no findings). The view must track
    the package, its dist-info and ``scripts_dir``."""
    records = [p for p in view.files if is_dist_record(p, sp)]
    if not records:
        return {"rows": 0, "checked": 0}, []
    if len(records) > 1:
        return {"rows": 0, "checked": 0}, [f"several vLLM dist-infos: {', '.join(sorted(records))}"]
    path = records[0]
    data = view.contents.get(path)
    if data is None:
        return {"rows": 0, "checked": 0}, [f"/{path} could not be read"]
    folder = path[len(sp) + 1:].rpartition("/")[0]
    installed = {p: f.sha256 for p, f in view.files.items() if f.kind == "file"}
    try:
        rows = distrecord.rows(data)
    except (UnicodeDecodeError, ValueError) as exc:
        return {"rows": 0, "checked": 0}, [f"/{path} is not a RECORD file ({exc})"]
    found = distrecord.problems(rows, installed, sp, f"{folder}/RECORD", PACKAGE)
    checked = sum(1 for r in rows if r.sha256 is not None)
    return {"rows": len(rows), "checked": checked}, [f"RECORD: {m}" for m in found[:20]] + (
        [f"RECORD: {len(found) - 20} more rows disagree"] if len(found) > 20 else [])


def after_base(res: Resolved, exp: Expected, patched: Patched, pristine: dict[str, str],
               cache_dir: Path | None, digests: LayerDigests | None = None
               ) -> list[dict[str, Any]]:
    """The base is pinned by digest; above it may only be written the baked files (or a
    vllm file byte-identical to upstream), the four files bake writes to /opt/patchbake
    (regular files), directories, and whiteouts of
    the files the patch deletes. Anything else -- under ``vllm/`` or anywhere else (the
    interpreter, its standard library, the entrypoint's scripts) -- is a failure. With
    ``digests``, memoised layers are checked there (see ``layer_ops``)."""
    pkg = f"{exp.sp}/{PACKAGE}"
    touched = {f"{exp.sp}/{p}" for p in patched.files if p.startswith(PACKAGE)}
    deleted = {f"{exp.sp}/{p}" for p in patched.deleted if p.startswith(PACKAGE)}
    # directories a layer above the base may carry under vllm/: the baked files' parents
    parents = {pkg[:-1]} | {q.rsplit("/", k)[0] for q in touched | deleted
                            for k in range(1, q[len(pkg):].count("/") + 2)}
    out: list[dict[str, Any]] = []

    def bad(i: int, path: str, found: str | None, what: str) -> None:
        shown = path[len(exp.sp) + 1:] if path.startswith(pkg) or path == pkg[:-1] \
            else "/" + path
        out.append({"path": shown, "expected": pristine.get(path[len(pkg):]) if
                    path.startswith(pkg) else None, "found": found,
                    "why": f"layer {i} (above the base) {what}"})

    for i in range(len(exp.base_diff_ids), len(res.image.layers)):
        for op in layer_ops(res.image, res.blobs, i, ("",), cache_dir, digests):
            path = op[1]
            if op[0] == "f":
                if path in touched or (path in KEEP_FILES and op[2] == "file") or (
                        op[2] == "file" and is_dist_record(path, exp.sp)) or (
                        path.startswith(pkg) and op[2] == "file"
                        and pristine.get(path[len(pkg):]) == op[5]):
                    continue
                bad(i, path, op[5], "writes a file outside the baked set"
                    if path.startswith(pkg) else "writes outside the baked set and "
                    "the files bake writes to /opt/patchbake")
            elif op[0] == "r" and not (not op[2] and path in deleted):
                bad(i, path, None, "deletes what is under it; the patch does not" if op[2]
                    else "deletes it; the patch does not")
            elif op[0] == "d" and (path + "/").startswith(pkg) and path not in parents:
                # a directory where the base has a module makes it a namespace package
                bad(i, path, None, "adds a directory outside the baked set")
            elif op[0] == "x":
                bad(i, path, None, "replaces this directory with a non-directory")
    return out


def stale_bytecode(view: View, sp: str, patched: Patched) -> list[dict[str, Any]]:
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


def drift_before_overlay(drift: dict[str, Any], flagged: set[str]) -> None:
    """Base drift is the base against pristine upstream: paths the layers above the base
    changed are failures listed as mismatches, not drift."""
    for kind in ("changed", "missing", "extra"):
        drift[kind] = [p for p in drift[kind]
                       if not any(p == f or p.startswith(f + "/") for f in flagged)]
        drift["counts"][kind] = len(drift[kind])
