#!/usr/bin/env bash
# The daemon as a service: metrics scraped by a real Prometheus (Debian's, on 127.0.0.1,
# tools/prometheus/start.sh) and asserted through its query API; --log-format json read
# line by line; systemd's readiness protocol (sd_notify) on a socket the test listens on;
# the unit file checked by systemd-analyze; a subscription's deliveries in the metrics; SIGHUP
# told to the service manager as a reload.
#   service_test.sh VNFLOW SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init service "$1"
root=$2
v=$T_VNFLOW
command -v curl >/dev/null || die "curl is missing (tools/install-deps.sh)"
command -v jq >/dev/null || die "jq is missing (tools/install-deps.sh)"

export VNFLOW_DB=$T_DIR/db/vnflow.db
mkdir -p "$T_DIR/db" "$T_DIR/gate"
chmod 700 "$T_DIR/db"
daemon_pid=
listener_pid=
receiver_pid=
cleanup() {
  [[ -n $receiver_pid ]] && kill "$receiver_pid" 2>/dev/null
  [[ -n ${SVC_KEEP_LOG:-} ]] && cp "$T_DIR/daemon.log" "$SVC_KEEP_LOG"
  [[ -n $daemon_pid ]] && kill -9 "$daemon_pid" 2>/dev/null
  [[ -n $listener_pid ]] && kill "$listener_pid" 2>/dev/null
  bash "$root/tools/prometheus/stop.sh" "$T_DIR/prom" >/dev/null 2>&1
}
# shellcheck disable=SC2016,SC2034 # expanded by tests/lib.sh's die
T_ON_DIE='t_show "$T_DIR/daemon.log" 30'

free_port() { /usr/bin/python3 "$root/tests/api/free_port.py"; }
api_port=$(free_port) mport=$(free_port) pport=$(free_port)
[[ -n $api_port && -n $mport && -n $pport && $api_port != "$mport" && $mport != "$pport" &&
  $api_port != "$pport" ]] ||
  die "no free ports"
token=t-$RANDOM$RANDOM$RANDOM
printf 'token %s\n' "$token" >"$T_DIR/auth"
chmod 600 "$T_DIR/auth"
api=http://127.0.0.1:$api_port

# A copy of the local demo whose instantiate_end gate fails while the file "open" is
# missing (retried once, then FAILED_TEMP), with a secret in its request.
pkg=$T_DIR/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
cat >"$pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: a gate the test opens with a file
start: gate
states:
  gate:
    action: local.exec
    with:
      shell: |
        env > "$OUT/env"
        test -e "$OUT/open" || { echo "gate closed to $SSH_PASSWORD" >&2; exit 1; }
      env:
        OUT: ${request.additionalParams.out}
        SSH_PASSWORD: ${default(request.additionalParams.ssh_password, '')}
    timeout: 20s
    retry: {attempts: 2, backoff: 100ms, on: [failed]}
    next: done
  done:
    succeed: true
EOF
t_demo_manifest "$root" "$pkg"
secret=s3cret-$RANDOM$RANDOM
cat >"$T_DIR/inst.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$T_DIR/vnfs", "out": "$T_DIR/gate",
 "nodes": ["n"], "ssh_password": "$secret"}}
EOF

# --- the unit file
unit=$T_DIR/vnflow.service
sed "s|@bindir@|$(dirname "$(realpath "$v")")|" "$root/dist/vnflow.service.in" >"$unit"
if command -v systemd-analyze >/dev/null; then
  # Only the unit's own problems count (a container has no vnflow user, no network target).
  systemd-analyze verify "$unit" >"$T_DIR/verify.out" 2>&1
  hasnt "systemd-analyze finds nothing wrong in the unit's syntax" "$T_DIR/verify.out" \
    -e 'Unknown key' -e 'Unknown section' -e 'Failed to parse' -e 'Invalid'
fi
has "the unit waits for the daemon's readiness (Type=notify)" "$unit" -x 'Type=notify'

# --- readiness: a listener on the socket systemd would give
notify=$T_DIR/notify.sock
/usr/bin/python3 - "$notify" "$T_DIR/notify.log" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(900)  # bounded; cleanup kills it sooner
with open(sys.argv[2], "ab", buffering=0) as out:
    try:
        while True:
            out.write(s.recv(4096) + b"\n--\n")
    except socket.timeout:
        pass
EOF
listener_pid=$!
wait_until 10 test -S "$notify" || die "the notify listener did not start"

p=$("$v" package onboard "$pkg") || die "onboard"
inst=$("$v" instance create --package "$p" --name svc) || die "instance create"
NOTIFY_SOCKET=$notify "$v" daemon --workers 2 --listen "127.0.0.1:$api_port" \
  --auth-file "$T_DIR/auth" --metrics-listen "127.0.0.1:$mport" --log-format json \
  2>"$T_DIR/daemon.log" &
daemon_pid=$!
check "the daemon says READY=1 to the service manager" wait_until 20 grep -qx 'READY=1' "$T_DIR/notify.log"
check "... once its API answers" \
  curl -sf -o /dev/null -H "X-Auth-Token: $token" "$api/vnflcm/v1/vnf_instances"
has "... with a STATUS naming the database" "$T_DIR/notify.log" "^STATUS=running the operations of $VNFLOW_DB"

# --- Prometheus scrapes the metrics listener
PROM_PORT=$pport bash "$root/tools/prometheus/start.sh" "$T_DIR/prom" "127.0.0.1:$mport" \
  >"$T_DIR/prom.out" 2>&1 || { t_show "$T_DIR/prom.out" 20; die "Prometheus did not start"; }
prom=http://127.0.0.1:$pport
# The value of a PromQL query's first series ("" when none).
q() {
  curl -sf --max-time 5 -G "$prom/api/v1/query" --data-urlencode "query=$1" |
    jq -r '.data.result[0].value[1] // empty'
}
q_is() { [[ $(q "$1") == "$2" ]]; }
# A number above $2 (NaN, which histogram_quantile gives for empty buckets, is not).
q_gt() {
  local x
  x=$(q "$1")
  [[ $x =~ ^[0-9.eE+-]+$ ]] && awk -v x="$x" -v y="$2" 'BEGIN { exit !(x + 0 > y + 0) }'
}

check "Prometheus scrapes the daemon (up == 1)" wait_until 30 q_is 'up{job="vnflow"}' 1

# A subscription, its receiver on 127.0.0.1: what the lifecycle below notifies is delivered.
rport=$(free_port)
/usr/bin/python3 "$root/tests/api/receiver.py" "$rport" "$T_DIR/rx.jsonl" --max-seconds 300 &
receiver_pid=$!
wait_until 10 curl -s -o /dev/null "http://127.0.0.1:$rport/" || die "the receiver did not come up"
check "a subscription is created over the API" test "$(curl -s -o /dev/null -w '%{http_code}' \
  -H "X-Auth-Token: $token" -H 'Content-Type: application/json' \
  --data-binary "{\"callbackUri\": \"http://127.0.0.1:$rport/cb\"}" \
  "$api/vnflcm/v1/subscriptions")" = 201

# A lifecycle with a failure: the gate is closed, the instantiate retries and stops at
# FAILED_TEMP; the gate opens, op retry, COMPLETED.
o1=$("$v" instance instantiate "$inst" --request "$T_DIR/inst.json") || die "instantiate"
check "the closed gate leaves the instantiate FAILED_TEMP" wait_state "$o1" FAILED_TEMP 30
touch "$T_DIR/gate/open"
"$v" op retry "$o1" >/dev/null || die "op retry"
check "after the retry it is COMPLETED" wait_state "$o1" COMPLETED 30
"$v" op show "$o1" --timing --json >"$T_DIR/timing.json"
check "op show --timing: the gate's three calls (two failed, one after the retry)" \
  jq -e '[.states[] | select(.state == "instantiate_end.gate")][0].calls == 3' "$T_DIR/timing.json"
check "... the wait for the operator's retry counted as paused, the backoff as timers" \
  jq -e '.paused_ms > 0 and .timers_ms == 100 and .actions_ms > 0' "$T_DIR/timing.json"
check "... the parts add up to the wall time" \
  jq -e '.queue_ms + .paused_ms + .timers_ms + .actions_ms + .own_ms == .wall_ms' "$T_DIR/timing.json"
"$v" op show "$o1" --timing >"$T_DIR/timing.txt"
has "... and in words" "$T_DIR/timing.txt" -E '^  own +[0-9.]+ s +[0-9.]+%$'
has "the hook ran (its environment is written)" "$T_DIR/gate/env" '^OUT='
hasnt "... without the service manager's socket" "$T_DIR/gate/env" NOTIFY_SOCKET
for _ in 1 2 3; do curl -sf -o /dev/null -H "X-Auth-Token: $token" "$api/vnflcm/v1/vnf_instances"; done
curl -s -o /dev/null -H "X-Auth-Token: $token" "$api/vnflcm/v1/vnf_instances/no-such-id"
curl -s -o /dev/null "$api/vnflcm/v1/vnf_lcm_op_occs"  # no credentials

check "ops by operation and state: one instantiate COMPLETED" \
  wait_until 30 q_is 'vnflow_operations{operation="instantiate",state="COMPLETED"}' 1
check "the daemon counts it settled COMPLETED and once FAILED_TEMP" \
  wait_until 30 q_is 'sum(vnflow_operations_settled_total{operation="instantiate"})' 2
check "its duration is in the histogram" \
  q_is 'vnflow_operation_duration_seconds_count{operation="instantiate",state="COMPLETED"}' 1
check "transitions committed" q_gt 'vnflow_transitions_committed_total' 3
check "commit latency as a quantile" q_gt 'histogram_quantile(0.99, vnflow_commit_duration_seconds_bucket)' 0
check "commit batch sizes" q_gt 'vnflow_commit_batch_size_count' 3
check "group commits, none refused" q_gt 'vnflow_commits_total' 3
check "... the failure counter exists at 0 (rate() sees the first one)" q_is 'vnflow_commit_failures_total' 0
check "action durations" q_gt 'vnflow_action_duration_seconds_count{action="local.exec"}' 2
check "nothing left running" q_is 'vnflow_running_operations' 0
check "actions by kind: local.exec ok" q_gt 'vnflow_actions_total{action="local.exec",result="ok"}' 0
check "actions by error class: the gate's two failed attempts" \
  q_is 'vnflow_actions_total{action="local.exec",result="failed"}' 2
check "the queue is empty" q_is 'vnflow_queue_depth' 0
check "API requests by route and status (200)" wait_until 30 \
  q_is 'vnflow_api_requests_total{route="/vnflcm/v1/vnf_instances",method="GET",status="200"}' 4
check "... the 404 under the route's pattern, not the id" \
  q_is 'vnflow_api_requests_total{route="/vnflcm/v1/vnf_instances/{id}",method="GET",status="404"}' 1
check "... the 401" q_is 'vnflow_api_requests_total{route="/vnflcm/v1/vnf_lcm_op_occs",status="401"}' 1
check "API latency per route" \
  q_gt 'vnflow_api_request_duration_seconds_count{route="/vnflcm/v1/vnf_instances"}' 3

# STARTING, PROCESSING, FAILED_TEMP, PROCESSING (the retry), COMPLETED.
check "notifications delivered, counted" wait_until 30 q_gt 'vnflow_notifications_total{result="ok"}' 4
check "... their delivery latency observed" q_gt 'vnflow_notification_latency_seconds_count' 0
check "... the outbox drained (backlog 0)" wait_until 30 q_is 'vnflow_notification_backlog' 0
check "... one subscription, not failing" q_is 'vnflow_subscriptions{failing="false"}' 1
check "... the receiver got them" test "$(wc -l <"$T_DIR/rx.jsonl")" -ge 5

# --- SIGHUP: a reload, told to the service manager; the daemon runs on
kill -HUP "$daemon_pid"
check "SIGHUP: the service manager hears RELOADING=1" wait_until 10 grep -qx 'RELOADING=1' "$T_DIR/notify.log"
ready_after_reload() { grep -A3 -x 'RELOADING=1' "$T_DIR/notify.log" | grep -qx 'READY=1'; }
check "... then READY=1 again" wait_until 10 ready_after_reload
check "... and the API still answers" \
  curl -sf -o /dev/null -H "X-Auth-Token: $token" "$api/vnflcm/v1/api_versions"

# --- the metrics listener serves /metrics alone; the API's /metrics needs credentials
check "the metrics listener answers any other path 404" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$mport/vnflcm/v1/vnf_instances")" = 404
check "... and POST /metrics 405" \
  test "$(curl -s -o /dev/null -w '%{http_code}' -X POST "127.0.0.1:$mport/metrics")" = 405
check "the API's /metrics without credentials: 401" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "$api/metrics")" = 401
curl -s -H "X-Auth-Token: $token" "$api/metrics" >"$T_DIR/metrics.txt"
has "... with them, the text format" "$T_DIR/metrics.txt" '^# TYPE vnflow_transitions_committed_total counter$'
hasnt "no metric carries an id" "$T_DIR/metrics.txt" -e "$inst" -e "$o1"

# --- the JSON log
kill -TERM "$daemon_pid"
check "SIGTERM: the daemon drains and exits 0" wait_pid "$daemon_pid" 30
daemon_pid=
check "the service manager hears STOPPING=1" wait_until 5 grep -qx 'STOPPING=1' "$T_DIR/notify.log"
check "every log line is one JSON object with time, level and msg" \
  jq -e -R -s '[split("\n")[] | select(length > 0) | fromjson] | length > 5 and
    all(.[]; (.time | type) == "string" and (.level | type) == "string" and
    (.msg | type) == "string")' "$T_DIR/daemon.log"
check "the instantiate's lines carry its op_id and instance_id" \
  jq -e -s --arg op "$o1" --arg i "$inst" \
    '[.[] | select(.op_id == $op and .instance_id == $i)] | length >= 4' "$T_DIR/daemon.log"
check "a failed attempt: state, attempt (a number), level warning" \
  jq -e -s --arg op "$o1" '[.[] | select(.op_id == $op and .event == "failed" and
    .state == "instantiate_end.gate" and .attempt == 2 and .level == "warning")] | length == 1' \
  "$T_DIR/daemon.log"
check "... its message, the hook's stderr, with the secret as ***" \
  jq -e -s --arg op "$o1" '[.[] | select(.op_id == $op and
    (.event == "failed" or .event == "retry_scheduled") and
    (.msg | contains("gate closed to ***")))] | length == 2' "$T_DIR/daemon.log"
check "its COMPLETED line" \
  jq -e -s --arg op "$o1" '[.[] | select(.op_id == $op and .event == "op_completed")] | length == 1' \
  "$T_DIR/daemon.log"
check "the API's access log" \
  jq -e -s '[.[] | select(.msg | startswith("api: GET /vnflcm/v1/vnf_instances 200"))] | length >= 3' \
  "$T_DIR/daemon.log"
hasnt "the request's secret is in no log line" "$T_DIR/daemon.log" -F "$secret"
hasnt "the API token is in no log line" "$T_DIR/daemon.log" -F "$token"

t_finish
