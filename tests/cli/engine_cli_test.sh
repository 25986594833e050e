#!/usr/bin/env bash
# The engine through the command line, with a real daemon and a real database: onboarding,
# requests and their checks, the SOL003 task commands, replay, secrets, draining, the
# daemon's lock and key rotation.
#
# One script for both stores. By default a SQLite file; with VNFLOW_TEST_PG set (a
# postgresql:// URL, as tests/postgres/with_pg.sh gives) the same checks run on PostgreSQL,
# in schemas of their own (dropped afterwards), with the key in a file of the test's. What
# only one store has is checked there alone, and says so: SQLite's file modes, its flock
# (symbolic and hard links of the file) and its wake socket; PostgreSQL's daemon names
# (two daemons of one name refused, two names side by side) and the secrets absent from
# pg_dump.
# Usage: engine_cli_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pg_url=${VNFLOW_TEST_PG:-}
t_init "engine_cli${pg_url:+_postgres}" "$v"
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-engine-cli.XXXXXX")
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
pg_schemas=()
# pg_db SCHEMA: a URL of the test's cluster whose tables live in SCHEMA (made here, empty).
# Called as db=$(pg_db S) || die ...: it runs in a subshell, so the caller records S.
pg_db() {
  PGOPTIONS=-cclient_min_messages=warning "$PG_BIN/psql" "$pg_url" -Atq -v ON_ERROR_STOP=1 \
    -c "DROP SCHEMA IF EXISTS $1 CASCADE; CREATE SCHEMA $1" >/dev/null || return 1
  local sep='?'
  [[ $pg_url == *\?* ]] && sep='&'
  echo "$pg_url${sep}options=-csearch_path%3D$1"
}
# at_rest_absent NEEDLE DB: NEEDLE is nowhere in what the database holds (the SQLite file and its
# WAL, or the schema's pg_dump). Not a pipe into grep -q: grep's early exit would make the
# writer die of SIGPIPE, and pipefail + ! would call that a pass.
at_rest_absent() {
  if [[ -n $pg_url ]]; then
    local schema=${2##*%3D}
    "$PG_BIN/pg_dump" "$pg_url" -n "$schema" >"$work/dump.sql" || return 1
    grep -q 'CREATE TABLE' "$work/dump.sql" || return 1  # the dump holds the schema
    ! grep -aqF "$1" "$work/dump.sql"
  else
    test -s "$2" || return 1
    ! grep -saqF "$1" "$2" "$2-wal"
  fi
}
if [[ -n $pg_url ]]; then
  schema=vnflow_cli_$$
  pg_schemas+=("$schema")
  VNFLOW_DB=$(pg_db "$schema") || die "cannot make the schema $schema on $pg_url"
  export VNFLOW_DB VNFLOW_DB_KEY=$work/keys/pg.key
  # A SIGKILLed daemon's name is taken again once its lease ran out: 2 s here.
  daemon_name=(--name cli-d1 --lease-ms 2000)
else
  export VNFLOW_DB=$work/vnflow.db
  daemon_name=()
fi
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -9 "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  for s in "${pg_schemas[@]}"; do
    PGOPTIONS=-cclient_min_messages=warning "$PG_BIN/psql" "$pg_url" -Atq -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1
  done
  rm -rf "$work"
}
state() { op_state "$1"; }
gate_started() { [[ $(grep -c gate "$work/out/log") -gt $gates ]]; }  # a gate step more than $gates
start_daemon() {
  "$v" daemon "${daemon_name[@]}" --workers 4 --work-dir "$work/wd" --poll-ms 10 2>>"$work/daemon.log" &
  daemon_pid=$!
}

# A copy of the local demo whose instantiate_end can be made to fail, to wait, or to run
# long, by request parameters: each step checks a file the test controls.
pkg=$work/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
cat > "$pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: steps the test steers with files
start: setup
states:
  setup:
    action: local.exec
    with:
      shell: mkdir -p "$VNF_DIR" && echo set up >> "$OUT/log"
      env: {OUT: "${request.additionalParams.out}", VNF_DIR: "${request.additionalParams.work_dir}/${instance.id}"}
    timeout: 10s
    compensate:
      action: local.exec
      with:
        shell: echo undo setup >> "$OUT/log"
        env: {OUT: "${request.additionalParams.out}"}
      timeout: 10s
    next: gate
  gate:
    action: local.exec
    with:
      shell: |
        echo gate >> "$OUT/log"
        sleep "$HOLD"
        test -e "$OUT/open" || { printf '\033[31mgate closed\033[0m\n' >&2; exit 1; }
      env:
        OUT: ${request.additionalParams.out}
        HOLD: ${string(default(request.additionalParams.hold, 0))}
        SSH_PASSWORD: ${default(request.additionalParams.ssh_password, '')}
    timeout: 20s
    retry: {attempts: 2, backoff: 100ms, on: [failed]}
    next: done
  done:
    succeed: true
EOF
t_demo_manifest "$root" "$pkg"
mkdir -p "$work/out"
req() {  # req FILE EXTRA_JSON_FIELDS
  cat > "$1" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$work/vnfs", "out": "$work/out", "nodes": ["n"] $2}}
EOF
}
req "$work/inst.json" ""
req "$work/inst-secret.json" ', "ssh_password": "s3cret-XYZ"'
req "$work/inst-long.json" ', "hold": 5'
req "$work/inst-2s.json" ', "hold": 2'

# --- onboarding
p1=$("$v" package onboard "$pkg") && ok "onboard" || bad "onboard"
p2=$("$v" package onboard "$pkg")
check "onboarding twice gives the same package" test "$p1" = "$p2"
if "$v" package onboard "$root/tests/golden/bad/T0030-unknown-node-type" >/dev/null 2>"$work/err"; then
  bad "an invalid package was accepted"
else
  check "an invalid package is refused with located diagnostics" grep -q 'error:' "$work/err"
fi
check "only one package is stored" test "$("$v" package list | wc -l)" -eq 1

# --- requests are checked before anything is queued
i1=$("$v" instance create --package "$p1")
echo '{"flavourId": 7}' > "$work/badtype.json"
"$v" instance instantiate "$i1" --request "$work/badtype.json" 2>"$work/err" >/dev/null
check "a request with a wrong type is refused (exit 1)" test $? -eq 1
check "... with the reason" grep -q 'flavourId: expected a string' "$work/err"
echo '{"type": "SCALE_OUT", "aspectId": "node_aspect"}' > "$work/scale.json"
"$v" instance scale "$i1" --request "$work/scale.json" 2>"$work/err" >/dev/null
check "scale of a NOT_INSTANTIATED instance is refused" grep -q 'NOT_INSTANTIATED' "$work/err"
echo 'not json' > "$work/notjson.json"
"$v" instance instantiate "$i1" --request "$work/notjson.json" 2>"$work/err" >/dev/null
check "a request that is not JSON is refused" grep -q 'is not JSON' "$work/err"
check "nothing was queued" test "$("$v" op list | wc -l)" -eq 0

# --- a failing step: retries, FAILED_TEMP, conflict, retry
start_daemon
o1=$("$v" instance instantiate "$i1" --request "$work/inst-secret.json")
"$v" instance instantiate "$i1" --request "$work/inst.json" 2>"$work/err" >/dev/null
check "a second operation on the instance is refused, naming the first" grep -q "$o1" "$work/err"
"$v" op wait "$o1" --timeout 30 >/dev/null
check "op wait exits 1 when the operation is not COMPLETED" test $? -eq 1
check "the gate failure leaves FAILED_TEMP" test "$(state "$o1")" = FAILED_TEMP
check "op show names the failed state and the reason" grep -q 'instantiate_end.gate: failed: .*exit status 1' <("$v" op show "$o1")
check "the history shows the retry" grep -q 'retry_scheduled instantiate_end.gate' <("$v" op history "$o1")
"$v" op show "$o1" >"$work/show.txt"; "$v" op history "$o1" >"$work/hist.txt"
check "op show prints the hook's escape sequence escaped" grep -qF 'exit status 1: \x1b[31mgate closed\x1b[0m' "$work/show.txt"
check "... and op history" grep -qF '\x1b[31mgate closed' "$work/hist.txt"
check "... never raw (op show, op history, the daemon's log)" \
  bash -c "! grep -qP '\x1b' '$work/show.txt' '$work/hist.txt' '$work/daemon.log'"
if [[ -n $pg_url ]]; then
  check "the key file is 0600 (PostgreSQL)" test "$(stat -c %a "$VNFLOW_DB_KEY")" = 600
else
  check "the database, its WAL and SHM are 0600 (SQLite)" \
    test "$(stat -c %a "$VNFLOW_DB" "$VNFLOW_DB-wal" "$VNFLOW_DB-shm" "$VNFLOW_DB.key" | sort -u)" = 600
fi
check "the work folder is 0700" test "$(stat -c %a "$work/wd")" = 700
touch "$work/out/open"
"$v" op retry "$o1" >/dev/null
check "op retry completes the operation" "$v" op wait "$o1" --timeout 30
check "retry did not run the finished step again" test "$(grep -c 'set up' "$work/out/log")" -eq 1
check "instance show reflects the instantiation" grep -q '"instantiation_state":"INSTANTIATED"' <("$v" instance show "$i1" --json)

# --- secrets never appear
"$v" op history "$o1" --json > "$work/hist.json"
"$v" op show "$o1" --json > "$work/show.json"
check "no secret in the history" bash -c "! grep -q s3cret-XYZ '$work/hist.json'"
check "no secret in op show" bash -c "! grep -q s3cret-XYZ '$work/show.json'"
check "no secret in the daemon log" bash -c "! grep -q s3cret-XYZ '$work/daemon.log'"
check "the secret is shown as ***" grep -q '"ssh_password":"\*\*\*"' "$work/show.json"
check "the secret is sealed at rest" at_rest_absent s3cret-XYZ "$VNFLOW_DB"

# --- replay
check "replay --dry-run of a completed operation reproduces it" "$v" op replay "$o1" --dry-run
cp -r "$pkg" "$work/pkg2"
sed -i 's/^  gate:/  gate2:/; s/next: gate$/next: gate2/' "$work/pkg2/Workflows/instantiate_end.yaml"
t_demo_manifest "$root" "$work/pkg2"
"$v" op replay "$o1" --dry-run --package "$work/pkg2" > "$work/replay.txt"
check "a changed package diverges (exit 1)" test $? -eq 1
check "... and says where" grep -q 'diverges: .*gate2' "$work/replay.txt"

# --- scale, terminate
echo '{"type": "SCALE_OUT", "aspectId": "node_aspect", "additionalParams": {"work_dir": "'"$work"'/vnfs"}}' > "$work/scale.json"
"$v" instance scale "$i1" --request "$work/scale.json" --wait --timeout 30 >"$work/scale.out"
check "scale out --wait completes (exit 0)" test $? -eq 0
check "... printing the operation, COMPLETED" grep -q '^  state COMPLETED$' "$work/scale.out"
check "the scale level is recorded" grep -q '"scale_status":{"node_aspect":1}' <("$v" instance show "$i1" --json)
echo '{"type": "SCALE_OUT", "aspectId": "nope"}' > "$work/badaspect.json"
"$v" instance scale "$i1" --request "$work/badaspect.json" 2>"$work/err" >/dev/null
check "an unknown aspect is refused" grep -q 'aspectId "nope" is not a scaling aspect' "$work/err"
echo '{"terminationType": "FORCEFUL", "additionalParams": {"work_dir": "'"$work"'/vnfs"}}' > "$work/term.json"
o3=$("$v" instance terminate "$i1" --request "$work/term.json")
check "terminate completes" "$v" op wait "$o3" --timeout 30
check "the instance is NOT_INSTANTIATED again" grep -q '"instantiation_state":"NOT_INSTANTIATED"' <("$v" instance show "$i1" --json)

# --- rollback of a failed instantiate
rm -f "$work/out/open" "$work/out/log"
i2=$("$v" instance create --package "$p1")
"$v" instance instantiate "$i2" --request "$work/inst.json" --timeout 30 2>"$work/err" >/dev/null
check "--timeout without --wait is a usage error (exit 2)" test $? -eq 2
"$v" instance instantiate "$i2" --request "$work/inst.json" --wait --timeout 30 --json >"$work/o4.json"
check "instantiate --wait of an instantiate that fails exits 1" test $? -eq 1
o4=$(jq -r .id "$work/o4.json")
check "... printing the operation, FAILED_TEMP" test "$(jq -r .operationState "$work/o4.json")" = FAILED_TEMP
check "the second instantiate fails" test "$(state "$o4")" = FAILED_TEMP
"$v" op rollback "$o4" >/dev/null
"$v" op wait "$o4" --timeout 30 >/dev/null
check "op rollback ends ROLLED_BACK" test "$(state "$o4")" = ROLLED_BACK
check "the compensation ran" grep -q 'undo setup' "$work/out/log"
check "the instance is back to NOT_INSTANTIATED" grep -q '"instantiation_state":"NOT_INSTANTIATED"' <("$v" instance show "$i2" --json)

# --- fail
o5=$("$v" instance instantiate "$i2" --request "$work/inst.json")
"$v" op wait "$o5" --timeout 30 >/dev/null
"$v" op fail "$o5" >/dev/null
check "op fail makes it FAILED" test "$(state "$o5")" = FAILED
"$v" op retry "$o5" 2>"$work/err" >/dev/null
check "a FAILED operation refuses retry, saying why" grep -q 'is FAILED; this needs FAILED_TEMP' "$work/err"

# --- cancel
i3=$("$v" instance create --package "$p1")
gates=$(grep -c gate "$work/out/log")
o6=$("$v" instance instantiate "$i3" --request "$work/inst-long.json")
wait_until 5 gate_started
"$v" op cancel "$o6" >/dev/null
"$v" op wait "$o6" --timeout 30 >/dev/null
check "op cancel stops at the next transition (FAILED_TEMP)" test "$(state "$o6")" = FAILED_TEMP
check "... saying it was cancelled" grep -q 'cancelled by the operator' <("$v" op show "$o6")
"$v" op fail "$o6" >/dev/null

# --- the daemon: one per database (SQLite) or per name (PostgreSQL); SIGTERM drains
if [[ -n $pg_url ]]; then
  "$v" daemon "${daemon_name[@]}" --work-dir "$work/wd2" 2>"$work/err" &
  second=$!
  wait_pid "$second" 30
  check "a second daemon of the same name is refused (PostgreSQL)" test $? -eq 1
  check "... naming the running one" grep -q 'a daemon named "cli-d1" is running' "$work/err"
  "$v" daemon --name cli-d2 --work-dir "$work/wd2" --poll-ms 10 2>"$work/d2.log" &
  second=$!
  wait_until 10 grep -q 'vnflow daemon on' "$work/d2.log"
  check "a daemon of another name runs beside it" kill -0 "$second"
  kill -TERM "$second"
  wait_pid "$second" 30
  check "... and drains on SIGTERM (exit 0)" test $? -eq 0
else
  "$v" daemon --work-dir "$work/wd" 2>"$work/err" &
  second=$!
  wait_pid "$second" 30
  check "a second daemon on the same database is refused (SQLite)" test $? -eq 1
  check "... saying so" grep -q 'another daemon is running' "$work/err"
  # The lock is the database file's (its inode), not its name's.
  ln -s "$VNFLOW_DB" "$work/alias.db"
  timeout 20 "$v" daemon --db "$work/alias.db" --work-dir "$work/wd" 2>"$work/err"
  check "a second daemon through a symlink is refused" test $? -eq 1
  check "... naming the database" grep -qF "another daemon is running on $VNFLOW_DB" "$work/err"
  ln "$VNFLOW_DB" "$work/hard.db" && cp -p "$VNFLOW_DB.key" "$work/hard.db.key"
  timeout 20 "$v" daemon --db "$work/hard.db" --work-dir "$work/wd" 2>"$work/err"
  check "a second daemon through a hard link is refused" test $? -eq 1
  check "... saying so (two names of one file are refused outright)" grep -qE 'another daemon is running on|hard links' "$work/err"
  rm -f "$work/hard.db" "$work/hard.db.key" "$work/alias.db"
fi
touch "$work/out/open"
i4=$("$v" instance create --package "$p1")
gates=$(grep -c gate "$work/out/log")
o7=$("$v" instance instantiate "$i4" --request "$work/inst-long.json")
wait_until 5 gate_started
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "SIGTERM drains and exits 0" test $? -eq 0
daemon_pid=
check "the drained step finished and was recorded" grep -q 'succeeded instantiate_end.gate' <("$v" op history "$o7")
start_daemon
check "the operation completes after the restart" "$v" op wait "$o7" --timeout 30

# --- SIGHUP reloads (nothing, without an API) and stops nothing
i5=$("$v" instance create --package "$p1")
gates=$(grep -c gate "$work/out/log")
o8=$("$v" instance instantiate "$i5" --request "$work/inst-2s.json")
wait_until 5 gate_started
kill -HUP "$daemon_pid"
check "SIGHUP leaves the operation running to its end" "$v" op wait "$o8" --timeout 30
check "... and the daemon running" kill -0 "$daemon_pid"
check "... which logged that there was nothing to reload" grep -q 'nothing to reload' "$work/daemon.log"
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "SIGTERM after it drains and exits 0" test $? -eq 0
daemon_pid=

# --- a restart right after SIGKILL: a forked child of the dead daemon may still hold the
# lock for a moment; the new daemon waits for it (up to 3 s) instead of refusing. On
# PostgreSQL the name's old lease must run out first (2 s here): the restart waits for it.
start_daemon
i6=$("$v" instance create --package "$p1")
gates=$(grep -c gate "$work/out/log")
o9=$("$v" instance instantiate "$i6" --request "$work/inst-2s.json")
wait_until 5 gate_started
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
start_daemon
check "a restart right after SIGKILL succeeds" "$v" op wait "$o9" --timeout 30
kill -TERM "$daemon_pid"; wait_pid "$daemon_pid" 30; daemon_pid=

# --- a queued request wakes the daemon: with a 60 s poll, an instantiate still starts at
# once: a datagram to the wake socket beside the database (SQLite), the commit's NOTIFY
# (PostgreSQL)
touch "$work/out/open"
"$v" daemon "${daemon_name[@]}" --work-dir "$work/wd" --poll-ms 60000 2>"$work/wake.log" &
daemon_pid=$!
wait_until 10 grep -q 'vnflow daemon on' "$work/wake.log"
if [[ -z $pg_url ]]; then
  wait_until 5 test -S "$VNFLOW_DB.wake"
  check "the daemon's wake socket is beside the database, 0600 (SQLite)" \
    test "$(stat -c %a "$VNFLOW_DB.wake" 2>/dev/null)" = 600
fi
i7=$("$v" instance create --package "$p1")
o10=$("$v" instance instantiate "$i7" --request "$work/inst.json")
check "an instantiate completes within 10 s though the daemon polls every 60 s" \
  "$v" op wait "$o10" --timeout 10
kill -TERM "$daemon_pid"; wait_pid "$daemon_pid" 30; daemon_pid=
if [[ -z $pg_url ]]; then
  check "the wake socket is gone with the daemon" test ! -e "$VNFLOW_DB.wake"
fi

# What follows up to the key rotation is SQLite's alone: the flock on its file, and a daemon
# as another user on a file of its own.
if [[ -z $pg_url ]]; then
# Deterministically: another process holds the database's flock for 1.5 s.
locked() { ! flock -n "$VNFLOW_DB" true; }
held() { wait_until 5 locked; }
flock "$VNFLOW_DB" sleep 1.5 &
holder=$!
held
"$v" daemon --work-dir "$work/wd" --poll-ms 10 2>"$work/held.log" &
daemon_pid=$!
sleep 0.5
check "a daemon does not start while the database's lock is held" \
  bash -c "! grep -q 'vnflow daemon on' '$work/held.log'"
wait "$holder"
wait_until 5 grep -q 'vnflow daemon on' "$work/held.log"
check "... and starts once it is released" grep -q 'vnflow daemon on' "$work/held.log"
check "... still running" kill -0 "$daemon_pid"
kill -TERM "$daemon_pid"; wait_pid "$daemon_pid" 30; daemon_pid=
flock "$VNFLOW_DB" sleep 8 &
holder=$!
held
start=$(date +%s%N)
timeout 20 "$v" daemon --work-dir "$work/wd" 2>"$work/err"
rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "a lock held longer than 3 s refuses the daemon" test $rc -eq 1
check "... after trying for 3 s (took ${took_ms} ms)" test $took_ms -ge 2900 -a $took_ms -lt 7000
check "... saying so" grep -q 'another daemon is running' "$work/err"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# --- as another user: the daemon is not dumpable; --hook-user needs root
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
  nb=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-nobody.XXXXXX")
  chown nobody "$nb"
  as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$nb")
  "${as_nobody[@]}" "$v" daemon --db "$nb/v.db" --work-dir "$nb/wd" 2>"$work/nobody.log" &
  daemon_pid=$!
  wait_until 5 grep -q 'vnflow daemon on' "$work/nobody.log"
  check "a daemon runs as nobody" grep -q '^Uid:[[:space:]]*65534' "/proc/$daemon_pid/status"
  check "... and is not dumpable (its /proc/<pid>/fd is root's, not nobody's)" \
    test "$(stat -c %U "/proc/$daemon_pid/fd")" = root
  kill -TERM "$daemon_pid"; wait_pid "$daemon_pid" 30; daemon_pid=
  "${as_nobody[@]}" timeout 20 "$v" daemon --db "$nb/v.db" --hook-user nobody 2>"$work/err"
  check "--hook-user is refused when the daemon is not root (exit 2)" test $? -eq 2
  check "... saying why" grep -q -- '--hook-user needs the daemon to run as root' "$work/err"
  rm -rf "$nb"
fi

fi

# --- key rotation (its own database and key file); a SQLite database with two hard links
kr=$work/keyrot
mkdir -p -m 700 "$kr"
printf 'kr-secret-pw' > "$kr/pw"
if [[ -n $pg_url ]]; then
  pg_schemas+=("vnflow_kr_$$")
  kr_db=$(pg_db "vnflow_kr_$$") || die "cannot make the schema vnflow_kr_$$ on $pg_url"
  kr_key=$kr/pg.key
else
  kr_db=$kr/v.db
  kr_key=$kr/v.db.key
fi
krv() { VNFLOW_DB_KEY=$kr_key "$v" "$@"; }  # (not for a background process: $! would be a subshell's)
krv vim register --db "$kr_db" --name kr --auth-url http://127.0.0.1:5000/v3 --username u \
  --password-file "$kr/pw" --project p >/dev/null
key_before=$(od -An -tx1 "$kr_key" | tr -d ' \n')
krv key rotate --db "$kr_db" >"$kr/out" 2>"$work/err"
check "key rotate succeeds" test $? -eq 0
check "... and writes a new key" test "$(od -An -tx1 "$kr_key" | tr -d ' \n')" != "$key_before"
krv key rotate --db "$kr_db" >/dev/null 2>"$work/err"
check "... whose secrets open (a second rotation reads them all)" test $? -eq 0
check "... the secret is still not at rest" at_rest_absent kr-secret-pw "$kr_db"
VNFLOW_DB_KEY=$kr_key "$v" daemon --db "$kr_db" --work-dir "$kr/wd" 2>"$kr/daemon.log" &
daemon_pid=$!
wait_until 10 grep -q 'vnflow daemon on' "$kr/daemon.log"
krv key rotate --db "$kr_db" 2>"$work/err"
check "key rotate is refused while a daemon runs" test $? -eq 1
check "... saying so" grep -q 'a daemon is running' "$work/err"
kill -TERM "$daemon_pid"; wait_pid "$daemon_pid" 30; daemon_pid=
if [[ -z $pg_url ]]; then
  ln "$kr/v.db" "$kr/hard.db"
  "$v" vim list --db "$kr/hard.db" >/dev/null 2>"$work/err"
  check "a database with two hard links is refused (SQLite)" grep -q 'hard links' "$work/err"
  rm -f "$kr/hard.db"
fi

t_finish
