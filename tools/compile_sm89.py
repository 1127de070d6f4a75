"""Compile the payload's Triton kernel ahead of time for sm_89 and record the cubins.

Compile evidence, not run evidence: no GPU is needed or used; the record says "compiled
for 8.9, not run on 8.9". The kernel source is the patch's own new file
(vllm/model_executor/layers/dsv4_topk_canon.py, added whole by the patch), taken from the
committed patch and checked against FILES.txt's post-image sha256 before it is compiled.
The module imports torch for its host-side functions only; the kernels need triton alone,
so torch is an empty stand-in module here.

Run with a Python that has triton==3.6.0 (the lineage's pin), e.g.:

    python3 -m venv /tmp/triton && /tmp/triton/bin/pip install triton==3.6.0
    make sm89-compile-evidence TRITON_PYTHON=/tmp/triton/bin/python

Writes manifests/compile/dsv4-topk-sm89.json (atomically); ``--check`` compiles again and
compares (exit 1 when a cubin differs). Standard library, triton and patchbake's own cubin
reader (``patchbake.cuda.elf``, standard library only), which must read each cubin as sm_89.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from patchbake.cuda.elf import read_elf  # noqa: E402 - standard library only below it
PATCH = ROOT / "patch" / "dsv4-deterministic-topk-v0.25.1.patch"
FILES = ROOT / "patch" / "FILES.txt"
SOURCE = "vllm/model_executor/layers/dsv4_topk_canon.py"
KERNEL = "_canonicalize_topk_kernel"
TRITON = "3.6.0"
LABEL = "compiled for 8.9, not run on 8.9"
# (k, rows): the launch shapes the GPU suite covers at the top-k sizes DeepSeek-V4 uses
SHAPES = [(512, 4096), (1024, 4096), (2048, 4096)]
MODES = {"ascending": 0, "descending": -1}  # FLIP


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def new_file(patch: bytes, path: str) -> bytes:
    """The content of ``path``, a file the patch adds whole (one hunk from line 0)."""
    lines = patch.decode("utf-8").split("\n")
    start = lines.index(f"+++ b/{path}")
    if lines[start - 1] != "--- /dev/null":
        raise SystemExit(f"{path} is not a file the patch adds")
    out = []
    for line in lines[start + 2:]:  # past the single '@@ -0,0 +1,N @@'
        if not line.startswith("+"):
            break
        out.append(line[1:])
    return ("\n".join(out) + "\n").encode("utf-8")


def expected_sha256(files_txt: str, path: str) -> str:
    for line in files_txt.splitlines():
        parts = line.split()
        if parts and parts[0] == path:
            return parts[-1]
    raise SystemExit(f"FILES.txt does not list {path}")


def load_kernels(source: bytes, workdir: Path) -> types.ModuleType:
    # Triton reads a kernel's source through inspect: the module must be a real file
    path = workdir / "dsv4_topk_canon.py"
    path.write_bytes(source)
    sys.modules.setdefault("torch", types.ModuleType("torch"))
    spec = importlib.util.spec_from_file_location("dsv4_topk_canon", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.HAS_TRITON:
        raise SystemExit("triton did not import")
    return module


def compile_one(mod: types.ModuleType, k: int, rows: int, flip: int) -> dict[str, object]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = mod.kernel_config(k, rows)
    num_warps = cfg.pop("num_warps")
    kp = cfg["HI"] * cfg["LANES"] * cfg["VEC"]
    consts = {"FLIP": flip, "EVEN_COLS": k == kp, **cfg,
              "REG_BITS": (cfg["HI"] * cfg["VEC"]).bit_length() - 1,
              "N": (kp * cfg["ROWS"]).bit_length() - 1}
    fn = getattr(mod, KERNEL)
    names = fn.arg_names
    signature = {"idx_ptr": "*i32", "n_rows": "i32", "n_cols": "i32", "stride_row": "i32",
                 **{n: "constexpr" for n in consts}}
    src = ASTSource(fn, {n: signature[n] for n in names},
                    constexprs={(names.index(n),): v for n, v in consts.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 89, 32),
                              options={"num_warps": num_warps})
    cubin = compiled.asm["cubin"]
    read_back = sorted(c.label for c in read_elf(
        lambda off, n: cubin[off:off + n], len(cubin), "cubin").codes)
    if read_back != ["sm_89"]:
        raise SystemExit(f"the cubin reads back as {read_back}, not sm_89")
    return {"k": k, "rows": rows, "flip": flip, "num_warps": num_warps,
            "constexprs": consts, "cubin_sha256": sha256(cubin), "cubin_size": len(cubin),
            "ptx_sha256": sha256(compiled.asm["ptx"].encode()),
            "ptx_target": next((ln.split()[1] for ln in compiled.asm["ptx"].splitlines()
                                if ln.startswith(".target")), None),
            "cubin_reads_as": read_back,
            "shared_bytes": compiled.metadata.shared}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true",
                    help="compile again and compare with --out instead of writing it")
    ap.add_argument("--out", type=Path, default=ROOT / "manifests" / "compile" /
                    "dsv4-topk-sm89.json")
    args = ap.parse_args()
    import triton
    if triton.__version__ != TRITON:
        raise SystemExit(f"triton {triton.__version__} is not the lineage's pin {TRITON}")
    patch = PATCH.read_bytes()
    source = new_file(patch, SOURCE)
    want = expected_sha256(FILES.read_text(), SOURCE)
    if sha256(source) != want:
        raise SystemExit(f"{SOURCE} from the patch hashes to {sha256(source)}, FILES.txt "
                         f"says {want}")
    with tempfile.TemporaryDirectory() as tmp:
        # a cold cache of its own; and no line info, whose file path (this temporary
        # directory) would otherwise be compiled into the PTX and the cubin
        os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
        mod = load_kernels(source, Path(tmp))
        kernels = [compile_one(mod, k, rows, flip) for k, rows in SHAPES[:args.shapes]
                   for flip in MODES.values()]
    doc = {"format": "patchbake-compile-evidence/1", "label": LABEL,
           "target": {"backend": "cuda", "arch": 89, "warp_size": 32},
           "compiler": {"triton": triton.__version__},
           "kernel": KERNEL, "source": {"path": SOURCE, "sha256": want},
           "patch": {"path": PATCH.relative_to(ROOT).as_posix(), "sha256": sha256(patch)},
           "kernels": kernels}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print(f"{args.out}: {'the same cubins again' if same else 'DIFFERS from a fresh compile'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=args.out.parent, prefix=".compile.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp_name, args.out)
    print(f"{args.out}: {len(kernels)} cubins, {LABEL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
