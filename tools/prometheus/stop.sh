#!/usr/bin/env bash
# Stops the Prometheus tools/prometheus/start.sh runs from DIR (TERM, then KILL after
# PROM_STOP_WAIT=10 seconds) and, with --purge, removes DIR. Already stopped is not an
# error; a pid in DIR/prometheus.pid that is no longer DIR's Prometheus is left alone.
# Usage: tools/prometheus/stop.sh DIR [--purge]
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || ( $# -eq 2 && $2 != --purge ) ]]; then
  echo "usage: $0 DIR [--purge]" >&2
  exit 2
fi
DIR=$(realpath -m "$1")
WAIT=${PROM_STOP_WAIT:-10}
[[ $WAIT =~ ^[0-9]+$ ]] || { echo "prometheus: PROM_STOP_WAIT=$WAIT is not a number of seconds" >&2; exit 1; }

# Whether PID is the Prometheus of DIR (not a reused pid).
ours() {
  [[ -r /proc/$1/cmdline ]] && tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null |
    grep -qxF -- "--config.file=$DIR/prometheus.yml"
}

if [[ -f $DIR/prometheus.pid ]]; then
  pid=$(<"$DIR/prometheus.pid")
  if [[ $pid =~ ^[0-9]+$ ]] && ours "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((n = 0; n < WAIT * 5; n++)); do
      ours "$pid" || break
      sleep 0.2
    done
    if ours "$pid"; then
      echo "prometheus: pid $pid still running after ${WAIT}s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for ((n = 0; n < 25; n++)); do
        ours "$pid" || break
        sleep 0.2
      done
    fi
  fi
  rm -f "$DIR/prometheus.pid"
fi
if [[ ${2:-} == --purge ]]; then
  [[ $DIR != / ]] || { echo "prometheus: refusing to purge /" >&2; exit 1; }
  rm -rf "$DIR"
fi
