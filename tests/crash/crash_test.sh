#!/usr/bin/env bash
# Crash test: the daemon is killed with SIGKILL at random moments while operations made of
# keyed local.exec steps run (tests/keyed_ops.sh); it is restarted each time. At the end
# every operation must be COMPLETED, no step skipped, no keyed effect applied under two keys
# or twice, a poll loop's passes each a key of its own, and every history must replay.
#
# Usage: crash_test.sh VNFLOW_BINARY SOURCE_ROOT [KILLS]
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
kills_wanted=${3:-50}
instances=4
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init crash "$vnflow"

work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-crash.XXXXXX")
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -9 "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  # Steps of a killed daemon may still be running (they are in their own process groups).
  pkill -9 -f "$work/" 2>/dev/null || true
  rm -rf "$work"
}
export VNFLOW_DB=$work/vnflow.db
show_log() { echo "daemon log (tail):"; t_show "$work/daemon.log"; }
T_ON_DIE=show_log

# shellcheck source=tests/keyed_ops.sh
source "$root/tests/keyed_ops.sh"
keyed_setup "$work" "$root"
keyed_start "$instances"

kills=0
deadline=$((SECONDS + 180))
while ((kills < kills_wanted)); do
  ((SECONDS < deadline)) || die "only $kills kills in 180 s"
  "$vnflow" daemon --workers 4 --work-dir "$work/wd" --poll-ms 10 --max-redispatch 1000 2>>"$work/daemon.log" &
  daemon_pid=$!
  sleep "$(printf '0.%03d' $(( 20 + $(od -An -N2 -tu2 /dev/urandom) % 280 )))"
  kill -9 "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=
  kills=$((kills + 1))
  keyed_feed
done
ok "$kills kills of the daemon"

# Let everything finish.
"$vnflow" daemon --workers 4 --work-dir "$work/wd" --poll-ms 10 --max-redispatch 1000 2>>"$work/daemon.log" &
daemon_pid=$!
keyed_wait 60
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 60 || die "the daemon did not drain cleanly (within 60 s)"
daemon_pid=
ok "the last daemon finished every operation and drained"

keyed_check
# Every history, with its kills, re-dispatches and resumes, replays through the executor's
# stepper to the same events.
keyed_replay
runs=$(wc -l < "$work/runs.log")
effects=$(wc -l < "$work/effects.log")
redispatched=$((runs - effects))
echo "crash: $kills kills, $KEYED_OPS_N ops, all COMPLETED, $KEYED_CHECKED keyed steps each applied once, $redispatched re-dispatches observed"
t_finish
