#!/usr/bin/env bash
# The seeds' VNFs end to end on this machine: real Keystone + Heat (tools/openstack), VMs
# that boot when Heat reports a server (network namespaces with a real sshd each,
# tools/vms/heatwatch.py), and the vnflow daemon running the packages' workflows with
# their stand-in scripts (install_mode standin: no Docker or Kubernetes runs in the VMs).
# Every scenario is checked on the VMs' file systems and in vnflow's state.
#
# Usage: vnf_test.sh VNFLOW_BINARY SOURCE_ROOT [SCENARIO...]
#   scenarios: registry (default: all)
# Environment: VNFLOW_OPENSTACK_DIR (default: fresh), KEEP=1 keeps everything running.
set -euo pipefail
vnflow=$(realpath "$1")
root=$(realpath "$2")
shift 2
scenarios=${*:-registry}
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-e2e.XXXXXX")
osdir=${VNFLOW_OPENSTACK_DIR:-$work/openstack}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15600} HEAT_PORT=${HEAT_PORT:-18604}
export VNFLOW_VMS_DIR=$work/vms
vm=$root/tools/vms/vm.sh
PY=/usr/bin/python3
daemon_pid= watch_pid=
checks=0 failed=0

cleanup() {
  set +e
  [[ ${KEEP:-0} == 1 ]] && { echo "kept: $work (daemon $daemon_pid, heatwatch $watch_pid)"; return; }
  [[ -n $daemon_pid ]] && { kill -9 "$daemon_pid"; wait "$daemon_pid"; } 2>/dev/null
  [[ -n $watch_pid ]] && { kill "$watch_pid"; wait "$watch_pid"; } 2>/dev/null
  bash "$vm" down-all >/dev/null 2>&1
  bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
die() {
  echo "e2e: FAIL: $*"
  [[ -f $work/daemon.log ]] && tail -20 "$work/daemon.log"
  [[ -f $work/heatwatch.log ]] && tail -10 "$work/heatwatch.log"
  exit 1
}

echo "== Keystone + Heat ($osdir), test VMs ($VNFLOW_VMS_DIR)"
bash "$root/tools/openstack/start.sh" "$osdir" >"$work/start.log" 2>&1 || { tail -30 "$work/start.log"; die "start.sh"; }
bash "$vm" setup >"$work/vm-setup.log" 2>&1 || { tail -20 "$work/vm-setup.log"; die "vm.sh setup"; }
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
op_state() { "$vnflow" op show "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["operationState"])'; }
wait_op() { timeout "${2:-300}" "$vnflow" op wait "$1" >/dev/null 2>&1; }
expect_completed() {  # expect_completed WHAT OP
  if wait_op "$2"; then ok "$1 COMPLETED"; else bad "$1 COMPLETED (is $(op_state "$2"))"; "$vnflow" op show "$2" | sed 's/^/     /'; fi
}
# The VM (heatwatch's name) at an address.
vm_at() { bash "$vm" list | awk -v a="$1" '$2 == a {print $1}'; }
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

for s in $scenarios; do "scenario_$s"; done

echo
echo "e2e: $checks checks, $failed failed"
[[ $failed == 0 ]]
