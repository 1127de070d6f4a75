"""The CUDA code reader and its verdicts, hermetic: crafted fatbins, ELF objects, cubins
and images (the real wheels' objects are in tests/integration/test_cuda_code.py)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from patchbake import config
from patchbake.entry import main
from patchbake.config.channels import Gate
from patchbake.config.images import parse as parse_definition
from patchbake.cuda.check import check_image, gate_reading
from patchbake.cuda.elf import read_elf
from patchbake.cuda.fatbin import Code, Unreadable
from patchbake.cuda.verdict import Target, runs_on
from patchbake.errors import ConfigError, CudaCodeError
from patchbake.oci.image import StoreBlobs, load_image
from patchbake.oci.tarwriter import file_entry, whiteout_entry
from patchbake.release import gates
from patchbake.store import Store

from cuda_craft import (ARCH_SPECIFIC, COMPRESSED, FAMILY, PTX, SASS, container, cubin,
                        elf64, entry, image)

REPO = Path(__file__).resolve().parents[2]
T89 = Target.parse("8.9")


def codes(data: bytes) -> list[str]:
    def read(off: int, n: int) -> bytes:
        if off + n > len(data):
            raise Unreadable(f"short read at {off}")
        return data[off:off + n]
    return sorted(c.label for c in read_elf(read, len(data), "obj").codes)


def fat(*archs: int, kind: int = SASS, flags: int = 0x11) -> bytes:
    return elf64({".text": b"\x90" * 40, ".nv_fatbin": container(
        *(entry(kind, a, flags) for a in archs))})


def test_fatbin_entries_are_read_from_their_headers() -> None:
    section = (container(entry(SASS, 80, 0x11 | COMPRESSED), entry(SASS, 90, ARCH_SPECIFIC))
               + bytes(24) + container(entry(PTX, 80), entry(SASS, 100, FAMILY)))
    data = elf64({".text": b"x" * 10, ".nv_fatbin": section, ".nvFatBinSegment": b"\0" * 24})

    def read(off: int, n: int) -> bytes:
        return data[off:off + n]
    got = read_elf(read, len(data), "obj")
    assert got.sections == (".nv_fatbin",)
    assert [c.label for c in got.codes] == ["sm_80", "sm_90a", "compute_80", "sm_100f"]
    assert [c.compressed for c in got.codes] == [True, False, False, False]
    assert got.codes[2].ptx_isa == "9.0" and got.codes[0].ptx_isa is None


def test_relocatable_fatbins_and_cubins() -> None:
    assert codes(elf64({"__nv_relfatbin": container(entry(SASS, 86))})) == ["sm_86"]
    assert codes(cubin(89)) == ["sm_89"]
    assert codes(elf64({".text": b"\x90" * 8})) == []  # an ELF without CUDA code


@pytest.mark.parametrize("code, ok", [
    (Code("sass", 89), True), (Code("sass", 86), True), (Code("sass", 80), True),
    (Code("sass", 87), True), (Code("sass", 90), False), (Code("sass", 75), False),
    (Code("sass", 90, "a"), False), (Code("sass", 89, "a"), True), (Code("sass", 100, "f"), False),
    (Code("ptx", 80), True), (Code("ptx", 89), True), (Code("ptx", 75), True),
    (Code("ptx", 90), False), (Code("ptx", 90, "a"), False), (Code("ptx", 89, "a"), True),
])
def test_what_runs_on_8_9(code: Code, ok: bool) -> None:
    assert runs_on(code, T89) is ok


@pytest.mark.parametrize("data, message", [
    (elf64({".nv_fatbin": b"\x01\x02\x03\x04" + bytes(60)}), "no fatbin container at +0"),
    (elf64({".nv_fatbin": struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 1 << 40)}),
     "does not fit the section"),
    (elf64({".nv_fatbin": container(entry(SASS, 80)[:40])}), "runs past its container"),
    (elf64({".nv_fatbin": container(entry(SASS, 3))}), "names architecture 3"),
    (elf64({".nv_fatbin": container(entry(SASS, 80))})[:-70], "does not fit the object"),
])
def test_malformed_objects_are_unreadable(data: bytes, message: str) -> None:
    with pytest.raises(Unreadable) as err:
        codes(data)
    assert message in str(err.value)


def _store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "store")


def check(store: Store, digest: Any, **kw: Any) -> Any:
    blobs = StoreBlobs(store)
    (store.root / "tmp").mkdir(exist_ok=True)
    return check_image(load_image(blobs, digest), blobs, "img", T89, store.root / "tmp", **kw)


def test_the_merged_filesystem_is_what_is_judged(tmp_path: Path) -> None:
    store = _store(tmp_path)
    lower = [file_entry("usr/lib/hopper.so", data=fat(90)),
             file_entry("usr/lib/ampere.so", data=fat(86, 90)),
             file_entry("usr/lib/plain.so", data=elf64({".text": b"\x90" * 64})),
             file_entry("usr/lib/replaced.so", data=fat(90)),
             file_entry("usr/share/readme.txt", data=b"not an ELF object, long enough " * 3)]
    upper = [whiteout_entry("usr/lib/hopper.so"), file_entry("usr/lib/replaced.so",
                                                             data=fat(89, kind=PTX))]
    bad = check(store, image(store, [lower]))
    assert [(o.path, o.verdict) for o in bad.objects] == [
        ("usr/lib/ampere.so", "pass"), ("usr/lib/hopper.so", "fail"),
        ("usr/lib/plain.so", "not-cuda"), ("usr/lib/replaced.so", "fail")]
    assert bad.elf_objects == 4 and len(bad.failures) == 2
    with pytest.raises(CudaCodeError) as err:
        bad.raise_on_failure()
    assert err.value.exit_code == 39
    assert "2 CUDA object(s) of img have no code for compute capability 8.9; first: " \
        "usr/lib/hopper.so" in err.value.message
    good = check(store, image(store, [lower, upper]))
    assert [(o.path, o.verdict) for o in good.objects] == [
        ("usr/lib/ampere.so", "pass"), ("usr/lib/plain.so", "not-cuda"),
        ("usr/lib/replaced.so", "pass")]
    assert good.objects[2].ptx == ["compute_89"]
    good.raise_on_failure()
    assert gate_reading(good, "present")[0] == "pass"


def test_exemptions_come_from_the_definition_and_unreadable_objects_fail(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    broken = fat(80)[:-100]  # its section table is cut off
    digest = image(store, [[file_entry("opt/fa3.so", data=fat(90, flags=ARCH_SPECIFIC)),
                            file_entry("opt/broken.so", data=broken)]])
    rep = check(store, digest, exempt={"/opt/fa3.so": "Hopper only; never loaded on 8.9"})
    assert [(o.path, o.verdict) for o in rep.objects] == [("opt/broken.so", "unreadable"),
                                                          ("opt/fa3.so", "exempt")]
    status, reason = gate_reading(rep, "present")
    assert status == "fail" and "first: opt/broken.so" in reason


def test_zero_cuda_objects_pass_only_where_the_definition_declares_none(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    empty = check(store, image(store, [[file_entry("usr/bin/tool", data=b"#!/bin/sh\n" * 8)]]))
    assert gate_reading(empty, "none") == ("pass", "no CUDA objects, as the definition "
                                                   "declares (0 ELF objects)")
    status, reason = gate_reading(empty, "present")
    assert status == "fail" and "a serving image for 8.9 must carry kernels" in reason
    some = check(store, image(store, [[file_entry("usr/lib/k.so", data=fat(89))]]))
    status, reason = gate_reading(some, "none")
    assert status == "fail" and "declares no CUDA code, but the image holds 1" in reason


def test_the_command_lists_objects_and_exits_39(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(REPO / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    store = _store(tmp_path)
    bad = image(store, [[file_entry("x/ext.so", data=fat(90, 100)),
                         file_entry("x/ok.so", data=fat(80, kind=PTX))]])
    assert main(["--json", "image", "cuda-code", str(bad)]) == 39
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [(o["path"], o["sass"], o["ptx"], o["verdict"]) for o in doc["objects"]] == [
        ("x/ext.so", ["sm_90", "sm_100"], [], "fail"), ("x/ok.so", [], ["compute_80"], "pass")]
    assert "1 CUDA object(s) of sha256:" in err and "first: x/ext.so" in err
    assert main(["image", "cuda-code", str(bad), "--target", "9.0"]) == 0
    assert main(["image", "cuda-code", str(bad), "--target", "sm_89"]) == 2
    assert "target 'sm_89' is not a compute capability" in capsys.readouterr().err
    assert not os.listdir(store.root / "tmp")  # nothing left behind


def _definition(extra: dict[str, Any]) -> Any:
    raw = yaml.safe_load((REPO / "images" / "sm89-serving-offline.yaml").read_text())
    return parse_definition({**raw, **extra}, "d", REPO / "images" / "d.yaml", REPO)


def test_the_definition_declares_cuda_code() -> None:
    plain = _definition({"cuda_code": {}})
    assert plain.cuda_expect == "present" and plain.cuda_exempt == ()
    standin = config.images.load_file(REPO / "images" / "sm89-serving-offline.yaml")
    assert standin.cuda_expect == "none"
    assert standin.fingerprint == plain.fingerprint  # not part of what a bake writes
    ex = _definition({"cuda_code": {"exempt": [{"path": "/a/b.so", "why": "Hopper only"}]}})
    assert ex.cuda_exempt == (("/a/b.so", "Hopper only"),)
    for bad, message in [({"expect": "some"}, "cuda_code.expect"),
                         ({"exempt": [{"path": "a.so", "why": "x"}]}, "must be an absolute"),
                         ({"exempt": [{"path": "/a.so"}]}, "exactly 'path' and 'why'"),
                         ({"exempt": [{"path": "/a.so", "why": " "}]}, "must say why")]:
        with pytest.raises(ConfigError) as err:
            _definition({"cuda_code": bad})
        assert message in err.value.one_line()


def test_the_gate_reads_the_declaration_of_the_recorded_definition(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    digest = image(store, [[file_entry("usr/lib/k.so", data=fat(90))]])
    p = config.load(REPO / "pipeline.yaml")
    ev = gates.Evaluation(p, store, p.lineages["v0.25.1"], "i", digest, tmp_path, tmp_path)
    g = Gate("cuda-code", "candidate", cuda_target="8.9")
    assert gates.gate_cuda_code(ev, g)[0] == "fail"  # no record: fails closed
    ev._memo["record"] = type("R", (), {"definition": "sm89-serving-offline"})()
    status, reason = gates.gate_cuda_code(ev, g)
    assert status == "fail" and "declares no CUDA code, but the image holds 1" in reason
    ev._memo["record"] = type("R", (), {"definition": "sm89-serving"})()
    status, reason = gates.gate_cuda_code(ev, g)
    assert status == "fail" and "usr/lib/k.so: no SASS runnable on 8.9" in reason
    assert gates.gate_cuda_code(ev, Gate("cuda-code", "c", cuda_target="9.0"))[0] == "pass"


def test_the_committed_compile_evidence_is_for_the_committed_patch() -> None:
    """manifests/compile/dsv4-topk-sm89.json (tools/compile_sm89.py): compiled for 8.9 from
    the committed patch's kernel; a patch change makes it stale, and this says so."""
    import hashlib
    doc = json.loads((REPO / "manifests" / "compile" / "dsv4-topk-sm89.json").read_text())
    assert doc["label"] == "compiled for 8.9, not run on 8.9"
    assert doc["target"] == {"backend": "cuda", "arch": 89, "warp_size": 32}
    assert doc["compiler"]["triton"] == "3.6.0"
    patch = (REPO / doc["patch"]["path"]).read_bytes()
    assert doc["patch"]["sha256"] == hashlib.sha256(patch).hexdigest(), \
        "the patch changed: run `make sm89-compile-evidence` and commit the result"
    files = (REPO / "patch" / "FILES.txt").read_text()
    assert f"{doc['source']['path']}  A  " in files and doc["source"]["sha256"] in files
    assert doc["kernels"] and all(k["cubin_reads_as"] == ["sm_89"] and k["ptx_target"] ==
                                  "sm_89" and len(k["cubin_sha256"]) == 64
                                  for k in doc["kernels"])


def test_an_exemption_names_one_path_or_a_pattern_of_them() -> None:
    from patchbake.cuda.check import exemption

    exempt = {"/opt/x/one.so": "exact", "/opt/cubins/*": "per-arch kernels"}
    assert exemption(exempt, "opt/x/one.so") == "exact"
    assert exemption(exempt, "opt/cubins/a/b/k_sm100f.cubin") == "per-arch kernels"
    assert exemption(exempt, "opt/x/two.so") is None
    assert exemption(exempt, "opt/cubinsX/k.cubin") is None
