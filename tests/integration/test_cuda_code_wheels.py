"""The cuda-code reader and gate on real objects: vLLM 0.25.1's wheel (its CUDA extension,
its Hopper-only FlashAttention 3), the same extension rewritten to hold sm_90 code only,
and NVIDIA's own ``cuobjdump`` as the second reader.

The wheel is looked up in ``$PATCHBAKE_TEST_WHEELS`` (default
``~/.cache/patchbake-tests/wheels``), where ``pip download --no-deps --only-binary=:all:
--platform manylinux_2_28_x86_64 vllm==0.25.1`` puts it; cuobjdump is
``$PATCHBAKE_CUOBJDUMP``, the one on PATH, or the ``nvidia-cuda-cuobjdump`` wheel's (in the
test extras). The wheel is also found as the blob the serving base's store holds for it.
Each part is skipped, with that reason, when its input is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from cuda_craft import image, retarget

from patchbake import config
from patchbake.config.channels import Gate
from patchbake.cuda.elf import read_elf
from patchbake.cuda.fatbin import Unreadable
from patchbake.oci.tarwriter import file_entry
from patchbake.release import gates
from patchbake.store import Store

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("PATCHBAKE_TEST_WHEELS",
                             Path.home() / ".cache" / "patchbake-tests" / "wheels"))
WHEEL = "vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl"
EXT = "vllm/_C_stable_libtorch.abi3.so"
FA3 = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
SP = "usr/local/lib/python3.11/site-packages"


def find_wheel() -> Path | None:
    """The wheel in WHEELS, else the blob a store holds for it: the serving base's lock
    pins this wheel by sha256, so `make serving-image` leaves it in the user's store."""
    if (WHEELS / WHEEL).is_file():
        return WHEELS / WHEEL
    lock = json.loads((REPO / "images" / "locks" / "vllm-0.25.1.lock").read_bytes())
    sha = str(next(w["sha256"] for w in lock["wheels"] if w["filename"] == WHEEL))
    homes = [os.environ.get("PATCHBAKE_SERVING_HOME"), os.environ.get("PATCHBAKE_HOME"),
             str(Path.home() / ".cache" / "patchbake")]
    for home in filter(None, homes):
        blob = Path(home) / "blobs" / "sha256" / sha.removeprefix("sha256:")
        if blob.is_file():
            return blob
    return None


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    wheel = find_wheel()
    if wheel is None:
        pytest.skip(f"{WHEEL} is neither in {WHEELS} nor in a store (pip download "
                    f"vllm==0.25.1 into {WHEELS}, or `make serving-image`)")
    out = tmp_path_factory.mktemp("wheel")
    with zipfile.ZipFile(wheel) as zf:
        for name in (EXT, FA3):
            zf.extract(name, out)
    sm90 = out / "sm90_only.so"
    sm90.write_bytes(retarget((out / EXT).read_bytes(), 90))
    return {"ext": out / EXT, "fa3": out / FA3, "sm90": sm90}


def ours(path: Path) -> Counter[tuple[str, str, bool]]:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        def read(off: int, n: int) -> bytes:
            if off + n > size:
                raise Unreadable("short")
            fh.seek(off)
            return fh.read(n)
        code = read_elf(read, size, path.name)
    return Counter((c.kind, c.label.replace("compute_", "sm_"), c.compressed)
                   for c in code.codes)


def theirs(tool: str, path: Path) -> Counter[tuple[str, str, bool]]:
    """cuobjdump's listing: a block per entry, 'Fatbin elf code:' or 'Fatbin ptx code:',
    then 'arch = sm_XY' and, when so, a line 'compressed'."""
    text = subprocess.run([tool, str(path)], capture_output=True, text=True,
                          check=True).stdout
    out: Counter[tuple[str, str, bool]] = Counter()
    for block in re.split(r"\n(?=Fatbin (?:elf|ptx) code:)", text):
        m = re.search(r"Fatbin (elf|ptx) code:.*?arch = (\S+)", block, re.S)
        if m:
            kind = "sass" if m.group(1) == "elf" else "ptx"
            out[(kind, m.group(2), "\ncompressed" in block)] += 1
    return out


def test_our_reading_is_cuobjdumps(objects: dict[str, Path]) -> None:
    # the nvidia-cuda-cuobjdump wheel (test extras) puts it under site-packages, not bin/
    wheel_tool = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin" / "cuobjdump"
    tool = os.environ.get("PATCHBAKE_CUOBJDUMP") or shutil.which("cuobjdump") or \
        (str(wheel_tool) if wheel_tool.is_file() else None)
    if not tool:
        pytest.skip("no cuobjdump (PATCHBAKE_CUOBJDUMP, or the nvidia-cuda-cuobjdump wheel "
                    "on PATH)")
    for name in ("ext", "fa3", "sm90"):
        mine = ours(objects[name])
        assert sum(mine.values()) > 0
        assert mine == theirs(tool, objects[name]), name
    assert {label for _, label, _ in ours(objects["sm90"])} == {"sm_90"}


def _pb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "PATCHBAKE_HOME": str(home),
           "PATCHBAKE_PIPELINE": str(REPO / "pipeline.yaml")}
    return subprocess.run([sys.executable, "-m", "patchbake", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def _gate(store: Store, digest: Any, definition: str) -> tuple[str, str]:
    p = config.load(REPO / "pipeline.yaml")
    ev = gates.Evaluation(p, store, p.lineages["v0.25.1"], "i", digest, store.root,
                          store.root)
    ev._memo["record"] = type("R", (), {"definition": definition})()
    return gates.gate_cuda_code(ev, Gate("cuda-code", "candidate", cuda_target="8.9"))


def test_the_gate_passes_the_real_extension_and_fails_one_without_8_9_code(
        objects: dict[str, Path], tmp_path: Path) -> None:
    home = tmp_path / "store"
    store = Store.open(home)
    real = image(store, [[file_entry(f"{SP}/{EXT}", source=objects["ext"],
                                     executable=True)]])
    lacking = image(store, [[file_entry(f"{SP}/{EXT}", source=objects["sm90"],
                                        executable=True)]])
    assert _gate(store, real, "sm89-serving") == ("pass", "1/1 CUDA objects have code for "
                                                  "8.9; 0 ELF objects without CUDA code")
    status, reason = _gate(store, lacking, "sm89-serving")
    assert status == "fail"
    assert reason == (f"1 of 1 CUDA objects have no code for 8.9; first: {SP}/{EXT}: no SASS "
                      "runnable on 8.9 and no PTX <= compute_89")
    ok = _pb(home, "image", "cuda-code", str(real))
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"_C_stable_libtorch\.abi3\.so\s+sm_75 sm_80 sm_86 sm_89 sm_90 sm_90a "
                     r"sm_100 sm_100f sm_120 sm_120f\s+compute_80 compute_89 compute_90\s+pass",
                     ok.stdout), ok.stdout
    bad = _pb(home, "image", "cuda-code", str(lacking))
    assert bad.returncode == 39
    assert f"first: {SP}/{EXT} (no SASS runnable on 8.9 and no PTX <= compute_89; has " \
        "sm_90, compute_90)" in bad.stderr


def test_hopper_only_flash_attention_needs_an_exemption(objects: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """vLLM's wheel carries FlashAttention 3 with sm_90a code only: on 8.9 vLLM never loads
    it, and only the definition can say so."""
    store = Store.open(tmp_path / "store")
    digest = image(store, [[file_entry(f"{SP}/{EXT}", source=objects["ext"]),
                            file_entry(f"{SP}/{FA3}", source=objects["fa3"])]])
    status, reason = _gate(store, digest, "sm89-serving")
    assert status == "fail" and f"first: {SP}/{FA3}" in reason
