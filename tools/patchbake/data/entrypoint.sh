#!/bin/sh
# patchbake entrypoint wrapper (baked to /opt/patchbake/entrypoint.sh; the image's
# entrypoint is this script followed by the base's own entrypoint, and its cmd is kept).
# With PATCHBAKE_VERIFY_ON_START=1 it runs the in-image verifier first, isolated (-I -S:
# no start-up hook runs before the check), and refuses to start when the image does not
# match its record; then, or otherwise, it execs the original entrypoint and arguments
# unchanged. PATCHBAKE_PYTHON names the Python to check (default python3, the one the
# server runs). The check sets PYTHONDONTWRITEBYTECODE=1 unless it is set, so a restarted
# container finds no bytecode the server wrote into the checked tree.
if [ "${PATCHBAKE_VERIFY_ON_START:-0}" = "1" ]; then
    # verify.py prints its one-line reason on stderr; its exit code is passed on
    "${PATCHBAKE_PYTHON:-python3}" -I -S /opt/patchbake/verify.py --quiet || exit "$?"
    export PYTHONDONTWRITEBYTECODE="${PYTHONDONTWRITEBYTECODE:-1}"
fi
if [ "$#" -eq 0 ]; then
    echo "patchbake: no command to run (the image has no entrypoint or cmd; pass one)" >&2
    exit 64
fi
exec "$@"
