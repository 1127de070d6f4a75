#!/usr/bin/env bash
# Make what the GPU machine needs to run the GPU suites on the serving image, from the
# repository root, with the image in the store (make serving-image):
#
#   ci/gpu/make_carry.sh OUT_DIR     (about 7 minutes on two cores)
#
# OUT_DIR/carry    a files bundle of sm89-serving-local (`patchbake suites bundle --files`):
#                  its vllm/ and the pure-Python (and abi3) distributions the machine lacks
# OUT_DIR/deps312  the cp312 wheels of deps-cp312.txt (pip's own index and configuration)
# OUT_DIR/parts    both as one tar.xz stream in parts of 57 MiB, and SHA256SUMS: one part
#                  per device call (a call carries at most 64 MiB with the repository)
set -euo pipefail
OUT=${1:?usage: make_carry.sh OUT_DIR}
HERE=ci/gpu
PB=${PATCHBAKE:-patchbake}
# the distributions of the image the GPU machine lacks whose wheels any Python 3 loads
DISTS="annotated-types astor cachetools compressed-tensors depyf dill diskcache fastapi
flashinfer-python httpcore2 httpx2 interegular jsonschema jsonschema-specifications lark
llguidance lm-format-enforcer mistral-common openai openai-harmony partial-json-parser
prometheus-fastapi-instrumentator pydantic python-json-logger referencing sniffio starlette
truststore typing-inspection watchfiles"
args=()
for d in $DISTS; do args+=(--dist "$d"); done
mkdir -p "$OUT"
$PB suites bundle --files sm89-serving-local "${args[@]}" \
  --leave "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so=FlashAttention-2 (191 MB): vLLM 0.25.1 uses it below sm90 only; on sm90 it picks FlashAttention-3's sparse MLA" \
  --leave "vllm/vllm-rs=the Rust HTTP front end (38 MB): the suites drive vllm.LLM in-process" \
  --out "$OUT/carry"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 \
         manylinux2014 manylinux_2_5 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --abi cp312 --abi abi3 --abi none "${platforms[@]}" \
  -r $HERE/deps-cp312.txt -d "$OUT/deps312"
mkdir -p "$OUT/parts"
tar -C "$OUT" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - carry deps312 \
  | xz -T0 -6 | split -b 57M -d -a 2 - "$OUT/parts/part-"
(cd "$OUT/parts" && sha256sum part-* > SHA256SUMS)
ls -l "$OUT/parts"
