#!/usr/bin/env bash
# On the GPU machine, from the repo root. The bundle (.bundle/, made by make_bundle.py)
# arrives one part per call; `stage` moves what arrived to /root/bundle, `suite` also
# unpacks and checks it, compares torch/triton with the lock's RECORDs, and runs the
# suite on the patched tree and then on the pristine one. Results go to $OUT (8 files).
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
{ nvidia-smi; python3 -c 'import sys,torch,triton; print(sys.version); print("torch", torch.__version__, torch.version.cuda, torch.version.git_version); print("triton", triton.__version__); print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())'; which nvcc && nvcc --version | tail -2; } > "$OUT/machine.txt" 2>&1
python3 $HERE/device_check.py unpack --parts "$B/parts" --into "$B" --out "$OUT/bundle-check.json" || exit 1
python3 $HERE/device_check.py compare --records "$B/records" --out "$OUT/torch-record-compare.json"
export PATCHBAKE_SITE=$B/site
for side in patched pristine; do
  tree=$B/trees/patched; [ $side = pristine ] && tree=$B/site
  [ $side = pristine ] && export PATCHBAKE_SERVED_KNOBS=${PRISTINE_KNOBS:-1}
  PATCHBAKE_TREE=$tree PATCHBAKE_SERVED_OUT=$OUT/served-$side.json \
    timeout ${SUITE_TIMEOUT:-330} python3 -m pytest -q -p no:cacheprovider -c $HERE/pytest.ini \
    --rootdir $HERE -m gpu --junitxml=$OUT/junit-$side.xml $HERE
  echo "suite on the $side tree: exit $?"
done
