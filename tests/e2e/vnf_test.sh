#!/usr/bin/env bash
# The seeds' VNFs end to end on this machine: real Keystone + Heat (tools/openstack), VMs
# that boot when Heat reports a server (network namespaces with a real sshd each,
# tools/vms/heatwatch.py), and the vnflow daemon running the packages' workflows with
# their stand-in scripts (install_mode standin: no Docker or Kubernetes runs in the VMs).
# Every scenario is checked on the VMs' file systems and in vnflow's state.
#
# Usage: vnf_test.sh VNFLOW_BINARY SOURCE_ROOT [SCENARIO...]
#   scenarios: registry registry_faults k8s (default: all)
# Environment: VNFLOW_OPENSTACK_DIR (default: fresh), KEEP=1 keeps everything running.
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
shift 2
scenarios=${*:-registry registry_faults k8s}
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
T_WAIT_SECS=300  # real Heat and VMs: operations take minutes
t_init e2e "$vnflow"
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-e2e.XXXXXX")
osdir=${VNFLOW_OPENSTACK_DIR:-$work/openstack}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15600} HEAT_PORT=${HEAT_PORT:-18604}
export VNFLOW_VMS_DIR=$work/vms
vm=$root/tools/vms/vm.sh
PY=/usr/bin/python3
daemon_pid= watch_pid=

cleanup() {
  set +e
  [[ ${KEEP:-0} == 1 ]] && { echo "kept: $work (daemon $daemon_pid, heatwatch $watch_pid)"; return; }
  [[ -n $daemon_pid ]] && { kill -9 "$daemon_pid"; wait "$daemon_pid"; } 2>/dev/null
  [[ -n $watch_pid ]] && { kill "$watch_pid"; wait "$watch_pid"; } 2>/dev/null
  bash "$vm" down-all >/dev/null 2>&1
  bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1
  rm -rf "$work"
}
show_logs() {
  echo "daemon log (tail):"; t_show "$work/daemon.log"
  echo "heatwatch log (tail):"; t_show "$work/heatwatch.log" 10
}
T_ON_DIE=show_logs

echo "== Keystone + Heat ($osdir), test VMs ($VNFLOW_VMS_DIR)"
bash "$root/tools/openstack/start.sh" "$osdir" >"$work/start.log" 2>&1 || { t_show "$work/start.log" 30; die "start.sh"; }
bash "$vm" setup >"$work/vm-setup.log" 2>&1 || { t_show "$work/vm-setup.log"; die "vm.sh setup"; }
# shellcheck disable=SC1091
source "$osdir/openrc"
$PY "$root/tools/vms/heatwatch.py" --openrc "$osdir/openrc" --vms-dir "$VNFLOW_VMS_DIR" --interval 0.3 \
  --lifetime 2400 --log-file "$work/heatwatch.log" --down-on-exit &
watch_pid=$!

# The VIM: the fake Nova/Neutron templates, addresses in the VMs' subnet.
mkdir -p "$work/env"
ln -s "$root/tests/openstack/fake" "$work/env/fake"
sed -e 's/^  fake_ip_from_stack_id: false/  fake_ip_from_stack_id: true/' \
  -e 's/^  fake_ip_subnet: ""/  fake_ip_subnet: "10.231"/' "$root/tests/openstack/fake-env.yaml" >"$work/env/env.yaml"
export VNFLOW_DB=$work/vnflow.db
"$vnflow" vim register --name e2e --from-env --heat-env "$work/env/env.yaml" --default >/dev/null

start_daemon() {
  "$vnflow" daemon --work-dir "$work/wd" --workers 8 >>"$work/daemon.log" 2>&1 &
  daemon_pid=$!
}
start_daemon

inst_field() { "$vnflow" instance show "$1" --json | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)"; }
expect_completed() {  # expect_completed WHAT OP
  if wait_op "$2"; then ok "$1 COMPLETED"; else bad "$1 COMPLETED (is $(op_state "$2"))"; "$vnflow" op show "$2" | t_printable | sed 's/^/     /'; fi
}
# The live VM (heatwatch's name) at an address: a deleted stack's dead VM may have had the
# same address.
vm_at() { bash "$vm" list | awk -v a="$1" '$2 == a && $4 != "dead" {n = $1} END {print n}'; }
on_vm() { local name; name=$(vm_at "$1"); shift; [[ -n $name ]] && bash "$vm" exec "$name" "$@"; }

# ---------------------------------------------------------------------------------------
scenario_registry() {
  echo "== private registry: instantiate (stand-in), heal, terminate"
  local pkg inst op addr addr2 req
  pkg=$("$vnflow" package onboard "$root/csar-samples/private-registry")
  inst=$("$vnflow" instance create --package "$pkg" --name registry)
  req=$work/registry-instantiate.json
  sed 's/"standin_lifetime": 3600/"standin_lifetime": 900/' "$root/csar-samples/private-registry/Requests/instantiate_standin.json" >"$req"
  op=$("$vnflow" instance instantiate "$inst" --request "$req")
  expect_completed "registry instantiate" "$op"
  addr=$(inst_field "$inst" 'd["vnfcs"][0]["address"]')
  check "the registry VM has an address in the VM subnet ($addr)" bash -c "[[ $addr == 10.231.* ]]"
  check "VM: Docker configured (/etc/docker/daemon.json)" on_vm "$addr" grep -q live-restore /etc/docker/daemon.json
  check "VM: the package's image was uploaded and loaded" \
    bash -c "[[ \"\$(bash '$vm' exec $(vm_at "$addr") cat /var/lib/vnflow-standin/registry/image)\" == 'loaded sha256:'\"\$(sha256sum < '$root/csar-samples/private-registry/Files/images/registry-standin.tar' | cut -d' ' -f1)\" ]]"
  check "VM: the registry answers GET /v2/ on port 5000" bash -c "curl -fsS --max-time 5 http://$addr:5000/v2/ | grep -qx '{}'"
  check "record: the VM's host key is pinned" test "$(inst_field "$inst" 'd.get("host_keys",{}).get("'"$addr"':22","")[:7]')" = "SHA256:"
  check "history: no password" bash -c "! '$vnflow' op history $op --json | grep -q vnf-password"
  check "the database holds no SSH password in clear (sealed at rest)" \
    bash -c "! cat '$VNFLOW_DB' '$VNFLOW_DB-wal' 2>/dev/null | grep -qa vnf-password"

  op=$("$vnflow" instance heal "$inst" --request "$root/csar-samples/private-registry/Requests/heal.json")
  expect_completed "registry heal (whole VNF)" "$op"
  addr2=$(inst_field "$inst" 'd["vnfcs"][0]["address"]')
  check "heal: a new VM ($addr2) configured again, registry answers" bash -c "curl -fsS --max-time 5 http://$addr2:5000/v2/ | grep -qx '{}'"
  check "heal: the new VM's host key is pinned" test "$(inst_field "$inst" 'd["host_keys"].get("'"$addr2"':22","")[:7]')" = "SHA256:"

  op=$("$vnflow" instance terminate "$inst" --request "$root/csar-samples/private-registry/Requests/terminate.json")
  expect_completed "registry terminate" "$op"
  local gone=1
  for _ in $(seq 1 60); do [[ -z $(vm_at "$addr2") ]] && { gone=0; break; }; sleep 0.5; done
  check "terminate: the VM is gone (Heat deleted the server)" test $gone = 0
}

# Heat's own view: live stacks named like $1.
heat_token() {
  curl -sS -i -X POST "$OS_AUTH_URL/auth/tokens" -H 'Content-Type: application/json' -d "{\"auth\": {\"identity\":
    {\"methods\": [\"password\"], \"password\": {\"user\": {\"name\": \"$OS_USERNAME\", \"domain\": {\"name\": \"Default\"},
    \"password\": \"$OS_PASSWORD\"}}}, \"scope\": {\"project\": {\"name\": \"$OS_PROJECT_NAME\", \"domain\": {\"name\": \"Default\"}}}}}" |
    tr -d '\r' | awk 'tolower($1)=="x-subject-token:"{print $2}'
}
live_stacks() {
  local t project
  t=$(heat_token)
  project=$(curl -sS -H "X-Auth-Token: $t" -H "X-Subject-Token: $t" "$OS_AUTH_URL/auth/tokens" | $PY -c 'import json,sys; print(json.load(sys.stdin)["token"]["project"]["id"])')
  curl -sS -H "X-Auth-Token: $t" "http://127.0.0.1:$HEAT_PORT/v1/$project/stacks?name=$1" | $PY -c '
import json,sys
print(len([s for s in json.load(sys.stdin)["stacks"] if not s["stack_status"].startswith("DELETE")]))'
}
registry_request() {  # registry_request FILE FAULTS(json fragment)
  $PY - "$root/csar-samples/private-registry/Requests/instantiate_standin.json" "$1" "$2" <<'PYEOF'
import json, sys
src, out, extra = sys.argv[1:]
r = json.load(open(src))
p = r["additionalParams"]["private_registry_installation_param"]
p["standin_lifetime"] = 900
p.update(json.loads(extra))
json.dump(r, open(out, "w"))
PYEOF
}
changes() { on_vm "$1" cat /var/lib/vnflow-standin/registry/changes.log 2>/dev/null; }
# Every effective change on the VM happened once: no line twice in changes.log.
configured_once() { [[ -n $(changes "$1") && -z $(changes "$1" | sort | uniq -d) ]]; }

scenario_registry_faults() {
  echo "== private registry faults: failing script, sshd killed, daemon killed, rollback"
  local pkg a b c d op_a op_b op_c op_d addr
  pkg=$("$vnflow" package onboard "$root/csar-samples/private-registry")
  # A and B: install-docker fails on its first runs. A fails 3 times (all its attempts)
  # and is retried by the operator; B keeps failing and is rolled back.
  registry_request "$work/fail3.json" '{"standin_fail_times": "install-docker=3"}'
  registry_request "$work/fail9.json" '{"standin_fail_times": "install-docker=9"}'
  registry_request "$work/slow.json" '{"standin_step_secs": 3}'
  # C's steps take 6 s: sshd must die while install-docker runs, after the CLI commands
  # that find the VM (a few seconds on a loaded machine: with 3 s steps CI once killed sshd
  # after the step had finished, and nothing was retried).
  registry_request "$work/slower.json" '{"standin_step_secs": 6}'
  a=$("$vnflow" instance create --package "$pkg" --name fail-then-retry)
  b=$("$vnflow" instance create --package "$pkg" --name fail-then-rollback)
  c=$("$vnflow" instance create --package "$pkg" --name sshd-killed)
  d=$("$vnflow" instance create --package "$pkg" --name daemon-killed)
  op_a=$("$vnflow" instance instantiate "$a" --request "$work/fail3.json")
  op_b=$("$vnflow" instance instantiate "$b" --request "$work/fail9.json")
  op_c=$("$vnflow" instance instantiate "$c" --request "$work/slower.json")

  # C: sshd killed while install-docker runs (each step takes 6 s): the broken connection
  # is transient, the step is retried on a new connection, and nothing is applied twice.
  if wait_dispatched "$op_c" instantiate_end.install_docker 120; then
    sleep 1
    addr=$(inst_field "$c" 'd["vnfcs"][0]["address"]')
    bash "$vm" kill-sshd "$(vm_at "$addr")"
    sleep 2
    bash "$vm" start-sshd "$(vm_at "$addr")"
  else
    bad "sshd-killed: install_docker was never dispatched"
  fi
  expect_completed "sshd killed during a command: instantiate" "$op_c"
  check "sshd killed: the step was retried after the broken connection" \
    bash -c "'$vnflow' op history $op_c | grep -q 'retry_scheduled instantiate_end.install_docker'"
  check "sshd killed: every change on the VM happened once" configured_once "$addr"

  # D: the daemon killed (SIGKILL) in the middle of instantiate_end; a new one finishes it.
  op_d=$("$vnflow" instance instantiate "$d" --request "$work/slow.json")
  if wait_dispatched "$op_d" instantiate_end.install_docker 120; then
    sleep 1
    kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
    start_daemon
  else
    bad "daemon-killed: install_docker was never dispatched"
  fi
  expect_completed "daemon killed mid-instantiate_end: instantiate" "$op_d"
  addr=$(inst_field "$d" 'd["vnfcs"][0]["address"]')
  check "daemon killed: the VM was configured once (each change once)" configured_once "$addr"
  check "daemon killed: the registry answers" bash -c "curl -fsS --max-time 5 http://$addr:5000/v2/ | grep -qx '{}'"

  check "failing script: FAILED_TEMP after the policy's 3 attempts" wait_state "$op_a" FAILED_TEMP
  check "failing script: the reason names the step and the script's message" \
    bash -c "'$vnflow' op show $op_a | grep -q 'instantiate_end.install_docker.*injected failure 3 of 3'"
  check "failing script: 2 retries scheduled by the policy" \
    test "$("$vnflow" op history "$op_a" | grep -c 'retry_scheduled instantiate_end.install_docker')" = 2
  "$vnflow" op retry "$op_a" >/dev/null
  expect_completed "failing script: op retry" "$op_a"
  addr=$(inst_field "$a" 'd["vnfcs"][0]["address"]')
  check "op retry: the registry answers" bash -c "curl -fsS --max-time 5 http://$addr:5000/v2/ | grep -qx '{}'"

  check "rollback: FAILED_TEMP first" wait_state "$op_b" FAILED_TEMP
  "$vnflow" op rollback "$op_b" >/dev/null
  wait_op "$op_b" || true
  check "rollback: ROLLED_BACK" test "$(op_state "$op_b")" = ROLLED_BACK
  check "rollback: no stack left in Heat" test "$(live_stacks "vnflow-$b")" = 0
  check "rollback: the instance is NOT_INSTANTIATED" test "$(inst_field "$b" 'd["instantiation_state"]')" = NOT_INSTANTIATED
  check "rollback: no VIM left behind (only the cloud's)" test "$("$vnflow" vim list | grep -vc '^ID\|^id' || true)" -le 1

  # E: the VM unreachable (sshd down) when the workflow first reaches it: the SSH step keeps
  # connecting (connect_within) and goes on once the VM answers.
  local e op_e t0 vmname
  e=$("$vnflow" instance create --package "$pkg" --name unreachable)
  op_e=$("$vnflow" instance instantiate "$e" --request "$work/slow.json")
  vmname=
  if wait_dispatched "$op_e" instantiate.read_resources 120; then
    for _ in $(seq 1 100); do
      addr=$(inst_field "$e" 'd.get("vnfcs",[{}])[0].get("address","")' 2>/dev/null || true)
      [[ -n $addr ]] && vmname=$(vm_at "$addr")
      [[ -n $vmname ]] && break
      sleep 0.1
    done
  fi
  if [[ -n $vmname ]]; then
    bash "$vm" kill-sshd "$vmname"
    t0=$SECONDS
    sleep 8
    bash "$vm" start-sshd "$vmname"
    expect_completed "VM unreachable for 8 s: instantiate" "$op_e"
    check "VM unreachable: the operation waited for it ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -ge 8
    check "VM unreachable: configured once" configured_once "$addr"
  else
    bad "VM unreachable: the VM never appeared"
  fi

  for i in "$a" "$c" "$d" "$e"; do
    op=$("$vnflow" instance terminate "$i" --request "$root/csar-samples/private-registry/Requests/terminate.json")
    wait_op "$op" || bad "terminate $i"
  done
}

# ---------------------------------------------------------------------------------------
scenario_k8s() {
  echo "== Kubernetes cluster with two private registries: instantiate, scale out/in (oldest, is_reverse), heal worker, heal master (refused), heal whole, terminate"
  local P=$root/csar-samples/k8s-cluster pkg inst op m ws ip new w mid m2
  pkg=$("$vnflow" package onboard "$P")
  inst=$("$vnflow" instance create --package "$pkg" --name k8s)
  run_k8s() {  # run_k8s COMMAND REQUEST -> op id; waits
    local o
    o=$("$vnflow" instance "$1" "$inst" --request "$2") || return 1
    wait_op "$o" 600 || true
    echo "$o"
  }
  vnfcs() { inst_field "$inst" '"\n".join(v["id"]+" "+v["vdu"]+" "+v["address"] for v in d.get("vnfcs",[]))'; }
  nodes() { on_vm "$m" cat /var/lib/vnflow-standin/k8s/nodes | wc -l; }

  $PY - "$P/Requests/instantiate_standin.json" "$work/k8s-bad.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["additionalParams"]["k8s_cluster_installation_param"]["install_mode"] = "fast"
json.dump(d, open(sys.argv[2], "w"))
PYEOF
  op=$(run_k8s instantiate "$work/k8s-bad.json")
  check "bad install_mode: FAILED_TEMP in instantiate_start, before any stack" \
    bash -c "[[ \$('$vnflow' op show $op --json | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"operationState\"])') == FAILED_TEMP ]] && ! '$vnflow' op history $op | grep -q 'dispatched instantiate.create_stack'"
  "$vnflow" op rollback "$op" >/dev/null
  wait_op "$op" 60 || true

  op=$(run_k8s instantiate "$P/Requests/instantiate_standin.json")
  check "k8s instantiate COMPLETED" test "$(op_state "$op")" = COMPLETED
  m=$(vnfcs | awk '$2=="masterNode"{print $3}')
  ws=$(vnfcs | awk '$2=="workerNode"{print $3}')
  check "VIM kubernetes_vim_<instance> registered at https://$m:6443" bash -c "'$vnflow' vim list | grep -q 'kubernetes_vim_$inst  kubernetes  https://$m:6443'"
  check "record: the instance's vim_connection_info names the Kubernetes VIM" \
    bash -c "'$vnflow' instance show $inst --json | grep -q ETSINFV.KUBERNETES.V_1"
  check "master: 3 nodes joined" test "$(nodes)" = 3
  for ip in $m $ws; do
    check "$ip: /etc/hosts block (3 nodes + 2 registries)" test "$(on_vm "$ip" sed -n '/^# BEGIN vnflow/,/^# END vnflow/p' /etc/hosts | wc -l)" = 7
    check "$ip: HTTP registry in daemon.json insecure-registries" bash -c "bash '$vm' exec $(vm_at "$ip") cat /etc/docker/daemon.json | grep -q '10.231.0.1:5000'"
    check "$ip: HTTPS registry CA in certs.d" bash -c "bash '$vm' exec $(vm_at "$ip") cat /etc/docker/certs.d/registry.vnflow.test:5443/ca.crt | cmp -s - '$P/Files/certs/registry-ca.crt'"
    check "$ip: registry logins for both" test "$(on_vm "$ip" $PY -c 'import json; print(len(json.load(open("/root/.docker/config.json"))["auths"]))')" = 2
    check "$ip: kubelet has both registries' credentials (/var/lib/kubelet/config.json, 0600)" \
      test "$(on_vm "$ip" $PY -c 'import json, os; print(sorted(json.load(open("/var/lib/kubelet/config.json"))["auths"]), oct(os.stat("/var/lib/kubelet/config.json").st_mode & 0o777))')" = "['10.231.0.1:5000', 'registry.vnflow.test:5443'] 0o600"
    check "$ip: joined to https://$m:6443" on_vm "$ip" grep -q "endpoint=https://$m:6443" /var/lib/vnflow-standin/k8s/joined
  done
  check "no token, password or key in any history" bash -c "for o in \$('$vnflow' op list --instance $inst | awk '{print \$1}'); do '$vnflow' op history \$o --json; done | grep -qE 'registry-http-password|vnf-password|BEGIN (RSA |EC )?PRIVATE' && exit 1 || exit 0"

  op=$(run_k8s scale "$P/Requests/scale_out.json")
  check "scale out COMPLETED" test "$(op_state "$op")" = COMPLETED
  new=$(vnfcs | awk '$2=="workerNode"{print $3}' | grep -vxF "$ws")
  check "scale out: 4 nodes; the new worker ($new) joined and has the registries" \
    bash -c "[[ \$(bash '$vm' exec $(vm_at "$m") cat /var/lib/vnflow-standin/k8s/nodes | wc -l) == 4 ]] && bash '$vm' exec $(vm_at "$new") grep -q endpoint /var/lib/vnflow-standin/k8s/joined && bash '$vm' exec $(vm_at "$new") grep -q 10.231.0.1:5000 /etc/docker/daemon.json"
  check "scale out: the master's /etc/hosts names the new worker" on_vm "$m" grep -q "worker-${new//./-}" /etc/hosts

  # Scale-in removes the oldest worker, as Heat and Tacker do; is_reverse "True" the newest.
  local oldest
  oldest=$(vnfcs | awk '$2=="workerNode"{print $3; exit}')
  op=$(run_k8s scale "$P/Requests/scale_in.json")
  check "scale in COMPLETED" test "$(op_state "$op")" = COMPLETED
  check "scale in: the oldest worker ($oldest) was drained and deleted (3 nodes, not in hosts), the new one kept" \
    bash -c "[[ \$(bash '$vm' exec $(vm_at "$m") cat /var/lib/vnflow-standin/k8s/nodes | wc -l) == 3 ]] && ! bash '$vm' exec $(vm_at "$m") grep -q '${oldest//./-}' /var/lib/vnflow-standin/k8s/nodes /etc/hosts && bash '$vm' exec $(vm_at "$m") grep -q '${new//./-}' /var/lib/vnflow-standin/k8s/nodes"
  check "scale in: the record lists the oldest worker as removed" \
    test "$(inst_field "$inst" '",".join(v["address"] for v in d["affected_vnfcs"]["removed"])')" = "$oldest"
  op=$(run_k8s scale "$P/Requests/scale_out.json")
  new=$(vnfcs | awk '$2=="workerNode"{print $3}' | tail -1)
  check "scale out again COMPLETED ($new)" test "$(op_state "$op")" = COMPLETED
  op=$(run_k8s scale "$P/Requests/scale_in_reverse.json")
  check "scale in with is_reverse \"True\" COMPLETED" test "$(op_state "$op")" = COMPLETED
  check "scale in with is_reverse: the newest worker ($new) went, 3 nodes" \
    bash -c "[[ \$(bash '$vm' exec $(vm_at "$m") cat /var/lib/vnflow-standin/k8s/nodes | wc -l) == 3 ]] && ! bash '$vm' exec $(vm_at "$m") grep -q '${new//./-}' /var/lib/vnflow-standin/k8s/nodes /etc/hosts"
  printf '{"type": "SCALE_IN", "aspectId": "worker_instance", "additionalParams": {"is_reverse": "maybe"}}\n' >"$work/k8s-maybe.json"
  check "scale in: is_reverse \"maybe\" is refused with the request" \
    bash -c "! '$vnflow' instance scale $inst --request '$work/k8s-maybe.json' 2>'$work/maybe.err' && grep -q 'is_reverse must be' '$work/maybe.err'"

  w=$(vnfcs | awk '$2=="workerNode"{print $1; exit}')
  sed "s/WORKER_VNFC_ID/$w/" "$P/Requests/heal_worker.json" >"$work/k8s-hw.json"
  op=$(run_k8s heal "$work/k8s-hw.json")
  check "heal worker COMPLETED" test "$(op_state "$op")" = COMPLETED
  check "heal worker: the replacement joined (3 nodes)" test "$(nodes)" = 3

  # Healing the only master would lose the control plane and every workload: refused
  # before anything changes (Tacker refuses it too); a whole heal builds a new cluster.
  mid=$(vnfcs | awk '$2=="masterNode"{print $1}')
  sed "s/MASTER_VNFC_ID/$mid/" "$P/Requests/heal_master.json" >"$work/k8s-hm.json"
  op=$(run_k8s heal "$work/k8s-hm.json")
  check "heal of the only master: FAILED_TEMP in heal_start, saying why" \
    bash -c "[[ \$('$vnflow' op show $op --json | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d[\"operationState\"], \"every master\" in d[\"error\"][\"detail\"])') == 'FAILED_TEMP True' ]]"
  check "heal of the only master: no VM touched, no stack update" bash -c "! '$vnflow' op history $op | grep -qE 'dispatched heal(_start)?\.(drain|mark_unhealthy|update_stack)'"
  "$vnflow" op fail "$op" >/dev/null
  check "heal of the only master: the cluster is as it was (3 nodes, same VIM)" \
    bash -c "'$vnflow' vim list | grep -q 'kubernetes_vim_$inst  kubernetes  https://$m:6443' && [[ \$(bash '$vm' exec $(vm_at "$m") cat /var/lib/vnflow-standin/k8s/nodes | wc -l) == 3 ]]"

  op=$(run_k8s heal "$P/Requests/heal_whole.json")
  check "heal whole COMPLETED" test "$(op_state "$op")" = COMPLETED
  m2=$(vnfcs | awk '$2=="masterNode"{print $3}')
  check "heal whole: a new master ($m2) and the VIM follows it" bash -c "[[ $m2 != $m ]] && '$vnflow' vim list | grep -q 'kubernetes_vim_$inst  kubernetes  https://$m2:6443'"
  check "heal whole: the VIM was deregistered first, then registered again" \
    bash -c "'$vnflow' op history $op | grep -E 'succeeded heal_(start.deregister_whole|end.register_vim)' | awk '{print \$4}' | tr '\n' ' ' | grep -qx 'heal_start.deregister_whole heal_end.register_vim '"

  op=$(run_k8s terminate "$P/Requests/terminate.json")
  check "terminate COMPLETED" test "$(op_state "$op")" = COMPLETED
  check "terminate: the Kubernetes VIM is gone" bash -c "! '$vnflow' vim list | grep -q kubernetes_vim_$inst"
  check "terminate: no stack left in Heat" test "$(live_stacks "vnflow-$inst")" = 0
}

for s in $scenarios; do "scenario_$s"; done

echo
t_finish
