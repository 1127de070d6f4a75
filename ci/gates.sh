#!/usr/bin/env bash
# The release gates, as CI runs them and as `make ci-gates` runs them locally: every
# channel's gate table for the image (default: the offline definition's latest bake).
# Exit status: that of the REQUIRED channel (default candidate; 60 when it is blocked);
# the later channels' tables are printed, and say what blocks them.
set -uo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-sm89-serving-offline}
required=${REQUIRED_CHANNEL:-candidate}
py=${PY:-python3}
channels=$(PYTHONPATH=tools "$py" -c 'from patchbake import config; print(" ".join(config.load().channels))')
rc=0
for channel in $channels; do
  PYTHONPATH=tools "$py" -m patchbake release gates --channel "$channel" --image "$image"
  status=$?
  if [ "$channel" = "$required" ]; then rc=$status; fi
done
echo "required channel '$required': exit $rc"
exit "$rc"
