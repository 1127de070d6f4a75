#!/usr/bin/env bash
# CI, in the job bound to the `release` environment: GitHub starts it only after one of the
# environment's required reviewers approves the run, and only then hands it the
# environment's secret PATCHBAKE_APPROVER_KEY (a key whose trust-policy role is `approver`).
# So the review becomes what the approval gate checks: a signed approval of this digest for
# CHANNEL. A channel without an approval gate needs none: nothing is signed. Neither is one
# whose other signed gates block (exit 60: nothing could be released; the gates job fails).
# The job first takes the GPU legs' new evidence (ci/take-evidence.sh): what it approves is
# computed from the channel's gates, which read it. The approval, and only it, is left in
# approval-out/<its file name>: the job's artifact.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${CHANNEL:?set CHANNEL}" "${DIGEST:?set DIGEST=sha256:...}"
if ! channel_has_gate "$CHANNEL" approval; then
  echo "channel '$CHANNEL' has no approval gate: the review was the approval; nothing to sign"
  exit 0
fi
policy_is_the_commits
key_from_env PATCHBAKE_KEY_PEM
rc=0
signed=$(pb --json release approve --channel "$CHANNEL" --image "$DIGEST" \
  --note "approved by ${GITHUB_ACTOR:-a reviewer} in run ${GITHUB_RUN_ID:-local} of ${GITHUB_REPOSITORY:-this repository}") || rc=$?
if [ "$rc" = 60 ]; then  # GateError: a signed gate blocks, so no release could be approved
  echo "'$CHANNEL' cannot be released for $DIGEST as its signed gates stand: no approval signed;"
  echo "the gates job fails closed and names what blocks it"
  exit 0
fi
[ "$rc" = 0 ] || exit "$rc"
approval=$(printf '%s' "$signed" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["approval"])')
mkdir -p approval-out
cp -p "$approval" approval-out/
echo "approval $approval: in approval-out/"
