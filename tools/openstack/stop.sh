#!/usr/bin/env bash
# Stops the Keystone and Heat processes started by tools/openstack/start.sh,
# by their pid files: SIGTERM, then SIGKILL for whatever still runs after
# 5 s (heat-all's API otherwise lingers for its graceful shutdown).
#
# Usage: tools/openstack/stop.sh [DIR] [--purge]
#   DIR      as given to start.sh (default $VNFLOW_OPENSTACK_DIR or /tmp/vnflow-openstack)
#   --purge  also delete DIR: databases, keys, logs
set -euo pipefail

DIR=${VNFLOW_OPENSTACK_DIR:-/tmp/vnflow-openstack}
PURGE=0
for arg in "$@"; do
  case $arg in
    --purge) PURGE=1 ;;
    -*)
      echo "usage: $0 [DIR] [--purge]" >&2
      exit 2
      ;;
    *) DIR=$arg ;;
  esac
done
DIR=$(realpath -m "$DIR")

# a pid counts only while it is still one of our launchers (not a recycled pid)
ours() {
  local pid=$1
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$DIR/bin/"
}

pids=()
names=()
for svc in heat keystone; do
  f=$DIR/run/$svc.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  if [[ $pid =~ ^[0-9]+$ ]] && ours "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
    names+=("$svc")
  fi
  rm -f "$f"
done

if ((${#pids[@]} > 0)); then
  started=$(date +%s%N)
  for ((i = 0; i < 50; i++)); do
    alive=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    ((alive)) || break
    sleep 0.1
  done
  for idx in "${!pids[@]}"; do
    pid=${pids[$idx]}
    if kill -0 "$pid" 2>/dev/null && ours "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      echo "stopped ${names[$idx]} (pid $pid) with SIGKILL after 5 s"
    else
      echo "stopped ${names[$idx]} (pid $pid)"
    fi
  done
  # bounded wait until the killed processes are gone (ports free again)
  for ((i = 0; i < 30; i++)); do
    alive=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    ((alive)) || break
    sleep 0.1
  done
  echo "stop took $((($(date +%s%N) - started) / 1000000)) ms"
else
  echo "nothing running for $DIR"
fi

if ((PURGE)) && [[ -d $DIR ]]; then
  # only a directory that start.sh made
  if [[ -f $DIR/etc/keystone.conf || -d $DIR/run ]]; then
    rm -rf "$DIR"
    echo "removed $DIR"
  else
    echo "not removing $DIR: it does not look like a start.sh directory" >&2
    exit 1
  fi
fi
