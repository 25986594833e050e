#!/usr/bin/env bash
# The REST API under load, with real parts (the daemon on a temporary database, the local
# demo; tests/api/load_client.py: 64 threads, each on a keep-alive connection of its own).
#   1. 64 clients send 20,000 requests (reads of instances, lists and operations, and 200
#      instantiate submits, each polled until it ends) while the daemon runs the 200
#      operations: every answer 2xx, every accepted operation COMPLETED; p99 of reads printed.
#   2. The daemon SIGKILLed while 64 clients submit instantiates of 300 fresh instances;
#      after a restart every accepted (202) operation exists and completes, no request that
#      got an HTTP error or found no daemon started one, and a request that got no answer
#      (the daemon died with it) started at most one.
# Bounded: each phase has a deadline (SECS), the whole run is in meson's timeout.
#   tests/api/api_load_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init api-load "$1"
root=$2
v=$T_VNFLOW
client=$root/tests/api/load_client.py
CLIENTS=${LOAD_CLIENTS:-64} REQUESTS=${LOAD_REQUESTS:-20000} OPS=${LOAD_OPS:-200} KILL_OPS=${LOAD_KILL_OPS:-300}

# shellcheck source=tests/api/daemon_setup.sh
source "$root/tests/api/daemon_setup.sh"
ep=http://127.0.0.1:$port
printf '{"flavourId": "simple", "additionalParams": {"work_dir": "%s", "nodes": ["n1"]}}' \
  "$T_DIR/vnfs" >"$T_DIR/inst.json"

start_daemon() {
  "$v" daemon --listen 127.0.0.1:$port --auth-file "$T_DIR/auth" >>"$T_DIR/daemon.log" 2>&1 &
  daemon_pid=$!
  up() { curl -s -o /dev/null "$ep/vnflcm/v1/api_versions"; }
  wait_until 30 up || die "the API did not come up on $ep"
}
# instances N FILE: N new instances of the local demo (by the CLI), their ids in FILE
instances() {
  local i
  : >"$2"
  for ((i = 0; i < $1; i++)); do "$v" instance create --package "$pkg" --name "load-$i" >>"$2" || return 1; done
}
pkg=$("$v" package onboard "$root/csar-samples/local-demo") || die "onboard local-demo"
instances "$OPS" "$T_DIR/drill.ids" || die "instance create"
instances "$KILL_OPS" "$T_DIR/kill.ids" || die "instance create"
op_count() { "$v" op list --limit 100000 2>/dev/null | grep -ciw instantiate; }
# states FILE: "OP STATE" of every operation in FILE (one id a line), from one op list
states() { "$v" op list --limit 100000 2>/dev/null | awk 'NR == FNR {want[$1] = 1; next} ($1 in want) {print $1, $3}' "$1" -; }
# all_end FILE: every operation of FILE is in a state it stays in
all_end() { [[ $(states "$1" | grep -cwE 'COMPLETED|FAILED_TEMP|FAILED') == $(grep -c . "$1") ]]; }

# --- 1. the drill
start_daemon
/usr/bin/python3 "$client" drill "$ep" "$token" "$T_DIR/drill.ids" "$T_DIR/inst.json" \
  "$CLIENTS" "$REQUESTS" 240 >"$T_DIR/drill.json" || die "the load client failed"
d() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T_DIR/drill.json" "$1"; }
echo "drill: $(d 'd["requests"]') requests by $CLIENTS clients in $(d 'd["seconds"]') s, status $(d 'd["status"]');" \
  "reads: $(d 'd["reads"]'), p50 $(d 'd["read_p50_ms"]') ms, p99 $(d 'd["read_p99_ms"]') ms; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
check "all $REQUESTS requests sent" test "$(d 'd["requests"]')" = "$REQUESTS"
check "no error (every answer 2xx): $(d 'd["errors"]')" test "$(d 'd["error_count"]')" = 0
check "$OPS operations accepted" test "$(d 'len(d["accepted"])')" = "$OPS"
d 'chr(10).join(d["accepted"])' >"$T_DIR/drill.ops"
check "every accepted operation ends" wait_until 300 all_end "$T_DIR/drill.ops"
completed=$(states "$T_DIR/drill.ops" | grep -cw COMPLETED)
check "... COMPLETED, all $OPS ($completed)" test "$completed" = "$OPS"
check "no operation lost or doubled: the store holds exactly $OPS" test "$(op_count)" = "$OPS"

# --- 2. SIGKILL during load
/usr/bin/python3 "$client" submit "$ep" "$token" "$T_DIR/kill.ids" "$T_DIR/inst.json" \
  "$CLIENTS" "$T_DIR/kill.out" 60 &
client_pid=$!
some_stored() { (($(op_count) >= OPS + 20)); }
wait_until 60 some_stored || true
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
daemon_pid=
ok "the daemon SIGKILLed after $(($(op_count) - OPS)) submits were stored"
wait "$client_pid"
check "the clients wrote what they got" test -s "$T_DIR/kill.out"
echo "kill: $(awk '{print $2}' "$T_DIR/kill.out" | sort | uniq -c | tr '\n' ' ')"
start_daemon
bad_count=0 lost_started=0
ops_of() { curl -s -H "X-Auth-Token: $token" "$ep/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,vnfInstanceId,$1)&fields=id" |
  /usr/bin/python3 -c 'import json,sys; print(" ".join(o["id"] for o in json.load(sys.stdin)))'; }
: >"$T_DIR/kill.ops"
while read -r inst what arg; do
  ops=$(ops_of "$inst")
  case $what in
    accepted)
      [[ $ops == "$arg" ]] || { bad_count=$((bad_count + 1)); echo "accepted $inst: ops '$ops', expected $arg"; }
      echo "$arg" >>"$T_DIR/kill.ops" ;;
    http | refused)
      [[ -z $ops ]] || { bad_count=$((bad_count + 1)); echo "$what $arg for $inst, yet ops '$ops'"; } ;;
    lost)
      n=$(wc -w <<<"$ops")
      ((n <= 1)) || { bad_count=$((bad_count + 1)); echo "no answer for $inst, yet ops '$ops'"; }
      ((n == 1)) && { lost_started=$((lost_started + 1)); echo "$ops" >>"$T_DIR/kill.ops"; } ;;
  esac
done <"$T_DIR/kill.out" >"$T_DIR/kill.check"
check "every 202's operation exists, no HTTP error started one: $(head -c 300 "$T_DIR/kill.check")" test "$bad_count" = 0
echo "requests without an answer that had started an operation: $lost_started"
check "after the restart every such operation ends" wait_until 300 all_end "$T_DIR/kill.ops"
notdone=$(($(grep -c . "$T_DIR/kill.ops") - $(states "$T_DIR/kill.ops" | grep -cw COMPLETED)))
check "... COMPLETED ($(grep -c . "$T_DIR/kill.ops") operations, $notdone not)" test "$notdone" = 0
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "the daemon stopped on SIGTERM" test $? -eq 0
daemon_pid=
t_finish
