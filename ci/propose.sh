#!/usr/bin/env bash
# CI, the last release job (contents: write, pull-requests: write; it holds no key): the
# release's records, downloaded into the checkout, are committed on a branch
# release/<channel>-<release id, 16 hex> and proposed as a pull request, reviewed like any
# other record. Outside GitHub Actions (make ci-local) the branch is pushed and no pull
# request is opened.
cd "$(dirname "$0")/.."
set -euo pipefail
: "${CHANNEL:?set CHANNEL}"
release=$(tail -n 1 manifests/releases/ledger.jsonl | python3 -c 'import json,sys; print(json.load(sys.stdin)["release"])')
branch="release/$CHANNEL-${release:0:16}"
if [ -z "$(git status --porcelain --untracked-files=all -- manifests)" ]; then
  echo "nothing new under manifests/: release $release is already committed"; exit 0
fi
git switch -c "$branch"
git add manifests
git -c user.name="${GITHUB_ACTOR:-patchbake-ci}" -c user.email="patchbake-ci@users.noreply.invalid" \
  commit -q -m "release $release into $CHANNEL (records from the release workflow)"
git push origin "HEAD:refs/heads/$branch"
if [ "${GITHUB_ACTIONS:-}" = true ]; then
  gh pr create --base "${GITHUB_REF_NAME:-main}" --head "$branch" \
    --title "release ${release:0:16} into $CHANNEL" \
    --body "The records of release $release (channel $CHANNEL) from run $GITHUB_RUN_ID. \`patchbake release verify $release\` checks them."
else
  echo "branch $branch pushed to origin (no pull request outside GitHub Actions)"
fi
