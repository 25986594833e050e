#!/usr/bin/env bash
# Runs tests/ssh/ssh_actions_test.cpp against real OpenSSH sshd in two network-namespace
# VMs (tools/vms/vm.sh), stopped afterwards.
# Usage: ssh_test.sh SSH_ACTIONS_TEST_BINARY SOURCE_ROOT
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-ssh.XXXXXX")
export VNFLOW_VMS_DIR=$work/vms
vm=$root/tools/vms/vm.sh
a=sshta b=sshtb
cleanup() {
  bash "$vm" down "$a" >/dev/null 2>&1 || true
  bash "$vm" down "$b" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

bash "$vm" setup >"$work/setup.log" 2>&1 || { tail -20 "$work/setup.log"; exit 1; }
bash "$vm" up "$a" 10.231.7.11
bash "$vm" up "$b" 10.231.7.12

export VNFLOW_SSH_HOSTS="10.231.7.11 10.231.7.12" VNFLOW_SSH_VMS="$a $b"
export VNFLOW_SSH_USER=${VM_USER:-vnfuser} VNFLOW_SSH_PASSWORD=${VM_PASSWORD:-vnf-password}
export VNFLOW_SSH_KEY=$VNFLOW_VMS_DIR/client/id_ed25519 VNFLOW_VM_SH="bash $vm"
export VNFLOW_SSH_DOWN=10.231.7.99
"$bin" "${@:3}"
