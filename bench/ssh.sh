#!/usr/bin/env bash
# SSH fan-out, three ways, in one run, against the same VMs (4 unless VMS says) (network namespaces with a
# real OpenSSH sshd each, tools/vms/vm.sh): on every VM 10 commands
# (`echo step N >> ~/bench/bench.log`) and a 1 MiB file upload.
#   vnflow     an instantiate whose instantiate_end workflow runs the job: 10 ssh.exec states
#              fanned out over the VMs (parallelism = VMs), then ssh.put of a package file;
#              every transition checkpointed to SQLite. Timed from the request
#              (`instance instantiate --wait`, the instance created before) to COMPLETED.
#   ssh_mux    plain OpenSSH: per host a ControlMaster, 10 commands and an scp over it,
#              `-O exit`; the 4 hosts in parallel (../shared/research/bench/ssh_fanout.sh (c)).
#   ansible    ansible-playbook, forks = VMs, defaults, gather_facts: false (same playbook as the
#              research baseline (a)).
# Every run starts cold (a new daemon: no pooled session; no ssh master) and is checked: 10 log lines and
# the payload's SHA-256 on every VM. Prints per-run times, medians, ratios and the floors
# (issue 19): vnflow <= 1.0 x ssh_mux,  ansible / vnflow >= 10.
# Usage: [VMS=N] [QUIET_WAIT=S] bench/ssh.sh [REPS]   (default 3 runs on 4 VMs, at most 64; each method
#   works on all VMs at once: vnflow's parallelism, ansible's forks; env CHECK_FLOORS=1:
#   exit 3 when a floor fails)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REPS=${1:-3}
NHOSTS=${VMS:-4}
[[ $NHOSTS =~ ^[0-9]+$ ]] && ((NHOSTS >= 1 && NHOSTS <= 64)) || { echo "VMS: 1 to 64" >&2; exit 2; }
STEPS=10
bash tools/install-deps.sh --bench >/dev/null
# shellcheck source=bench/release_build.sh
source bench/release_build.sh
release_build "$root" 2>/dev/null   # build-release/: $vnflow, $build_line
echo "$build_line"

T=$(mktemp -d /tmp/vnflow-bench-ssh.XXXXXX)
export VNFLOW_VMS_DIR=$T/vms
vm=$root/tools/vms/vm.sh
daemon_pid=
cleanup() {
  set +e
  [[ -n $daemon_pid ]] && { kill "$daemon_pid"; wait "$daemon_pid"; } 2>/dev/null
  for i in $(seq 1 $NHOSTS); do bash "$vm" down "bench$i" >/dev/null 2>&1; done
  rm -rf "$T"
}
trap cleanup EXIT

bash "$vm" setup >"$T/setup.log" 2>&1 || { tail -20 "$T/setup.log"; exit 1; }
hosts=()
for i in $(seq 1 $NHOSTS); do
  bash "$vm" up "bench$i" "10.231.9.$((10 + i))"
  hosts+=("10.231.9.$((10 + i))")
done
KEY=$VNFLOW_VMS_DIR/client/id_ed25519
USER_=${VM_USER:-vnfuser}
: >"$T/known_hosts"
for h in "${hosts[@]}"; do ssh-keyscan -t ed25519 "$h" >>"$T/known_hosts" 2>/dev/null; done
head -c 1048576 /dev/urandom >"$T/payload.bin"
SHA=$(sha256sum "$T/payload.bin" | cut -d' ' -f1)
SSHO=(-F /dev/null -i "$KEY" -o IdentitiesOnly=yes -o UserKnownHostsFile="$T/known_hosts"
  -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes -o LogLevel=ERROR
  -o User="$USER_")

reset_remote() {
  for h in "${hosts[@]}"; do ssh "${SSHO[@]}" "$h" 'rm -rf ~/bench; mkdir -p ~/bench'; done
}
verify() {  # verify METHOD
  local h n s
  for h in "${hosts[@]}"; do
    read -r n s < <(ssh "${SSHO[@]}" "$h" 'echo $(grep -c "^step " ~/bench/bench.log) $(sha256sum < ~/bench/payload.bin | cut -d" " -f1)')
    [[ $n == "$STEPS" && $s == "$SHA" ]] || { echo "VERIFY FAIL $1 on $h: $n lines, sha $s" >&2; return 1; }
  done
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b-a}'; }
median() { sort -g | awk '{v[NR]=$1} END{ if (NR%2) print v[(NR+1)/2]; else printf "%.4f\n", (v[NR/2]+v[NR/2+1])/2 }'; }

# ---------------------------------------------------------------- vnflow's package
pkg=$T/ssh-bench
cp -r csar-samples/local-demo "$pkg"
rm -f "$pkg/local-demo.mf" "$pkg"/Requests/*
mkdir -p "$pkg/Files"
cp "$T/payload.bin" "$pkg/Files/payload.bin"
{
  echo "description: the SSH fan-out job (bench/ssh.sh)"
  echo "start: step1"
  echo "states:"
  for s in $(seq 1 $STEPS); do
    next=step$((s + 1))
    [[ $s == "$STEPS" ]] && next=upload
    cat <<EOF
  step$s:
    action: ssh.exec
    for_each: \${request.additionalParams.hosts}
    as: host
    parallelism: $NHOSTS
    with:
      host: \${host}
      username: \${request.additionalParams.ssh_username}
      private_key: \${request.additionalParams.ssh_private_key}
      command: echo step $s >> ~/bench/bench.log
    timeout: 30s
    next: $next
EOF
  done
  cat <<'EOF'
  upload:
    action: ssh.put
    for_each: ${request.additionalParams.hosts}
    as: host
    parallelism: @NHOSTS@
    with:
      host: ${host}
      username: ${request.additionalParams.ssh_username}
      private_key: ${request.additionalParams.ssh_private_key}
      source: Files/payload.bin
      path: /home/vnfuser/bench/payload.bin
    timeout: 60s
    next: done
  done:
    succeed: true
EOF
} >"$pkg/Workflows/instantiate_end.yaml"
sed -i "s/@NHOSTS@/$NHOSTS/" "$pkg/Workflows/instantiate_end.yaml"
sed -i 's/^ETSI-Entry-Manifest: .*/ETSI-Entry-Manifest: ssh-bench.mf/' "$pkg/TOSCA-Metadata/TOSCA.meta"
bash tools/csar-manifest.sh "$pkg" ssh-bench.mf vnflow "Local demo" 1.0 >/dev/null

export VNFLOW_DB=$T/vnflow.db
"$vnflow" workflow check "$pkg" >"$T/check.log" 2>&1 || { cat "$T/check.log"; exit 1; }
pkg_id=$("$vnflow" package onboard "$pkg")
# A new daemon for each vnflow run, so that every run starts cold as the peers' do: no SSH
# session pooled by the run before (the pool keeps idle sessions 30 s).
start_daemon() {
  if [[ -n $daemon_pid ]]; then kill "$daemon_pid"; wait "$daemon_pid" || true; fi
  : >"$T/daemon.log"
  "$vnflow" daemon --work-dir "$T/wd" --workers $((NHOSTS > 8 ? NHOSTS : 8)) >"$T/daemon.log" 2>&1 &
  daemon_pid=$!
  local i
  for i in $(seq 1 100); do
    grep -q 'vnflow daemon on' "$T/daemon.log" && { sleep 0.2; return 0; }  # and running
    sleep 0.05
  done
  echo "the daemon did not start" >&2; cat "$T/daemon.log" >&2; return 1
}
/usr/bin/python3 - "$T/request.json" "$USER_" "$KEY" "${hosts[@]}" <<'EOF'
import json, sys
out, user, key, *hosts = sys.argv[1:]
json.dump({"flavourId": "simple", "additionalParams": {
    "work_dir": "/tmp/vnflow-bench-ssh-work", "nodes": ["a"], "hosts": hosts,
    "ssh_username": user, "ssh_private_key": open(key).read()}}, open(out, "w"))
EOF

inst=
prepare_vnflow() {  # untimed: a new daemon, and the instance (SOL003's "create VNF identifier")
  start_daemon || return 1
  inst=$("$vnflow" instance create --package "$pkg_id" --name "bench-$RANDOM") || return 1
}
run_vnflow() {  # the instantiate request, waited for; leaves the op id in $T/last_op
  local rc=0
  "$vnflow" instance instantiate "$inst" --request "$T/request.json" --wait --json >"$T/op.json" || rc=$?
  jq -r .id "$T/op.json" >"$T/last_op"
  ((rc == 0)) || { "$vnflow" op show "$(cat "$T/last_op")"; return 1; }
}
mux_host() {
  local h=$1 sock="$T/cm/$1" s
  ssh "${SSHO[@]}" -o ControlMaster=yes -o ControlPath="$sock" -o ControlPersist=yes -N -f "$h"
  for s in $(seq 1 $STEPS); do ssh "${SSHO[@]}" -o ControlPath="$sock" "$h" "echo step $s >> ~/bench/bench.log"; done
  scp -q "${SSHO[@]}" -o ControlPath="$sock" "$T/payload.bin" "$h:bench/payload.bin"
  ssh -o ControlPath="$sock" -O exit "$h" 2>/dev/null
}
run_ssh_mux() {
  local h pids=()
  mkdir -p "$T/cm"
  for h in "${hosts[@]}"; do mux_host "$h" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
}
{
  echo "[bench]"
  for i in $(seq 1 $NHOSTS); do echo "vm$i ansible_host=${hosts[$((i - 1))]}"; done
  echo "[bench:vars]"
  echo "ansible_user=$USER_"
  echo "ansible_ssh_private_key_file=$KEY"
  echo "ansible_ssh_common_args='-F /dev/null -o IdentitiesOnly=yes -o UserKnownHostsFile=$T/known_hosts -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes'"
} >"$T/inventory.ini"
{
  echo "- hosts: bench"
  echo "  gather_facts: false"
  echo "  tasks:"
  for s in $(seq 1 $STEPS); do
    echo "    - name: step $s"
    echo "      ansible.builtin.shell: \"echo step $s >> ~/bench/bench.log\""
  done
  echo "    - name: copy 1 MiB file"
  echo "      ansible.builtin.copy:"
  echo "        src: $T/payload.bin"
  echo "        dest: \"~/bench/payload.bin\""
} >"$T/playbook.yml"
printf '[defaults]\nforks = %s\ninventory = %s\nretry_files_enabled = False\n' "$NHOSTS" "$T/inventory.ini" >"$T/ansible.cfg"
run_ansible() {
  local home="$T/ans-$1"
  mkdir -p "$home/cp" "$home/tmp"
  ANSIBLE_CONFIG="$T/ansible.cfg" ANSIBLE_HOME="$home" ANSIBLE_LOCAL_TEMP="$home/tmp" \
    ANSIBLE_SSH_CONTROL_PATH_DIR="$home/cp" ANSIBLE_NOCOLOR=1 \
    ansible-playbook "$T/playbook.yml" >"$home/out.log" 2>&1 ||
    { tail -30 "$home/out.log" >&2; return 1; }
}

wait_quiet  # the VMs' setup above raised it
declare -A times
for rep in $(seq 1 "$REPS"); do
  for method in vnflow ssh_mux ansible; do
    reset_remote
    if [[ $method == vnflow ]]; then prepare_vnflow || exit 1; fi
    t0=$(now)
    case $method in
      vnflow) run_vnflow ;;
      ssh_mux) run_ssh_mux ;;
      ansible) run_ansible "$rep" ;;
    esac
    t1=$(now)
    verify "$method"
    t=$(elapsed "$t0" "$t1")
    times[$method]+="$t "
    echo "run $rep $method ${t}s" >&2
  done
done

med() { tr ' ' '\n' <<<"${times[$1]}" | grep . | median; }
v=$(med vnflow) m=$(med ssh_mux) a=$(med ansible)
[[ -n ${SHOW_HISTORY:-} ]] && "$vnflow" op history "$(cat "$T/last_op")" >&2
# Where the last vnflow run's time went, as its history accounts it (queue, vnflow's own
# stepping and commits, the actions; per state its calls and span).
echo "last vnflow run:"
"$vnflow" op show "$(cat "$T/last_op")" --timing | sed 's/^/  /'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "job: $NHOSTS VMs x ($STEPS commands + 1 MiB upload), median of $REPS cold runs"
echo "vnflow_s: $v"
echo "ssh_mux_parallel_s: $m"
echo "ansible_s: $a"
r1=$(awk -v a="$v" -v b="$m" 'BEGIN{printf "%.2f", a/b}')
r2=$(awk -v a="$a" -v b="$v" 'BEGIN{printf "%.1f", a/b}')
p1=$(awk -v r="$r1" 'BEGIN{print (r <= 1.0) ? "PASS" : "FAIL"}')
p2=$(awk -v r="$r2" 'BEGIN{print (r >= 10) ? "PASS" : "FAIL"}')
echo "vnflow / ssh_mux: ${r1}x (floor <= 1.0x: $p1)"
echo "ansible / vnflow: ${r2}x (floor >= 10x: $p2)"
if [[ ${CHECK_FLOORS:-0} == 1 && ($p1 == FAIL || $p2 == FAIL) ]]; then exit 3; fi
