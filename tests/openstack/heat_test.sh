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
#   - Heat killed in the middle of a wait and started again: the orphaned stack is resumed
#     once it made no progress for the VIM's heat_stall_secs, and the operation completes;
#   - Keystone tokens that expire (20 s) during a 30 s wait: vnflow authenticates again;
#   - Keystone behind HTTPS with a private CA: verified with the VIM's CA file; another CA
#     or a certificate for another host name fails at once (not retried), and rolls back.
#
# Usage: heat_test.sh VNFLOW_BINARY SOURCE_ROOT
# Environment: VNFLOW_OPENSTACK_DIR (default: a fresh temporary directory), OS_SKIP_STOP=1
# keeps the servers running afterwards (debugging).
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
T_WAIT_SECS=180  # a real Heat: operations take minutes
t_init heat "$vnflow"
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-heat.XXXXXX")
osdir=${VNFLOW_OPENSTACK_DIR:-$work/openstack}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15100} HEAT_PORT=${HEAT_PORT:-18104}
proxy_port=${PROXY_PORT:-18105}
daemon_pid= proxy_pid= kproxy_pid= tproxy_pid=

cleanup() {
  [[ -n $daemon_pid ]] && { kill -9 "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; }
  [[ -n $proxy_pid ]] && { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }
  [[ -n $kproxy_pid ]] && { kill "$kproxy_pid" 2>/dev/null || true; wait "$kproxy_pid" 2>/dev/null || true; }
  [[ -n $tproxy_pid ]] && { kill "$tproxy_pid" 2>/dev/null || true; wait "$tproxy_pid" 2>/dev/null || true; }
  if [[ ${OS_SKIP_STOP:-0} != 1 ]]; then
    bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
show_log() { echo "daemon log (tail):"; t_show "$work/daemon.log" 30; }
T_ON_DIE=show_log

echo "== starting Keystone + Heat in $osdir (ports $KEYSTONE_PORT, $HEAT_PORT)"
bash "$root/tools/openstack/start.sh" "$osdir" >"$work/start.log" 2>&1 || { t_show "$work/start.log" 40; die "tools/openstack/start.sh failed"; }
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
check "record: affected_vnfcs.added is the new worker" test "$(inst_field "$inst" 'len(d["affected_vnfcs"]["added"])')" = 1
check "record: 3 VNFCs, scale level 1" test "$(inst_field "$inst" 'str(len(d["vnfcs"]))+" "+str(d["scale_status"]["worker_aspect"])')" = "3 1"

echo "== heal one worker VNFC"
worker=$(inst_field "$inst" '[v["id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU"][0]')
worker_stack=$(inst_field "$inst" '[v["stack_id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU"][0]')
printf '{"vnfcInstanceId": ["%s"], "cause": "test", "additionalParams": {"inventory_dir": "%s"}}\n' "$worker" "$inv" >"$work/heal.json"
before=$(stack_view "$stack")
op=$("$vnflow" instance heal "$inst" --request "$work/heal.json")
check "heal VNFC COMPLETED" wait_op "$op"
after=$(stack_view "$stack")
check "Heat: the healed worker was replaced (new physical id)" bash -c "[[ '${after##* }' != *'$worker'* && '${before##* }' == *'$worker'* ]]"
check "Heat: still 2 workers" test "$(echo "$after" | cut -d' ' -f2)" = 2
check "record: the healed VNFC id is gone" bash -c "! '$vnflow' instance show $inst --json | grep -q '$worker'"
check "record: affected_vnfcs.healed is the replacement, in the same member stack" \
  test "$(inst_field "$inst" 'str(len(d["affected_vnfcs"]["healed"]))+" "+d["affected_vnfcs"]["healed"][0]["stack_id"]')" = "1 $worker_stack"

echo "== scale in"
sed "s|/tmp/vnflow-heat-demo|$inv|" "$R/scale_in.json" >"$work/scale_in.json"
newest=$(inst_field "$inst" '[v["id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU"][-1]')
oldest=$(inst_field "$inst" '[v["id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU"][0]')
op=$("$vnflow" instance scale "$inst" --request "$work/scale_in.json")
check "scale in COMPLETED" wait_op "$op"
view=$(stack_view "$stack")
check "Heat: UPDATE_COMPLETE with 1 worker" test "${view% *}" = "UPDATE_COMPLETE 1"
check "the oldest worker was removed (as Heat and Tacker do), the newest kept" test "$(inst_field "$inst" '",".join(v["id"] for v in d["vnfcs"] if v["vdu"]=="workerVDU")')" = "$newest"
check "record: affected_vnfcs.removed names the removed worker" test "$(inst_field "$inst" '",".join(v["id"] for v in d["affected_vnfcs"]["removed"])')" = "$oldest"

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

# VIMs whose fake servers take a while (fake_delay_secs), reached through a proxy in front
# of Keystone so that vnflow's own authentications can be counted in its log.
slow_vim() {  # slow_vim ID DELAY_SECS [vim register options...]
  local id=$1 delay=$2; shift 2
  mkdir -p "$work/env-$id"
  ln -sfn "$root/tests/openstack/fake" "$work/env-$id/fake"
  sed "s/^  fake_delay_secs: {}/  fake_delay_secs: {frontVDU: $delay}/" "$root/tests/openstack/fake-env.yaml" >"$work/env-$id/env.yaml"
  "$vnflow" vim register --name "$id" --id "$id" --from-env --auth-url "http://127.0.0.1:$kproxy_port/v3" \
    --heat-env "$work/env-$id/env.yaml" "$@" >/dev/null
}
instantiate_on() {  # instantiate_on VIM NAME -> "instance op"
  local i
  i=$("$vnflow" instance create --package "$pkg" --name "$2")
  printf '{"flavourId":"simple","vimConnectionInfo":[{"id":"c1","vimId":"%s","vimType":"ETSINFV.OPENSTACK_KEYSTONE.V_3"}],"additionalParams":{"inventory_dir":"%s"},"extVirtualLinks":[]}\n' "$1" "$inv" >"$work/inst_$2.json"
  echo "$i $("$vnflow" instance instantiate "$i" --request "$work/inst_$2.json")"
}
kproxy_port=${KPROXY_PORT:-15105}
$PY "$root/tools/openstack/faultproxy.py" --listen "$kproxy_port" --upstream "$KEYSTONE_PORT" --control-file "$work/kproxy.ctl" \
  --lifetime 900 --log-file "$work/kproxy.log" >/dev/null 2>&1 &
kproxy_pid=$!
for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$kproxy_port/" && break; sleep 0.1; done
auths() { grep -c "POST /v3/auth/tokens" "$work/kproxy.log" 2>/dev/null || true; }
stop_daemon
slow_vim slow 8 --heat-stall-secs 15
start_daemon

echo "== fault: Heat killed (SIGKILL) in the middle of a wait, then started again"
read -r inst4 op < <(instantiate_on slow heatkill)
wait_dispatched "$op" instantiate.wait_create 20 || bad "wait_create was never dispatched"
sleep 1
kill -9 "$(cat "$osdir/run/heat.pid")"
sleep 2
bash "$root/tools/openstack/start.sh" "$osdir" >>"$work/start.log" 2>&1 || die "Heat did not start again"
# Heat's convergence engine leaves the orphaned stack CREATE_IN_PROGRESS for ever; after
# heat_stall_secs without an event vnflow resumes it with an update that keeps everything.
check "instantiate COMPLETED after Heat's restart" wait_op "$op" 120
check "the wait ended on the resumed stack (UPDATE_COMPLETE)" bash -c "'$vnflow' op history $op --json | grep -q '\"status\":\"UPDATE_COMPLETE\"'"
check "Heat: one stack, complete" test "$(live_stacks "vnflow-$inst4") $(stack_view "$(inst_field "$inst4" 'd["stack_id"]')" | cut -d' ' -f1)" = "1 UPDATE_COMPLETE"
op=$("$vnflow" instance terminate "$inst4" --request "$R/terminate.json")
check "terminate after the restart COMPLETED" wait_op "$op"

echo "== HTTPS: Keystone behind TLS with a private CA; the certificate is verified"
tls=$work/tls
mkdir -p "$tls"
(
  cd "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=vnflow test CA" -keyout ca.key -out ca.pem
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=another CA" -keyout other.key -out other-ca.pem
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
  printf 'subjectAltName=DNS:localhost\n' >san.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem
) >"$work/openssl.log" 2>&1 || die "openssl could not make the test certificates"
tls_port=${TLS_PORT:-15107}
$PY "$root/tools/openstack/faultproxy.py" --listen "$tls_port" --upstream "$KEYSTONE_PORT" --tls-cert "$tls/server.pem" \
  --tls-key "$tls/server.key" --lifetime 900 --log-file "$work/tlsproxy.log" >/dev/null 2>&1 &
tproxy_pid=$!
for _ in $(seq 1 50); do curl -s -o /dev/null --cacert "$tls/ca.pem" "https://localhost:$tls_port/v3" && break; sleep 0.1; done
tls_vim() {  # tls_vim ID URL CA
  "$vnflow" vim register --name "$1" --id "$1" --from-env --auth-url "$2" --cacert "$3" \
    --heat-env "$root/tests/openstack/fake-env.yaml" >/dev/null
}
tls_vim tls-ok "https://localhost:$tls_port/v3" "$tls/ca.pem"
tls_vim tls-other-ca "https://localhost:$tls_port/v3" "$tls/other-ca.pem"
tls_vim tls-wrong-name "https://127.0.0.1:$tls_port/v3" "$tls/ca.pem"
read -r inst6 op < <(instantiate_on tls-ok tls-ok)
check "instantiate with Keystone over verified HTTPS COMPLETED" wait_op "$op"
check "Keystone was reached through TLS" grep -q "POST /v3/auth/tokens" "$work/tlsproxy.log"
op=$("$vnflow" instance terminate "$inst6" --request "$R/terminate.json")
check "terminate over HTTPS COMPLETED" wait_op "$op"
for bad_vim in tls-other-ca tls-wrong-name; do
  read -r inst7 op < <(instantiate_on "$bad_vim" "$bad_vim")
  wait_op "$op" 60 || true
  check "$bad_vim: FAILED_TEMP, not retried (a certificate problem is not transient)" \
    test "$(op_state "$op") $("$vnflow" op history "$op" | grep -c "dispatched instantiate.create_stack")" = "FAILED_TEMP 1"
  check "$bad_vim: the error says the certificate failed verification" bash -c "'$vnflow' op show $op | grep -q 'certificate verify failed'"
  rb=$("$vnflow" op rollback "$op" >/dev/null 2>&1 && wait_op "$op" 60; op_state "$op")
  check "$bad_vim: rollback leaves no stack (ROLLED_BACK)" test "$rb $(live_stacks "vnflow-$inst7")" = "ROLLED_BACK 0"
done
kill "$tproxy_pid" 2>/dev/null || true

echo "== fault: Keystone tokens expire (20 s) during a 30 s wait"
stop_daemon
KEYSTONE_TOKEN_EXPIRATION=20 bash "$root/tools/openstack/start.sh" "$osdir" >>"$work/start.log" 2>&1 || die "Keystone did not restart"
slow_vim slow30 30
start_daemon
before=$(auths)
t0=$SECONDS
read -r inst5 op < <(instantiate_on slow30 expiry)
check "instantiate with 20 s tokens COMPLETED" wait_op "$op" 180
took=$((SECONDS - t0))
after=$(auths)
check "the operation outlived a token (${took}s > 20 s)" test "$took" -gt 20
check "vnflow authenticated again as its token expired ($((after - before)) authentications)" test "$((after - before))" -ge 2
TOKEN=$(token)
op=$("$vnflow" instance terminate "$inst5" --request "$R/terminate.json")
check "terminate with 20 s tokens COMPLETED" wait_op "$op"
check "Heat: no stack left for it" test "$(live_stacks "vnflow-$inst5")" = 0
kill "$kproxy_pid" 2>/dev/null || true

echo
t_finish
