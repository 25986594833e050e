#!/usr/bin/env bash
# The REST API over HTTPS (a certificate the test makes with openssl), /vnflcm/v2 and the
# cancel of an operation, with real parts: the daemon, curl and python3-tackerclient.
#   - HTTPS: curl and `openstack vnflcm` (OS_CACERT) get through with the test's CA, fail
#     without it; plain HTTP and TLS 1.1 get no answer; a key file others may read and a
#     key that is not the certificate's are refused before anything is served.
#   - v2: `openstack --os-tacker-api-version 2 vnflcm create/instantiate/show/list/op
#     list/terminate/delete`; Version 2.0.0 required (400 without, 406 with 1.3.0) and sent.
#   - cancel: an instantiate held in a step (its configure reads a FIFO) is cancelled
#     (202), stops short of COMPLETED once the step returns; a second cancel is 409.
#   - SIGHUP: a credentials file others can read is refused (the old token serves on); a
#     new token and a certificate from another CA are then served, the old ones not.
#   tests/api/api_tls_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init api-tls "$1"
root=$2
v=$T_VNFLOW
command -v openssl >/dev/null || die "openssl is missing"
command -v openstack >/dev/null || die "python3-tackerclient (openstack) is missing (tools/install-deps.sh)"

# shellcheck source=tests/api/daemon_setup.sh
source "$root/tests/api/daemon_setup.sh"
ep=https://127.0.0.1:$port

# A CA and a server certificate for 127.0.0.1 signed by it; another CA nobody trusts.
{ t_tls_server "$T_DIR" && t_self_signed "$T_DIR" other; } ||
  { t_show "$T_DIR/openssl.log"; die "openssl could not make the certificates"; }

"$v" package onboard "$root/csar-samples/local-demo" >/dev/null || die "onboard local-demo"
vnfd=3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c

# --- refused before anything is served
chmod 644 "$T_DIR/server.key"
check_exit "a TLS key others can read is refused" 2 \
  "$v" daemon --listen $port --auth-file "$T_DIR/auth" --tls-cert "$T_DIR/server.pem" --tls-key "$T_DIR/server.key"
has "... saying so" "$T_ERR" 'open to other users'
chmod 600 "$T_DIR/server.key"
check_exit "--tls-cert without --tls-key is a usage error" 2 \
  "$v" daemon --listen $port --auth-file "$T_DIR/auth" --tls-cert "$T_DIR/server.pem"
check_exit "a key that is not the certificate's is refused" 1 \
  "$v" daemon --listen $port --auth-file "$T_DIR/auth" --tls-cert "$T_DIR/server.pem" --tls-key "$T_DIR/other.key"
has "... naming the key" "$T_ERR" 'not a PEM private key for the certificate'

"$v" daemon --listen 127.0.0.1:$port --auth-file "$T_DIR/auth" --poll-ms 60000 \
  --tls-cert "$T_DIR/server.pem" --tls-key "$T_DIR/server.key" >"$T_DIR/daemon.log" 2>&1 &
daemon_pid=$!
up() { curl -s -o /dev/null --cacert "$T_DIR/ca.pem" "$ep/vnflcm/v1/api_versions"; }
wait_until 20 up || die "the API did not come up on $ep"
ok "the daemon serves HTTPS on $ep"

# req METHOD PATH [curl args...]: $code, the body in $T_DIR/body, headers in $T_DIR/headers
req() {
  local m=$1 p=$2
  shift 2
  code=$(curl -s --cacert "$T_DIR/ca.pem" -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' \
    -X "$m" -H "X-Auth-Token: $token" "$@" "$ep$p")
}
is_code() { check "$1: HTTP $2" test "$code" = "$2"; }
header() { tr -d '\r' <"$T_DIR/headers" | awk -v h="$1" 'tolower($1) == tolower(h) ":" {sub(/^[^:]*: */, ""); print}'; }
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T_DIR/body" "$1"; }

# --- TLS itself
req GET /vnflcm/v1/vnf_instances
is_code "HTTPS with the test's CA" 200
check_not "HTTPS without the CA fails verification" curl -sS -o /dev/null "$ep/vnflcm/v1/api_versions"
check_not "HTTPS trusting another CA fails" curl -sS -o /dev/null --cacert "$T_DIR/other.pem" "$ep/vnflcm/v1/api_versions"
check_not "plain HTTP on the HTTPS port gets no answer" curl -sS -m 10 -o /dev/null "http://127.0.0.1:$port/vnflcm/v1/api_versions"
check_not "TLS 1.1 is refused" curl -sS -m 10 -o /dev/null --cacert "$T_DIR/ca.pem" --tlsv1.1 --tls-max 1.1 "$ep/vnflcm/v1/api_versions"
req GET /vnflcm/v1/api_versions
check "... and the daemon still serves TLS 1.2+" test "$code" = 200
code=$(curl -s --cacert "$T_DIR/ca.pem" -o "$T_DIR/body" -w '%{http_code}' "$ep/vnflcm/v1/vnf_instances")
is_code "HTTPS without credentials" 401
req POST /vnflcm/v1/vnf_instances -H 'Content-Type: application/json' \
  --data-binary "{\"vnfdId\": \"$vnfd\", \"vnfInstanceName\": \"tls-1\"}"
is_code "create over HTTPS" 201
check "... Location is https" grep -q "^$ep/vnflcm/v1/vnf_instances/" <<<"$(header Location)"
inst=$(field 'd["id"]')
check "... links are https" test "$(field 'd["_links"]["self"]["href"]')" = "$ep/vnflcm/v1/vnf_instances/$inst"

osc() {  # the client over HTTPS with the test's CA, a clean environment
  env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_TYPE=admin_token OS_TOKEN="$token" OS_ENDPOINT="$ep" \
    OS_CACERT="$T_DIR/ca.pem" timeout 60 openstack "$@"
}
check "openstack vnflcm list over HTTPS (OS_CACERT)" osc vnflcm list -f value -c ID
has "... lists the instance" "$T_DIR/check.out" -x "$inst"
check_exit "openstack without the CA fails" 1 env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_TYPE=admin_token \
  OS_TOKEN="$token" OS_ENDPOINT="$ep" timeout 60 openstack vnflcm list
has "... on the certificate" "$T_ERR" -i 'certificate'

# --- /vnflcm/v2
req GET /vnflcm/v2/api_versions
is_code "v2 api_versions (no Version needed)" 200
check "... uriPrefix /vnflcm/v2, 2.0.0" test "$(field 'd["uriPrefix"] + " " + d["apiVersions"][0]["version"]')" = "/vnflcm/v2 2.0.0"
req GET /vnflcm/api_versions
check "/vnflcm/api_versions lists 1.3.0 and 2.0.0" test "$(field '[a["version"] for a in d["apiVersions"]]')" = "['1.3.0', '2.0.0']"
req GET /vnflcm/v2/vnf_instances
is_code "v2 without a Version header" 400
check "... saying so" grep -q 'Version header' "$T_DIR/body"
req GET /vnflcm/v2/vnf_instances -H 'Version: 1.3.0'
is_code "v2 with Version 1.3.0" 406
req GET /vnflcm/v2/vnf_instances -H 'Version: 2.0.0'
is_code "v2 list" 200
check "... answers Version 2.0.0" test "$(header Version)" = 2.0.0
check "... the instance, its links under /vnflcm/v2" test "$(field 'd[0]["_links"]["self"]["href"]')" = "$ep/vnflcm/v2/vnf_instances/$inst"

osc2() { osc --os-tacker-api-version 2 "$@"; }
cat >"$T_DIR/inst.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$T_DIR/vnfs", "nodes": ["n1"]}}
EOF
# v2's instantiate names its VIM in a map (SOL003 3.x); a VIM registered, never contacted.
printf 'pw\n' >"$T_DIR/vim-pw"
chmod 600 "$T_DIR/vim-pw"
vim=$("$v" vim register --name v2-vim --auth-url http://127.0.0.1:1/v3 --username u \
  --password-file "$T_DIR/vim-pw" --project p) || die "vim register"
# The work folder in the request's extensions (SOL003: they go into the instance), so the
# later operations find it there: the client's terminate cannot send additionalParams.
cat >"$T_DIR/inst2.json" <<EOF
{"flavourId": "simple", "extensions": {"work_dir": "$T_DIR/vnfs"}, "additionalParams": {"nodes": ["n1", "n2"]},
 "vimConnectionInfo": {"vim1": {"vimId": "$vim", "vimType": "ETSINFV.OPENSTACK_KEYSTONE.V_3"}}}
EOF
check "openstack v2 vnflcm create" osc2 vnflcm create "$vnfd" --name v2-1 -f value -c ID
inst2=$(cat "$T_DIR/check.out")
check "openstack v2 vnflcm instantiate" osc2 vnflcm instantiate "$inst2" "$T_DIR/inst2.json"
has "... accepted" "$T_DIR/check.out" "Instantiate request for VNF Instance $inst2 has been accepted."
inst2_is() { osc2 vnflcm show "$inst2" -f value -c 'Instantiation State' 2>/dev/null | grep -qx "$1"; }
check "... the daemon instantiates it (v2 show)" wait_until 60 inst2_is INSTANTIATED
req GET "/vnflcm/v2/vnf_instances/$inst2" -H 'Version: 2.0.0'
check "v2 show: vimConnectionInfo is a map by id" test "$(field 'sorted(d["vimConnectionInfo"].items())[0][1]["vimId"]')" = "$vim"
req GET "/vnflcm/v1/vnf_instances/$inst2"
check "v1 show of the same: a list" test "$(field 'd["vimConnectionInfo"][0]["vimId"]')" = "$vim"
check "openstack v2 vnflcm op list --filter" osc2 vnflcm op list --filter "(eq,vnfInstanceId,$inst2)" -f value -c 'Operation State' -c Operation
has "... COMPLETED INSTANTIATE" "$T_DIR/check.out" -x "COMPLETED INSTANTIATE"
check "openstack v2 vnflcm list" osc2 vnflcm list -f value -c ID
has "... both instances" "$T_DIR/check.out" -x "$inst2"
check "... its files in the work folder of its extensions" test -f "$T_DIR/vnfs/$inst2/n1.conf"
has "... each node's file with its position in the list (the fan-out's index)" \
  "$T_DIR/vnfs/$inst2/n1.conf" '^node=n1 index=0 port='
has "... the second node's, index 1" "$T_DIR/vnfs/$inst2/n2.conf" '^node=n2 index=1 port='
req GET "/vnflcm/v2/vnf_instances/$inst2" -H 'Version: 2.0.0'
check "... which the instance records" test "$(field 'd["extensions"]["work_dir"]')" = "$T_DIR/vnfs"
check "... with the VNFD's own version (vnfdVersion)" test "$(field 'd["vnfdVersion"]')" = 1.0
# A scale with no additionalParams: the hook reads the folder from the instance.
req POST "/vnflcm/v2/vnf_instances/$inst2/scale" -H 'Version: 2.0.0' -H 'Content-Type: application/json' \
  --data-binary '{"type": "SCALE_OUT", "aspectId": "node_aspect"}'
is_code "v2 scale" 202
check "... Location under /vnflcm/v2" grep -q "^$ep/vnflcm/v2/vnf_lcm_op_occs/" <<<"$(header Location)"
top=$(header Location)
top_done() {
  req GET "/vnflcm/v2/vnf_lcm_op_occs/${top##*/}" -H 'Version: 2.0.0'
  [[ $(field 'd["operationState"]') == COMPLETED ]]
}
check "... the daemon scales it" wait_until 60 top_done
check "... its hook wrote to the instance's folder" grep -qx "node_aspect 1" "$T_DIR/vnfs/$inst2/scale.log"
check "openstack v2 vnflcm terminate (unmodified: no additionalParams)" \
  osc2 vnflcm terminate "$inst2" --termination-type FORCEFUL
has "... accepted" "$T_DIR/check.out" "Terminate request for VNF Instance"
# The built-in release commits NOT_INSTANTIATED before terminate_end runs: wait for the op.
terminated() {
  osc2 vnflcm op list --filter "(eq,vnfInstanceId,$inst2)" -f value -c 'Operation State' \
    -c Operation 2>/dev/null | grep -qx "COMPLETED TERMINATE"
}
check "... the daemon terminates it (v2 op list: COMPLETED TERMINATE)" wait_until 60 terminated
check "... NOT_INSTANTIATED (v2 show)" inst2_is NOT_INSTANTIATED
check "... and its hook removed the instance's folder" test ! -e "$T_DIR/vnfs/$inst2"
check "openstack v2 vnflcm delete" osc2 vnflcm delete "$inst2"
req GET "/vnflcm/v2/vnf_instances/$inst2" -H 'Version: 2.0.0'
is_code "... gone" 404

# --- cancel: the instance's configure step reads a FIFO and so waits until it is written
mkdir -p "$T_DIR/vnfs/$inst"
mkfifo "$T_DIR/vnfs/$inst/n1.conf"
req POST "/vnflcm/v1/vnf_instances/$inst/instantiate" -H 'Content-Type: application/json' \
  --data-binary @"$T_DIR/inst.json"
is_code "instantiate (held by the FIFO)" 202
op=$(header Location)
op=${op##*/}
processing() {
  req GET "/vnflcm/v1/vnf_lcm_op_occs/$op"
  [[ $(field 'd["operationState"]') == PROCESSING ]]
}
check "... PROCESSING" wait_until 20 processing
check "... with a cancel link" test "$(field 'd["_links"]["cancel"]["href"]')" = "$ep/vnflcm/v1/vnf_lcm_op_occs/$op/cancel"
req POST "/vnflcm/v1/vnf_lcm_op_occs/$op/cancel" -H 'Content-Type: application/json' --data-binary '{"cancelMode": "SOFT"}'
is_code "cancel with a bad cancelMode" 400
req POST "/vnflcm/v1/vnf_lcm_op_occs/$op/cancel" -H 'Content-Type: application/json' --data-binary '{"cancelMode": "GRACEFUL"}'
is_code "cancel of a PROCESSING operation" 202
check "... an empty body" test ! -s "$T_DIR/body"
check "... Location of the operation" test "$(header Location)" = "$ep/vnflcm/v1/vnf_lcm_op_occs/$op"
echo >"$T_DIR/vnfs/$inst/n1.conf" &  # the held step returns
stopped() {
  req GET "/vnflcm/v1/vnf_lcm_op_occs/$op"
  case $(field 'd["operationState"]') in FAILED_TEMP | FAILED | ROLLED_BACK) return 0 ;; esac
  return 1
}
check "... the operation stops short of COMPLETED" wait_until 60 stopped
state=$(field 'd["operationState"]')
req POST "/vnflcm/v1/vnf_lcm_op_occs/$op/cancel"
is_code "cancel of a $state operation" 409
check "... saying only STARTING or PROCESSING can be" grep -q 'STARTING or PROCESSING' "$T_DIR/body"
req POST "/vnflcm/v1/vnf_lcm_op_occs/no-such-op/cancel"
is_code "cancel of an unknown operation" 404
req POST "/vnflcm/v2/vnf_lcm_op_occs/$op/cancel" -H 'Version: 2.0.0'
is_code "no cancel in v2" 404
check_exit "openstack vnflcm op cancel of a stopped operation fails" 1 osc vnflcm op cancel "$op"
has "... with the engine's reason" "$T_ERR" 'STARTING or PROCESSING'
hasnt "the token is not logged" "$T_DIR/daemon.log" -F "$token"

# --- SIGHUP: the credentials file and the TLS files read again; nothing else stops
t_tls_server "$T_DIR" 2 || die "openssl could not make the second certificate"
old_token=$token
token=t2-$RANDOM$RANDOM$RANDOM
list_with() {  # list_with CA TOKEN: the status of a list over HTTPS trusting CA
  curl -s --cacert "$1" -o /dev/null -w '%{http_code}' -H "X-Auth-Token: $2" "$ep/vnflcm/v1/vnf_instances"
}
# A credentials file others may read is refused: the old credentials stay.
printf 'token %s\n' "$token" >"$T_DIR/auth"
chmod 644 "$T_DIR/auth"
kill -HUP "$daemon_pid"
check "a reload with a credentials file others can read is refused" \
  wait_until 10 grep -q 'reload refused' "$T_DIR/daemon.log"
check "... the old token still serves" test "$(list_with "$T_DIR/ca.pem" "$old_token")" = 200
check "... the daemon runs on" kill -0 "$daemon_pid"
# Good credentials but a key that is not the certificate's: refused whole, the old
# credentials serve on.
chmod 600 "$T_DIR/auth"
cp "$T_DIR/other.key" "$T_DIR/server.key"
kill -HUP "$daemon_pid"
refusals() { [[ $(grep -c 'reload refused' "$T_DIR/daemon.log") -ge 2 ]]; }
check "a reload with a key that is not the certificate's is refused" wait_until 10 refusals
check "... the old token still serves (all or nothing)" test "$(list_with "$T_DIR/ca.pem" "$old_token")" = 200
check "... the new one does not yet" test "$(list_with "$T_DIR/ca.pem" "$token")" = 401
# New credentials and a new certificate, in place.
cp "$T_DIR/server2.pem" "$T_DIR/server.pem"
cp "$T_DIR/server2.key" "$T_DIR/server.key"
chmod 600 "$T_DIR/server.key"
kill -HUP "$daemon_pid"
check "SIGHUP reloads the credentials and the certificate" \
  wait_until 10 grep -q 'api: reloaded the credentials file and the TLS certificate and key' "$T_DIR/daemon.log"
check "... the new certificate (another CA) and the new token serve" \
  test "$(list_with "$T_DIR/ca2.pem" "$token")" = 200
check "... the old token no longer does" test "$(list_with "$T_DIR/ca2.pem" "$old_token")" = 401
check_not "... nor does the old CA" curl -sS -o /dev/null --cacert "$T_DIR/ca.pem" "$ep/vnflcm/v1/api_versions"
hasnt "... no token in the log" "$T_DIR/daemon.log" -F "$token"

kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "the daemon stopped on SIGTERM" test $? -eq 0
daemon_pid=
t_finish
