"""On the GPU machine: unpack the bundle, check every file, and compare what it lacks.

Standard library only (it runs before anything from the bundle is importable).

* ``unpack``: join the parts (each checked against the manifest's sha256), unpack the
  tar.xz stream, re-hash every carried file and every overlay file against the manifest,
  and make the patched tree (a hard-linked copy of the image's ``vllm/`` with the
  overlay's files written in their place) beside the pristine one (the same, unpatched).
* ``compare``: what the bundle does not carry (torch, triton) is the machine's. Each
  installed file of those distributions is hashed and compared, path by path, with the
  RECORD of the lock's wheel of the same version; the report says how many match, which
  differ, and which exist on one side only. A different build of the same version shows
  up here as differing compiled files; nothing is hidden.

    python3 device_check.py unpack --parts DIR --into /root/bundle --out check.json
    python3 device_check.py compare --records DIR --out compare.json
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def unpack(parts: Path, into: Path) -> dict[str, object]:
    manifest = json.loads((parts / "manifest.json").read_text())
    stream = into / "stream.tar.xz"
    into.mkdir(parents=True, exist_ok=True)
    with stream.open("wb") as out:
        for part in manifest["parts"]:
            path = parts / part["name"]
            if sha256_file(path) != part["sha256"]:
                sys.exit(f"device_check: {path} does not match the manifest")
            out.write(path.read_bytes())
    if sha256_file(stream) != manifest["stream_sha256"]:
        sys.exit("device_check: the joined stream does not match the manifest")
    with tarfile.open(stream, "r:xz") as tar:
        # the stream is hash-checked; the data filter (where this Python has it) still
        # refuses links, devices and paths outside ``into``
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(into, **safe)  # noqa: S202 - checked stream, filtered where possible
    stream.unlink()
    bad = [e["path"] for e in manifest["files"] if e["carried"]
           and sha256_file(into / "site" / e["path"]) != e["sha256"]]
    bad += [e["path"] for e in manifest["overlay"]
            if sha256_file(into / "overlay" / e["path"]) != e["sha256"]]
    if bad:
        sys.exit(f"device_check: {len(bad)} files differ from the manifest: {bad[:5]}")
    # Each tree holds vllm/ alone (hard links into site/), so that the suite puts it
    # first on the path and takes every other package from site/ after it.
    trees = into / "trees"
    if trees.exists():
        shutil.rmtree(trees)
    patched, pristine = trees / "patched", trees / "pristine"
    for tree in (patched, pristine):
        shutil.copytree(into / "site" / "vllm", tree / "vllm", copy_function=os.link)
    for e in manifest["overlay"]:
        target = patched / e["path"]
        target.unlink(missing_ok=True)  # a hard link: never write through to the pristine file
        shutil.copyfile(into / "overlay" / e["path"], target)
    carried = [e for e in manifest["files"] if e["carried"]]
    return {
        "files_checked": len(carried) + len(manifest["overlay"]),
        "files_not_carried": [{"path": e["path"], "reason": e["not_carried_reason"]}
                              for e in manifest["files"] if not e["carried"]],
        "wheels": sorted({e["wheel"] for e in manifest["files"]}),
        "overlay": manifest["overlay"],
        "stream_sha256": manifest["stream_sha256"],
        "pristine_tree": str(pristine),
        "patched_tree": str(patched),
    }


def compare_dist(dist_name: str, record: Path) -> dict[str, object]:
    dist = md.distribution(dist_name)
    wheel = {}
    for line in record.read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if digest:
            wheel[name] = digest
    installed = {str(f): dist.locate_file(f) for f in dist.files or [] if f.hash}
    match, differ = 0, []
    for name, path in sorted(installed.items()):
        if name in wheel:
            if Path(path).is_file() and record_hash(Path(path)) == wheel[name]:
                match += 1
            else:
                differ.append(name)
    return {
        "distribution": dist_name, "version": dist.version, "record": record.name,
        "compared": match + len(differ), "match": match, "differ": len(differ),
        "differ_files": differ[:40],
        "only_installed": len(set(installed) - set(wheel)),
        "only_in_wheel": sorted(set(wheel) - set(installed))[:20],
        "only_in_wheel_count": len(set(wheel) - set(installed)),
        "installed_at": str(dist.locate_file("")),
    }


def compare(records: Path) -> dict[str, object]:
    out = []
    for rec in sorted(records.glob("*.RECORD")):
        out.append(compare_dist(rec.name.split("-")[0], rec))
    return {"python": sys.version.split()[0], "comparisons": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("unpack")
    u.add_argument("--parts", type=Path, required=True)
    u.add_argument("--into", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("--records", type=Path, required=True)
    for p in (u, c):
        p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    doc = unpack(args.parts, args.into) if args.cmd == "unpack" else compare(args.records)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True))
    print(json.dumps({k: v for k, v in doc.items() if k != "files_not_carried"})[:3000])


if __name__ == "__main__":
    main()
