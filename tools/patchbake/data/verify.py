#!/usr/bin/env python3
"""patchbake in-image verifier (standard library only, python3 >= 3.8; baked to
/opt/patchbake/verify.py).

    python3 -I -S /opt/patchbake/verify.py          # "which build am I?" + the full check
    python3 -I -S /opt/patchbake/verify.py --line   # the one identity line only
    python3 -I -S /opt/patchbake/verify.py --json   # the result as JSON
    python3 -I -S /opt/patchbake/verify.py --quiet  # nothing on success, one line on failure

Run it isolated (-I -S): no start-up hook of the image then runs before the check.

Checks, against /opt/patchbake/identity.json (written by `patchbake bake`) and the full
tree manifest /opt/patchbake/tree.json it names by sha256:
- EVERY file of the installed vllm/ tree (base files and baked files): path, kind, size,
  sha256 and mode; files missing, extra or modified are failures;
- start-up hooks of the Python that runs this script: sitecustomize/usercustomize on the
  path, *.pth in any site directory, a `vllm` importable before the recorded one (the
  working directory counts: `python3 -m` puts it first), unless the record allow-lists
  the hook by path and sha256;
- this script is the one the record names.
Exit 0 when everything matches, 1 on any difference, 2 when the record or the tree
manifest is missing, unreadable, of the wrong shape or empty.

``--root DIR`` checks an unpacked image below DIR (tests; never taken from the
environment, so an image's own configuration cannot point the check elsewhere).
"""

import hashlib
import json
import os
import site
import stat
import sys

RECORD = "/opt/patchbake/identity.json"
TREE_FORMAT = "patchbake-tree/1"
HOOK_NAMES = ("sitecustomize", "usercustomize")


class RecordError(Exception):
    """The record or the tree manifest cannot be used: exit 2."""


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
               ps=str(rec.get("patch", {}).get("sha256", "?"))[:12],
               fs=str(rec.get("files_sha256", "?"))[:12], n=len(rec.get("files", [])),
               base=rec.get("base", {}).get("name", "?"))


def load_json(path, what):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RecordError("no readable {} at {}: {}".format(what, path, exc.strerror))
    try:
        return data, json.loads(data.decode("utf-8"))
    except ValueError:
        raise RecordError("{} at {} is not valid JSON".format(what, path))


def load_record(root):
    _, rec = load_json(root + RECORD, "identity record")
    if not isinstance(rec, dict) or not isinstance(rec.get("tree"), dict):
        raise RecordError("identity record {} names no tree manifest (baked by an older "
                          "patchbake?): nothing to check against".format(RECORD))
    tree = rec["tree"]
    raw, doc = load_json(root + str(tree.get("path")), "tree manifest")
    if hashlib.sha256(raw).hexdigest() != tree.get("sha256"):
        raise RecordError("tree manifest {} does not hash to the sha256 the identity record "
                          "names".format(tree.get("path")))
    files = doc.get("files") if isinstance(doc, dict) else None
    if doc.get("format") != TREE_FORMAT or not isinstance(files, list) \
            or not isinstance(doc.get("root"), str):
        raise RecordError("tree manifest {} is not a {} document".format(tree.get("path"),
                                                                        TREE_FORMAT))
    if not files:
        raise RecordError("tree manifest {} lists no files: an empty record proves "
                          "nothing".format(tree.get("path")))
    for entry in files:
        if not (isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], str)
                and entry[1] in ("file", "symlink") and isinstance(entry[2], int)
                and isinstance(entry[3], str) and isinstance(entry[4], str)):
            raise RecordError("tree manifest {} has a malformed entry: {!r}".format(
                tree.get("path"), entry)[:300])
    return rec, doc


def _walk(top):
    """Every non-directory below ``top``: {relative path: absolute path}."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames:  # os.walk does not descend into symlinked dirs: list them
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                filenames.append(name)
        for name in filenames:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, top).replace(os.sep, "/")] = full
    return found


def check_tree(doc, root):
    """(problems, checked): every manifest entry and every file on disk under the root."""
    top = root + doc["root"].rstrip("/")
    problems = []
    if not os.path.isdir(top):
        return [("missing", doc["root"], "the package directory", "nothing")], 0
    on_disk = _walk(top)
    for entry in doc["files"]:
        rel, kind, size, digest, mode = entry
        full = on_disk.pop(rel, None)
        shown = doc["root"] + rel
        if full is None:
            problems.append(("missing", shown, digest, "nothing"))
            continue
        st = os.lstat(full)
        if kind == "symlink":
            if not stat.S_ISLNK(st.st_mode):
                problems.append(("kind", shown, "symlink", "not a symlink"))
            elif hashlib.sha256(os.readlink(full).encode()).hexdigest() != digest:
                problems.append(("modified", shown, "symlink " + digest, "another target"))
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(("kind", shown, "regular file", "not a regular file"))
            continue
        got = sha256_file(full)
        if got != digest or st.st_size != size:
            problems.append(("modified", shown, digest, got))
        elif stat.S_IMODE(st.st_mode) != int(mode, 8):
            problems.append(("mode", shown, mode, "%04o" % stat.S_IMODE(st.st_mode)))
    for rel in sorted(on_disk):
        problems.append(("extra", doc["root"] + rel, "nothing", "present"))
    return problems, len(doc["files"])


def python_path(sp):
    """The directories the server's Python imports from, in order, as this Python would
    see them without -I -S: cwd (python3 -m), PYTHONPATH, the standard library, the user
    site, the site directories (plus the record's site-packages)."""
    env_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    here = os.path.dirname(os.path.abspath(__file__))
    stdlib = [p for p in sys.path if p and p != here and "-packages" not in p]
    user = [site.getusersitepackages()] if not os.environ.get("PYTHONNOUSERSITE") else []
    sites = list(site.getsitepackages())
    if sp not in sites:
        sites.append(sp)
    seen, out = set(), []
    for p in [os.getcwd(), *env_path, *stdlib, *user, *sites]:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            out.append((p, p in user or p in sites))
    return out


def _is_vllm(dirpath, name):
    full = os.path.join(dirpath, name)
    if name == "vllm":
        return os.path.isfile(os.path.join(full, "__init__.py")) or \
            os.path.isfile(os.path.join(full, "__init__.pyc"))
    return name == "vllm.py" or name == "vllm.pyc" or (name.startswith("vllm.") and
                                                      name.endswith((".so", ".pyd")))


def check_startup(rec, root):
    """Start-up hooks and vllm shadows on the Python path (paths reported in the image)."""
    allowed = {a.get("path"): a.get("sha256") for a in rec.get("startup_allow", [])
               if isinstance(a, dict)}
    sp = str(rec.get("site_packages", "")).rstrip("/")
    problems = []
    found_ours = False
    for p, is_site in python_path(sp):
        try:
            names = sorted(os.listdir(root + p))
        except OSError:
            continue
        if os.path.realpath(root + p) == os.path.realpath(root + sp):
            found_ours = True
        for name in names:
            full = os.path.join(p, name)
            stem = name.split(".", 1)[0]
            hook = (is_site and name.endswith(".pth")) or (
                stem in HOOK_NAMES and (name == stem or name.endswith((".py", ".pyc", ".so"))))
            if hook:
                try:
                    got = sha256_file(root + full) if os.path.isfile(root + full) else "a dir"
                except OSError:
                    got = "unreadable"
                if allowed.get(full) != got:
                    problems.append(("startup-hook", full, "not allow-listed", got))
            elif not found_ours and _is_vllm(root + p, name):
                problems.append(("shadow", full, "vllm from " + sp, "imported first"))
    return problems


def check_verifier(rec, root):
    me = rec.get("verifier", {})
    try:
        got = sha256_file(root + me.get("path", ""))
    except OSError:
        got = None
    if got != me.get("sha256"):
        return [("verifier", me.get("path"), me.get("sha256"), got)]
    return []


def reason(problems):
    kind, path, want, got = problems[0]
    more = " (+{} more)".format(len(problems) - 1) if len(problems) > 1 else ""
    return "patchbake: image does not match its record: {} {} (recorded {}, found {}){}".format(
        kind, path, want, got, more)


def main(argv):
    root = ""
    if "--root" in argv:
        at = argv.index("--root")
        root = argv[at + 1].rstrip("/") if at + 1 < len(argv) else ""
        if not root:
            print("patchbake: --root needs a directory", file=sys.stderr)
            return 2
    try:
        rec, doc = load_record(root)
    except RecordError as exc:
        print("patchbake: refused: {}".format(exc), file=sys.stderr if "--quiet" in argv
              else sys.stdout)
        return 2
    line = identity_line(rec)
    if "--line" in argv:
        print(line)
        return 0
    problems, checked = check_tree(doc, root)
    problems += check_startup(rec, root) + check_verifier(rec, root)
    if "--json" in argv:
        print(json.dumps({"identity": line, "checked": checked, "ok": not problems,
                          "problems": [list(p) for p in problems]}, sort_keys=True))
        return 1 if problems else 0
    if "--quiet" in argv:
        if problems:
            print(reason(problems), file=sys.stderr)
        return 1 if problems else 0
    print(line)
    if not problems:
        print("OK: {0}/{0} files of {1} match the tree manifest; no start-up hook".format(
            checked, doc["root"]))
        return 0
    for kind, path, want, got in problems:
        print("MISMATCH {}: {} (recorded {}, found {})".format(kind, path, want, got))
    print(reason(problems))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
