#!/usr/bin/env bash
# CI: the main job (fetch, guard, apply, bake, verify, candidate gates), then the image
# goes to the staging repository by digest. STAGING=host:port/repo (a registry the runner
# can reach); the tag is the commit, and tags never move.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STAGING:?set STAGING=host:port/repo}"
PYTHONPATH=tools python3 -m patchbake run
PYTHONPATH=tools python3 -m patchbake push sm89-serving-offline "$STAGING:$(git rev-parse --short=12 HEAD)"
