#!/usr/bin/env bash
# Runs tests/ssh/ssh_actions_test.cpp against real OpenSSH sshd in two network-namespace
# VMs (tools/vms/vm.sh), stopped afterwards.
# Usage: ssh_test.sh SSH_ACTIONS_TEST_BINARY SOURCE_ROOT
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init ssh
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-ssh.XXXXXX")
export VNFLOW_VMS_DIR=$work/vms
vm=$root/tools/vms/vm.sh
a=sshta b=sshtb
cleanup() {
  bash "$vm" down "$a" >/dev/null 2>&1 || true
  bash "$vm" down "$b" >/dev/null 2>&1 || true
  rm -rf "$work"
}

bash "$vm" setup >"$work/setup.log" 2>&1 || { t_show "$work/setup.log"; die "tools/vms/vm.sh setup"; }
bash "$vm" up "$a" 10.231.7.11
bash "$vm" up "$b" 10.231.7.12

export VNFLOW_SSH_HOSTS="10.231.7.11 10.231.7.12" VNFLOW_SSH_VMS="$a $b"
export VNFLOW_SSH_USER=${VM_USER:-vnfuser} VNFLOW_SSH_PASSWORD=${VM_PASSWORD:-vnf-password}
export VNFLOW_SSH_KEY=$VNFLOW_VMS_DIR/client/id_ed25519 VNFLOW_VM_SH="bash $vm"
export VNFLOW_SSH_DOWN=10.231.7.99
rc=0
"$bin" "${@:3}" 2>&1 | t_printable || rc=$?
[[ $rc -ne 77 ]] || exit 77  # skipped
if [[ $rc -eq 0 ]]; then ok "ssh_actions_test against the VMs"; else bad "ssh_actions_test against the VMs (exit $rc)"; fi
t_finish
