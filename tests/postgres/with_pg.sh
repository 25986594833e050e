#!/usr/bin/env bash
# Runs a test on a throwaway PostgreSQL 15 cluster: tools/postgres/start.sh in a scratch
# folder (fsync off: durability is not what these tests check; the drill runs its own
# cluster with fsync on), the test run with VNFLOW_TEST_PG set to its URL, the cluster stopped
# and removed afterwards (also when the test fails or is killed).
#
# Usage: with_pg.sh SOURCE_ROOT PORT COMMAND [ARG...]
#   PORT  the cluster's port (below 32768); each test of the `postgres` suite has its own,
#         so they could run side by side
# The tests it runs (tests/meson.build): the engine unit tests (one parametrised suite:
# tests/unit/engine/store_param.h) and tests/cli/engine_cli_test.sh (the CLI's lifecycle
# checks, the same script as on SQLite).
# Exits 77 (skipped) when PostgreSQL 15 is not installed.
set -euo pipefail
root=$1
port=$2
shift 2
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [[ ! -x $BIN/postgres ]]; then
  echo "skipped: no PostgreSQL 15 in $BIN (apt-get install postgresql-15)"
  exit 77
fi
dir=$(mktemp -d /tmp/vnflow-pg-test-XXXXXX)
chmod 0755 "$dir"  # the cluster runs as the postgres user when this runs as root
cleanup() { bash "$root/tools/postgres/stop.sh" "$dir/pg" --purge || true; rm -rf "$dir"; }
trap cleanup EXIT
url=$(PG_PORT=$port PG_FSYNC=off VNFLOW_PG_NO_APT=1 \
  bash "$root/tools/postgres/start.sh" "$dir/pg" | tail -n 1)
echo "PostgreSQL: $url"
VNFLOW_TEST_PG=$url VNFLOW_SOURCE_ROOT=$root "$@"
