#!/usr/bin/env bash
# Start the services the integration tests use: a Docker engine with no bridge network and
# no iptables (every container and build runs with --network none), and the distribution
# registry bound to 127.0.0.1. Idempotent: a service that already answers is left alone.
# State, logs and pid files live in $PATCHBAKE_SERVICES_DIR (default
# /var/tmp/patchbake-services). `ci/services.sh stop` (make services-stop) stops what this
# script started, by the pids it recorded; services it did not start are left alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${PATCHBAKE_SERVICES_DIR:-/var/tmp/patchbake-services}
mkdir -p "$state"

start_dockerd() {
  if docker info >/dev/null 2>&1; then echo "docker engine: already running"; return; fi
  command -v dockerd >/dev/null || { echo "dockerd not installed (make setup installs docker.io)"; return 1; }
  nohup dockerd --bridge=none --iptables=false --ip-masq=false \
    --data-root "$state/docker" --pidfile "$state/dockerd.pid" >"$state/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { echo "docker engine: started"; return; }
    sleep 1
  done
  echo "docker engine did not start; last log lines:"; tail -n 20 "$state/dockerd.log"; return 1
}

start_registry() {
  local port=${PATCHBAKE_REGISTRY_PORT:-5000}
  if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
    echo "registry: already running on 127.0.0.1:$port"; return
  fi
  command -v docker-registry >/dev/null || { echo "docker-registry not installed (make setup installs it)"; return 1; }
  mkdir -p "$state/registry"
  sed -e "s#@ROOT@#$state/registry#" -e "s#@PORT@#$port#" "$here/registry.yml.in" >"$state/registry.yml"
  nohup docker-registry serve "$state/registry.yml" >"$state/registry.log" 2>&1 &
  echo $! >"$state/registry.pid"
  for _ in $(seq 1 30); do
    curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && { echo "registry: started on 127.0.0.1:$port"; return; }
    sleep 1
  done
  echo "registry did not start; last log lines:"; tail -n 20 "$state/registry.log"; return 1
}

stop_one() {  # name pidfile
  local pidfile=$2 pid
  if [ ! -s "$pidfile" ]; then echo "$1: not started by this script (no $pidfile)"; return; fi
  pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    echo "$1: stopped (pid $pid)"
  else
    echo "$1: not running (stale pid $pid)"
  fi
  rm -f "$pidfile"
}

case "${1:-start}" in
  start) start_dockerd; start_registry ;;
  stop) stop_one registry "$state/registry.pid"; stop_one "docker engine" "$state/dockerd.pid" ;;
  *) echo "usage: $0 [start|stop]"; exit 2 ;;
esac
