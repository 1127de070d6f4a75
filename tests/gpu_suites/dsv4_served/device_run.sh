#!/usr/bin/env bash
# On the GPU machine, from the repo root. The bundle (.bundle/, made by make_bundle.py)
# arrives one part per call; `stage` moves what arrived to /root/bundle, `suite` also
# unpacks and checks it, compares torch/triton with the lock's RECORDs, and runs the
# suite on the patched tree, on the pristine one, and on the patched one with vLLM's
# other sparse MLA backend. Results go to $OUT (8 files).
set -uo pipefail
B=/root/bundle
IN=${BUNDLE_IN:-.bundle}   # where this call's carried parts arrived
HERE=tests/gpu_suites/dsv4_served
mkdir -p "$B/parts"
for f in "$IN"/part-* "$IN"/manifest.json; do [ -f "$f" ] && cp "$f" "$B/parts/"; done
[ -d "$IN/records" ] && cp -r "$IN/records" "$B/"
ls -la "$B/parts"
[ "${1:-stage}" = stage ] && exit 0

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi
python3 -c 'import sys,torch,triton; print(sys.version); print("torch", torch.__version__, torch.version.cuda, torch.version.git_version); print("triton", triton.__version__); print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())'
nvcc --version | tail -2
sha256sum $(find $HERE -type f ! -path '*__pycache__*' | sort)
python3 $HERE/device_check.py unpack --parts "$B/parts" --into "$B" --out "$OUT/bundle-check.json" || exit 1
python3 $HERE/device_check.py compare --records "$B/records" --out "$OUT/torch-record-compare.json"
export PATCHBAKE_SITE=$B/site
# patched: the suite; pristine: the probe (knob 1 alone: the tree has no knob);
# flashmla: the patched tree on vLLM's other sparse MLA backend (does the order reach it?)
for pass in patched pristine flashmla; do
  tree=$B/trees/patched; knobs=0,1,2; backend=; junit=$OUT/junit-$pass.xml
  [ $pass = pristine ] && tree=$B/trees/pristine && knobs=1
  [ $pass = flashmla ] && backend=FLASHMLA_SPARSE && junit=/tmp/junit-flashmla.xml
  PATCHBAKE_TREE=$tree PATCHBAKE_SERVED_KNOBS=$knobs PATCHBAKE_SERVED_BACKEND=$backend \
    PATCHBAKE_SERVED_OUT=$OUT/served-$pass.json \
    timeout ${SUITE_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -c $HERE/pytest.ini \
    --rootdir $HERE -m gpu --junitxml=$junit $HERE
  echo "suite, $pass pass: exit $?"
done
