"""A files bundle: an image's vLLM and chosen distributions, for a GPU box that cannot
hold the image.

The serving image weighs 10 GB; a GPU box reachable only through small transfers cannot
take its layers, so ``suites bundle --files`` carries the part a suite runs: the image's
installed ``vllm/`` (patched, compiled extensions included), its dist-info, and the
distributions named with ``--dist``, each file exactly as the image's verified layers hold
it. ``manifest.json`` (``patchbake-files-bundle/v1``, canonical JSON) names

* the image (manifest and config digest), its base (the unpatched image it was baked on)
  and the site-packages directory, and the selection that made it (``dists``, ``leave``);
* ``files``: every file of the selection, ``[path, mode, sha256, size, left]`` with
  ``left`` the reason a file stays behind (``--leave PATH=REASON``) or null;
* ``pristine``: where the base's ``vllm/`` differs from the image's, the base's file
  (``[path, mode, sha256, size]``; mode null where the base lacks the path), so the
  patch-sensitivity probe runs on the unpatched install of the same release;
* ``records``: the RECORD of every distribution in the image, so the GPU box can show
  that what the bundle does not carry (torch, triton) is the same software, file by file;
* ``vllm_digest`` and ``pristine_vllm_digest``: tree digests (``sources.digest``) of the
  two ``vllm/`` trees as the GPU box will rebuild them (left files excluded).

The manifest is a pure function of the image's layers and the selection, so
``evidence sign`` rebuilds it from the store and refuses a result whose files do not
match the image it names (``check_signable``): what ran is bound to the digest, not to a
claim made on the GPU box.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata as md
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest
from ..errors import ImageError, IntegrityError, PatchbakeError, SuiteError, UsageError, shown
from ..fsutil import canonical_json, read_input, sha256_file
from ..images.distrecord import record_hash
from ..oci import image as oci_image
from ..oci.scan import scan_image
from ..oci.view import FileInfo, View
from ..sources.digest import MODE_EXEC, MODE_FILE, MODE_LINK, Entry, digest_entries, tree_digest
from ..staging import discard, new_dir, release
from ..store import Store
from .image import SuiteImage

FORMAT = "patchbake-files-bundle/v1"
MANIFEST = "manifest.json"
TREE, PRISTINE, RECORDS = "tree", "pristine", "records"
SITE_LABEL = "dev.patchbake.site-packages"
BASE_LABEL = "org.opencontainers.image.base.digest"
_MANIFEST_MAX = 64 << 20


def normalise(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Selection:
    """What a files bundle carries besides ``vllm``: distributions by name, and files
    (site-packages relative paths or directories) left behind with a reason."""

    dists: tuple[str, ...] = ()
    leave: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, dists: list[str] | tuple[str, ...], leave: list[str] | tuple[str, ...]
           ) -> Selection:
        pairs = []
        for item in leave:
            path, sep, reason = item.partition("=")
            if not sep or not path.strip("/") or not reason.strip():
                raise UsageError(f"--leave {shown(item)}: expected PATH=REASON (a path under "
                                 "site-packages and why it stays behind)")
            rel = path.strip("/")
            if rel in ("vllm", "vllm/__init__.py"):
                raise UsageError(f"--leave {shown(item)}: the bundle carries vllm; leave files "
                                 "or directories below vllm/, not the package")
            pairs.append((rel, reason.strip()))
        return cls(tuple(sorted({normalise(d) for d in dists})), tuple(sorted(set(pairs))))

    def to_json(self) -> dict[str, Any]:
        return {"dists": list(self.dists),
                "leave": [{"path": p, "reason": r} for p, r in self.leave]}

    @classmethod
    def from_json(cls, doc: Any) -> Selection:
        try:
            return cls.of([str(d) for d in doc["dists"]],
                          [f"{e['path']}={e['reason']}" for e in doc["leave"]])
        except (KeyError, TypeError) as exc:
            raise SuiteError(f"a files bundle's selection is malformed ({exc})") from exc

    def reason_for(self, path: str) -> str | None:
        for prefix, reason in self.leave:
            if path == prefix or path.startswith(prefix + "/"):
                return reason
        return None


def _mode(info: FileInfo) -> str:
    if info.kind == "symlink":
        return MODE_LINK
    return MODE_EXEC if info.mode & 0o111 else MODE_FILE


def _tree_digest(view: View, sp: str, sel: Selection) -> str:
    """The ``sources.digest`` tree digest of ``<sp>/vllm/`` as a directory rebuilt from
    ``view`` would give, without what the selection leaves behind (the rule the file and
    pristine rows follow)."""
    prefix = f"{sp}/vllm/"
    entries = [Entry(p[len(prefix):].encode(), _mode(i), i.sha256)
               for p, i in sorted(view.files.items())
               if p.startswith(prefix) and i.kind in ("file", "symlink")
               and sel.reason_for(p[len(sp) + 1:]) is None]
    entries.sort(key=lambda e: e.path)
    return str(digest_entries(entries))


def _dist_infos(view: View, sp: str) -> dict[str, tuple[str, bytes]]:
    """normalised name -> (dist-info directory, RECORD bytes) of every distribution."""
    found: dict[str, tuple[str, bytes]] = {}
    for path, data in view.contents.items():
        parent, _, name = path.rpartition("/")
        if name != "RECORD" or not parent.endswith(".dist-info") or \
                parent.rpartition("/")[0] != sp:
            continue
        info_dir = parent.rpartition("/")[2]
        found[normalise(info_dir.removesuffix(".dist-info").rpartition("-")[0])] = \
            (info_dir, data)
    return found


def _record_csv(data: bytes) -> list[list[str]]:
    """A RECORD's rows, read as the CSV it is (a path may hold a quoted comma)."""
    return [row for row in csv.reader(io.StringIO(data.decode("utf-8", "replace"))) if row]


def _record_paths(data: bytes) -> list[str]:
    return [row[0] for row in _record_csv(data)
            if row[0] and not row[0].startswith(("/", "../"))]


@dataclass
class Plan:
    """The manifest of a files bundle and what making it needs to know."""

    doc: dict[str, Any]
    sp: str  # site-packages inside the image, no leading '/'
    image: oci_image.Image
    base: oci_image.Image
    records: dict[str, bytes]  # dist-info directory -> RECORD bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.doc)).hexdigest()

    def carried(self) -> list[str]:
        return [f[0] for f in self.doc["files"] if f[4] is None]


def plan(store: Store, ref: SuiteImage, sel: Selection) -> Plan:
    """What a files bundle of ``ref`` with ``sel`` holds (every layer digest-checked)."""
    blobs = oci_image.StoreBlobs(store)
    img = oci_image.load_image(blobs, ref.digest)
    sp = img.labels.get(SITE_LABEL, "").strip("/")
    base_text = img.labels.get(BASE_LABEL, "")
    if not sp or not base_text:
        raise ImageError(f"{ref.name} ({ref.digest}) does not name its site-packages and its "
                         f"base ({SITE_LABEL}, {BASE_LABEL}): only a baked image can be "
                         "carried as files")
    base_digest = Digest.parse(base_text, f"{ref.name}'s {BASE_LABEL} label", ImageError)
    if not store.has(base_digest):
        raise ImageError(f"the base {base_digest} of {ref.name} is not in the store: the "
                         "pristine files come from it",
                         hint="rebuild it (`patchbake image base`) or pull it by digest")
    base = oci_image.load_image(blobs, base_digest)
    view = scan_image(img, blobs, (f"{sp}/",))
    base_view = scan_image(base, blobs, (f"{sp}/vllm/",))
    dists = _dist_infos(view, sp)
    wanted = _selected(view, sp, dists, sel, ref.name)
    files: list[list[Any]] = []
    for path in sorted(wanted):
        info = view.files[path]
        if info.kind not in ("file", "symlink"):
            raise ImageError(f"{path} in {ref.name} is not a file or symlink")
        rel = path[len(sp) + 1:]
        files.append([rel, _mode(info), info.sha256, info.size, sel.reason_for(rel)])
    records = {d: data for d, data in dists.values()}
    doc = {
        "format": FORMAT,
        "image": {"digest": str(ref.digest), "config_digest": str(img.config_desc.digest)},
        "base": str(base_digest),
        "site_packages": "/" + sp,
        "selection": sel.to_json(),
        "files": files,
        "pristine": _pristine_rows(view, base_view, sp, sel),
        "records": sorted([d, hashlib.sha256(data).hexdigest()] for d, data in records.items()),
        "vllm_digest": _tree_digest(view, sp, sel),
        "pristine_vllm_digest": _tree_digest(base_view, sp, sel),
    }
    return Plan(doc, sp, img, base, records)


def _selected(view: View, sp: str, dists: dict[str, tuple[str, bytes]], sel: Selection,
              name: str) -> set[str]:
    """The image paths a bundle carries: everything under vllm/, and each chosen
    distribution's files (its RECORD's rows that the image holds) and dist-info."""
    wanted: set[str] = {p for p in view.files if p.startswith(f"{sp}/vllm/")}
    for dist in ("vllm", *sel.dists):
        if dist not in dists:
            raise ImageError(f"{name} has no distribution {shown(dist)} in /{sp}",
                             hint="name distributions as pip does (`pip list` inside the image)")
        info_dir, record = dists[dist]
        wanted |= {f"{sp}/{p}" for p in _record_paths(record)} & set(view.files)
        wanted |= {p for p in view.files if p.startswith(f"{sp}/{info_dir}/")}
    for prefix, _reason in sel.leave:
        if not any(p[len(sp) + 1:] == prefix or p.startswith(f"{sp}/{prefix}/") for p in wanted):
            raise UsageError(f"--leave {shown(prefix)}: no carried file is at or below it")
    return wanted


def _pristine_rows(view: View, base_view: View, sp: str, sel: Selection) -> list[list[Any]]:
    """Where the base's vllm/ differs from the image's: the base's file, or a row with a
    null mode where the base lacks the path (a file the patch adds)."""
    rows: list[list[Any]] = []
    vllm = f"{sp}/vllm/"
    for path in sorted({p for p in view.files if p.startswith(vllm)} |
                       {p for p in base_view.files if p.startswith(vllm)}):
        rel = path[len(sp) + 1:]
        if sel.reason_for(rel) is not None:
            continue
        mine, theirs = view.files.get(path), base_view.files.get(path)
        if theirs is None:
            rows.append([rel, None, None, None])
        elif mine is None or (_mode(mine), mine.sha256) != (_mode(theirs), theirs.sha256):
            rows.append([rel, _mode(theirs), theirs.sha256, theirs.size])
    return rows


def make(store: Store, ref: SuiteImage, sel: Selection, out: Path) -> dict[str, Any]:
    """Write the bundle into ``out`` (a new directory; it appears whole or not at all)."""
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise UsageError(f"{out} exists and is not an empty directory; a bundle is written "
                         "into a fresh one")
    p = plan(store, ref, sel)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = new_dir(out.parent, f".{out.name}.")
    try:
        blobs = oci_image.StoreBlobs(store)
        carried = set(p.carried())
        tops = tuple(sorted({f"{p.sp}/{c.split('/')[0]}" for c in carried}))
        scan_image(p.image, blobs, tops, write_root=staging / TREE, write_prefix=f"{p.sp}/")
        _prune(staging / TREE, carried)
        want = {f[0]: f for f in p.doc["pristine"] if f[1] is not None}
        if want:
            scan_image(p.base, blobs, tuple(f"{p.sp}/{w}" for w in sorted(want)),
                       write_root=staging / PRISTINE, write_prefix=f"{p.sp}/")
            _prune(staging / PRISTINE, set(want))
        for info_dir, data in p.records.items():
            (staging / RECORDS / info_dir).mkdir(parents=True)
            (staging / RECORDS / info_dir / "RECORD").write_bytes(data)
        (staging / MANIFEST).write_bytes(canonical_json(p.doc))
        # what was written is what the manifest says, and its pristine tree rebuilds to the
        # recorded digest, before the bundle is named (not first on the GPU box)
        pristine_tree(check(staging), staging / "pristine-check")
        shutil.rmtree(staging / "pristine-check")
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        discard(staging)
        raise
    release(out)
    carried_bytes = sum(f[3] for f in p.doc["files"] if f[4] is None)
    return {"bundle": str(out), "image": str(ref.digest), "base": p.doc["base"],
            "manifest_sha256": p.sha256, "files": len(carried),
            "left": len(p.doc["files"]) - len(carried), "bytes": carried_bytes,
            "pristine_files": len(p.doc["pristine"]), "records": len(p.records)}


def _prune(root: Path, keep: set[str]) -> None:
    """Remove what a prefix scan wrote beyond the selection (another distribution's files
    in a shared directory, files outside RECORD)."""
    for dirpath, _dirs, names in os.walk(root, topdown=False):
        for name in names:
            full = Path(dirpath) / name
            if full.relative_to(root).as_posix() not in keep:
                full.unlink()
        if dirpath != str(root) and not os.listdir(dirpath):
            os.rmdir(dirpath)


@dataclass(frozen=True)
class FilesBundle:
    """A checked files bundle on this machine."""

    root: Path
    doc: dict[str, Any]
    sha256: str

    @property
    def tree(self) -> Path:
        return self.root / TREE

    @property
    def image_digest(self) -> Digest:
        return Digest.parse(self.doc["image"]["digest"], f"{self.root / MANIFEST}'s image",
                            SuiteError)

    def summary(self) -> dict[str, Any]:
        """What the suite result records about where its files came from."""
        left = [{"path": f[0], "reason": f[4]} for f in self.doc["files"] if f[4] is not None]
        return {"format": FORMAT, "manifest_sha256": self.sha256,
                "image": self.doc["image"]["digest"], "base": self.doc["base"],
                "site_packages": self.doc["site_packages"],
                "selection": self.doc["selection"],
                "carried_files": len(self.doc["files"]) - len(left), "left": left,
                "pristine_files": len(self.doc["pristine"]),
                "vllm_digest": self.doc["vllm_digest"],
                "pristine_vllm_digest": self.doc["pristine_vllm_digest"]}


def _entries_under(root: Path) -> set[str]:
    """Every entry below ``root`` (symlinks never followed), directories with a trailing
    '/': an empty directory is an entry too (an importable namespace package)."""
    found: set[str] = set()
    if not root.is_dir():
        return found
    for d, dirs, names in os.walk(root):
        rel = Path(d).relative_to(root).as_posix()
        base = "" if rel == "." else rel + "/"
        found |= {base + n for n in names}
        found |= {base + n + ("" if (Path(d) / n).is_symlink() else "/") for n in dirs}
    return found


def _with_parents(paths: set[str]) -> set[str]:
    """``paths`` and every directory above them, with a trailing '/'."""
    out = set(paths)
    for p in paths:
        parts = p.split("/")[:-1]
        out |= {"/".join(parts[:i]) + "/" for i in range(1, len(parts) + 1)}
    return out


def _entry_ok(path: Path, mode: str, sha: str) -> bool:
    if mode == MODE_LINK:
        return path.is_symlink() and \
            hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest() == sha
    if path.is_symlink() or not path.is_file():
        return False
    return sha256_file(path) == sha and (MODE_EXEC if os.stat(path).st_mode & 0o111
                                         else MODE_FILE) == mode


_HEX = re.compile(r"^[0-9a-f]{64}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MODES = (MODE_FILE, MODE_EXEC, MODE_LINK)


def _safe_rel(path: object) -> bool:
    """A relative '/'-separated path that stays below its root: no empty, '.' or '..'
    component, no backslash or NUL."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path \
            or "\0" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _validated(data: bytes, where: Path) -> dict[str, Any]:
    """The manifest's fields with their types checked; SuiteError (one line) otherwise. Every
    path a row names must stay below the bundle: rows become paths to read, unlink, copy."""
    def bad(why: str) -> SuiteError:
        return SuiteError(f"{where} is malformed: {why}")

    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise bad(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SuiteError(f"{where} is not a {FORMAT} manifest")
    image = doc.get("image")
    if not isinstance(image, dict) or not all(
            isinstance(image.get(k), str) and _DIGEST.match(image[k])
            for k in ("digest", "config_digest")):
        raise bad("'image' must name a manifest and a config digest")
    for key in ("base", "vllm_digest", "pristine_vllm_digest"):
        if not isinstance(doc.get(key), str) or not _DIGEST.match(doc[key]):
            raise bad(f"'{key}' must be sha256:<64 hex digits>")
    if not isinstance(doc.get("selection"), dict):
        raise bad("'selection' must be an object")
    Selection.from_json(doc["selection"])
    _check_rows(doc, bad)
    return doc


def _check_rows(doc: dict[str, Any], bad: Callable[[str], SuiteError]) -> None:
    files, pristine, records = doc.get("files"), doc.get("pristine"), doc.get("records")
    if not isinstance(files, list) or not all(
            isinstance(f, list) and len(f) == 5 and _safe_rel(f[0]) and f[1] in _MODES
            and isinstance(f[2], str) and _HEX.match(f[2]) and isinstance(f[3], int)
            and (f[4] is None or isinstance(f[4], str)) for f in files):
        raise bad("'files' must be rows [path below the bundle, mode, sha256, size, reason or "
                  "null]")
    if not isinstance(pristine, list) or not all(
            isinstance(f, list) and len(f) == 4 and _safe_rel(f[0])
            and f[0].startswith("vllm/") and (
                f[1:] == [None, None, None] or (f[1] in _MODES and isinstance(f[2], str)
                                                and _HEX.match(f[2]) and isinstance(f[3], int)))
            for f in pristine):
        raise bad("'pristine' must be rows [path below vllm/, mode, sha256, size] "
                  "(mode, sha256 and size null where the base lacks the path)")
    if not isinstance(records, list) or not all(
            isinstance(r, list) and len(r) == 2 and _safe_rel(r[0]) and "/" not in r[0]
            and r[0].endswith(".dist-info") and isinstance(r[1], str) and _HEX.match(r[1])
            for r in records):
        raise bad("'records' must be rows [<name>.dist-info, sha256]")


def check(root: Path) -> FilesBundle:
    """Read and check a bundle: its manifest, then every carried, pristine and RECORD file
    by sha256 and mode, and that nothing else is there (IntegrityError naming the first)."""
    data = read_input(root / MANIFEST, "files bundle manifest", SuiteError, _MANIFEST_MAX)
    doc = _validated(data, root / MANIFEST)
    expected = {TREE: {f[0]: (f[1], f[2]) for f in doc["files"] if f[4] is None},
                PRISTINE: {f[0]: (f[1], f[2]) for f in doc["pristine"] if f[1] is not None},
                RECORDS: {f"{d}/RECORD": (MODE_FILE, sha) for d, sha in doc["records"]}}
    for part, want in expected.items():
        extra = sorted(_entries_under(root / part) - _with_parents(set(want)))
        if extra:
            first = shown(part + "/" + extra[0])
            raise IntegrityError(f"files bundle {root}: {first} is not in its manifest "
                                 f"({len(extra)} such)")
        for rel, (mode, sha) in sorted(want.items()):
            path = root / part / rel
            if part == RECORDS:
                ok = path.is_file() and not path.is_symlink() and sha256_file(path) == sha
            else:
                ok = _entry_ok(path, mode, sha)
            if not ok:
                raise IntegrityError(f"files bundle {root}: {part}/{rel} is missing or differs "
                                     "from its manifest")
    sha = hashlib.sha256(canonical_json(doc)).hexdigest()
    # every file under tree/ was just checked by sha256 and mode and nothing else is there,
    # so the digest of tree/vllm is the digest of the manifest's rows: no second read
    got = str(digest_entries(sorted(
        (Entry(f[0].removeprefix("vllm/").encode(), f[1], f[2]) for f in doc["files"]
         if f[4] is None and f[0].startswith("vllm/")), key=lambda e: e.path)))
    if got != doc["vllm_digest"]:
        raise IntegrityError(f"files bundle {root}: tree/vllm is {got}, its manifest says "
                             f"{doc['vllm_digest']}")
    return FilesBundle(root, doc, sha)


def pristine_tree(bundle: FilesBundle, dest: Path) -> Path:
    """The unpatched tree beside the bundle's: the carried files hard-linked (copied where
    links cannot be made), with the base's files in place of the patched ones. Checked
    against the manifest's ``pristine_vllm_digest`` before it is used."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dst, follow_symlinks=False)

    shutil.copytree(bundle.tree, dest, symlinks=True, copy_function=link)
    for rel, mode, _sha, _size in bundle.doc["pristine"]:
        target = dest / rel
        if target.is_symlink() or target.exists():
            target.unlink()  # a hard link: never write through to the patched file
        if mode is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bundle.root / PRISTINE / rel, target, follow_symlinks=False)
    got = str(tree_digest(dest / "vllm"))
    if got != bundle.doc["pristine_vllm_digest"]:
        raise IntegrityError(f"the pristine tree rebuilt from files bundle {bundle.root} is "
                             f"{got}, its manifest says {bundle.doc['pristine_vllm_digest']}")
    return dest


def _record_rows(data: bytes) -> dict[str, str]:
    return {row[0]: row[1] for row in _record_csv(data) if len(row) >= 2 and row[1]}


def _file_record_hash(path: Path) -> str | None:
    try:
        return record_hash(sha256_file(path))
    except OSError:
        return None


def distributions(bundle: FilesBundle, search: list[str]) -> list[dict[str, Any]]:
    """Every distribution of the image: carried (the image's files), or found on
    ``search`` (the suite's path: the bundle's tree first) and compared file by file with
    the image's RECORD, or missing. Nothing is judged; the result records what was found.
    """
    carried = {normalise(d) for d in bundle.doc["selection"]["dists"]} | {"vllm"}
    found: dict[str, md.Distribution] = {}
    for dist in md.distributions(path=search):
        name = normalise(dist.metadata["Name"] or "")
        if name and name not in found:
            found[name] = dist
    out = []
    for info_dir, _sha in bundle.doc["records"]:
        name = normalise(info_dir.removesuffix(".dist-info").rpartition("-")[0])
        version = info_dir.removesuffix(".dist-info").rpartition("-")[2]
        row: dict[str, Any] = {"name": name, "image_version": version}
        if name in carried:
            out.append({**row, "source": "image"})
            continue
        if name not in found:
            out.append({**row, "source": "missing"})
            continue
        dist = found[name]
        image_rows = _record_rows((bundle.root / RECORDS / info_dir / "RECORD").read_bytes())
        mine = {str(f): Path(str(dist.locate_file(f))) for f in dist.files or []}
        same, differ = 0, []
        for rel, want in sorted(image_rows.items()):
            if rel in mine:
                if _file_record_hash(mine[rel]) == want:
                    same += 1
                else:
                    differ.append(rel)
        out.append({**row, "source": "machine", "machine_version": dist.version,
                    "location": str(dist.locate_file("")),
                    "compared": same + len(differ), "equal": same,
                    "differ": len(differ), "differ_files": differ[:20],
                    "only_image": len(set(image_rows) - set(mine)),
                    "only_machine": len({f for f in mine if f not in image_rows
                                         and not f.endswith(".pyc")})})
    return out


def suite_path(bundle: FilesBundle, extra: str) -> list[str]:
    """Where the suite's interpreter finds packages: the bundle's tree, the suite's extra
    directories (``PATCHBAKE_SITE``), then the interpreter's own path."""
    return [str(bundle.tree), *[p for p in extra.split(os.pathsep) if p],
            *[p for p in sys.path if p]]


def check_signable(store: Store, image: SuiteImage, recorded: dict[str, Any],
                   probed: bool, probe_digest: str | None) -> None:
    """Signing a result whose files came from a bundle: rebuild the bundle's manifest from
    the image's layers in the store and refuse unless it is the one the run checked, and
    unless the patch-sensitivity probe ran on that bundle's pristine tree."""
    from ..errors import refuse_evidence

    if not store.has(image.digest):
        refuse_evidence("files-unbound", f"the result ran on files carried from {image.digest}, "
                        "which is not in the store: its files cannot be checked against the "
                        "image's layers", hint="sign where the image's store is (the machine "
                        "that made the bundle)")
    if recorded.get("image") != str(image.digest):
        refuse_evidence("files-unbound", f"the result names image {image.digest} but its files "
                        f"came from a bundle of {shown(str(recorded.get('image')))}")
    try:
        again = plan(store, image, Selection.from_json(recorded.get("selection")))
    except PatchbakeError as exc:
        refuse_evidence("files-unbound", f"the files bundle the result names cannot be rebuilt "
                        f"from {image.digest} in the store: {exc.one_line()}")
    if again.sha256 != recorded.get("manifest_sha256"):
        refuse_evidence("files-unbound", f"the files the suite ran on (bundle manifest "
                        f"{shown(str(recorded.get('manifest_sha256')))}) are not those of "
                        f"{image.digest} (its layers give {again.sha256})")
    if probed and probe_digest != again.doc["pristine_vllm_digest"]:
        refuse_evidence("foreign-pristine", f"the patch-sensitivity probe ran on a vLLM tree "
                        f"{probe_digest}, not the unpatched base {again.doc['base']}'s "
                        f"{again.doc['pristine_vllm_digest']}")
