"""The hostile-input corpus: each case builds one bad input in a scratch checkout and names
the command that must refuse it, the exit code and a fragment of the one-line message.

Used twice: ``test_corpus.py`` runs every case in-process (part of ``pytest tests``), and
``run.py`` (``make reliability``) runs each as a real process and writes the table in
docs/RELIABILITY.md. A case passes when the exit code and message match, stderr is one
``patchbake: error:`` line (no traceback), nothing was written outside the store and the
case's own target, and ``store fsck`` finds the store clean.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures" / "patchset"))
import fx


@dataclass(frozen=True)
class Case:
    name: str
    area: str
    build: Callable[[Path], list[str]]  # scratch root -> argv (the repo is root/"repo")
    code: int
    match: str  # a fragment of stderr
    env: dict[str, str] = field(default_factory=dict)
    writes: str | None = None  # a path (relative to root) the command may create


CASES: list[Case] = []


def case(name: str, area: str, code: int, match: str, env: dict[str, str] | None = None,
         writes: str | None = None) -> Callable[[Callable[[Path], list[str]]], None]:
    def add(fn: Callable[[Path], list[str]]) -> None:
        CASES.append(Case(name, area, fn, code, match, env or {}, writes))
    return add


def scratch(root: Path) -> Path:
    """root/repo: the patchset fixture checkout; root/store is PATCHBAKE_HOME."""
    fx.make_repo(root, with_patch=True)
    return root / "repo"


# -- source archives ----------------------------------------------------------------------
def _pin_archive(root: Path, data: bytes, name: str = "up-1.0.tar.gz",
                 extra: str = "") -> list[str]:
    arc = root / name
    arc.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    repo = root / "repo"
    (repo / "pipeline.yaml").write_text(
        "version: 1\nname: hostile\nlineages:\n  v1.0:\n    name: fixture-fix\n"
        f"    upstream: {{kind: path, package: up, version: '1.0', path: '{arc}', "
        f"sha256: {sha}{extra}}}\n"
        "    patch: patch/fixture-fix-v1.0.patch\n    files: patch/FILES.txt\n"
        "    source_record: patch/SOURCE\n")
    return ["fetch"]


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz",
         fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tf:  # type: ignore[call-overload]
        for ti, data in members:
            if data is not None:
                ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _ti(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = kind, link, mode
    return ti


def _f(name: str, data: bytes = b"x\n") -> tuple[tarfile.TarInfo, bytes]:
    return _ti(name), data


def _zip(entries: list[tuple[str, bytes, int | None]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, mode in entries:
            zi = zipfile.ZipInfo(name)
            if mode is not None:
                zi.create_system = 3
                zi.external_attr = mode << 16
            zf.writestr(zi, data)
    return buf.getvalue()


ARCHIVE_CASES: list[tuple[str, int, str, Callable[[], bytes], dict[str, str]]] = [
    ("gzip bomb over the total-size cap", 14, "unpacked size",
     lambda: _tar([_f("up/a", b"\0" * (3 << 20))]), {"PATCHBAKE_EXTRACT_TOTAL_BYTES": "2000000"}),
    ("too many members", 14, "member count",
     lambda: _tar([_f(f"up/f{i}") for i in range(60)]), {"PATCHBAKE_EXTRACT_MEMBERS": "50"}),
    ("one member over the member-size cap", 14, "the size of member",
     lambda: _tar([_f("up/big", b"\0" * 300_000)]), {"PATCHBAKE_EXTRACT_MEMBER_BYTES": "100000"}),
    ("300-byte member name", 14, "a name in member",
     lambda: _tar([_f("up/" + "n" * 300)]), {}),
    ("5000-byte member path", 14, "path length",
     lambda: _tar([_f("up/" + "/".join(["d" * 100] * 50))]), {}),
    ("absolute member path", 12, "absolute path", lambda: _tar([_f("/etc/evil")]), {}),
    ("dot-dot traversal", 12, "path traversal", lambda: _tar([_f("up/../../evil")]), {}),
    ("backslash traversal", 12, "path traversal", lambda: _tar([_f("up\\..\\..\\evil")]), {}),
    ("windows drive path", 12, "absolute path", lambda: _tar([_f("C:/evil")]), {}),
    ("symlink escaping the tree", 12, "resolves outside",
     lambda: _tar([_f("up/a"), (_ti("up/l", tarfile.SYMTYPE, "../../.."), None)]), {}),
    ("absolute symlink", 12, "absolute path",
     lambda: _tar([_f("up/a"), (_ti("up/l", tarfile.SYMTYPE, "/etc/passwd"), None)]), {}),
    ("symlink chain escaping", 12, "resolves outside",
     lambda: _tar([_f("up/a"), (_ti("up/l1", tarfile.SYMTYPE, "l2"), None),
                   (_ti("up/l2", tarfile.SYMTYPE, "../../x"), None)]), {}),
    ("file written through a symlink", 12, "under the symlink",
     lambda: _tar([(_ti("up/l", tarfile.SYMTYPE, "."), None),
                   (_ti("up/l/m", tarfile.SYMTYPE, "a"), None), _f("up/a")]), {}),
    ("hardlink to outside", 12, "absolute path",
     lambda: _tar([_f("up/a"), (_ti("up/h", tarfile.LNKTYPE, "/etc/passwd"), None)]), {}),
    ("hardlink to a later file", 12, "hardlink",
     lambda: _tar([(_ti("up/h", tarfile.LNKTYPE, "up/a"), None), _f("up/a")]), {}),
    ("character device", 12, "device node",
     lambda: _tar([_f("up/a"), (_ti("up/dev", tarfile.CHRTYPE), None)]), {}),
    ("block device", 12, "device node",
     lambda: _tar([_f("up/a"), (_ti("up/blk", tarfile.BLKTYPE), None)]), {}),
    ("fifo", 12, "a fifo", lambda: _tar([_f("up/a"), (_ti("up/p", tarfile.FIFOTYPE), None)]), {}),
    ("duplicate member", 12, "appears twice", lambda: _tar([_f("up/a"), _f("up/a")]), {}),
    ("file under a file", 12, "under a path that is a file",
     lambda: _tar([_f("up/a"), _f("up/a/b")]), {}),
    ("directory over a file", 12, "directory",
     lambda: _tar([_f("up/a"), (_ti("up/a", tarfile.DIRTYPE), None)]), {}),
    ("corrupt gzip stream", 10, "not a readable",
     lambda: _corrupt(_tar([_f(f"up/f{i}", os.urandom(2000)) for i in range(20)])), {}),
    ("truncated tar.gz", 10, "not a readable",
     lambda: _tar([_f("up/a", os.urandom(50_000))])[:20_000], {}),
    ("truncated plain tar", 10, "not a readable",
     lambda: _tar([_f("up/a", os.urandom(50_000))], mode="w")[:20_000], {}),
    ("empty tar archive", 10, "holds no files", lambda: _tar([]), {}),
    ("only directories", 10, "holds no files",
     lambda: _tar([(_ti("up", tarfile.DIRTYPE), None), (_ti("up/d", tarfile.DIRTYPE), None)]), {}),
    ("random bytes", 10, "not a readable", lambda: os.urandom(4096), {}),
    ("zero-byte file", 10, "not a readable", lambda: b"", {}),
    ("zip with traversal", 12, "path traversal", lambda: _zip([("up/../../z", b"x", None)]), {}),
    ("zip with absolute path", 12, "absolute path", lambda: _zip([("/z", b"x", None)]), {}),
    ("zip symlink escaping", 12, "resolves outside",
     lambda: _zip([("up/a", b"x", None), ("up/l", b"../../..", 0o120777)]), {}),
    ("zip with a fifo entry", 12, "special file",
     lambda: _zip([("up/a", b"x", None), ("up/p", b"", 0o010644)]), {}),
    ("truncated zip", 10, "not a readable",
     lambda: _zip([("up/a", os.urandom(20_000), None)])[:-200], {}),
    ("empty zip", 10, "holds no files", lambda: _zip([]), {}),
    ("unknown tar member type", 12, "unsupported tar type",
     lambda: _tar([_f("up/a"), (_ti("up/s", b"Z"), None)], fmt=tarfile.GNU_FORMAT), {}),
    ("GNU sparse member", 12, "sparse",
     lambda: _tar([_f("up/a"), (_ti("up/s", tarfile.GNUTYPE_SPARSE), b"")],
                  fmt=tarfile.GNU_FORMAT), {}),
    ("corrupt bzip2 stream", 10, "not a readable",
     lambda: _corrupt(_tar([_f(f"up/f{i}", os.urandom(2000)) for i in range(20)], mode="w:bz2")), {}),
    ("truncated xz", 10, "not a readable",
     lambda: _tar([_f("up/a", os.urandom(50_000))], mode="w:xz")[:30_000], {}),
    ("set-uid file is accepted with its mode normalised", 0, "",
     lambda: _tar([(_ti("up/a", mode=0o4755), b"x\n")]), {}),
    ("plain zip written by zipfile is accepted", 0, "",
     lambda: _zip([("up/a", b"x\n", None), ("up/b/c", b"y\n", None)]), {}),
    ("pax name over the name cap", 14, "a name in member",
     lambda: _tar([_f("up/" + "p" * 256)], fmt=tarfile.PAX_FORMAT), {}),
]


def _corrupt(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64]) + data[mid + 64:]


def _archive_builder(make: Callable[[], bytes], ext: str) -> Callable[[Path], list[str]]:
    def build(root: Path) -> list[str]:
        scratch(root)
        return _pin_archive(root, make(), f"up-1.0.{ext}")
    return build


for _name, _code, _match, _make, _env in ARCHIVE_CASES:
    CASES.append(Case(f"archive: {_name}", "sources", _archive_builder(
        _make, "zip" if "zip" in _name else "tar.gz"), _code, _match, _env))


@case("archive: sha256 differs from the pin", "sources", 11, "expected sha256")
def _sha_mismatch(root: Path) -> list[str]:
    scratch(root)
    argv = _pin_archive(root, _tar([_f("up/a")]))
    (root / "up-1.0.tar.gz").write_bytes(_tar([_f("up/b")]))
    return argv


@case("archive: member outside upstream.strip", "sources", 10, "outside the top-level")
def _strip(root: Path) -> list[str]:
    scratch(root)
    return _pin_archive(root, _tar([_f("up/a"), _f("other/b")]), extra=", strip: up")


# -- YAML -----------------------------------------------------------------------------------
def _pipeline_text(root: Path) -> str:
    return (root / "repo" / "pipeline.yaml").read_text()


def _yaml_case(name: str, code: int, match: str, edit: Callable[[str], bytes],
               env: dict[str, str] | None = None) -> None:
    def build(root: Path) -> list[str]:
        repo = scratch(root)
        (repo / "pipeline.yaml").write_bytes(edit(_pipeline_text(root)))
        return ["patch", "check", "--no-tree"]
    CASES.append(Case(f"pipeline.yaml: {name}", "yaml", build, code, match, env or {}))


_yaml_case("not UTF-8", 3, "not UTF-8", lambda t: t.encode().replace(b"fixture\n", b"fi\xffx\n", 1))
_yaml_case("UTF-16 with BOM", 3, "not UTF-8", lambda t: t.encode("utf-16"))
_yaml_case("20,000-deep flow nesting", 15, "nesting deeper than",
           lambda t: t.encode() + b"extra: " + b"[" * 20000 + b"]" * 20000 + b"\n")
_yaml_case("300-deep block nesting", 15, "nesting deeper than",
           lambda t: t.encode() + b"".join(b" " * i + b"k:\n" for i in range(300)))
_yaml_case("over the size cap", 15, "exceeds the cap",
           lambda t: t.encode() + b"#" * 5000 + b"\n", {"PATCHBAKE_YAML_BYTES": "4096"})
_yaml_case("duplicate top-level key", 3, "appears twice",
           lambda t: (t + "name: other\n").encode())
_yaml_case("duplicate nested key", 3, "appears twice",
           lambda t: t.replace("    name: fixture-fix\n",
                               "    name: fixture-fix\n    name: other-fix\n").encode())
_yaml_case("non-string item in upstream.generated", 3, "generated[0]",
           lambda t: t.replace("sha256: ", "generated: [1], sha256: ").encode())
_yaml_case("mapping item in upstream.generated", 3, "generated[1]",
           lambda t: t.replace("sha256: ", "generated: [a, {b: c}], sha256: ").encode())
_yaml_case("unknown key", 3, "unknown key", lambda t: (t + "chanels: {}\n").encode())
_yaml_case("version 2", 3, "must be 1", lambda t: t.replace("version: 1", "version: 2").encode())
_yaml_case("lineages is a list", 3, "must be of type mapping",
           lambda t: b"version: 1\nname: x\nlineages: [a, b]\n")
_yaml_case("syntax error", 3, "not valid YAML", lambda t: (t + "bad: [unclosed\n").encode())
_yaml_case("tab indentation", 3, "not valid YAML", lambda t: (t + "x:\n\t- y\n").encode())
_yaml_case("empty file", 3, "is empty (no YAML document", lambda t: b"")
_yaml_case("a bare scalar", 3, "must be a mapping", lambda t: b"just words\n")
_yaml_case("sha256 not hex", 3, "64 lowercase hex", lambda t: t.replace(
    "sha256: ", "sha256: Z", 1).encode())
_yaml_case("unknown upstream kind", 3, "must be one of", lambda t: t.replace(
    "kind: path", "kind: ftp").encode())
_yaml_case("alias bomb", 3, "", lambda t: (
    t + 'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
        'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n').encode())
# nine levels of nine aliases to one list: printing it whole is 9**8 items
_BOMB = "[" + ", ".join(
    [f"&{c} [" + ", ".join(["*" + p if p else '"x"' for _ in range(9)]) + "]"
     for p, c in zip(["", *"abcdefg"], "abcdefgh", strict=True)] + ["[" + ", ".join(["*h"] * 9) + "]"]) + "]"
_yaml_case("alias bomb under upstream.pins", 3, "maps package names to version strings",
           lambda t: t.replace("sha256: ", f"pins: {{torch: {_BOMB}}}, sha256: ", 1).encode())
_yaml_case("alias bomb as upstream.version", 3, "must be of type string",
           lambda t: t.replace('version: "1.0"', f"version: {_BOMB}", 1).encode())
_yaml_case("python object tag", 3, "not valid YAML",
           lambda t: (t + "x: !!python/object/apply:os.system ['true']\n").encode())
_yaml_case("integer key", 3, "must be a string", lambda t: (t + "1: x\n").encode())


@case("pipeline.yaml: a directory", "yaml", 3, "is a directory")
def _dir_pipeline(root: Path) -> list[str]:
    repo = scratch(root)
    (repo / "pipeline.yaml").unlink()
    (repo / "pipeline.yaml").mkdir()
    return ["patch", "check", "--no-tree"]


def _special_pipeline(kind: str, make: Callable[[Path], None]) -> None:
    def build(root: Path) -> list[str]:
        repo = scratch(root)
        (repo / "pipeline.yaml").unlink()
        make(repo / "pipeline.yaml")
        return ["patch", "check", "--no-tree"]
    CASES.append(Case(f"pipeline.yaml: {kind}", "yaml", build, 3, "not a regular file"))


_special_pipeline("a FIFO", os.mkfifo)
_special_pipeline("a link to a FIFO", lambda p: (os.mkfifo(p.with_name("fifo")),
                                                 p.symlink_to("fifo")))
_special_pipeline("a link to a character device", lambda p: p.symlink_to(os.devnull))


def _image_case(name: str, code: int, match: str, text: bytes | None, rel: str = "images/x.yaml") -> None:
    def build(root: Path) -> list[str]:
        repo = scratch(root)
        (repo / "images").mkdir()
        if text is not None:
            target = (repo / rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text)
        p = repo / "pipeline.yaml"
        p.write_text(p.read_text() + f"images:\n  x: {rel}\n")
        return ["image", "show", "x"]
    CASES.append(Case(f"image definition: {name}", "yaml", build, code, match))


_image_case("duplicate key", 3, "appears twice", b"version: 1\nmode: overlay\nmode: engine\n")
_image_case("not UTF-8", 3, "not UTF-8", b"version: 1\nmode: \xfe\n")
_image_case("outside the repository", 3, "outside the repository",
            b"version: 1\n", "../outside.yaml")
_image_case("missing file", 3, "does not exist", None)
@case("image definition: a FIFO", "yaml", 3, "is a FIFO (named pipe), not a regular file")
def _fifo_def(root: Path) -> list[str]:
    repo = scratch(root)
    (repo / "images").mkdir()
    os.mkfifo(repo / "images" / "x.yaml")
    p = repo / "pipeline.yaml"
    p.write_text(p.read_text() + "images:\n  x: images/x.yaml\n")
    return ["image", "show", "x"]


_image_case("deep nesting", 15, "nesting deeper than", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n")


@case("image definition: absolute path elsewhere", "yaml", 3, "outside the repository")
def _abs_def(root: Path) -> list[str]:
    repo = scratch(root)
    p = repo / "pipeline.yaml"
    p.write_text(p.read_text() + "images:\n  x: /etc/hostname\n")
    return ["image", "show", "x"]


def _policy_case(name: str, code: int, match: str, text: bytes) -> None:
    def build(root: Path) -> list[str]:
        scratch(root)
        (root / "policy.yaml").write_bytes(text)
        (root / "ev.json").write_text("{}")
        return ["evidence", "verify", str(root / "ev.json"), "--image", "sha256:" + "0" * 64,
                "--policy", str(root / "policy.yaml")]
    CASES.append(Case(f"trust policy: {name}", "evidence", build, code, match))


_policy_case("duplicate key", 3, "appears twice", b"version: 1\nkeys: {}\nkeys: {}\n")
_policy_case("not UTF-8", 3, "not UTF-8", b"version: 1\nkeys: \xff\n")
_policy_case("suites item not a string", 3, "suites[0]",
             re.sub(rb"suites: \[[^\]]*\]", b"suites: [1]",
                    (HERE.parents[1] / "manifests" / "trust-policy.yaml").read_bytes(), count=1))


# -- patch, FILES.txt, SOURCE ------------------------------------------------------------
PATCH = "patch/fixture-fix-v1.0.patch"


def _patch_case(name: str, code: int, match: str, edit: Callable[[Path], None],
                argv: tuple[str, ...] = ("patch", "check", "--no-tree")) -> None:
    def build(root: Path) -> list[str]:
        repo = scratch(root)
        edit(repo)
        return list(argv)
    CASES.append(Case(f"patch: {name}", "patches", build, code, match))


def _write(rel: str, data: bytes) -> Callable[[Path], None]:
    return lambda repo: (repo / rel).write_bytes(data)


def _edit(rel: str, fn: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    return lambda repo: (repo / rel).write_bytes(fn((repo / rel).read_bytes()))


_patch_case("SOURCE is not JSON", 21, "SOURCE", _write("patch/SOURCE", b"not json {\n"))
_patch_case("SOURCE is a JSON list", 21, "SOURCE", _write("patch/SOURCE", b"[1, 2]\n"))
_patch_case("SOURCE is binary", 21, "SOURCE", _write("patch/SOURCE", b"\xff\xfe\x00garbage"))
_patch_case("SOURCE has wrong field types", 21, "must be a",
            _write("patch/SOURCE", b'{"format": "patchbake-source 1", "patch_sha256": 5}\n'))
_patch_case("SOURCE source is a list", 21, "must be a mapping",
            _write("patch/SOURCE", b'{"format": "patchbake-source 1", "source": []}\n'))
_patch_case("FILES.txt missing", 21, "FILES.txt", lambda repo: (repo / "patch/FILES.txt").unlink())
_patch_case("FILES.txt not UTF-8", 21, "FILES.txt", _edit("patch/FILES.txt", lambda b: b + b"\xff\xfe\n"))
_patch_case("FILES.txt drops a path", 21, "",
            _edit("patch/FILES.txt", lambda b: b"\n".join(
                ln for ln in b.split(b"\n") if b"nonl.txt" not in ln)))
_patch_case("FILES.txt lists an extra path", 21, "",
            _edit("patch/FILES.txt", lambda b: b + b"pkg/extra.py\n"))
_patch_case("patch drops a file's section", 21, "dropped",
            _edit(PATCH, lambda b: fx.drop_section(b, "pkg/sub/nonl.txt")))
_patch_case("patch not UTF-8", 21, "", _edit(PATCH, lambda b: b.replace(b"+", b"+\xff", 1)))
_patch_case("patch truncated mid-hunk", 21, "", _edit(PATCH, lambda b: b[: len(b) * 2 // 3]))
_patch_case("patch with CRLF line ends", 21, "", _edit(PATCH, lambda b: b.replace(b"\n", b"\r\n")))
_patch_case("patch is empty", 21, "", _write(PATCH, b""))
_patch_case("patch missing", 21, "does not exist", lambda repo: (repo / PATCH).unlink())
_patch_case("patch path traversal", 21, "", _edit(PATCH, lambda b: b.replace(
    b"a/pkg/", b"a/../pkg/", 1).replace(b"b/pkg/", b"b/../pkg/", 1)))
def _patch_dir(repo: Path) -> None:
    (repo / PATCH).unlink()
    (repo / PATCH).mkdir()


_patch_case("patch is a directory", 21, "", _patch_dir)


@case("patch apply: --to under a regular file", "patches", 17, "cannot be written",
      writes="afile")
def _to_under_file(root: Path) -> list[str]:
    scratch(root)
    (root / "afile").write_text("x")
    return ["patch", "apply", "--to", str(root / "afile" / "out")]


@case("patch apply: --to under /proc", "patches", 17, "cannot be written")
def _to_proc(root: Path) -> list[str]:
    scratch(root)
    return ["patch", "apply", "--to", "/proc/patchbake-out"]


@case("patch apply: --to a non-empty directory", "patches", 22, "not empty", writes="full")
def _to_full(root: Path) -> list[str]:
    scratch(root)
    (root / "full").mkdir()
    (root / "full" / "x").write_text("x")
    return ["patch", "apply", "--to", str(root / "full")]


# -- evidence ------------------------------------------------------------------------------
def _evidence_case(name: str, data: bytes, match: str = "") -> None:
    def build(root: Path) -> list[str]:
        scratch(root)
        (root / "ev.json").write_bytes(data)
        return ["evidence", "verify", str(root / "ev.json"), "--image", "sha256:" + "0" * 64,
                "--policy", str(HERE.parents[1] / "manifests" / "trust-policy.yaml")]
    CASES.append(Case(f"evidence: {name}", "evidence", build, 50, match))


_evidence_case("not JSON", b"{not json")
_evidence_case("not UTF-8", b"\xff\xfe{}")
_evidence_case("a JSON list", b"[]")
_evidence_case("empty envelope", b"{}")
_evidence_case("payload not base64", json.dumps(
    {"payloadType": "application/vnd.in-toto+json", "payload": "!!!", "signatures": []}).encode())
_evidence_case("no signatures", json.dumps(
    {"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}).encode())
_evidence_case("signature not base64", json.dumps(
    {"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
     "signatures": [{"keyid": "a" * 64, "sig": "%%%"}]}).encode())
_evidence_case("wrong payload type", json.dumps(
    {"payloadType": "text/plain", "payload": "e30=",
     "signatures": [{"keyid": "a" * 64, "sig": "AAAA"}]}).encode())
_evidence_case("signatures is a string", json.dumps(
    {"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
     "signatures": "AAAA"}).encode())


@case("evidence: file missing", "evidence", 50, "")
def _ev_missing(root: Path) -> list[str]:
    scratch(root)
    return ["evidence", "verify", str(root / "nothing.json"), "--image", "sha256:" + "0" * 64,
            "--policy", str(HERE.parents[1] / "manifests" / "trust-policy.yaml")]


# -- registry references (no network needed to refuse these) ---------------------------------
def _ref_case(name: str, argv: list[str], code: int, match: str) -> None:
    def build(root: Path) -> list[str]:
        scratch(root)
        return argv
    CASES.append(Case(f"registry: {name}", "registry", build, code, match))


_ref_case("pull ref with user info", ["pull", "user:pw@127.0.0.1:5000/r:t"], 2, "")
_ref_case("pull ref without tag or digest", ["pull", "127.0.0.1:5000/r"], 2, "neither a tag")
_ref_case("pull ref with a bad digest", ["pull", "127.0.0.1:5000/r@sha256:xyz"], 2,
          "is not sha256:<64")
_ref_case("pull with a URL scheme", ["pull", "http://registry.test/r:t"], 2,
          "is not a host")
_ref_case("push of an unknown image", ["push", "sha256:" + "0" * 64, "127.0.0.1:5000/r:t"],
          30, "is not in the store")


# -- image archives (a definition's docker-archive base, read by `bake`) ---------------------
def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(gz: bool = True) -> tuple[bytes, bytes]:
    """(stored bytes, uncompressed tar) of a one-file layer."""
    tar = _tar([_f("etc/x", b"layer\n")], mode="w")
    if not gz:
        return tar, tar
    import gzip
    return gzip.compress(tar, mtime=0), tar


def _docker_archive(config: object | None = None, manifest: object | None = None,
                    layer: bytes | None = None, extra: list[tuple[str, bytes]] | None = None,
                    index: object | None = None) -> bytes:
    stored, tar = _layer()
    if layer is not None:
        stored = layer
    cfg = config if config is not None else {
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [_sha(tar)]}}
    cbytes = json.dumps(cfg).encode()
    chex = hashlib.sha256(cbytes).hexdigest()
    man = manifest if manifest is not None else [
        {"Config": f"{chex}.json", "RepoTags": ["b:1"], "Layers": ["l0/layer.tar"]}]
    files = [("manifest.json", json.dumps(man).encode()), (f"{chex}.json", cbytes),
             ("l0/layer.tar", stored), *(extra or [])]
    if index is not None:
        files.append(("index.json", json.dumps(index).encode()))
    return _tar([_f(n, d) for n, d in files], mode="w")


def _bake_case(name: str, code: int, match: str, make: Callable[[], bytes]) -> None:
    def build(root: Path) -> list[str]:
        repo = scratch(root)
        (repo / "images").mkdir()
        (repo / "images" / "x.yaml").write_text(
            "version: 1\nbase: {source: docker-archive, name: 'b:1', digest: 'sha256:"
            + "1" * 64 + "', path: base.tar}\nsite_packages: /usr/lib/python3/dist-packages\n"
            "mode: overlay\n")
        p = repo / "pipeline.yaml"
        p.write_text(p.read_text() + "images:\n  x: images/x.yaml\n")
        (repo / "base.tar").write_bytes(make())
        return ["bake", "x"]
    CASES.append(Case(f"image archive: {name}", "images", build, code, match))


_GOOD_TAR = _layer()[1]
_bake_case("not a tar", 30, "not a readable docker-archive", lambda: os.urandom(3000))
_bake_case("truncated", 30, "", lambda: _docker_archive()[:1500])
_bake_case("manifest.json not JSON", 30, "not JSON",
           lambda: _tar([_f("manifest.json", b"{nope")], mode="w"))
_bake_case("manifest.json lists two images", 30, "exactly one image",
           lambda: _tar([_f("manifest.json", b"[{}, {}]")], mode="w"))
_bake_case("manifest.json entry is a string", 30, "needs 'Config'",
           lambda: _tar([_f("manifest.json", b'["x"]')], mode="w"))
_bake_case("config member missing", 30, "has no member",
           lambda: _tar([_f("manifest.json", b'[{"Config": "c.json", "Layers": []}]')], mode="w"))
_bake_case("rootfs is a string", 30, "'rootfs' is str",
           lambda: _docker_archive(config={"rootfs": "layers", "config": {}}))
_bake_case("config is a list", 30, "'config' is list",
           lambda: _docker_archive(config={"rootfs": {"diff_ids": [_sha(_GOOD_TAR)]}, "config": []}))
_bake_case("integer diff_ids", 30, "is not sha256:<64 lowercase hex digits>",
           lambda: _docker_archive(config={"rootfs": {"diff_ids": [5]}, "config": {}}))
_bake_case("diff_ids not a list", 30, "not a list",
           lambda: _docker_archive(config={"rootfs": {"diff_ids": "sha256:x"}}))
_bake_case("diff_ids count differs", 30, "diff_ids for",
           lambda: _docker_archive(config={"rootfs": {"diff_ids": []}}))
_bake_case("diff_id does not match the layer", 11, "uncompressed tar hashes",
           lambda: _docker_archive(config={"rootfs": {"diff_ids": ["sha256:" + "2" * 64]}}))
_bake_case("corrupt gzip layer", 30, "not a valid gzip stream",
           lambda: _docker_archive(layer=_corrupt(_layer()[0] + b"\0" * 0)))
_bake_case("truncated gzip layer", 30, "truncated gzip",
           lambda: _docker_archive(layer=_layer()[0][:-30]))
_bake_case("unsafe entry", 12, "unsafe archive entry",
           lambda: _tar([_f("../evil", b"x")], mode="w"))
_bake_case("index.json manifests is a string", 30, "",
           lambda: _docker_archive(index={"schemaVersion": 2, "manifests": "x"}))
_bake_case("index.json entry is a string", 30, "descriptor is not an object",
           lambda: _docker_archive(index={"schemaVersion": 2, "manifests": ["x"]}))
_bake_case("index.json not JSON", 30, "not valid JSON",
           lambda: _tar([_f("index.json", b"{")], mode="w"))
