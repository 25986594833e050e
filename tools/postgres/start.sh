#!/usr/bin/env bash
# Runs a throwaway PostgreSQL 15 cluster (Debian's postgresql-15 binaries) for vnflow's
# tests and benches: a cluster in DIR, listening on 127.0.0.1:PORT and a unix socket in
# DIR/sock, trust authentication for the user "vnflow", a database "vnflow". As root, the
# cluster belongs to the `postgres` system user (PostgreSQL refuses to run as root).
#
# Usage: tools/postgres/start.sh [DIR]          stop with tools/postgres/stop.sh [DIR]
# Prints the database URL last (postgresql://vnflow@127.0.0.1:PORT/vnflow).
#
# Idempotent: a running cluster in DIR only has its URL printed again.
#
# Settings (environment):
#   VNFLOW_PG_DIR      DIR when no argument is given (/tmp/vnflow-postgres)
#   PG_PORT=15432      below 32768, the ephemeral range
#   PG_FSYNC=on        off for test suites that need no durability (faster on a busy disk)
#   PG_BIN             /usr/lib/postgresql/15/bin
#   VNFLOW_PG_NO_APT=1 never run apt-get (fail if the binaries are missing)
set -euo pipefail

DIR=$(realpath -m "${1:-${VNFLOW_PG_DIR:-/tmp/vnflow-postgres}}")
PORT=${PG_PORT:-15432}
FSYNC=${PG_FSYNC:-on}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
URL="postgresql://vnflow@127.0.0.1:$PORT/vnflow"

if [[ ! -x $BIN/postgres ]]; then
  if [[ ${VNFLOW_PG_NO_APT:-} == 1 ]]; then
    echo "postgres: $BIN/postgres is missing (apt-get install postgresql-15)" >&2
    exit 1
  fi
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql-15
fi

# Runs a command as the cluster's owner.
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

mkdir -p "$DIR"
if [[ $(id -u) -eq 0 ]]; then
  chown postgres: "$DIR"
  if ! runuser -u postgres -- test -w "$DIR"; then
    echo "postgres: the postgres user cannot reach $DIR (a parent folder closed to others?)" >&2
    exit 1
  fi
fi
chmod 0700 "$DIR"

if as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  echo "$URL"
  exit 0
fi

if [[ ! -f $DIR/data/PG_VERSION ]]; then
  as_owner "$BIN/initdb" -D "$DIR/data" -U vnflow --auth=trust -E UTF8 --locale=C.UTF-8 \
    >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
fi
as_owner mkdir -p "$DIR/sock"
# Only 127.0.0.1 and the socket; trust is for this throwaway cluster only.
as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR/sock -c fsync=$FSYNC -c max_connections=200" \
  start >/dev/null
chmod 0755 "$DIR" "$DIR/sock"  # the socket for other users of the tests
if ! as_owner "$BIN/psql" -h "$DIR/sock" -p "$PORT" -U vnflow -d postgres -Atq \
  -c "SELECT 1 FROM pg_database WHERE datname = 'vnflow'" | grep -q 1; then
  as_owner "$BIN/createdb" -h "$DIR/sock" -p "$PORT" -U vnflow vnflow
fi
echo "$URL"
