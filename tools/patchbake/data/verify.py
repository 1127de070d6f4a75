#!/usr/bin/env python3
"""patchbake in-image verifier (standard library only; baked to /opt/patchbake/verify.py).

    python3 /opt/patchbake/verify.py            # "which build am I?" + check every file
    python3 /opt/patchbake/verify.py --line     # the one identity line only (entrypoints)
    python3 /opt/patchbake/verify.py --json     # the result as JSON

Reads /opt/patchbake/identity.json (written by `patchbake bake`) and checks every baked
file's sha256, size and mode, that deleted files are absent, and that this script is the
one the record names. Exit 0 when all match, 1 on any difference, 2 when the record is
missing or unreadable.
"""

import hashlib
import json
import os
import stat
import sys

RECORD = os.environ.get("PATCHBAKE_IDENTITY", "/opt/patchbake/identity.json")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def identity_line(rec):
    return "patchbake build: {img} | vllm {ver} + {patch} (patch sha256:{ps}, FILES.txt " \
           "sha256:{fs}) | {n} baked files | base {base}".format(
               img=rec.get("definition", "?"), ver=rec.get("upstream", {}).get("version", "?"),
               patch=rec.get("patch", {}).get("name", "?"),
               ps=rec.get("patch", {}).get("sha256", "?")[:12],
               fs=rec.get("files_sha256", "?")[:12], n=len(rec.get("files", [])),
               base=rec.get("base", {}).get("name", "?"))


def check(rec, root):
    problems = []
    for f in rec.get("files", []):
        path = root + f["path"]
        try:
            st = os.lstat(path)
        except OSError:
            problems.append(("missing", f["path"], f["sha256"], None))
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(("not-a-file", f["path"], f["sha256"], None))
            continue
        got = sha256_file(path)
        if got != f["sha256"] or st.st_size != f["size"]:
            problems.append(("modified", f["path"], f["sha256"], got))
        elif (st.st_mode & 0o111 != 0) != (int(f["mode"], 8) & 0o111 != 0):
            problems.append(("mode", f["path"], f["mode"], oct(st.st_mode & 0o777)))
    for path in rec.get("deleted", []):
        if os.path.lexists(root + path):
            problems.append(("should-be-deleted", path, None, "present"))
    me = rec.get("verifier", {})
    if me.get("path") and me.get("sha256"):
        try:
            got = sha256_file(root + me["path"])
        except OSError:
            got = None
        if got != me["sha256"]:
            problems.append(("verifier", me["path"], me["sha256"], got))
    return problems


def main(argv):
    root = os.environ.get("PATCHBAKE_ROOT", "").rstrip("/")
    try:
        with open(root + RECORD, "rb") as f:
            rec = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        print(f"patchbake: no readable identity record at {RECORD}: {exc}")
        return 2
    line = identity_line(rec)
    if "--line" in argv:
        print(line)
        return 0
    problems = check(rec, root)
    total = len(rec.get("files", [])) + len(rec.get("deleted", []))
    if "--json" in argv:
        print(json.dumps({"identity": line, "total": total, "ok": not problems,
                          "problems": [list(p) for p in problems]}, sort_keys=True))
        return 1 if problems else 0
    print(line)
    if not problems:
        print(f"OK: {total}/{total} baked files match the identity record")
        return 0
    for kind, path, want, got in problems:
        print(f"MISMATCH {kind}: {path} (recorded {want}, found {got})")
    print(f"STALE OR MODIFIED IMAGE: {len(problems)} of {total} checks differ from the identity record")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
