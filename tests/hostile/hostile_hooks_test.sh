#!/usr/bin/env bash
# Hostile hooks against the real daemon: a hook is code someone else wrote. Each scenario is
# a regression test of the hardening issue (item numbers in brackets):
#   sigpipe      a hook that closes stdin early while a large stdin is written        [1]
#   poison       a hook that kills the daemon every time: FAILED_TEMP after 3 tries  [1]
#   timeout      a hook that closes stdout/stderr and sleeps past its deadline        [2]
#   background   a child keeps stdout open after the hook exits 0                     [2]
#   setsid       a child escapes the process group with setsid                        [2]
#   output       50 MB of output                                                      [2]
#   sigterm      two SIGTERMs stop the daemon during a hook that ignores its pipes    [2]
#   orphans      SIGKILL of the daemon mid-hook, immediate restart: no overlap         [5]
#   snooping     the hook's environment and the database/key files                   [12]
#   secret       a secret output: sealed, *** in history, usable by the next state   [8]
#   diskfull     the database's disk fills up: no hot loop, stoppable, recovers      [3]
# Usage: hostile_hooks_test.sh VNFLOW_BINARY SOURCE_ROOT
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init hostile "$vnflow"

work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-hostile.XXXXXX")
chmod 700 "$work"
daemon_pid=
mounted=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -9 "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  pkill -9 -f "sleep [0-9]+[.][0-9]{4}" 2>/dev/null || true
  if [[ -n $mounted ]]; then umount "$mounted" 2>/dev/null || true; fi
  if [[ -n ${KEEP:-} ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
export VNFLOW_DB=$work/db/vnflow.db
mkdir -p -m 700 "$work/db" "$work/out"
show_log() { echo "--- daemon log (tail)"; t_show "$work/daemon.log" 40; }
T_ON_DIE=show_log

# The package: local-demo whose instantiate_end runs two scripts from the request, the first
# one optionally a secret output that the second one receives.
pkg=$work/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
cat > "$pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: two scripts from the request (a hostile hook test)
start: first
states:
  first:
    action: local.exec
    with:
      shell: eval "$SCRIPT"
      env:
        SCRIPT: ${request.additionalParams.script1}
        OUT: ${request.additionalParams.out}
      stdin: ${default(request.additionalParams.stdin, "")}
      secret_output: ${default(request.additionalParams.secret, false)}
    timeout: 5s
    next: second
  second:
    action: local.exec
    with:
      shell: eval "$SCRIPT"
      env:
        SCRIPT: ${default(request.additionalParams.script2, "true")}
        OUT: ${request.additionalParams.out}
        PREV: ${states.first.stdout}
    timeout: 5s
    next: done
  done:
    succeed: true
EOF
t_demo_manifest "$root" "$pkg"
package=$("$vnflow" package onboard "$pkg")

start_daemon() {
  local before
  before=$(grep -c "vnflow daemon on" "$work/daemon.log" 2>/dev/null || true)
  "$vnflow" daemon --workers 4 --poll-ms 10 "$@" 2>>"$work/daemon.log" &
  daemon_pid=$!
  echo "$daemon_pid" > "$work/daemon.pid"
  wait_until 5 started_since "${before:-0}" || true
}
started_since() { (($(grep -c "vnflow daemon on" "$work/daemon.log" 2>/dev/null || true) > $1)); }
stop_daemon() {
  [[ -n $daemon_pid ]] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null || true
  wait_pid "$daemon_pid" 30 2>/dev/null || true
  daemon_pid=
}
op_wait() { wait_op "$1" "${2:-30}" || true; op_state "$1"; }  # op_wait OP [SECS]: its state then
# run_op NAME JSON_ADDITIONAL_PARAMS: a new instance instantiated with those parameters.
run_op() {
  local inst
  inst=$("$vnflow" instance create --package "$package" --name "$1")
  printf '{"flavourId": "simple", "additionalParams": {"work_dir": "%s", "nodes": ["a"], "out": "%s", %s}}\n' \
    "$work/vnfs" "$work/out" "$2" > "$work/req-$1.json"
  "$vnflow" instance instantiate "$inst" --request "$work/req-$1.json" | tail -1
}
alive() { kill -0 "$1" 2>/dev/null; }
no_marker() { ! pgrep -f "$1" >/dev/null; }

OS_PASSWORD=daemon-env-secret-4711 start_daemon

# --- sigpipe [1]: 256 KiB of stdin into a hook that reads one byte.
big=$(head -c 262144 /dev/zero | tr '\0' 'x')
op=$(run_op sigpipe "\"script1\": \"head -c 1 >/dev/null\", \"stdin\": \"$big\"")
check "sigpipe: the operation completes" test "$(op_wait "$op")" = COMPLETED
check "sigpipe: the daemon is alive" alive "$daemon_pid"
op=$(run_op sigpipe2 "\"script1\": \"exec 0<&-; sleep 0.2\", \"stdin\": \"$big\"")
check "stdin closed early: completes, daemon alive" \
  bash -c "[[ \$('$vnflow' op wait $op --timeout 30 >/dev/null 2>&1; '$vnflow' op show $op | awk '\$1==\"state\"{print \$2}') == COMPLETED ]] && kill -0 $daemon_pid"

# --- timeout [2]: stdout and stderr closed, then a sleep past the 5 s deadline.
t0=$SECONDS
op=$(run_op timeout '"script1": "exec >/dev/null 2>&1; exec sleep 40.1234"')
st=$(op_wait "$op" 60)
check "timeout: FAILED_TEMP (not COMPLETED after 40 s)" test "$st" = FAILED_TEMP
check "timeout: within 12 s" test $((SECONDS - t0)) -le 12
check "timeout: error class timeout" bash -c "'$vnflow' op show $op | grep -q 'timeout'"
check "timeout: the sleeping process is gone" no_marker "sleep 40.1234"

# --- background [2]: a child keeps stdout open after the hook exits 0.
t0=$SECONDS
op=$(run_op background '"script1": "(exec sleep 30.1234) & echo started; exit 0"')
check "background: COMPLETED" test "$(op_wait "$op" 60)" = COMPLETED
check "background: judged when the hook exits (< 8 s)" test $((SECONDS - t0)) -lt 8
check "background: the child is gone" no_marker "sleep 30.1234"

# --- setsid [2]: a child that left the process group.
op=$(run_op setsid '"script1": "setsid sh -c \"exec sleep 30.2345\" & sleep 0.3; exit 0"')
check "setsid: COMPLETED" test "$(op_wait "$op" 60)" = COMPLETED
sleep 0.3
check "setsid: the escaped child is gone" no_marker "sleep 30.2345"

# --- output [2]: 50 MB on stdout is cut, the daemon stays small.
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$daemon_pid/status")
op=$(run_op output '"script1": "head -c 50000000 /dev/zero | tr \"\\\\0\" y"')
check "output: COMPLETED" test "$(op_wait "$op" 60)" = COMPLETED
check "output: marked truncated" bash -c "'$vnflow' op history $op --json | grep -q '\"truncated\":true'"
rss=$(awk '/VmRSS/ {print $2}' "/proc/$daemon_pid/status")
check "output: the daemon grew by less than 40 MB ($rss0 -> $rss kB)" test $((rss - rss0)) -lt 40000

# --- snooping [12]: the environment, the database and the key file.
op=$(run_op snoop "\"script1\": \"env > \$OUT/env.txt; for f in ../../vnflow.db.key ../../vnflow.db $VNFLOW_DB.key $VNFLOW_DB $VNFLOW_DB-wal; do printf '%s %s\\\\n' \$f \$(cat \$f 2>/dev/null | wc -c); done > \$OUT/files.txt\"")
check "snooping: COMPLETED" test "$(op_wait "$op")" = COMPLETED
check "snooping: the daemon's OS_PASSWORD is not in the hook's environment" \
  bash -c "! grep -q daemon-env-secret-4711 '$work/out/env.txt'"
check "snooping: no VNFLOW_DB in the hook's environment" bash -c "! grep -q '^VNFLOW_DB=' '$work/out/env.txt'"
check "snooping: the hook's PATH is the documented one" grep -qx 'PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin' "$work/out/env.txt"
check "snooping: the database and key read as empty" bash -c "awk '\$2 != 0 {bad=1} END {exit bad}' '$work/out/files.txt'"
[[ $T_FAILED -eq 0 ]] || t_show "$work/out/files.txt"

# --- secret [8]: a secret output reaches the next state and no view or file.
op=$(run_op secret '"secret": true, "script1": "echo the-output-secret-$((8800 + 12))", "script2": "printf %s \"$PREV\" > $OUT/prev.txt; echo \"got $PREV\" >&2; exit 3"')
check "secret: the next state failed as asked" test "$(op_wait "$op")" = FAILED_TEMP
check "secret: the next state received the value" grep -q the-output-secret-8812 "$work/out/prev.txt"
check "secret: not in op history --json" bash -c "! '$vnflow' op history $op --json | grep -q the-output-secret-8812"
check "secret: not in the operation's error" bash -c "! '$vnflow' op show $op --json | grep -q the-output-secret-8812"
check "secret: the error says ***" bash -c "'$vnflow' op show $op | grep -q 'got \*\*\*'"
check "secret: not in the database or its WAL" bash -c "! cat '$VNFLOW_DB' '$VNFLOW_DB-wal' | grep -aq the-output-secret-8812"
"$vnflow" op fail "$op" >/dev/null

# --- sigterm [2]: the daemon stops on two signals while a hook ignores its pipes.
op=$(run_op sigterm '"script1": "exec >/dev/null 2>&1; exec sleep 4.3456"')
sleep 1
t0=$SECONDS
kill -TERM "$daemon_pid"; sleep 0.2; kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30 2>/dev/null || true
daemon_pid=
check "sigterm: the daemon stopped within 2 s" test $((SECONDS - t0)) -le 2
sleep 0.2
check "sigterm: the hook is gone" no_marker "sleep 4.3456"
check "sigterm: op fail --force ends the interrupted operation" \
  bash -c "'$vnflow' op fail $op --force | grep -q FAILED"

# --- orphans [5]: SIGKILL mid-hook; the restarted daemon's copy never overlaps the old one.
start_daemon
op=$(run_op orphans "\"script1\": \"exec 9>>\$OUT/orphan.lock; flock -n 9 || echo OVERLAP >> \$OUT/orphans.log; echo start >> \$OUT/orphans.log; exec sleep 2.3456\"")
wait_until 5 grep -qs start "$work/out/orphans.log" || true
kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
start_daemon
check "orphans: the restart is accepted at once" alive "$daemon_pid"
check "orphans: COMPLETED" test "$(op_wait "$op")" = COMPLETED
check "orphans: no overlap of the two copies" bash -c "! grep -q OVERLAP '$work/out/orphans.log'"
check "orphans: the step ran twice (re-dispatched)" test "$(grep -c start "$work/out/orphans.log")" -eq 2

# --- poison [1]: a hook that SIGKILLs its daemon is not dispatched a fourth time.
op=$(run_op poison "\"script1\": \"kill -9 \$(cat $work/daemon.pid)\"")
for round in $(seq 8); do
  for _ in $(seq 40); do
    alive "$daemon_pid" || break
    [[ $(op_state "$op") == FAILED_TEMP ]] && break
    sleep 0.25
  done
  [[ $(op_state "$op") == FAILED_TEMP ]] && break
  wait "$daemon_pid" 2>/dev/null || true
  start_daemon
done
check "poison: FAILED_TEMP after the daemon died 4 times" test "$(op_state "$op")" = FAILED_TEMP
check "poison: the reason is given" bash -c "'$vnflow' op show $op | grep -q 're-dispatched 3 times'"
alive "$daemon_pid" || start_daemon
check "poison: op fail works" bash -c "'$vnflow' op fail $op | grep -q FAILED"
stop_daemon

# --- diskfull [3]: the database's file system fills up.
if [[ $(id -u) -eq 0 ]] && mkdir -p "$work/full" && mount -t tmpfs -o size=24m tmpfs "$work/full"; then
  mounted=$work/full
  chmod 700 "$work/full"
  export VNFLOW_DB=$work/full/vnflow.db
  pkg2=$("$vnflow" package onboard "$pkg")
  package=$pkg2
  : > "$work/daemon.log"
  start_daemon
  op=$(run_op full '"script1": "sleep 2"')
  sleep 0.5
  dd if=/dev/zero of="$work/full/filler" bs=64k 2>/dev/null || true
  sleep 6
  ticks0=$(awk '{print $14 + $15}' "/proc/$daemon_pid/stat")
  sleep 4
  ticks1=$(awk '{print $14 + $15}' "/proc/$daemon_pid/stat")
  lines=$(grep -c "commit failed" "$work/daemon.log" || true)
  check "diskfull: at most 2 failure lines in 10 s ($lines)" test "$lines" -le 2
  check "diskfull: the failure names the cause" grep -q "full" "$work/daemon.log"
  check "diskfull: no busy loop ($((ticks1 - ticks0)) ticks in 4 s)" test $((ticks1 - ticks0)) -lt 100
  msg=$("$vnflow" instance create --package "$package" 2>&1 || true)
  check "diskfull: the CLI names the cause" bash -c "grep -q 'full' <<<'$msg' && ! grep -q 'no transaction' <<<'$msg'"
  rm -f "$work/full/filler"
  check "diskfull: recovers by itself" test "$(op_wait "$op" 30)" = COMPLETED
  op=$(run_op full2 '"script1": "sleep 2"')
  sleep 0.5
  dd if=/dev/zero of="$work/full/filler" bs=64k 2>/dev/null || true
  sleep 3
  t0=$SECONDS
  stop_daemon
  check "diskfull: SIGTERM stops it while commits fail" test $((SECONDS - t0)) -le 3
  rm -f "$work/full/filler"
  start_daemon
  check "diskfull: resumed after a restart" test "$(op_wait "$op" 30)" = COMPLETED
  stop_daemon
else
  echo "hostile: diskfull skipped (needs root for a tmpfs)"
fi

t_finish
