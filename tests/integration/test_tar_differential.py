"""Differential test of the layer reader against the real unpackers.

Every crafted layer of tests/fixtures/tarcorpus is wrapped as an image and (a) read by
patchbake (the final file set with sha256, or a refusal), (b) unpacked by Debian's umoci
(`umoci raw unpack --rootless`) and, where a Docker engine runs, by the engine (`docker
load` + `docker create` + `docker export`). Whenever patchbake reads a layer, its file set
must equal what every consumer wrote; otherwise patchbake must have refused the layer.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "tarcorpus"))

from oci_build import write_docker_archive, write_oci_layout
from patchbake.digest import Digest
from patchbake.errors import PatchbakeError
from patchbake.oci.image import DirBlobs, load_image
from patchbake.oci.scan import final_files
from tar_corpus import BASE, CASES, Case

pytestmark = [pytest.mark.integration]

Files = dict[str, tuple[str, str]]  # path -> (kind, sha256 of content or link target)
Outcome = tuple[str, "Files | str"]  # ("read", files) | ("refused"/"failed", reason)
# what the engine adds to every container's filesystem
ENGINE_ADDS = {".dockerenv", "etc/hostname", "etc/hosts", "etc/mtab", "etc/resolv.conf"}
ENGINE_DIRS = ("dev/", "proc/", "sys/")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patchbake_reads(layout: Path, digest: str) -> Outcome:
    try:
        got = final_files(load_image(DirBlobs(layout), Digest.parse(digest)), DirBlobs(layout))
    except PatchbakeError as exc:
        return "refused", f"{type(exc).__name__}: {exc.message}"
    return "read", {p: ("symlink" if i.kind == "symlink" else "file", i.sha256)
                    for p, i in got.items()}


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=120, check=False)


def _last_line(cp: subprocess.CompletedProcess[bytes]) -> str:
    lines = cp.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"]
    return lines[-1][:160]


def umoci_unpacks(layout: Path, work: Path) -> Outcome:
    rootfs = work / "rootfs"
    cp = _run(["umoci", "raw", "unpack", "--rootless", "--image", f"{layout}:case", str(rootfs)])
    if cp.returncode != 0:
        return "failed", _last_line(cp)
    files: Files = {}
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, rootfs)
            if os.path.islink(p):
                files[rel] = ("symlink", _sha(os.readlink(p).encode()))
            elif os.path.isfile(p):
                files[rel] = ("file", _sha(Path(p).read_bytes()))
            else:
                files[rel] = ("other", "")
    return "read", files


def _exported(data: bytes) -> Files:
    files: Files = {}
    content: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf:
            name = m.name.removeprefix("./").lstrip("/").rstrip("/")
            if name in ENGINE_ADDS or name.startswith(ENGINE_DIRS):
                continue
            if m.isreg():
                f = tf.extractfile(m)
                content[name] = _sha(f.read() if f else b"")
                files[name] = ("file", content[name])
            elif m.issym():
                files[name] = ("symlink", _sha(m.linkname.encode()))
            elif m.islnk():
                files[name] = ("file", content[m.linkname.removeprefix("./").lstrip("/")])
            elif not m.isdir():
                files[name] = ("other", "")
    return files


def docker_unpacks(cases: list[Case], work: Path) -> dict[str, Outcome]:
    """`docker load` every case in one archive (one by one when that fails), then create
    and export a container of each."""
    tags = {c.name: f"patchbake-tardiff/{c.name}:t" for c in cases}
    out: dict[str, Outcome] = {}
    archive = work / "all.tar"
    write_docker_archive(archive, {tags[c.name]: [BASE, *c.layers] for c in cases})
    loaded = _run(["docker", "load", "-i", str(archive)]).returncode == 0
    try:
        for c in cases:
            if not loaded:
                one = work / f"{c.name}.tar"
                write_docker_archive(one, {tags[c.name]: [BASE, *c.layers]})
                cp = _run(["docker", "load", "-i", str(one)])
                if cp.returncode != 0:
                    out[c.name] = ("failed", "docker load: " + _last_line(cp))
                    continue
            cp = _run(["docker", "create", "--network", "none", tags[c.name]])
            if cp.returncode != 0:
                out[c.name] = ("failed", "docker create: " + _last_line(cp))
                continue
            cid = cp.stdout.decode().strip()
            try:
                exp = _run(["docker", "export", cid])
                out[c.name] = ("read", _exported(exp.stdout)) if exp.returncode == 0 else \
                    ("failed", "docker export: " + _last_line(exp))
            finally:
                _run(["docker", "rm", "-f", cid])
    finally:
        _run(["docker", "rmi", "-f", *tags.values()])
    return out


def _engine_runs() -> bool:
    return shutil.which("docker") is not None and \
        _run(["docker", "version", "--format", "{{.Server.Version}}"]).returncode == 0


def _describe(o: Outcome | None) -> str:
    if o is None:
        return "-"
    kind, what = o
    if kind != "read":
        return f"{kind}: {what}"
    assert isinstance(what, dict)
    return f"read {len(what)} files"


def _diff(a: Files, b: Files) -> str:
    keys = sorted(set(a) ^ set(b) | {k for k in set(a) & set(b) if a[k] != b[k]})
    return ", ".join(f"{k}: {a.get(k, ('absent',))[0]}/{b.get(k, ('absent',))[0]}"
                     + ("" if a.get(k) is None or b.get(k) is None else " (content)")
                     for k in keys[:4])


def _verdict(expect: str, ours: Outcome,
             theirs_by: tuple[tuple[str, Outcome | None], ...]) -> str:
    """'ok', or how patchbake, the corpus and the unpackers disagree on one case."""
    verdict = "ok"
    if (ours[0] == "read") != (expect == "read"):
        verdict = f"patchbake {ours[0]}, the corpus expects {expect}"
    if ours[0] == "read":
        assert isinstance(ours[1], dict)
        for who, theirs in theirs_by:
            if theirs is None:
                continue
            if theirs[0] != "read":
                verdict = f"patchbake read it, {who} {theirs[0]}"
            elif theirs[1] != ours[1]:
                assert isinstance(theirs[1], dict)
                verdict = f"{who} wrote other files: {_diff(ours[1], theirs[1])}"
    return verdict


def test_patchbake_reads_every_crafted_layer_as_the_real_unpackers_do(tmp_path: Path) -> None:
    if shutil.which("umoci") is None:
        pytest.skip("umoci is not installed (make setup installs Debian's umoci)")
    assert len(CASES) >= 30
    rows: list[tuple[str, str, str, str, str]] = []
    bad: list[str] = []
    pb: dict[str, Outcome] = {}
    um: dict[str, Outcome] = {}
    for c in CASES:
        work = tmp_path / c.name
        layout = work / "oci"
        digest = write_oci_layout(layout, [BASE, *c.layers], tag="case")
        pb[c.name] = patchbake_reads(layout, digest)
        um[c.name] = umoci_unpacks(layout, work)
        shutil.rmtree(work / "rootfs", ignore_errors=True)
    engine = _engine_runs()
    dk = docker_unpacks([c for c in CASES if pb[c.name][0] == "read"], tmp_path) \
        if engine else {}
    for c in CASES:
        ours = pb[c.name]
        verdict = _verdict(c.expect, ours, (("umoci", um[c.name]), ("docker", dk.get(c.name))))
        if verdict != "ok":
            bad.append(c.name)
        rows.append((c.name, _describe(ours), _describe(um[c.name]),
                     _describe(dk.get(c.name)) if engine else "no engine", verdict))
    table = "\n".join(" | ".join(r) for r in
                      [("case", "patchbake", "umoci", "docker", "verdict"), *rows])
    print(table)
    assert not bad, f"{len(bad)} disagreements:\n{table}"
