#!/usr/bin/env bash
# CI, behind the `release` environment (required reviewers): record the release of the
# image in CHANNEL (gates re-evaluated, VSA signed, ledger entry) and promote it by digest
# to TARGET=host:port/repo:tag. The ledger and release record are then committed through
# a pull request; the registry tag and its attached statements are what users pull.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CHANNEL:?set CHANNEL}" "${TARGET:?set TARGET=host:port/repo:tag}"
release=$(PYTHONPATH=tools python3 -m patchbake --json release create --channel "$CHANNEL" \
  --image sm89-serving-offline | python3 -c 'import json,sys; print(json.load(sys.stdin)["release"])')
PYTHONPATH=tools python3 -m patchbake release promote "$release" --to "$TARGET"
PYTHONPATH=tools python3 -m patchbake ledger verify
