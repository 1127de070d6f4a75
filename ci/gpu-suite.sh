#!/usr/bin/env bash
# CI, on a self-hosted GPU runner labelled by compute capability, in three steps, each with
# only the secret it needs (docs/ci.md):
#   ci/gpu-suite.sh pull   pull the staged image by digest (the registry password)
#   ci/gpu-suite.sh run    run SUITE with the host runner (no secret: the suite is the
#                          image's code, and gets a scrubbed environment besides)
#   ci/gpu-suite.sh sign   sign the result (the evidence key, loaded only now)
# Each leg runs its own suite (sm90: dsv4-topk-gpu, sm89: dsv4-topk-gpu-sm89), so the legs
# write different files. Evidence is write-once: when the repository already holds evidence
# for this digest and suite that verifies, the leg says so and signs nothing (the gates use
# the committed file). The key: the secret's PEM in $PATCHBAKE_KEY_PEM (ci/lib.sh). The new
# evidence file, and only it, is left in evidence-out/<suite>.dsse.json: the job's artifact.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${STAGING:?set STAGING=host:port/repo}" "${DIGEST:?set DIGEST=sha256:...}" "${SUITE:?set SUITE}"
committed="manifests/evidence/${DIGEST#sha256:}/$SUITE.dsse.json"
results="results-$SUITE.json"
case "${1:-}" in
  pull)
    pb pull "$STAGING@$DIGEST"
    ;;
  run)
    if [ -e "$committed" ]; then
      pb evidence verify --suite "$SUITE" --image "$DIGEST"
      echo "$committed is committed and verifies: evidence is write-once, so $SUITE is not run again"
      exit 0
    fi
    if [ -n "${PATCHBAKE_KEY_PEM:-}${PATCHBAKE_SIGNING_KEY:-}" ]; then
      echo "a signing key is in this step's environment: the suite step must hold none (docs/ci.md)"
      exit 1
    fi
    pb suites run "$SUITE" --image "$DIGEST" --runner host --results-out "$results"
    ;;
  sign)
    if [ -e "$committed" ]; then echo "$committed is committed: nothing to sign"; exit 0; fi
    [ -s "$results" ] || { echo "no $results: the run step did not leave a result"; exit 1; }
    policy_is_the_commits
    key_from_env PATCHBAKE_KEY_PEM
    pb evidence sign "$results" --image "$DIGEST"
    mkdir -p evidence-out
    cp -p "$committed" "evidence-out/$SUITE.dsse.json"
    ;;
  *) echo "usage: $0 pull|run|sign"; exit 2 ;;
esac
