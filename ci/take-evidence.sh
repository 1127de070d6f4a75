#!/usr/bin/env bash
# CI, in the approve, gates and promote jobs: the evidence-* artifacts are downloaded into a
# scratch folder (default .work/artifacts/evidence, one folder per artifact), never into the
# checkout; this copies only the exact files the GPU legs and the approve job make for
# DIGEST (and CHANNEL's approvals) to manifests/evidence/<hex>/, refusing anything else
# (ci/take_evidence.py), and saying what it took.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${DIGEST:?set DIGEST=sha256:...}" "${CHANNEL:?set CHANNEL}"
PYTHONPATH=tools "$py" ci/take_evidence.py "${1:-.work/artifacts/evidence}" \
  --digest "$DIGEST" --channel "$CHANNEL"
