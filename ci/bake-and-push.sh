#!/usr/bin/env bash
# CI: the main job (fetch, guard, apply, bake, verify, candidate gates), then the image
# goes to the staging repository by digest. STAGING=host:port/repo (a registry the GPU
# runners can reach too); the tag is the commit, and tags never move.
# Leaves record-out/ (the image record, laid out like the repository: the GPU legs need it
# to sign) and writes `digest=sha256:...` to $GITHUB_OUTPUT when set (the job's output).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
: "${STAGING:?set STAGING=host:port/repo}"
image=${IMAGE:-sm89-serving-offline}
pb run
digest=$(PYTHONPATH=tools "$py" -c 'import sys; from patchbake import config; from patchbake.images import record
print(record.latest(config.load().root, sys.argv[1]).manifest_digest)' "$image")
pb push "$image" "$STAGING:$(git rev-parse --short=12 HEAD)"
hex=${digest#sha256:}
mkdir -p "record-out/manifests/images/$image"
cp -p "manifests/images/$image/$hex.json" "record-out/manifests/images/$image/"
echo "image $image = $digest"
if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "digest=$digest" >>"$GITHUB_OUTPUT"; fi
