#!/usr/bin/env bash
# CI, on a self-hosted GPU runner labelled by compute capability (sm89, sm90): pull the
# staged image by digest, run the GPU suite with the host runner, sign the result.
# The private key comes from the runner's secret store ($PATCHBAKE_SIGNING_KEY); the
# evidence file is the job's artifact (a later job commits it through review).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STAGING:?set STAGING=host:port/repo}"
digest=$(PYTHONPATH=tools python3 -c 'from patchbake import config; from patchbake.images import record; print(record.latest(config.load().root, "sm89-serving-offline")["manifest_digest"])')
PYTHONPATH=tools python3 -m patchbake pull "$STAGING@$digest"
PYTHONPATH=tools python3 -m patchbake suites run dsv4-topk-gpu --image "$digest" \
  --runner host --results-out "results-$1.json"
PYTHONPATH=tools python3 -m patchbake evidence sign "results-$1.json" --image "$digest"
