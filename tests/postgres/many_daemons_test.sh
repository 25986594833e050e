#!/usr/bin/env bash
# Many daemons, one PostgreSQL (issue 18's drill). Three daemons share a throwaway cluster
# while 20 instances run operations made of keyed local.exec steps. Meanwhile: random
# SIGKILLs of any daemon (each restarted under its name, which waits for its old lease to
# run out), SIGSTOP/SIGCONT of a daemon for longer than its lease (another daemon takes its
# operations over; when it wakes up, its commits must be fenced), and PostgreSQL itself
# restarted, fast and immediate. At the end:
#   - every operation COMPLETED, every history replays to the same events;
#   - every keyed step applied exactly once, under one key (a re-dispatch reused it), the
#     poll loop's passes a key each (tests/keyed_ops.sh);
#   - no daemon committed after its lease was taken: in every operation's history, the
#     claim epoch never goes back (a commit under an older epoch after a newer one would be a
#     fenced daemon writing over the new owner), and each epoch has one owner;
#   - work was spread: some operations ran on two or more daemons (takeovers happened).
#
# Usage: many_daemons_test.sh VNFLOW_BINARY SOURCE_ROOT [KILLS] [PAUSES]
# Exits 77 (skipped) when PostgreSQL 15 is not installed.
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
kills_wanted=${3:-30}
pauses_wanted=${4:-10}
instances=20
lease_ms=1000
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [[ ! -x $BIN/postgres ]]; then
  echo "skipped: no PostgreSQL 15 in $BIN (apt-get install postgresql-15)"
  exit 77
fi
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init many_daemons "$vnflow"

work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-many-daemons.XXXXXX")
chmod 0755 "$work"  # the cluster runs as the postgres user when this runs as root
declare -A pid
cleanup() {
  for n in "${!pid[@]}"; do
    [[ -n ${pid[$n]} ]] && { kill -CONT "${pid[$n]}" 2>/dev/null; kill -9 "${pid[$n]}" 2>/dev/null; } || true
  done
  pkill -9 -f "$work/" 2>/dev/null || true
  bash "$root/tools/postgres/stop.sh" "$work/pg" --purge >/dev/null 2>&1 || true
  rm -rf "$work"
}
show_logs() { for n in d0 d1 d2; do echo "daemon $n log (tail):"; t_show "$work/$n.log"; done; }
T_ON_DIE=show_logs

port=${PG_DRILL_PORT:-15435}
url=$(PG_PORT=$port PG_FSYNC=on VNFLOW_PG_NO_APT=1 bash "$root/tools/postgres/start.sh" "$work/pg" | tail -n 1)
export VNFLOW_DB=$url VNFLOW_DB_KEY=$work/keys/pg.key
psql_q() { "$BIN/psql" -h "$work/pg/sock" -p "$port" -U vnflow -d vnflow -Atq -c "$1"; }
ok "PostgreSQL at $url"

# shellcheck source=tests/keyed_ops.sh
source "$root/tests/keyed_ops.sh"
keyed_setup "$work" "$root"

start_daemon() {  # start_daemon NAME
  "$vnflow" daemon --name "$1" --lease-ms "$lease_ms" --workers 4 --work-dir "$work/wd-$1" \
    --poll-ms 20 --max-redispatch 1000 2>>"$work/$1.log" &
  pid[$1]=$!
}
for n in d0 d1 d2; do start_daemon "$n"; done

keyed_start "$instances"

as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
rand() { echo $(( $(od -An -N2 -tu2 /dev/urandom) % $1 )); }
kills=0 pauses=0 pg_restarts=0
declare -A paused_until  # daemon -> SECONDS after which it runs again
# The operations are fed in the background (a feed runs a vnflow command per finished
# operation: seconds a pass), so the disturbances keep their pace: one every 0.2-0.8 s.
# Bounded: 300 s (meson allows the test 900); a quiet machine takes about 40 s.
keyed_feeder_start 400
t0=$SECONDS
deadline=$((SECONDS + 300))
while ((kills < kills_wanted || pauses < pauses_wanted || pg_restarts < 2)); do
  ((SECONDS < deadline)) || die "only $kills kills, $pauses pauses, $pg_restarts PostgreSQL restarts in 300 s"
  kill -0 "$KEYED_FEEDER_PID" 2>/dev/null || die "the operation feeder stopped (above)"
  n=d$(rand 3)
  if ((SECONDS < ${paused_until[$n]:-0})); then sleep 0.1; continue; fi
  if ((pauses < pauses_wanted && $(rand 3) == 0)); then
    # Past its lease (maybe inside a transaction, holding row locks): the others take its
    # operations over; it wakes up into fencing. Woken by a timer of its own, whatever the
    # loop is doing.
    kill -STOP "${pid[$n]}" 2>/dev/null || true
    (sleep 2; kill -CONT "${pid[$n]}" 2>/dev/null || true) &
    paused_until[$n]=$((SECONDS + 3))
    pauses=$((pauses + 1))
  elif ((kills >= kills_wanted / 2 && pg_restarts < 2)); then
    mode=fast; ((pg_restarts == 1)) && mode=immediate
    keyed_feeder_hold
    as_pg "$BIN/pg_ctl" -D "$work/pg/data" -m "$mode" -w -t 60 restart >/dev/null
    keyed_feeder_release
    pg_restarts=$((pg_restarts + 1))
  elif ((kills < kills_wanted)); then
    kill -CONT "${pid[$n]}" 2>/dev/null || true
    kill -9 "${pid[$n]}" 2>/dev/null || true
    wait "${pid[$n]}" 2>/dev/null || true
    kills=$((kills + 1))
    start_daemon "$n"  # waits for its old lease to run out, then claims again
  fi
  sleep "0.$(( 20 + $(rand 60) ))"
done
sleep 2.5  # the last pause's timer
keyed_feeder_stop
ok "$kills kills, $pauses pauses past the lease, $pg_restarts PostgreSQL restarts (fast, immediate) in $((SECONDS - t0)) s"; t0=$SECONDS

# Let everything finish on the three daemons.
keyed_wait 120
for n in d0 d1 d2; do kill -TERM "${pid[$n]}" 2>/dev/null || true; done
for n in d0 d1 d2; do
  wait_pid "${pid[$n]}" 60 || die "daemon $n did not drain cleanly (within 60 s)"
  pid[$n]=
done
ok "the daemons finished every operation and drained ($((SECONDS - t0)) s)"; t0=$SECONDS

keyed_check
echo "(keyed_check: $((SECONDS - t0)) s)"; t0=$SECONDS

# Fencing, from the events' owners: per operation, the epoch never goes back, and one
# epoch has one owner.
back=$(psql_q "SELECT count(*) FROM (SELECT epoch, lag(epoch) OVER (PARTITION BY op_id ORDER BY seq) AS prev FROM events) x WHERE epoch < prev")
[[ $back == 0 ]] || die "$back commits under an older epoch after a newer one: a daemon wrote after its lease was taken"
two=$(psql_q "SELECT count(*) FROM (SELECT epoch FROM events WHERE epoch > 0 GROUP BY epoch HAVING count(DISTINCT owner) > 1) x")
[[ $two == 0 ]] || die "$two claim epochs with commits from two daemons"
ok "no commit after a lost lease: every history's epochs only go forward, one owner each"
moved=$(psql_q "SELECT count(*) FROM (SELECT op_id FROM events WHERE owner IS NOT NULL GROUP BY op_id HAVING count(DISTINCT owner) > 1) x")
spread=$(psql_q "SELECT count(DISTINCT owner) FROM events WHERE owner IS NOT NULL")
[[ $moved -gt 0 ]] || die "no operation moved between daemons: the drill took nothing over"
[[ $spread -eq 3 ]] || die "only $spread of 3 daemons committed work"
fenced=$(cat "$work"/d?.log | grep -c "no longer active here" || true)
lost=$(cat "$work"/d?.log | grep -c "ran out or was replaced" || true)
ok "$moved operations moved between daemons; all 3 committed work; $fenced fenced commits, $lost lost leases seen"

keyed_replay
echo "(keyed_replay: $((SECONDS - t0)) s)"
runs=$(wc -l < "$work/runs.log")
effects=$(wc -l < "$work/effects.log")
echo "many_daemons: 3 daemons, $kills kills, $pauses pauses, $pg_restarts PostgreSQL restarts, $KEYED_OPS_N ops COMPLETED, $KEYED_CHECKED keyed steps once each, $((runs - effects)) re-dispatches, $moved ops moved"
t_finish
