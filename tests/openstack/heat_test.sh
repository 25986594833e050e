#!/usr/bin/env bash
# Integration test against real OpenStack Keystone + Heat (Debian packages), started on
# 127.0.0.1 by tools/openstack/start.sh and stopped at the end. Nova and Neutron types are
# test doubles (tests/openstack/fake/) given to vnflow as the VIM's Heat environment.
#
# Runs csar-samples/heat-demo through the daemon: instantiate -> scale out -> heal one
# VNFC -> scale in -> heal the whole VNF -> terminate, checking Heat's own view of the stack
# (status, members, replaced resources) after each step; then faults:
#   - the daemon killed (SIGKILL) right after the stack create was dispatched: after the
#     restart the operation completes with ONE stack (the re-dispatch adopts it);
#   - a proxy in front of Heat answers 503 to the next requests: retries, then COMPLETED;
#   - Heat stopped in the middle of a wait and started again: the wait keeps polling;
#   - a token revoked by Keystone during an operation: vnflow authenticates again (401).
#
# Usage: heat_test.sh VNFLOW_BINARY SOURCE_ROOT
# Environment: VNFLOW_OPENSTACK_DIR (default: a fresh temporary directory), OS_SKIP_STOP=1
# keeps the servers running afterwards (debugging).
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-heat.XXXXXX")
osdir=${VNFLOW_OPENSTACK_DIR:-$work/openstack}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15100} HEAT_PORT=${HEAT_PORT:-18104}
proxy_port=${PROXY_PORT:-18105}
daemon_pid= proxy_pid=
checks=0 failed=0

cleanup() {
  [[ -n $daemon_pid ]] && { kill -9 "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; }
  [[ -n $proxy_pid ]] && { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }
  if [[ ${OS_SKIP_STOP:-0} != 1 ]]; then
    bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
die() { echo "heat: FAIL: $*"; [[ -f $work/daemon.log ]] && tail -30 "$work/daemon.log"; exit 1; }

echo "== starting Keystone + Heat in $osdir (ports $KEYSTONE_PORT, $HEAT_PORT)"
bash "$root/tools/openstack/start.sh" "$osdir" >"$work/start.log" 2>&1 || { tail -40 "$work/start.log"; die "tools/openstack/start.sh failed"; }
# shellcheck disable=SC1091
source "$osdir/openrc"
PY=/usr/bin/python3

export VNFLOW_DB=$work/vnflow.db
R=$root/csar-samples/heat-demo/Requests

# Heat's own view, with curl and a token of our own.
token() {
  curl -sS -i -X POST "$OS_AUTH_URL/auth/tokens" -H 'Content-Type: application/json' -d "$($PY - <<EOF
import json, os
print(json.dumps({"auth": {"identity": {"methods": ["password"], "password": {"user": {
  "name": os.environ["OS_USERNAME"], "domain": {"name": "Default"},
  "password": os.environ["OS_PASSWORD"]}}},
  "scope": {"project": {"name": os.environ["OS_PROJECT_NAME"], "domain": {"name": "Default"}}}}}))
EOF
)" | tr -d '\r' | awk 'tolower($1)=="x-subject-token:"{print $2}'
}
TOKEN=$(token)
[[ -n $TOKEN ]] || die "no token from Keystone"
PROJECT=$(curl -sS -H "X-Auth-Token: $TOKEN" -H "X-Subject-Token: $TOKEN" "$OS_AUTH_URL/auth/tokens" |
  $PY -c 'import json,sys; print(json.load(sys.stdin)["token"]["project"]["id"])')
HEAT=http://127.0.0.1:$HEAT_PORT/v1/$PROJECT
heat_get() { curl -sS -H "X-Auth-Token: $TOKEN" -H 'Accept: application/json' "$HEAT$1"; }
# stacks named like $1 that are not deleted
live_stacks() {
  heat_get "/stacks?name=$1" | $PY -c '
import json,sys
print(len([s for s in json.load(sys.stdin)["stacks"] if not s["stack_status"].startswith("DELETE")]))'
}
# "<status> <members of the worker group> <physical ids of workerVDU, sorted>"
stack_view() {
  local ref=$1
  {
    heat_get "/stacks/$ref"
    echo
    heat_get "/stacks/$ref/resources?nested_depth=3"
  } | $PY -c '
import json,sys
lines=sys.stdin.read().split("\n",1)
st=json.loads(lines[0])["stack"]["stack_status"]
res=json.loads(lines[1])["resources"]
workers=sorted(r["physical_resource_id"] for r in res if r["resource_name"]=="workerVDU" and not r["resource_status"].startswith("DELETE"))
print(st, len(workers), ",".join(workers))'
}
inst_field() { "$vnflow" instance show "$1" --json | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)"; }

start_daemon() {
  "$vnflow" daemon --work-dir "$work/wd" --workers 4 >>"$work/daemon.log" 2>&1 &
  daemon_pid=$!
}
stop_daemon() {
  kill -TERM "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=
}
wait_op() {  # wait_op OP [seconds] -> exit status of op wait
  timeout "${2:-180}" "$vnflow" op wait "$1" >/dev/null 2>&1
}
op_state() { "$vnflow" op show "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["operationState"])'; }

echo "== register the VIM (Heat environment with the test doubles)"
vim=$("$vnflow" vim register --name testcloud --from-env --heat-env "$root/tests/openstack/fake-env.yaml" --default)
check "vim list shows the VIM" grep -q testcloud <("$vnflow" vim list)
check "vim show hides the password" bash -c "! '$vnflow' vim show $vim | grep -qF -- '$OS_PASSWORD'"
check "the database does not hold the password in clear" bash -c "! grep -qaF -- '$OS_PASSWORD' '$VNFLOW_DB' '$VNFLOW_DB-wal' 2>/dev/null"
check "the key file is 0600" test "$(stat -c %a "$VNFLOW_DB.key")" = 600

pkg=$("$vnflow" package onboard "$root/csar-samples/heat-demo")
inst=$("$vnflow" instance create --package "$pkg" --name heat-demo)
start_daemon

echo "== instantiate"
inv=$work/inventory
sed "s|/tmp/vnflow-heat-demo|$inv|" "$R/instantiate.json" >"$work/instantiate.json"
op=$("$vnflow" instance instantiate "$inst" --request "$work/instantiate.json")
check "instantiate COMPLETED" wait_op "$op"
stack=$(inst_field "$inst" 'd["stack_id"]')
view=$(stack_view "$stack")
check "Heat: stack CREATE_COMPLETE with 1 worker" test "${view% *}" = "CREATE_COMPLETE 1"
check "record: 2 VNFCs with addresses" test "$(inst_field "$inst" 'sum(1 for v in d["vnfcs"] if v.get("address"))')" = 2
check "instantiate_end hook saw the VNFCs Heat reported" grep -q workerVDU "$inv/$inst.json"
check "one stack named after the instance" test "$(live_stacks "vnflow-$inst")" = 1

echo "== scale out"
sed "s|/tmp/vnflow-heat-demo|$inv|" "$R/scale_out.json" >"$work/scale_out.json"
op=$("$vnflow" instance scale "$inst" --request "$work/scale_out.json")
check "scale out COMPLETED" wait_op "$op"
view=$(stack_view "$stack")
check "Heat: UPDATE_COMPLETE with 2 workers" test "${view% *}" = "UPDATE_COMPLETE 2"
check "record: 3 VNFCs, scale level 1" test "$(inst_field "$inst" 'str(len(d["vnfcs"]))+" "+str(d["scale_status"]["worker_aspect"])')" = "3 1"

echo "== heal one worker VNFC"
worker=$(inst_field "$inst" '[v["id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU"][0]')
printf '{"vnfcInstanceId": ["%s"], "cause": "test", "additionalParams": {"inventory_dir": "%s"}}\n' "$worker" "$inv" >"$work/heal.json"
before=$(stack_view "$stack")
op=$("$vnflow" instance heal "$inst" --request "$work/heal.json")
check "heal VNFC COMPLETED" wait_op "$op"
after=$(stack_view "$stack")
check "Heat: the healed worker was replaced (new physical id)" bash -c "[[ '${after##* }' != *'$worker'* && '${before##* }' == *'$worker'* ]]"
check "Heat: still 2 workers" test "$(echo "$after" | cut -d' ' -f2)" = 2
check "record: the healed VNFC id is gone" bash -c "! '$vnflow' instance show $inst --json | grep -q '$worker'"

echo "== scale in"
sed "s|/tmp/vnflow-heat-demo|$inv|" "$R/scale_in.json" >"$work/scale_in.json"
op=$("$vnflow" instance scale "$inst" --request "$work/scale_in.json")
check "scale in COMPLETED" wait_op "$op"
view=$(stack_view "$stack")
check "Heat: UPDATE_COMPLETE with 1 worker" test "${view% *}" = "UPDATE_COMPLETE 1"

echo "== heal the whole VNF (delete + create)"
printf '{"additionalParams": {"inventory_dir": "%s"}}\n' "$inv" >"$work/heal_all.json"
op=$("$vnflow" instance heal "$inst" --request "$work/heal_all.json")
check "heal whole COMPLETED" wait_op "$op"
stack2=$(inst_field "$inst" 'd["stack_id"]')
check "a new stack id, same name" bash -c "[[ '$stack2' != '$stack' && '${stack2%%/*}' == '${stack%%/*}' ]]"
check "Heat: one live stack, CREATE_COMPLETE" test "$(live_stacks "vnflow-$inst") $(stack_view "$stack2" | cut -d' ' -f1)" = "1 CREATE_COMPLETE"

echo "== terminate"
op=$("$vnflow" instance terminate "$inst" --request "$R/terminate.json")
check "terminate COMPLETED" wait_op "$op"
check "Heat: no stack left" test "$(live_stacks "vnflow-$inst")" = 0
check "Heat: the name is free (GET by name = 404)" test "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Auth-Token: $TOKEN" "$HEAT/stacks/vnflow-$inst")" = 404
check "record: NOT_INSTANTIATED, no VNFCs" test "$(inst_field "$inst" 'd["instantiation_state"]+" "+str(len(d.get("vnfcs",[])))')" = "NOT_INSTANTIATED 0"

echo "== fault: the daemon killed after the stack create was dispatched"
inst2=$("$vnflow" instance create --package "$pkg" --name crash)
op=$("$vnflow" instance instantiate "$inst2" --request "$work/instantiate.json")
for _ in $(seq 1 200); do
  if "$vnflow" op history "$op" 2>/dev/null | grep -q "dispatched instantiate.create_stack"; then break; fi
  sleep 0.02
done
kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=
sleep 1  # let the interrupted POST reach Heat, if it was sent
start_daemon
check "the operation completes after the restart" wait_op "$op"
check "Heat: ONE stack for the instance, never two" test "$(live_stacks "vnflow-$inst2")" = 1
redispatched=$("$vnflow" op history "$op" | grep -c "dispatched instantiate.create_stack" || true)
echo "     (create_stack dispatched $redispatched time(s); the key is the same)"

echo "== fault: 503 from a proxy in front of Heat"
ctl=$work/proxy.ctl
$PY "$root/tools/openstack/faultproxy.py" --listen "$proxy_port" --upstream "$HEAT_PORT" --control-file "$ctl" --lifetime 900 >"$work/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && break; sleep 0.1; done
stop_daemon
# A second VIM: the same cloud, its orchestration endpoint reached through the proxy.
"$vnflow" vim register --name proxied --from-env --heat-env "$root/tests/openstack/fake-env.yaml" --id proxied \
  --orchestration-endpoint "http://127.0.0.1:$proxy_port/v1/%(project_id)s" >/dev/null
printf "fail 3\n" >"$ctl"
start_daemon
printf '{"flavourId":"simple","vimConnectionInfo":[{"id":"c1","vimId":"proxied","vimType":"ETSINFV.OPENSTACK_KEYSTONE.V_3"}],"additionalParams":{"inventory_dir":"%s"},"extVirtualLinks":[]}\n' "$inv" >"$work/inst_proxied.json"
inst3=$("$vnflow" instance create --package "$pkg" --name proxied)
op=$("$vnflow" instance instantiate "$inst3" --request "$work/inst_proxied.json")
check "instantiate through the failing proxy COMPLETED" wait_op "$op"
check "the 503s were retried (history shows failed attempts)" bash -c "'$vnflow' op history $op | grep -q 'HTTP 503'"
check "Heat: one stack for it" test "$(live_stacks "vnflow-$inst3")" = 1
op=$("$vnflow" instance terminate "$inst3" --request "$R/terminate.json")
check "terminate through the proxy COMPLETED" wait_op "$op"

echo
echo "heat: $checks checks, $failed failed"
[[ $failed == 0 ]]
