# tests/keyed_ops.sh: operations of keyed effects, for the drills that kill daemons
# (tests/crash, tests/postgres/many_daemons). Sourced after tests/lib.sh, never run.
#
#   keyed_setup WORK ROOT     writes WORK/pkg (local-demo with an instantiate_end of keyed
#                             effects and a poll loop), the request files, effects.log and
#                             runs.log; onboards the package into $KEYED_PACKAGE
#   keyed_start N             N instances, each instantiating ($KEYED_OPS lists every
#                             instantiate operation)
#   keyed_feed                queues the next operation (terminate, instantiate, ...) of
#                             every instance whose last one COMPLETED; dies on a failed one
#   keyed_feeder_start SECS   keyed_feed in a background loop (at most SECS seconds), so that
#                             a drill's disturbances keep their own pace while each feed
#                             waits on its CLI commands (20 instances: seconds a pass)
#   keyed_feeder_hold         waits until the feeder is between passes and keeps it there
#   keyed_feeder_release      lets it go on
#   keyed_feeder_stop         stops it, takes over its view of every instance's last
#                             operation; dies if a feed failed
#   keyed_wait SECS           until the last operation of every instance settled
#   keyed_check               every operation COMPLETED, no effect applied twice, every
#                             step of every instantiate exactly one keyed effect, the poll
#                             loop three (one key per pass); sets KEYED_CHECKED, KEYED_OPS_N
#   keyed_replay              every instantiate's history replays to the same events
#
# Each step appends its idempotency key to runs.log on every execution, and to effects.log
# only if the key is not there yet (under flock): the step is idempotent by key, as the
# design asks of actions. So for every (operation, state, item) exactly one key must reach
# effects.log: a re-dispatch after a crash reused the same key. The poll loop's passes are
# visits of their own, with keys of their own (with one key for every pass it would never
# count to 3).

keyed_setup() {  # keyed_setup WORK ROOT
  KEYED_WORK=$1
  local root=$2 pkg=$1/pkg
  cp -r "$root/csar-samples/local-demo" "$pkg"
  {
    echo "description: keyed effects for the crash drills"
    echo "start: a"
    echo "states:"
    local pair st nx fanout
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
  done:
    succeed: true
LOOP
  } > "$pkg/Workflows/instantiate_end.yaml"
  t_demo_manifest "$root" "$pkg"
  "$T_VNFLOW" workflow check "$pkg" >/dev/null || die "the test package does not compile"
  cat > "$KEYED_WORK/instantiate.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$KEYED_WORK/vnfs", "nodes": ["n0", "n1", "n2"],
 "effects_log": "$KEYED_WORK/effects.log", "runs_log": "$KEYED_WORK/runs.log"}}
EOF
  cat > "$KEYED_WORK/terminate.json" <<EOF
{"terminationType": "FORCEFUL", "additionalParams": {"work_dir": "$KEYED_WORK/vnfs"}}
EOF
  touch "$KEYED_WORK/effects.log" "$KEYED_WORK/runs.log"
  KEYED_OPS=$KEYED_WORK/instantiate-ops
  : > "$KEYED_OPS"
  KEYED_PACKAGE=$("$T_VNFLOW" package onboard "$pkg")
  ok "the test package compiles and is onboarded"
}

keyed_start() {  # keyed_start N
  KEYED_N=$1
  KEYED_INST=() KEYED_LAST=() KEYED_NEXT=()
  local i
  for ((i = 0; i < KEYED_N; i++)); do
    KEYED_INST[i]=$("$T_VNFLOW" instance create --package "$KEYED_PACKAGE")
    KEYED_LAST[i]=$("$T_VNFLOW" instance instantiate "${KEYED_INST[i]}" --request "$KEYED_WORK/instantiate.json")
    KEYED_NEXT[i]=terminate
    echo "${KEYED_LAST[i]}" >> "$KEYED_OPS"
  done
}

# The states read in one call, bounded: a command must not hang on a paused daemon.
keyed_feed() {
  local states i s
  states=$(timeout 60 "$T_VNFLOW" op list --limit 100000) || die "op list failed or hung (60 s)"
  for ((i = 0; i < KEYED_N; i++)); do
    s=$(awk -v id="${KEYED_LAST[i]}" '$1 == id {print $3}' <<<"$states")
    case $s in
      COMPLETED)
        if [[ ${KEYED_NEXT[i]} == terminate ]]; then
          KEYED_LAST[i]=$("$T_VNFLOW" instance terminate "${KEYED_INST[i]}" --request "$KEYED_WORK/terminate.json")
          KEYED_NEXT[i]=instantiate
        else
          KEYED_LAST[i]=$("$T_VNFLOW" instance instantiate "${KEYED_INST[i]}" --request "$KEYED_WORK/instantiate.json")
          echo "${KEYED_LAST[i]}" >> "$KEYED_OPS"
          KEYED_NEXT[i]=terminate
        fi
        ;;
      FAILED_TEMP | FAILED | ROLLED_BACK) die "operation ${KEYED_LAST[i]} ended $s: $("$T_VNFLOW" op show "${KEYED_LAST[i]}")" ;;
    esac
  done
}

keyed_feeder_start() {  # keyed_feeder_start SECS
  local secs=$1
  rm -f "$KEYED_WORK/feeder.stop" "$KEYED_WORK/feeder.state"
  (
    # A failed feed exits this subshell only: keyed_feeder_stop (or the drill's check of
    # KEYED_FEEDER_PID) reports it.
    T_ON_DIE=
    end=$((SECONDS + secs))
    while [[ ! -e $KEYED_WORK/feeder.stop ]] && ((SECONDS < end)); do
      if [[ -e $KEYED_WORK/feeder.hold ]]; then
        touch "$KEYED_WORK/feeder.held"
        sleep 0.1
        continue
      fi
      keyed_feed
      sleep 0.2
    done
    declare -p KEYED_LAST KEYED_NEXT | sed 's/^declare -a /declare -ga /' >"$KEYED_WORK/feeder.state"
  ) &
  KEYED_FEEDER_PID=$!
}

# A command of the feeder's that fails while the database restarts would leave it unknown
# whether the operation was queued: the drill holds the feeder around such moments.
keyed_feeder_hold() {
  rm -f "$KEYED_WORK/feeder.held"
  touch "$KEYED_WORK/feeder.hold"
  local i
  for ((i = 0; i < 1200; i++)); do
    [[ -e $KEYED_WORK/feeder.held ]] && return 0
    kill -0 "$KEYED_FEEDER_PID" 2>/dev/null || die "the operation feeder stopped (above)"
    sleep 0.1
  done
  die "the operation feeder did not pause within 120 s"
}

keyed_feeder_release() { rm -f "$KEYED_WORK/feeder.hold" "$KEYED_WORK/feeder.held"; }

keyed_feeder_stop() {
  touch "$KEYED_WORK/feeder.stop"
  wait "$KEYED_FEEDER_PID" || die "the operation feeder failed (above)"
  [[ -s $KEYED_WORK/feeder.state ]] || die "the operation feeder left no state"
  # shellcheck disable=SC1091
  source "$KEYED_WORK/feeder.state"
}

keyed_wait() {  # keyed_wait SECS
  local i
  for ((i = 0; i < KEYED_N; i++)); do
    "$T_VNFLOW" op wait "${KEYED_LAST[i]}" --timeout "$1" >/dev/null ||
      die "operation ${KEYED_LAST[i]}: $("$T_VNFLOW" op show "${KEYED_LAST[i]}")"
  done
}

keyed_check() {
  local unfinished dups op u n
  unfinished=$("$T_VNFLOW" op list --limit 100000 | awk '$3 != "COMPLETED"')
  [[ -z $unfinished ]] || die "operations not COMPLETED: $unfinished"
  KEYED_OPS_N=$("$T_VNFLOW" op list --limit 100000 | wc -l)
  ok "all $KEYED_OPS_N operations COMPLETED"
  dups=$(sort "$KEYED_WORK/effects.log" | uniq -d)
  [[ -z $dups ]] || die "effects applied twice: $dups"
  ok "no effect applied twice"
  local units=(a "b[0]" "b[1]" "b[2]" c "d[0]" "d[1]" "d[2]" e)
  KEYED_CHECKED=0
  while read -r op; do
    for u in "${units[@]}"; do
      n=$(grep -cF "$op/instantiate_end.$u/" "$KEYED_WORK/effects.log" || true)
      [[ $n -eq 1 ]] || die "operation $op step $u has $n keyed effects (want 1): $(grep -F "$op/instantiate_end.$u/" "$KEYED_WORK/effects.log" | tr '\n' ' ')"
      KEYED_CHECKED=$((KEYED_CHECKED + 1))
    done
    n=$(grep -cF "$op/instantiate_end.poll" "$KEYED_WORK/effects.log" || true)
    [[ $n -eq 3 ]] || die "operation $op: the poll loop has $n keyed effects (want 3, one per pass)"
    KEYED_CHECKED=$((KEYED_CHECKED + 1))
  done < "$KEYED_OPS"
  ok "$KEYED_CHECKED keyed steps each applied once under one key"
}

keyed_replay() {
  local diverged=0 op
  while read -r op; do
    "$T_VNFLOW" op replay "$op" --dry-run >"$KEYED_WORK/replay.out" 2>&1 || {
      diverged=$((diverged + 1)); echo "replay of $op: $(grep -m1 diverges "$KEYED_WORK/replay.out")"; }
  done < "$KEYED_OPS"
  [[ $diverged -eq 0 ]] || die "$diverged histories do not replay to the same events"
  ok "every history replays to the same events"
}
