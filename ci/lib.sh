# Sourced by the ci/ scripts: the Python that runs patchbake, and signing keys from secrets.
#
# The Python: $PY, else the active virtual environment's, else the checkout's .venv/ (what
# `make setup-python` makes); a bare `python3` lacks the tool's packages on a fresh runner.
# Keys: a CI secret holds the private key's PEM text, never a path (a hosted runner has no
# file of ours). `key_from_env` writes it to a mode-0600 temporary file, removed when the
# script exits, and points $PATCHBAKE_SIGNING_KEY (what patchbake reads) at it.
set -euo pipefail
if [ -n "${PY:-}" ]; then py=$PY
elif [ -n "${VIRTUAL_ENV:-}" ]; then py=$VIRTUAL_ENV/bin/python
else py=.venv/bin/python
fi
[ -x "$py" ] || { echo "no Python with patchbake's packages at $py: run \`make setup-python\` first"; exit 1; }

pb() { PYTHONPATH=tools "$py" -m patchbake "$@"; }

key_from_env() {  # VAR: the name of the variable holding the PEM (a secret)
  local var=$1 file
  if [ -z "${!var:-}" ]; then
    echo "$var is empty: set the job's key secret (its PEM text; docs/ci.md)"; exit 1
  fi
  file=$(umask 077 && mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/patchbake-key.XXXXXX")
  # shellcheck disable=SC2064  # the file name is fixed now
  trap "rm -f '$file'" EXIT
  printf '%s\n' "${!var}" >"$file"
  export PATCHBAKE_SIGNING_KEY=$file
}

collect_changes() {  # OUT: copy every new or changed file under manifests/ into OUT/, by path
  local out=$1 path
  mkdir -p "$out"
  git status --porcelain --untracked-files=all -- manifests | while read -r _ path; do
    mkdir -p "$out/$(dirname "$path")" && cp -p "$path" "$out/$path"
  done
}

policy_is_the_commits() {  # fail unless pipeline.yaml and the trust policy are the checkout's
  if ! git diff --quiet HEAD -- pipeline.yaml manifests/trust-policy.yaml; then
    git diff --stat HEAD -- pipeline.yaml manifests/trust-policy.yaml
    echo "pipeline.yaml or manifests/trust-policy.yaml differs from commit $(git rev-parse --short=12 HEAD):"
    echo "nothing is signed with a policy or pipeline the commit does not hold"
    exit 1
  fi
}

channel_has_gate() {  # CHANNEL GATE: whether CHANNEL's gates (inherited ones included) have GATE
  PYTHONPATH=tools "$py" -c 'import sys; from patchbake import config
sys.exit(0 if sys.argv[2] in [g.kind for g in config.load().channels[sys.argv[1]].gates] else 1)' "$1" "$2"
}
