#!/usr/bin/env bash
# Test of tools/vms (vm.sh + heatwatch.py): two test VMs with a real sshd,
# key and password login, sudo, file system isolation from the host and from
# each other, SFTP, kill-sshd/start-sshd (same host key), replace (new host
# key, fresh file system), down-all; then, against a real Keystone + Heat
# (tools/openstack/start.sh), heatwatch --once and the polling mode boot and
# remove VMs for fake servers with fake_ip_subnet 10.231.
#
# Usage: tests/vms/vm_test.sh            (root; exit 0 only if every check passed)
# Environment: VMS_TEST_HEAT=0 skips the Heat part; VMS_TEST_KEEP=1 keeps the
#   state dir; KEYSTONE_PORT (15400) HEAT_PORT (18404) VMS_TEST_OS_DIR
#   (/tmp/vms-os) for the Heat part, which stops Heat at the end unless it was
#   already running.
set -euo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
T_STOP_ON_FAIL=1  # each check builds on the ones before it
t_init vms

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VM=$REPO/tools/vms/vm.sh
HEATWATCH=$REPO/tools/vms/heatwatch.py
export VNFLOW_VMS_DIR=/tmp/vnflow-vms-test
export VM_USER=vnfuser VM_PASSWORD=vnf-password
OS_DIR=${VMS_TEST_OS_DIR:-/tmp/vms-os}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15400} HEAT_PORT=${HEAT_PORT:-18404}
A=vmt-a B=vmt-b
ADDR_A=10.231.0.11 ADDR_B=10.231.0.12
STACK_PREFIX=vnflow-vmtest-$$-

WORK=$(mktemp -d /tmp/vnflow-vmtest.XXXXXX)
KH=$WORK/known_hosts
KEY=$VNFLOW_VMS_DIR/client/id_ed25519
T0=$(date +%s%N)
STARTED_OS=0
HW_PID=
STACKS=()
TIMINGS=()

ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
say() { echo "[vm_test +$(ms "$T0")ms] $*"; }
SSH_OPTS=(-o UserKnownHostsFile="$KH" -o StrictHostKeyChecking=accept-new -o ConnectTimeout=5
  -o LogLevel=ERROR -o ServerAliveInterval=5 -o ServerAliveCountMax=3)
# kssh ADDR CMD...: key login; pssh: password login; strict_ssh: the host key must be in KH
kssh() {
  local a=$1
  shift
  ssh -i "$KEY" -o BatchMode=yes -o IdentitiesOnly=yes "${SSH_OPTS[@]}" "$VM_USER@$a" "$@"
}
pssh() {
  local a=$1
  shift
  SSHPASS=$VM_PASSWORD sshpass -e ssh -o PubkeyAuthentication=no -o PreferredAuthentications=password \
    "${SSH_OPTS[@]}" "$VM_USER@$a" "$@"
}
strict_ssh() {
  local a=$1
  shift
  ssh -i "$KEY" -o BatchMode=yes -o IdentitiesOnly=yes -o UserKnownHostsFile="$KH" -o StrictHostKeyChecking=yes \
    -o ConnectTimeout=5 "$VM_USER@$a" "$@"
}
# fp ADDR: SHA256 fingerprint of the ed25519 host key at ADDR
fp() { ssh-keyscan -T 5 -t ed25519 "$1" 2>/dev/null | ssh-keygen -lf - | awk '{print $2}'; }

cleanup() {
  local rc=$T_RC
  set +e
  [[ -z $HW_PID ]] || kill -TERM "$HW_PID" 2>/dev/null
  if ((${#STACKS[@]} > 0)) && [[ -n ${TOKEN:-} ]]; then
    for s in "${STACKS[@]}"; do
      curl -s -o /dev/null -m 10 -X DELETE -H "X-Auth-Token: $TOKEN" "$HEAT_URL/stacks/$s"
    done
  fi
  "$VM" down-all
  if ((STARTED_OS)) && [[ ${VMS_TEST_KEEP_OS:-0} != 1 ]]; then
    bash "$REPO/tools/openstack/stop.sh" "$OS_DIR" >/dev/null 2>&1
  fi
  if ((rc == 0)) && [[ ${VMS_TEST_KEEP:-0} != 1 ]]; then
    rm -rf "$WORK" "$VNFLOW_VMS_DIR"
  else
    echo "[vm_test] kept $WORK and $VNFLOW_VMS_DIR (VM logs: $VNFLOW_VMS_DIR/*/sshd.log)" >&2
  fi
}
trap 'exit 130' INT TERM

[[ $(id -u) -eq 0 ]] || die "run as root"
[[ ! -e /etc/testfile ]] || die "/etc/testfile exists on the host; the isolation check needs it absent"
host_had_user=0
getent passwd "$VM_USER" >/dev/null && host_had_user=1
host_etc_sum=$(cat /etc/passwd /etc/shadow /etc/group /etc/hosts | md5sum)

# ------------------------------------------------------------------ setup
t=$(date +%s%N)
"$VM" setup
ok "setup ($(ms "$t") ms)"
check "bridge vnfbr0 has 10.231.0.1/16" bash -c "ip -br addr show vnfbr0 | grep -qF 10.231.0.1/16"
check "host routes 10.231.0.0/16 via vnfbr0" bash -c "ip route get 10.231.7.7 | grep -q 'dev vnfbr0'"
check_not "no system sshd listening on the host's port 22" bash -c "ss -Hltn 'sport = :22' | grep -q ."
"$VM" down-all # leftovers of an interrupted run

# ----------------------------------------------------------- two VMs up
for vm in "$A:$ADDR_A" "$B:$ADDR_B"; do
  n=${vm%%:*} a=${vm#*:}
  check_not "nothing answers at $a before up" timeout 2 bash -c ": </dev/tcp/$a/22"
  t=$(date +%s%N)
  out=$("$VM" up "$n" "$a" 2>&1) || die "vm.sh up $n $a: $out"
  [[ -z $out ]] || die "vm.sh up printed something: $out"
  up_ms=$(ms "$t")
  TIMINGS+=("up $n: $up_ms ms")
  ok "up $n $a in $up_ms ms, silent"
done
check "list shows both VMs up" bash -c "\"$VM\" list | grep -q '^$A $ADDR_A [0-9]* up$' && \"$VM\" list | grep -q '^$B $ADDR_B [0-9]* up$'"
check "up again with the same address is a no-op" "$VM" up "$A" "$ADDR_A"
check_not "up of another VM with a taken address fails" "$VM" up vmt-c "$ADDR_A"
check_not "an address outside 10.231.0.0/16 is refused" "$VM" up vmt-c 192.168.5.5

for vm in "$A:$ADDR_A" "$B:$ADDR_B"; do
  n=${vm%%:*} a=${vm#*:}
  t=$(date +%s%N)
  check "$n: ssh with the key" kssh "$a" true
  TIMINGS+=("ssh connect+login (key) $n: $(ms "$t") ms")
  t=$(date +%s%N)
  check "$n: ssh with the password" pssh "$a" true
  TIMINGS+=("ssh connect+login (password) $n: $(ms "$t") ms")
  check "$n: user, bash and hostname" bash -c "[[ \$(ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$a 'echo \$(id -un) \$SHELL \$(hostname)') == '$VM_USER /bin/bash $n' ]]"
  check "$n: sudo without a password" bash -c "[[ \$(ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$a 'sudo -n id -u') == 0 ]]"
  check "$n: host key matches vm.sh's known_hosts" bash -c "grep -qF \"\$(ssh-keyscan -T 5 -t ed25519 $a 2>/dev/null | cut -d' ' -f2-)\" '$VNFLOW_VMS_DIR/$n/known_hosts'"
done
check_not "wrong password is refused" bash -c "SSHPASS=wrong sshpass -e ssh -o PubkeyAuthentication=no -o PreferredAuthentications=password ${SSH_OPTS[*]} $VM_USER@$ADDR_A true"
check "VM a reaches VM b over the bridge" "$VM" exec "$A" timeout 3 bash -c ": </dev/tcp/$ADDR_B/22"

# ------------------------------------------------- file system isolation
check "write /etc/testfile, /etc/docker/daemon.json, /etc/hosts in VM a (sudo)" kssh "$ADDR_A" '
  set -e
  echo vm-a-secret | sudo tee /etc/testfile >/dev/null
  sudo mkdir -p /etc/docker/certs.d/reg.example:5000
  echo "{\"insecure-registries\": [\"reg.example:5000\"]}" | sudo tee /etc/docker/daemon.json >/dev/null
  echo "10.231.0.99 reg.example" | sudo tee -a /etc/hosts >/dev/null
  echo in-home >~/homefile'
check "vm.sh exec a sees /etc/testfile" bash -c "[[ \$(\"$VM\" exec $A cat /etc/testfile) == vm-a-secret ]]"
check "vm.sh exec a sees the home file and /etc/hosts line" bash -c "\"$VM\" exec $A cat /home/$VM_USER/homefile | grep -qx in-home && \"$VM\" exec $A grep -q reg.example /etc/hosts"
check_not "host has no /etc/testfile" test -e /etc/testfile
check_not "host has no /etc/docker/daemon.json from the VM" grep -qs reg.example /etc/docker/daemon.json
check_not "VM b has no /etc/testfile" "$VM" exec "$B" test -e /etc/testfile
check_not "VM b has no reg.example in /etc/hosts" "$VM" exec "$B" grep -q reg.example /etc/hosts
check "host /etc/passwd, shadow, group, hosts unchanged" bash -c "[[ \"\$(cat /etc/passwd /etc/shadow /etc/group /etc/hosts | md5sum)\" == '$host_etc_sum' ]]"
((host_had_user)) || check_not "host has no user $VM_USER" getent passwd "$VM_USER"
check_not "host has no /home/$VM_USER/homefile" test -e "/home/$VM_USER/homefile"
check "VM /tmp is private" bash -c "\"$VM\" exec $A touch /tmp/vmt-private && [[ ! -e /tmp/vmt-private ]] && ! \"$VM\" exec $B test -e /tmp/vmt-private"

# ------------------------------------------------------------------ sftp
head -c 1048576 /dev/urandom >"$WORK/blob"
printf '%s\n' "put $WORK/blob blob.bin" "mkdir certs" "put $WORK/blob certs/ca.crt" "get blob.bin $WORK/blob.back" "ls -l" >"$WORK/sftp.batch"
t=$(date +%s%N)
check "sftp put/get of 1 MiB (key)" sftp -i "$KEY" -o BatchMode=yes "${SSH_OPTS[@]}" -b "$WORK/sftp.batch" "$VM_USER@$ADDR_A"
TIMINGS+=("sftp put+put+get 1 MiB: $(ms "$t") ms")
check "sftp round trip is byte-identical" cmp "$WORK/blob" "$WORK/blob.back"
check "sftp'd file is in the VM's home (vm.sh exec)" bash -c "[[ \$(\"$VM\" exec $A md5sum /home/$VM_USER/blob.bin | cut -d' ' -f1) == \$(md5sum <'$WORK/blob' | cut -d' ' -f1) ]]"
check "sudo mv into /etc/docker/certs.d" kssh "$ADDR_A" "sudo mv certs/ca.crt /etc/docker/certs.d/reg.example:5000/ca.crt"
check "ca.crt is in the VM's /etc only" bash -c "\"$VM\" exec $A test -s /etc/docker/certs.d/reg.example:5000/ca.crt && [[ ! -e /etc/docker/certs.d/reg.example:5000 ]]"
printf '%s\n' "put $WORK/blob pw.bin" >"$WORK/sftp2.batch"
# (sftp -b forces BatchMode=yes, i.e. no password prompt: commands on stdin instead)
check "sftp with the password" bash -c "SSHPASS=$VM_PASSWORD sshpass -e sftp -o PubkeyAuthentication=no -o PreferredAuthentications=password ${SSH_OPTS[*]} $VM_USER@$ADDR_B <'$WORK/sftp2.batch'"
check "password-sftp'd file is in VM b's home" bash -c "[[ \$(\"$VM\" exec $B md5sum /home/$VM_USER/pw.bin | cut -d' ' -f1) == \$(md5sum <'$WORK/blob' | cut -d' ' -f1) ]]"

# ------------------------------------------------ kill-sshd / start-sshd
fp_a=$(fp "$ADDR_A")
[[ -n $fp_a ]] || die "no host key fingerprint from $ADDR_A"
kssh "$ADDR_A" 'setsid sleep 600 </dev/null >/dev/null 2>&1 &' || die "start a background process in VM a"
sess_pids=$("$VM" exec "$A" pgrep -u "$VM_USER" -x sleep | tr '\n' ' ' || true)
[[ -n $sess_pids ]] || die "no session process in VM a"
t=$(date +%s%N)
check "kill-sshd a" "$VM" kill-sshd "$A"
TIMINGS+=("kill-sshd: $(ms "$t") ms")
check "ssh to a: connection refused" bash -c "if ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$ADDR_A true 2>'$WORK/refused.err'; then exit 1; fi; grep -q 'Connection refused' '$WORK/refused.err'"
check "session processes of a are gone" bash -c "for p in $sess_pids; do [[ ! -d /proc/\$p ]] || grep -q '^State:.*Z' /proc/\$p/status || exit 1; done"
check "list shows a sshd-down" bash -c "\"$VM\" list | grep -q '^$A $ADDR_A - sshd-down$'"
check "VM a's files survive kill-sshd" bash -c "[[ \$(\"$VM\" exec $A cat /etc/testfile) == vm-a-secret ]]"
check "VM b unaffected" kssh "$ADDR_B" true
t=$(date +%s%N)
check "start-sshd a" "$VM" start-sshd "$A"
TIMINGS+=("start-sshd: $(ms "$t") ms")
check "same host key after start-sshd (fingerprint)" bash -c "[[ \$(ssh-keyscan -T 5 -t ed25519 $ADDR_A 2>/dev/null | ssh-keygen -lf - | awk '{print \$2}') == '$fp_a' ]]"
check "same host key after start-sshd (StrictHostKeyChecking=yes)" strict_ssh "$ADDR_A" 'cat /etc/testfile'

# ---------------------------------------------------------------- replace
t=$(date +%s%N)
check "replace a" "$VM" replace "$A"
TIMINGS+=("replace: $(ms "$t") ms")
check "host key changed after replace" bash -c "fp=\$(ssh-keyscan -T 5 -t ed25519 $ADDR_A 2>/dev/null | ssh-keygen -lf - | awk '{print \$2}'); [[ -n \$fp && \$fp != '$fp_a' ]]"
check "StrictHostKeyChecking=yes now refuses a" bash -c "! ssh -i '$KEY' -o BatchMode=yes -o UserKnownHostsFile='$KH' -o StrictHostKeyChecking=yes -o ConnectTimeout=5 $VM_USER@$ADDR_A true 2>'$WORK/strict.err' && grep -q 'REMOTE HOST IDENTIFICATION HAS CHANGED' '$WORK/strict.err'"
ssh-keygen -R "$ADDR_A" -f "$KH" >/dev/null 2>&1
check "replaced a: ssh with key and password" bash -c "ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$ADDR_A true && SSHPASS=$VM_PASSWORD sshpass -e ssh -o PubkeyAuthentication=no ${SSH_OPTS[*]} $VM_USER@$ADDR_A true"
check_not "replaced a: /etc/testfile is gone" "$VM" exec "$A" test -e /etc/testfile
check_not "replaced a: home file is gone" "$VM" exec "$A" test -e "/home/$VM_USER/blob.bin"

# --------------------------------------------------------------- down-all
mnt_ns=$(cat "$VNFLOW_VMS_DIR/$A/mntns" "$VNFLOW_VMS_DIR/$B/mntns")
veths=$(cat "$VNFLOW_VMS_DIR/$A/veth" "$VNFLOW_VMS_DIR/$B/veth" | tr '\n' ' ')
sshd_pids=$(cat "$VNFLOW_VMS_DIR/$A/sshd.pid" "$VNFLOW_VMS_DIR/$B/sshd.pid" | tr '\n' ' ')
t=$(date +%s%N)
check "down-all" "$VM" down-all
TIMINGS+=("down-all (2 VMs): $(ms "$t") ms")
check_not "no netns of ours left" bash -c "ip netns list | grep -E '^vnfvm-($A|$B)( |\$)'"
check_not "no veth of ours left" bash -c "for v in $veths; do ip link show \$v 2>/dev/null; done | grep -q ."
check "no sshd of ours left (by pid)" bash -c "for p in $sshd_pids; do [[ ! -d /proc/\$p ]] || grep -q '^State:.*Z' /proc/\$p/status || exit 1; done"
echo "$mnt_ns" >"$WORK/mntns"
check_not "no process left in the VMs' mount namespaces" bash -c "find /proc/[0-9]*/ns/mnt -maxdepth 0 -printf '%l\n' 2>/dev/null | grep -qxF -f '$WORK/mntns'"
check_not "no live holder of ours" bash -c "ps -eo stat=,args= | awk '\$1 !~ /Z/' | grep -E '[v]nfvm-hold:vmt-'"
check "list is empty" bash -c "[[ -z \$(\"$VM\" list) ]]"
check "down-all again is a no-op" "$VM" down-all
check "down of an unknown VM is a no-op" "$VM" down vmt-nothing
check_not "no sshd in the host's network namespace" bash -c "for p in \$(pgrep -x sshd); do [[ \$(readlink /proc/\$p/ns/net) == \$(readlink /proc/self/ns/net) ]] && ! grep -q '^State:.*Z' /proc/\$p/status && echo \$p; done | grep -q ."

# ------------------------------------------------- heatwatch against Heat
if [[ ${VMS_TEST_HEAT:-1} == 1 ]]; then
  if ! [[ -s $OS_DIR/run/heat.pid && -d /proc/$(cat "$OS_DIR/run/heat.pid" 2>/dev/null || echo 0) ]]; then
    STARTED_OS=1
  fi
  t=$(date +%s%N)
  bash "$REPO/tools/openstack/start.sh" "$OS_DIR" >"$WORK/os-start.log" 2>&1 || {
    tail -n 30 "$WORK/os-start.log" >&2
    die "tools/openstack/start.sh $OS_DIR"
  }
  ok "Keystone + Heat up ($(ms "$t") ms)"
  # shellcheck source=/dev/null
  source "$OS_DIR/openrc"
  # shellcheck disable=SC2153 # OS_PASSWORD comes from the openrc
  jq -n --arg u "$OS_USERNAME" --arg p "$OS_PASSWORD" --arg proj "$OS_PROJECT_NAME" \
    '{auth: {identity: {methods: ["password"], password: {user: {name: $u, domain: {name: "Default"}, password: $p}}},
             scope: {project: {name: $proj, domain: {name: "Default"}}}}}' >"$WORK/auth.json"
  curl -s -m 30 -D "$WORK/hdr" -o "$WORK/tok.json" -H 'Content-Type: application/json' \
    --data-binary "@$WORK/auth.json" "$OS_AUTH_URL/auth/tokens" || die "keystone token"
  TOKEN=$(tr -d '\r' <"$WORK/hdr" | awk 'tolower($1) == "x-subject-token:" {print $2}')
  HEAT_URL=$(jq -r '.token.catalog[] | select(.type == "orchestration") | .endpoints[] | select(.interface == "public") | .url' "$WORK/tok.json" | head -n 1)
  [[ -n $TOKEN && -n $HEAT_URL ]] || die "no token or Heat URL"

  # heat METHOD PATH [BODY_FILE] -> body in $WORK/resp, status on stdout
  heat() {
    local args=(-s -m 60 -X "$1" -o "$WORK/resp" -w '%{http_code}' -H "X-Auth-Token: $TOKEN" -H 'Accept: application/json')
    [[ -z ${3:-} ]] || args+=(-H 'Content-Type: application/json' --data-binary "@$3")
    curl "${args[@]}" "$HEAT_URL$2" || true
  }
  # create_stack NAME N_SERVERS: stack id on stdout once CREATE_COMPLETE
  create_stack() {
    local name=$1 n=$2 i status tmpl
    tmpl=$'heat_template_version: 2018-08-31\nresources:\n'
    for ((i = 1; i <= n; i++)); do
      tmpl+="  VDU$i: {type: OS::Nova::Server, properties: {flavor: m1, image: img, networks: [{network: net0}]}}"$'\n'
    done
    tmpl+=$'outputs:\n'
    for ((i = 1; i <= n; i++)); do
      tmpl+="  addr$i: {value: {get_attr: [VDU$i, first_address]}}"$'\n'
    done
    jq -n --arg name "$name" --arg t "$tmpl" --rawfile srv "$REPO/tests/openstack/fake/server.yaml" \
      --rawfile port "$REPO/tests/openstack/fake/port.yaml" --rawfile net "$REPO/tests/openstack/fake/net.yaml" \
      --rawfile sub "$REPO/tests/openstack/fake/subnet.yaml" --rawfile env "$REPO/tests/openstack/fake-env.yaml" \
      '{stack_name: $name, template: $t, timeout_mins: 5, disable_rollback: true,
        files: {"fake/server.yaml": $srv, "fake/port.yaml": $port, "fake/net.yaml": $net, "fake/subnet.yaml": $sub,
                "fake-env.yaml": $env,
                "knobs.json": ({parameter_defaults: {fake_ip_from_stack_id: true, fake_ip_subnet: "10.231"}} | tojson)},
        environment_files: ["fake-env.yaml", "knobs.json"]}' >"$WORK/create.json"
    [[ $(heat POST /stacks "$WORK/create.json") == 201 ]] || die "create stack $name: $(head -c 500 "$WORK/resp")"
    STACKS+=("$name/$(jq -r .stack.id "$WORK/resp")")
    for ((i = 0; i < 240; i++)); do
      [[ $(heat GET "/stacks/${STACKS[-1]}") == 200 ]] || die "GET stack $name"
      status=$(jq -r .stack.stack_status "$WORK/resp")
      [[ $status == CREATE_IN_PROGRESS ]] || break
      sleep 0.25
    done
    [[ $status == CREATE_COMPLETE ]] || die "stack $name: $status $(jq -r .stack.stack_status_reason "$WORK/resp")"
  }
  # delete_stack: the last created stack, waits until it is gone
  delete_stack() {
    local s=${STACKS[-1]} i code
    code=$(heat DELETE "/stacks/$s")
    [[ $code == 204 ]] || die "DELETE stack $s -> $code"
    for ((i = 0; i < 240; i++)); do
      code=$(heat GET "/stacks/$s")
      [[ $code == 404 || $(jq -r .stack.stack_status "$WORK/resp" 2>/dev/null) == DELETE_COMPLETE ]] && break
      sleep 0.25
    done
    unset 'STACKS[-1]'
  }

  # --once: one fake server
  create_stack "${STACK_PREFIX}once" 1
  addr=$(jq -r '.stack.outputs[] | select(.output_key == "addr1") | .output_value' "$WORK/resp")
  if ! [[ $addr =~ ^10\.231\.([0-9]+)\.([0-9]+)$ ]] ||
    ((BASH_REMATCH[1] < 1 || BASH_REMATCH[1] > 254 || BASH_REMATCH[2] < 2 || BASH_REMATCH[2] > 254)); then
    die "fake server address '$addr' is not 10.231.X.Y (X 1..254, Y 2..254)"
  fi
  ok "fake server reports $addr (fake_ip_subnet 10.231)"
  hw=(/usr/bin/python3 "$HEATWATCH" --openrc "$OS_DIR/openrc" --prefix "$STACK_PREFIX" --log-file "$WORK/heatwatch.log")
  t=$(date +%s%N)
  check "heatwatch --once boots the VM" "${hw[@]}" --once
  TIMINGS+=("heatwatch --once (1 new VM): $(ms "$t") ms")
  check "a VM with $addr is listed" bash -c "\"$VM\" list | grep -q '^hw-[0-9a-f]\{12\} $addr [0-9]* up$'"
  check "ssh to the server at $addr (key)" kssh "$addr" 'sudo -n true'
  check "heatwatch logged one up line" grep -q " up hw-[0-9a-f]* $addr stack=${STACK_PREFIX}once resource=VDU1" "$WORK/heatwatch.log"
  check "heatwatch --once again changes nothing" bash -c "n=\$(wc -l <'$WORK/heatwatch.log'); ${hw[*]} --once && [[ \$(wc -l <'$WORK/heatwatch.log') == \$n ]]"
  delete_stack
  check "heatwatch --once after the delete" "${hw[@]}" --once
  check "the VM is gone" bash -c "! \"$VM\" list | grep -q ' $addr '"
  check_not "nothing answers at $addr" timeout 2 bash -c ": </dev/tcp/$addr/22"

  # polling mode: two servers appear and go
  "${hw[@]}" --interval 0.3 --lifetime 300 &
  HW_PID=$!
  t=$(date +%s%N)
  create_stack "${STACK_PREFIX}poll" 2
  a1=$(jq -r '.stack.outputs[] | select(.output_key == "addr1") | .output_value' "$WORK/resp")
  a2=$(jq -r '.stack.outputs[] | select(.output_key == "addr2") | .output_value' "$WORK/resp")
  t_created=$(date +%s%N)
  check "polling heatwatch boots both VMs (ssh answers on $a1 and $a2)" \
    wait_until 60 bash -c "ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$a1 true && ssh -i '$KEY' -o BatchMode=yes ${SSH_OPTS[*]} $VM_USER@$a2 true"
  TIMINGS+=("stack CREATE_COMPLETE -> both VMs answer ssh: $(ms "$t_created") ms (create+boot $(ms "$t") ms)")
  delete_stack
  check "polling heatwatch removes both VMs" wait_until 60 bash -c "[[ -z \$(\"$VM\" list) ]]"
  kill -TERM "$HW_PID"
  for _ in $(seq 1 50); do kill -0 "$HW_PID" 2>/dev/null || break; sleep 0.1; done
  check_not "heatwatch exits on SIGTERM" kill -0 "$HW_PID"
  HW_PID=
  check "heatwatch log: 3 up, 3 down, no error" bash -c "[[ \$(grep -c ' up hw-' '$WORK/heatwatch.log') == 3 && \$(grep -c ' down hw-' '$WORK/heatwatch.log') == 3 ]] && ! grep -q ' error ' '$WORK/heatwatch.log'"
fi

for t in "${TIMINGS[@]}"; do echo "  timing: $t"; done
t_finish
