#!/usr/bin/env bash
# CI, after the gates job: record the release of the image in CHANNEL (gates re-evaluated,
# VSA signed, ledger entry, checkpoint) and promote it by digest to TARGET=host:port/repo:tag.
# The key: the release key's PEM in $PATCHBAKE_KEY_PEM (ci/lib.sh).
# What it wrote under manifests/ (release directory, VSA, ledger, checkpoint, SBOM and
# provenance, the evidence and approval it was handed) is left in release-out/, laid out
# like the repository: the job's artifact, which the propose job turns into a pull request.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${CHANNEL:?set CHANNEL}" "${TARGET:?set TARGET=host:port/repo:tag}"
image=${IMAGE:-sm89-serving-offline}
policy_is_the_commits
key_from_env PATCHBAKE_KEY_PEM
release=$(pb --json release create --channel "$CHANNEL" --image "$image" \
  | "$py" -c 'import json,sys; print(json.load(sys.stdin)["release"])')
pb release promote "$release" --to "$TARGET"
pb ledger verify
pb release verify "$release"
collect_changes release-out
echo "release $release into '$CHANNEL': its records are in release-out/"
