#!/usr/bin/env bash
# Seed 003's own instantiate request bodies (tests/cli/seed003/, copied verbatim from the
# seed) against the sample packages, with only the site's VIM id substituted: what vnflow
# accepts, and what it refuses out loud instead of ignoring (Tacker parameters it does not
# carry out), each refusal naming the parameter and changing nothing. A real daemon and
# database; the VIM's Keystone is an address that refuses connections, so an accepted
# request shows as its first Heat call being dispatched.
# Usage: seed_requests_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init seed_requests "$v"
work=$T_DIR/w
mkdir -m 700 "$work"
export VNFLOW_DB=$work/vnflow.db
PY=/usr/bin/python3
seeds=$root/tests/cli/seed003
daemon_pid=
stop_daemon() {
  if [[ -n $daemon_pid ]]; then kill -9 "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  daemon_pid=
}
T_ON_DIE=stop_daemon
trap 'stop_daemon; t_exit' EXIT

printf 'not-a-secret-of-anyone\n' >"$work/pw"
vim=$("$v" vim register --name site --auth-url http://127.0.0.1:9/v3 --username u \
  --password-file "$work/pw" --project p) || die "vim register"
k8s=$("$v" package onboard "$root/csar-samples/k8s-cluster") || die "onboard k8s-cluster"
reg=$("$v" package onboard "$root/csar-samples/private-registry") || die "onboard private-registry"
"$v" daemon --workers 2 --work-dir "$work/wd" --poll-ms 10 2>>"$work/daemon.log" &
daemon_pid=$!

# body SEED OUT [PYTHON]: the seed's body with the site's VIM id, then PYTHON run on it (d).
body() {
  $PY - "$seeds/$1" "$2" "$vim" "${3:-}" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d.get("vimConnectionInfo", []):
    c["vimId"] = sys.argv[3]
exec(sys.argv[4])
json.dump(d, open(sys.argv[2], "w"))
PYEOF
}
# detail OP: the error detail of the operation (ProblemDetails.detail of op show --json).
detail() { "$v" op show "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin).get("error",{}).get("detail",""))'; }
# refused_in_hook OP STATE WORDS...: FAILED_TEMP in that hook state, before any Heat call,
# the error naming every word; then failed for good, so the instance takes a new request.
refused_in_hook() {
  local op=$1 st=$2 d w
  shift 2
  [[ -n $op ]] || { echo "the request was refused"; return 1; }
  wait_state "$op" FAILED_TEMP 60 || { end_op "$op"; return 1; }
  local rc=0
  "$v" op history "$op" | grep -q "failed *$st" || { echo "not failed in $st"; rc=1; }
  "$v" op history "$op" | grep -q 'dispatched instantiate\.' && { echo "a built-in step ran"; rc=1; }
  d=$(detail "$op")
  for w in "$@"; do
    [[ $d == *"$w"* ]] || { echo "detail lacks '$w': $d"; rc=1; }
  done
  end_op "$op" || rc=1
  return $rc
}
# end_op OP: cancelled if running, then failed for good, so that the instance takes the next
# request whatever happened to this one.
end_op() {
  "$v" op cancel "$1" >/dev/null 2>&1
  wait_until 60 t_state_is "$1" FAILED_TEMP || t_state_is "$1" FAILED || return 1
  "$v" op fail "$1" >/dev/null 2>&1
  wait_state "$1" FAILED 30
}

# Python for body(): the seed's body without the user data (p: additionalParams, k: their
# k8s_cluster_installation_param), and also without script_path and the master's aspect_id.
no_ud='p = d["additionalParams"]; del p["lcm-operation-user-data"]; del p["lcm-operation-user-data-class"]; k = p["k8s_cluster_installation_param"]'
no_ud_sp_asp=$no_ud'; del k["script_path"]; del k["master_node"]["aspect_id"]'

t_say "k8s-cluster: the seed's instantiate body"
inst=$("$v" instance create --package "$k8s" --name seed-k8s)
body k8s_cluster_instantiate.json "$work/k8s.json"
check_exit "as printed: refused with the request (lcm-operation-user-data)" 1 \
  "$v" instance instantiate "$inst" --request "$work/k8s.json"
has "... naming the parameter and what vnflow does instead" "$T_ERR" -F 'additionalParams.lcm-operation-user-data: vnflow does not run'
check "... and no operation was made" test -z "$("$v" op list --instance "$inst")"

body k8s_cluster_instantiate.json "$work/k8s-1.json" \
  "$no_ud"
op=$("$v" instance instantiate "$inst" --request "$work/k8s-1.json")
check "without user data: script_path refused in instantiate_start, before any stack" \
  refused_in_hook "$op" instantiate_start.check_tacker_only "carry out: additionalParams.k8s_cluster_installation_param.script_path."

body k8s_cluster_instantiate.json "$work/k8s-2.json" \
  "$no_ud"'; del k["script_path"]'
op=$("$v" instance instantiate "$inst" --request "$work/k8s-2.json")
check "... and without script_path: master_node.aspect_id master_instance is no aspect of the flavour" \
  refused_in_hook "$op" instantiate_start.check_aspects 'master_node.aspect_id' '"master_instance"' 'worker_instance'

body k8s_cluster_instantiate.json "$work/k8s-3.json" \
  "$no_ud_sp_asp"'; k["master_node"]["password"] = "Seed-Master-Pw-7"; k["private_registry_connection_info"][1]["password"] = "Seed-Reg-Pw-9"'
op=$("$v" instance instantiate "$inst" --request "$work/k8s-3.json")
check "... and without it: accepted (registries with and without a port, a CA on HTTPS): the stack is being made" \
  wait_dispatched "$op" instantiate.create_stack 60
check "... after every instantiate_start check succeeded" \
  bash -c "'$v' op history $op | grep -q 'succeeded instantiate_start.check_registries' && ! '$v' op history $op | grep -q 'failed instantiate_start'"
[[ -z $op ]] || check "... and cancelled, it ends (FAILED_TEMP, then FAILED)" end_op "$op"

t_say "k8s-cluster: parameters a Tacker user might send that the package does not carry out"
body k8s_cluster_instantiate.json "$work/k8s-4.json" \
  "$no_ud_sp_asp"'; k["storage_server"] = {}; k["master_node"]["cluster_fip_name"] = "fip"; p["worker_node_password"] = "x"'
op=$("$v" instance instantiate "$inst" --request "$work/k8s-4.json")
check "storage_server, cluster_fip_name and an instantiate-time password override: refused, each named" \
  refused_in_hook "$op" instantiate_start.check_tacker_only "carry out: additionalParams.k8s_cluster_installation_param.storage_server, additionalParams.k8s_cluster_installation_param.master_node.cluster_fip_name, additionalParams.worker_node_password."
body k8s_cluster_instantiate.json "$work/k8s-5.json" \
  "$no_ud_sp_asp"'; k["master_node"]["pod_cidrr"] = "10.0.0.0/16"; k["proxy"]["ftp_proxy"] = "x"'
op=$("$v" instance instantiate "$inst" --request "$work/k8s-5.json")
check "misspelt keys: refused, named with their path" \
  refused_in_hook "$op" instantiate_start.check_known "master_node.pod_cidrr" "proxy.ftp_proxy"
body k8s_cluster_instantiate.json "$work/k8s-6.json" \
  "$no_ud_sp_asp"'; k["private_registry_connection_info"][0]["server"] = "../../etc"'
op=$("$v" instance instantiate "$inst" --request "$work/k8s-6.json")
check "a registry server that is a path: refused" \
  refused_in_hook "$op" instantiate_start.check_registries '"../../etc"'

t_say "private-registry: the seed's instantiate body"
inst2=$("$v" instance create --package "$reg" --name seed-registry)
body private_registry_instantiate.json "$work/reg.json"
op=$("$v" instance instantiate "$inst2" --request "$work/reg.json")
check "as printed: accepted, the stack is being made" wait_dispatched "$op" instantiate.create_stack 60

# The passwords: in the accepted k8s body, those of the master and of a registry (secret-named
# fields; the seed's own equal their user names), and the seed's proxy URLs'
# (http://user1:password1@...), which are secrets too.
secrets='Seed-Master-Pw-7|Seed-Reg-Pw-9|password1|password2'
for o in $("$v" op list | awk '{print $1}'); do
  "$v" op show "$o" --json
  "$v" op history "$o" --json
done >"$work/views" 2>&1
for i in "$inst" "$inst2"; do "$v" instance show "$i" --json; done >>"$work/views" 2>&1
check "no password of the requests in any view (op show, op history, instance show)" \
  bash -c "grep -q proxy '$work/views' && ! grep -qE '$secrets' '$work/views'"
check "... nor at rest in the database, nor in the daemon's log" \
  bash -c "test -s '$VNFLOW_DB' && ! grep -saqE '$secrets' '$VNFLOW_DB' '$VNFLOW_DB-wal' '$work/daemon.log'"
stop_daemon
t_finish
