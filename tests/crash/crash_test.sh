#!/usr/bin/env bash
# Crash test: the daemon is killed with SIGKILL at random moments while operations made of
# local.exec steps run; it is restarted each time. At the end every operation must be
# COMPLETED, no step skipped, and no keyed effect applied under two keys or twice; a poll
# loop at the end gets keys of its own on every pass (three passes, three effects).
#
# Usage: crash_test.sh VNFLOW_BINARY SOURCE_ROOT [KILLS]
#
# Each step appends its idempotency key to runs.log on every execution, and to effects.log
# only if the key is not there yet (under flock): the step is idempotent by key, as the
# design asks of actions. The test then checks that for every (operation, state, item)
# exactly one key reached effects.log: a re-dispatch after a crash reused the same key.
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

# The package: local-demo with a longer instantiate_end of keyed effects.
pkg=$work/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
{
  echo "description: keyed effects for the crash test"
  echo "start: a"
  echo "states:"
  for pair in a:b b:c c:d d:e e:poll; do
    st=${pair%%:*} nx=${pair#*:}
    fanout=""
    if [[ $st == b || $st == d ]]; then
      fanout='    for_each: ${request.additionalParams.nodes}\n    as: node\n    parallelism: 2\n'
    fi
    cat <<'STEP' | sed -e "s/STATE/$st/" -e "s/NEXT/$nx/" -e "s/^FANOUT/$fanout/"
  STATE:
    action: local.exec
FANOUT    with:
      shell: |
        echo "$VNFLOW_IDEMPOTENCY_KEY" >> "$RUNS"
        sleep "0.0$(( $(od -An -N1 -tu1 /dev/urandom) % 4 ))"
        flock "$LOG" sh -c 'grep -qxF "$VNFLOW_IDEMPOTENCY_KEY" "$LOG" || echo "$VNFLOW_IDEMPOTENCY_KEY" >> "$LOG"'
      env:
        LOG: ${request.additionalParams.effects_log}
        RUNS: ${request.additionalParams.runs_log}
    timeout: 30s
    next: NEXT
STEP
  done
  # A poll loop: each pass is a visit of its own, with keys of its own; an effect deduped
  # by key counts the passes (with one key for every pass it would never reach 3).
  cat <<'LOOP'
  poll:
    action: local.exec
    with:
      shell: |
        echo "$VNFLOW_IDEMPOTENCY_KEY" >> "$RUNS"
        flock "$LOG" sh -c 'grep -qxF "$VNFLOW_IDEMPOTENCY_KEY" "$LOG" || echo "$VNFLOW_IDEMPOTENCY_KEY" >> "$LOG"'
        grep -c "^$VNFLOW_OP_ID/instantiate_end.poll" "$LOG"
      env:
        LOG: ${request.additionalParams.effects_log}
        RUNS: ${request.additionalParams.runs_log}
    timeout: 30s
    next: check
  check:
    choice:
      - when: ${int(trim(states.poll.stdout)) >= 3}
        next: done
    default: pause
  pause:
    wait: 0
    next: poll
LOOP
  echo "  done:"
  echo "    succeed: true"
} > "$pkg/Workflows/instantiate_end.yaml"
(cd "$root" && bash tools/csar-manifest.sh "$pkg" local-demo.mf vnflow "Local demo" 1.0 >/dev/null)
"$vnflow" workflow check "$pkg" >/dev/null || die "the test package does not compile"
ok "the test package compiles"

cat > "$work/instantiate.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$work/vnfs", "nodes": ["n0", "n1", "n2"],
 "effects_log": "$work/effects.log", "runs_log": "$work/runs.log"}}
EOF
cat > "$work/terminate.json" <<EOF
{"terminationType": "FORCEFUL", "additionalParams": {"work_dir": "$work/vnfs"}}
EOF
touch "$work/effects.log" "$work/runs.log"

package=$("$vnflow" package onboard "$pkg")
declare -a inst last next_op
for ((i = 0; i < instances; i++)); do
  inst[i]=$("$vnflow" instance create --package "$package")
  last[i]=$("$vnflow" instance instantiate "${inst[i]}" --request "$work/instantiate.json")
  next_op[i]=terminate
  echo "${last[i]}" >> "$work/instantiate-ops"
done

# Queues the next operation of every instance whose last one finished.
feed() {
  for ((i = 0; i < instances; i++)); do
    local s
    s=$(op_state "${last[i]}")
    case $s in
      COMPLETED)
        if [[ ${next_op[i]} == terminate ]]; then
          last[i]=$("$vnflow" instance terminate "${inst[i]}" --request "$work/terminate.json")
          next_op[i]=instantiate
        else
          last[i]=$("$vnflow" instance instantiate "${inst[i]}" --request "$work/instantiate.json")
          echo "${last[i]}" >> "$work/instantiate-ops"
          next_op[i]=terminate
        fi
        ;;
      FAILED_TEMP | FAILED | ROLLED_BACK) die "operation ${last[i]} ended $s: $("$vnflow" op show "${last[i]}")" ;;
    esac
  done
}

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
  feed
done
ok "$kills kills of the daemon"

# Let everything finish.
"$vnflow" daemon --workers 4 --work-dir "$work/wd" --poll-ms 10 --max-redispatch 1000 2>>"$work/daemon.log" &
daemon_pid=$!
for ((i = 0; i < instances; i++)); do
  "$vnflow" op wait "${last[i]}" --timeout 60 >/dev/null || die "operation ${last[i]}: $("$vnflow" op show "${last[i]}")"
done
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 60 || die "the daemon did not drain cleanly (within 60 s)"
daemon_pid=
ok "the last daemon finished every operation and drained"

# Every operation COMPLETED.
unfinished=$("$vnflow" op list --limit 100000 | awk '$3 != "COMPLETED"')
[[ -z $unfinished ]] || die "operations not COMPLETED: $unfinished"
ops=$("$vnflow" op list --limit 100000 | wc -l)
ok "all $ops operations COMPLETED"

# Every keyed effect once, under one key, none skipped.
dups=$(sort "$work/effects.log" | uniq -d)
[[ -z $dups ]] || die "effects applied twice: $dups"
ok "no effect applied twice"
units=(a "b[0]" "b[1]" "b[2]" c "d[0]" "d[1]" "d[2]" e)
checked=0
while read -r op; do
  for u in "${units[@]}"; do
    n=$(grep -cF "$op/instantiate_end.$u/" "$work/effects.log" || true)
    [[ $n -eq 1 ]] || die "operation $op step $u has $n keyed effects (want 1): $(grep -F "$op/instantiate_end.$u/" "$work/effects.log" | tr '\n' ' ')"
    checked=$((checked + 1))
  done
  # The loop: three passes, three keys, each applied once.
  n=$(grep -cF "$op/instantiate_end.poll" "$work/effects.log" || true)
  [[ $n -eq 3 ]] || die "operation $op: the poll loop has $n keyed effects (want 3, one per pass)"
  checked=$((checked + 1))
done < "$work/instantiate-ops"
ok "$checked keyed steps each applied once under one key"

# Every history, with its kills, re-dispatches and resumes, replays through the executor's
# stepper to the same events.
diverged=0
while read -r op; do
  "$vnflow" op replay "$op" --dry-run >"$work/replay.out" 2>&1 || {
    diverged=$((diverged + 1)); echo "replay of $op: $(grep -m1 diverges "$work/replay.out")"; }
done < "$work/instantiate-ops"
[[ $diverged -eq 0 ]] || die "$diverged histories do not replay to the same events"
ok "every history replays to the same events"
runs=$(wc -l < "$work/runs.log")
effects=$(wc -l < "$work/effects.log")
redispatched=$((runs - effects))
echo "crash: $kills kills, $ops ops, all COMPLETED, $checked keyed steps each applied once, $redispatched re-dispatches observed"
t_finish
