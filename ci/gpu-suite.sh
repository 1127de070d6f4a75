#!/usr/bin/env bash
# CI, on a self-hosted GPU runner labelled by compute capability: pull the staged image by
# digest, run SUITE with the host runner, sign the result. Each leg runs its own suite
# (sm90: dsv4-topk-gpu, sm89: dsv4-topk-gpu-sm89), so the legs write different files.
# Evidence is write-once: when the repository already holds evidence for this digest and
# suite that verifies, the leg says so and signs nothing (the gates use the committed file).
# The key: the secret's PEM in $PATCHBAKE_KEY_PEM (ci/lib.sh). New evidence is left in
# evidence-out/, laid out like the repository: the job's artifact.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${STAGING:?set STAGING=host:port/repo}" "${DIGEST:?set DIGEST=sha256:...}" "${SUITE:?set SUITE}"
committed="manifests/evidence/${DIGEST#sha256:}/$SUITE.dsse.json"
pb pull "$STAGING@$DIGEST"
if [ -e "$committed" ]; then
  pb evidence verify --suite "$SUITE" --image "$DIGEST"
  echo "$committed is committed and verifies: evidence is write-once, so $SUITE is not run again"
  exit 0
fi
key_from_env PATCHBAKE_KEY_PEM
pb suites run "$SUITE" --image "$DIGEST" --runner host --results-out "results-$SUITE.json"
pb evidence sign "results-$SUITE.json" --image "$DIGEST"
collect_changes evidence-out
