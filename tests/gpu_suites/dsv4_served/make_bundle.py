"""Make the served suite's fixtures bundle: the serving image's vLLM, in parts.

The GPU machine has no network and takes at most 64 MiB per call, so the image's files
travel as one tar.xz stream cut into parts. The stream holds

* ``site/``: the vllm wheel of the image's lock, unpacked as pip installs it (compiled
  extensions included), and the wheels of the pure-Python (and small compiled)
  dependencies the GPU machine lacks, each unpacked beside it;
* ``overlay/``: the files the repo's patch changes, made here by the project's strict
  applier (zero fuzz, zero offset) from the wheel's own files, each checked against the
  post-image sha256 that FILES.txt records.

``manifest.json`` (beside the parts, and inside the stream) lists every file of every
wheel with its sha256, the wheel it came from (name and sha256), and whether it was
carried; files left behind say why. ``device_check.py`` re-hashes all of it on the GPU
machine before the suite runs.

Run from the repo root (it imports the project's patch parser and applier):

    PYTHONPATH=tools python3 tests/gpu_suites/dsv4_served/make_bundle.py \
        --vllm-wheel vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl \
        --dep-wheels DIR --skip-dep numpy ... --out .bundle
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import lzma
import os
import sys
import tarfile
import zipfile
from pathlib import Path

from patchbake.patchset.diffparse import parse_patch
from patchbake.patchset.apply import apply_patch

FORMAT = "patchbake-served-bundle/v1"
PART_BYTES = 60 * 1024 * 1024
# Left behind, with the reason the manifest gives. FlashAttention-2 (191 MB, three more
# transfers) serves sm8x; on sm90 vLLM 0.25.1 picks FlashAttention-3's sparse MLA first,
# so FA3 travels. The run records every shared object it loaded, so a path that needed a
# file left here would fail with an ImportError naming it, never pass silently.
NOT_CARRIED = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so":
        "FlashAttention-2 extension (191 MB): vLLM uses it below sm90 only",
    "vllm/vllm-rs": "Rust HTTP front end binary (38 MB): the suite drives vllm.LLM in-process",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_hash(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_files(path: Path) -> tuple[str, list[tuple[str, bytes]]]:
    """The wheel's sha256 and its files; every file is checked against the wheel's RECORD."""
    whole = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(whole)) as zf:
        files = [(i.filename, zf.read(i)) for i in zf.infolist() if not i.is_dir()]
    record_name = next(n for n, _ in files if n.endswith(".dist-info/RECORD"))
    record = dict(files)[record_name].decode()
    want = {}
    for line in record.splitlines():
        name, digest, _size = line.rsplit(",", 2)
        want[name] = digest
    for name, data in files:
        if want.get(name, "") not in ("", record_hash(data)):
            sys.exit(f"make_bundle: {path.name}: {name} does not match the wheel's RECORD")
    return sha256(whole), files


def patched_overlay(site: dict[str, bytes], patch_path: Path,
                    files_txt: Path) -> dict[str, bytes]:
    patch = parse_patch(patch_path.read_bytes(), patch_path.name)
    # A wheel keeps no git modes (the sdist's envs.py is 100755): the content is what the
    # applier checks here, so each file is read with the mode the patch expects.
    modes = {fp.path: fp.old_mode or "100644" for fp in patch.files}
    outcomes = apply_patch(patch, lambda p: (site[p], modes[p]) if p in site else None,
                           pristine=True)
    expected = {}
    for line in files_txt.read_text().splitlines():
        if line and not line.startswith("#"):
            cols = line.split()
            expected[cols[0]] = cols[-1]
    overlay = {}
    for path, out in outcomes.items():
        assert out.post is not None, f"{path}: the patch deletes it"
        if sha256(out.post) != expected.get(path):
            sys.exit(f"make_bundle: {path}: the applied patch gives {sha256(out.post)}, "
                     f"FILES.txt records {expected.get(path)}")
        overlay[path] = out.post
    if set(overlay) != set(expected):
        sys.exit("make_bundle: the patch and FILES.txt name different paths")
    return overlay


def write_records(wheels: list[Path], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for whl in wheels:
        with zipfile.ZipFile(whl) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            (out / (whl.name + ".RECORD")).write_bytes(zf.read(name))
        index[whl.name] = {"sha256": sha256(whl.read_bytes())}
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o755 if name.endswith(".so") else 0o644
    tar.addfile(info, io.BytesIO(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-wheel", type=Path, required=True)
    ap.add_argument("--dep-wheels", type=Path, required=True, help="directory of wheels")
    ap.add_argument("--skip-dep", action="append", default=[],
                    help="a dependency the GPU machine already has (wheel name prefix)")
    ap.add_argument("--patch", type=Path, default=Path("patch/dsv4-deterministic-topk-v0.25.1.patch"))
    ap.add_argument("--files-txt", type=Path, default=Path("patch/FILES.txt"))
    ap.add_argument("--record-wheel", type=Path, action="append", default=[],
                    help="a wheel the bundle does not carry (torch, triton) whose RECORD "
                         "device_check.py compares with the machine's installed files")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    write_records(args.record_wheel, args.out / "records")

    entries: list[dict[str, object]] = []
    stream: dict[str, bytes] = {}
    wheels = [args.vllm_wheel] + sorted(args.dep_wheels.glob("*.whl"))
    skipped = []
    for whl in wheels:
        dist = whl.name.split("-")[0].lower().replace("_", "-")
        if whl is not args.vllm_wheel and dist in {s.lower() for s in args.skip_dep}:
            skipped.append(whl.name)
            continue
        whl_sha, files = wheel_files(whl)
        for name, data in files:
            reason = NOT_CARRIED.get(name) if whl is args.vllm_wheel else None
            entries.append({"path": name, "sha256": sha256(data), "size": len(data),
                            "wheel": whl.name, "wheel_sha256": whl_sha,
                            "carried": reason is None, "not_carried_reason": reason})
            if reason is None:
                if name in stream:
                    sys.exit(f"make_bundle: {name} is in two wheels")
                stream[name] = data
    overlay = patched_overlay(stream, args.patch, args.files_txt)
    manifest = {
        "format": FORMAT,
        "files": entries,
        "overlay": [{"path": p, "sha256": sha256(d), "from": args.patch.name}
                    for p, d in sorted(overlay.items())],
        "skipped_dep_wheels": skipped,
    }
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    buf = io.BytesIO()
    with lzma.open(buf, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        add(tar, "manifest.json", manifest_bytes)
        for name in sorted(stream):
            add(tar, "site/" + name, stream[name])
        for name in sorted(overlay):
            add(tar, "overlay/" + name, overlay[name])
    blob = buf.getvalue()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(0, len(blob), PART_BYTES):
        part = args.out / f"part-{i // PART_BYTES:02d}"
        part.write_bytes(blob[i:i + PART_BYTES])
        parts.append({"name": part.name, "sha256": sha256(blob[i:i + PART_BYTES])})
    manifest["parts"] = parts
    manifest["stream_sha256"] = sha256(blob)
    tmp = args.out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, args.out / "manifest.json")
    print(f"{len(entries)} files, {sum(1 for e in entries if e['carried'])} carried, "
          f"{len(blob)} bytes in {len(parts)} parts, {len(skipped)} dep wheels skipped")


if __name__ == "__main__":
    main()
