#!/usr/bin/env bash
# Stops the cluster tools/postgres/start.sh runs in DIR (fast shutdown) and, with --purge,
# removes DIR.
# Usage: tools/postgres/stop.sh [DIR] [--purge]
set -euo pipefail

DIR=$(realpath -m "${1:-${VNFLOW_PG_DIR:-/tmp/vnflow-postgres}}")
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [[ -f $DIR/data/postmaster.pid ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
  else
    "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
  fi
fi
if [[ ${2:-} == --purge ]]; then rm -rf "$DIR"; fi
