#!/usr/bin/env bash
# The engine's unit tests (tests/unit/engine: the executor, the commit-failure sweep,
# hardening, commands, the daemon's lock) on PostgreSQL: a throwaway cluster
# (tools/postgres/start.sh, in a scratch folder, fsync off: durability is not what these
# tests check), VNFLOW_TEST_PG set, the cluster stopped and removed afterwards.
# Usage: pg_engine_test.sh ENGINE_TEST_BINARY SOURCE_ROOT
# Exits 77 (skipped) when PostgreSQL 15 is not installed.
set -euo pipefail
exe=$1
root=$2
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [[ ! -x $BIN/postgres ]]; then
  echo "skipped: no PostgreSQL 15 in $BIN (apt-get install postgresql-15)"
  exit 77
fi
dir=$(mktemp -d /tmp/vnflow-pg-test-XXXXXX)
chmod 0755 "$dir"  # the cluster runs as the postgres user when this runs as root
cleanup() { bash "$root/tools/postgres/stop.sh" "$dir/pg" --purge || true; rm -rf "$dir"; }
trap cleanup EXIT
url=$(PG_PORT=${PG_TEST_PORT:-15433} PG_FSYNC=off VNFLOW_PG_NO_APT=1 \
  bash "$root/tools/postgres/start.sh" "$dir/pg" | tail -n 1)
echo "PostgreSQL: $url"
VNFLOW_TEST_PG=$url VNFLOW_SOURCE_ROOT=$root "$exe"
