#!/usr/bin/env bash
# On the GPU machine, from the repository root (PYTHONPATH=tools runs patchbake there).
# What travels is one tar.xz stream cut into parts (docs/fixtures.md, "The served suite's
# files"): `carry/`, a files bundle of the serving image made by `patchbake suites bundle
# --files`, and `deps312/`, the cp312 builds of the image's compiled dependencies that the
# machine lacks (not the image's files: the result lists them as the machine's).
#
#   device_run.sh stage     keep the parts that arrived in $CARRY_IN (default .carry)
#   device_run.sh unpack    check the parts (SHA256SUMS), unpack them into /root/carry
#   device_run.sh SUITE...  run each suite on the image's files (suites run --files);
#                           results, engine records and the log go to $OUT
#   device_run.sh start SUITE...   the same in its own session (it outlives the call that
#                           starts it: a run longer than one call's limit), into $C/out
#   device_run.sh wait      wait up to $WAIT_S seconds for it; when it is done, copy its
#                           files to $OUT
set -uo pipefail
C=/root/carry
IN=${CARRY_IN:-.carry}
IMAGE=${IMAGE:-sm89-serving-local}
mkdir -p $C/parts
for f in "$IN"/part-* "$IN"/SHA256SUMS; do [ -f "$f" ] && cp "$f" $C/parts/; done
ls -la $C/parts
case "${1:-stage}" in
  stage) exit 0 ;;
  unpack)
    (cd $C/parts && sha256sum -c SHA256SUMS) || exit 1
    rm -rf $C/u $C/extra $C/pb && mkdir -p $C/u $C/extra $C/pb
    cat $C/parts/part-* | xz -d | tar -C $C/u -xf - || exit 1
    for w in $C/u/deps312/*.whl; do
      case "$w" in */platformdirs-*) dest=$C/pb ;; *) dest=$C/extra ;; esac
      python3 -m zipfile -e "$w" "$dest" || exit 1
    done
    du -sh $C/u/carry $C/extra
    exit 0 ;;
  start)
    shift
    rm -rf $C/out && mkdir -p $C/out
    OUT=$C/out setsid nohup bash "$0" "$@" > $C/bg.log 2>&1 < /dev/null &
    echo "started in the background: $*"
    exit 0 ;;
  wait)
    for _ in $(seq 1 "${WAIT_S:-500}"); do [ -f $C/out/done ] && break; sleep 1; done
    tail -5 $C/bg.log
    [ -f $C/out/done ] && mkdir -p "${OUT:-/tmp/out}" && cp $C/out/* "${OUT:-/tmp/out}/"
    exit 0 ;;
esac

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,memory.used --format=csv
python3 -c 'import sys,torch,triton; print(sys.version); print("torch", torch.__version__, torch.version.cuda); print("triton", triton.__version__)'
export PYTHONPATH=$PWD/tools:$C/pb PATCHBAKE_HOME=$C/store
export PATCHBAKE_SITE=$C/extra PATCHBAKE_SERVED_OUT=$OUT
for suite in "$@"; do
  python3 -m patchbake suites run "$suite" --image "$IMAGE" --files $C/u/carry \
    --results-out "$OUT/$suite.result.json"
  echo "suites run $suite: exit $?"
done
touch "$OUT/done"
