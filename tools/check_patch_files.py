#!/usr/bin/env python3
"""The lost-line guard from a bare checkout: standard library and git only.

    python3 tools/check_patch_files.py [--json] [--tree DIR | --no-tree] [--patch P] [--files F]

Runs the same checks as ``patchbake patch check`` (it imports the same standard-library
modules from ``tools/patchbake/patchset``). The three-way part (strict apply to the pinned
tree, post-image hashes, re-export) needs the pristine upstream tree: ``--tree DIR``, or
the tree a previous ``patchbake fetch`` left in the store (found through the tree digest
that ``patch/SOURCE`` records). Without one, the patch <=> FILES.txt part still runs and a
note says the rest was skipped; ``--require-tree`` makes that a failure.
Exit status: 0 when every check passed, 21 (the guard's code) otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from patchbake.errors import GuardError, PatchbakeError
from patchbake.patchset.guard import check
from patchbake.patchset.sourcerec import read_source


def _store_root() -> Path:
    env = os.environ.get("PATCHBAKE_HOME")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "patchbake"


def _find_patch(repo: Path, files: Path, source: dict[str, object] | None) -> Path:
    name = (source or {}).get("patch")
    if not name and files.exists():
        for line in files.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("# patch: "):
                name = line[len("# patch: "):].strip()
                break
    if not name:
        found = sorted((repo / "patch").glob("*.patch"))
        if len(found) != 1:
            raise GuardError("cannot tell which patch to check; pass --patch")
        return found[0]
    return files.parent / str(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=HERE.parent, help="repository root")
    ap.add_argument("--patch", type=Path, help="the canonical patch (default: from FILES.txt)")
    ap.add_argument("--files", type=Path, help="FILES.txt (default: patch/FILES.txt)")
    ap.add_argument("--source", type=Path, help="SOURCE record (default: patch/SOURCE)")
    ap.add_argument("--tree", type=Path, help="pristine upstream tree for the three-way part")
    ap.add_argument("--no-tree", action="store_true", help="skip the three-way part")
    ap.add_argument("--require-tree", action="store_true",
                    help="fail when no pristine tree is available")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    try:
        files = args.files or args.repo / "patch" / "FILES.txt"
        src_rec = read_source(args.source or args.repo / "patch" / "SOURCE")
        source = src_rec.data if src_rec else None
        patch = args.patch or _find_patch(args.repo, files, source)
        if not patch.exists():
            raise GuardError(f"{patch} does not exist")
        tree = None if args.no_tree else args.tree
        if tree is None and not args.no_tree and src_rec and src_rec.tree_digest:
            candidate = _store_root() / "trees" / src_rec.tree_digest.removeprefix("sha256:")
            tree = candidate if candidate.is_dir() else None
        if tree is None and args.require_tree:
            raise GuardError("no pristine tree: pass --tree DIR or run `patchbake fetch`")
        if tree is not None and not tree.is_dir():
            raise GuardError(f"--tree {tree}: not a directory")
        report = check(patch.read_bytes(),
                       files.read_bytes() if files.exists() else None,
                       patch_name=patch.name, pristine_root=tree,
                       pin=str(source.get("upstream")) if source else None,
                       source_patch_sha256=src_rec.patch_sha256 if src_rec else None)
    except PatchbakeError as exc:
        print(f"check_patch_files: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        # the same document, and format version, as `patchbake patch check --json`
        print(json.dumps({"format_version": 1, **report.as_json()}, indent=2, sort_keys=True))
    else:
        print(f"{'ok' if report.ok else 'FAILED'}: {report.files} files "
              f"+{report.added} -{report.removed}, patch sha256 {report.patch_sha256}")
        for p in report.problems:
            print(f"  [{p.kind}] {p.message}")
    if not report.applied:
        print("note: no pristine tree available; apply, hash and re-export checks skipped "
              "(pass --tree DIR or run `patchbake fetch`)", file=sys.stderr)
    return 0 if report.ok else GuardError.exit_code


if __name__ == "__main__":
    status = main()
    # Everything is printed and nothing is left to collect: spare the interpreter's
    # final garbage collection over every imported module's objects (about a tenth of
    # this script's run time). Exit handlers still run.
    gc.freeze()
    sys.exit(status)
