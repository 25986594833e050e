#!/usr/bin/env bash
# The REST API with real parts: the daemon serving --listen on 127.0.0.1, a temporary
# database with the local demo onboarded by the CLI, curl as the client. Status codes,
# headers and bodies are checked; every /vnflcm/v1 and /vnfpkgm/v1 body is validated
# against ETSI's conformance schemas (../shared/etsi-schemas) with Debian's
# python3-jsonschema; bad requests get a 4xx ProblemDetails and change nothing.
#   tests/api/api_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init api "$1"
root=$2
v=$T_VNFLOW
schemas=$root/../shared/etsi-schemas
lcm_schemas=$schemas/SOL003/VNFLifecycleManagement-API
pkg_schemas=$schemas/SOL005/VNFPackageManagement-API
validate=$root/tests/api/validate.py
[[ -d $lcm_schemas ]] || die "the ETSI schemas are missing ($schemas)"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null ||
  die "Debian's python3-jsonschema is missing (tools/install-deps.sh)"
command -v curl >/dev/null || die "curl is missing (tools/install-deps.sh)"

export VNFLOW_DB=$T_DIR/db/vnflow.db
mkdir -p "$T_DIR/db" "$T_DIR/vnfs"
chmod 700 "$T_DIR/db"
daemon_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill -9 "$daemon_pid" 2>/dev/null
}
T_ON_DIE='t_show "$T_DIR/daemon.log" 30'

port=$(/usr/bin/python3 "$root/tests/api/free_port.py")
[[ -n $port ]] || die "no free port"
ep=http://127.0.0.1:$port
token=t-$RANDOM$RANDOM$RANDOM
printf '# test credentials\ntoken %s\nbasic alice:pa:ss\n' "$token" >"$T_DIR/auth"
chmod 600 "$T_DIR/auth"

pkg=$("$v" package onboard "$root/csar-samples/local-demo") || die "onboard local-demo"
vnfd=3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c
cli_inst=$("$v" instance create --package "$pkg" --name from-cli) || die "instance create"

# --- options refused before anything is served
check_exit "--auth none on a non-loopback address is a usage error" 2 \
  "$v" daemon --listen 0.0.0.0:$port --auth none
has "... saying why" "$T_ERR" 'only allowed on a loopback address'
check_exit "--listen without credentials is a usage error" 2 "$v" daemon --listen $port
has "... naming --auth-file" "$T_ERR" -- '--auth-file'
chmod 644 "$T_DIR/auth"
check_exit "an auth file others can read is refused" 2 "$v" daemon --listen $port --auth-file "$T_DIR/auth"
chmod 600 "$T_DIR/auth"
check_exit "a bad --listen is a usage error" 2 "$v" daemon --listen 127.0.0.1:99999 --auth none

# --poll-ms 60000: an operation the API queues starts because the API wakes the daemon,
# not because the daemon polled (the checks below wait seconds, not a minute).
"$v" daemon --listen 127.0.0.1:$port --auth-file "$T_DIR/auth" --api-page-size 2 --poll-ms 60000 \
  >"$T_DIR/daemon.log" 2>&1 &
daemon_pid=$!
up() { curl -s -o /dev/null "$ep/vnflcm/v1/api_versions"; }
wait_until 20 up || die "the API did not come up on $ep"
ok "the daemon serves the API on $ep"

# req METHOD PATH [curl args...]: $code, the body in $T_DIR/body, headers in $T_DIR/headers
req() {
  local m=$1 p=$2
  shift 2
  code=$(curl -s -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' -X "$m" \
    -H "X-Auth-Token: $token" "$@" "$ep$p")
}
json_req() {  # json_req METHOD PATH JSON
  req "$1" "$2" -H 'Content-Type: application/json' --data-binary "$3"
}
is_code() { check "$1: HTTP $2" test "$code" = "$2"; }
header() { tr -d '\r' <"$T_DIR/headers" | awk -v h="$1" 'tolower($1) == tolower(h) ":" {sub(/^[^:]*: */, ""); print}'; }
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T_DIR/body" "$1"; }
valid() {  # valid WHAT SCHEMA_FILE: the last body against a schema
  check "$1 matches ${2##*/}" /usr/bin/python3 "$validate" "$2" "$T_DIR/body"
}
problem() {  # problem WHAT STATUS: the last answer is a ProblemDetails of STATUS
  is_code "$1" "$2"
  check "$1: application/problem+json" test "$(header Content-Type)" = application/problem+json
  valid "$1: ProblemDetails" "$lcm_schemas/ProblemDetails.schema.json"
  check "$1: status $2 in the body" test "$(field 'd["status"]')" = "$2"
}

# --- authentication
code=$(curl -s -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' "$ep/vnflcm/v1/vnf_instances")
problem "no credentials" 401
code=$(curl -s -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' -H "X-Auth-Token: x$token" \
  "$ep/vnflcm/v1/vnf_instances")
problem "a wrong token" 401
code=$(curl -s -o "$T_DIR/body" -w '%{http_code}' -H "Authorization: Bearer $token" \
  "$ep/vnflcm/v1/vnf_instances")
is_code "a bearer token" 200
code=$(curl -s -o "$T_DIR/body" -w '%{http_code}' -u 'alice:pa:ss' "$ep/vnflcm/v1/vnf_instances")
is_code "basic credentials" 200
code=$(curl -s -o "$T_DIR/body" -w '%{http_code}' -u 'alice:wrong' "$ep/vnflcm/v1/vnf_instances")
is_code "wrong basic credentials" 401
hasnt "the token is not logged" "$T_DIR/daemon.log" -F "$token"

# --- api_versions
req GET /vnflcm/v1/api_versions
is_code "api_versions" 200
valid "api_versions" "$lcm_schemas/ApiVersionInformation.schema.json"
check "api_versions: uriPrefix" test "$(field 'd["uriPrefix"]')" = /vnflcm/v1
check "api_versions: Version header" test "$(header Version)" = 1.3.0
req GET /vnflcm/api_versions
valid "/vnflcm/api_versions" "$lcm_schemas/ApiVersionInformation.schema.json"

# --- packages
req GET /vnfpkgm/v1/vnf_packages
is_code "package list" 200
valid "package list" "$pkg_schemas/vnfPkgsInfo.schema.json"
check "the package is listed, in use" test "$(field '[p["usageState"] for p in d if p["id"] == "'"$pkg"'"]')" = "['IN_USE']"
req GET "/vnfpkgm/v1/vnf_packages/$pkg"
is_code "package show" 200
valid "package show" "$pkg_schemas/vnfPkgInfo.schema.json"
check "package show: ONBOARDED, the VNFD id" test "$(field 'd["onboardingState"] + " " + d["vnfdId"]')" = "ONBOARDED $vnfd"
req GET "/vnfpkgm/v1/vnf_packages?filter=(eq,vnfProductName,'Local%20demo')&all_fields"
check "package filter on a quoted value" test "$(field 'len(d)')" = 1
valid "package list, all_fields" "$pkg_schemas/vnfPkgsInfo.schema.json"

# --- instances
json_req POST /vnflcm/v1/vnf_instances '{"vnfdId":"'$vnfd'","vnfInstanceName":"api-1","vnfInstanceDescription":"made over HTTP"}'
is_code "instance create" 201
valid "instance create" "$lcm_schemas/vnfInstance.schema.json"
inst=$(field 'd["id"]')
check "create: Location names the instance" test "$(header Location)" = "$ep/vnflcm/v1/vnf_instances/$inst"
"$v" instance show "$inst" >"$T_DIR/show" 2>&1
has "the CLI shows the instance made over HTTP" "$T_DIR/show" api-1
json_req POST /vnflcm/v1/vnf_instances '{"vnfdId":"'$vnfd'","vnfInstanceName":"api-2"}'
is_code "a second instance" 201
req GET "/vnflcm/v1/vnf_instances/$cli_inst"
is_code "show of the CLI's instance" 200
valid "instance show" "$lcm_schemas/vnfInstance.schema.json"
check "show: NOT_INSTANTIATED, the instantiate link" \
  test "$(field 'd["instantiationState"] + " " + d["_links"]["instantiate"]["href"]')" = \
  "NOT_INSTANTIATED $ep/vnflcm/v1/vnf_instances/$cli_inst/instantiate"

# Paging: 3 instances, 2 a page; the Link carries the filter and the selector.
req GET "/vnflcm/v1/vnf_instances?filter=(neq,vnfInstanceName,nosuch)&fields=metadata"
is_code "instance list, page 1" 200
valid "instance list, page 1" "$lcm_schemas/vnfInstances.schema.json"
check "page 1 holds 2" test "$(field 'len(d)')" = 2
link=$(header Link)
check "a Link rel=next" grep -q '^<http://127.0.0.1:'$port'/vnflcm/v1/vnf_instances?.*>; rel="next"$' <<<"$link"
check "the Link carries the filter and fields" grep -q 'filter=%28neq%2CvnfInstanceName%2Cnosuch%29&fields=metadata&nextpage_opaque_marker=' <<<"$link"
next=${link#<}
next=${next%%>*}
code=$(curl -s -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' -H "X-Auth-Token: $token" "$next")
is_code "instance list, page 2" 200
check "page 2 holds the last one" test "$(field 'len(d)')" = 1
check "... and no Link" test -z "$(header Link)"
req GET "/vnflcm/v1/vnf_instances?filter=(cont,vnfInstanceName,api-)"
check "a filter over the whole list" test "$(field 'sorted(i["vnfInstanceName"] for i in d)')" = "['api-1', 'api-2']"

# --- instantiate: the engine's request path, run by the daemon
cat >"$T_DIR/inst.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$T_DIR/vnfs", "nodes": ["n1", "n2"]}}
EOF
req POST "/vnflcm/v1/vnf_instances/$inst/instantiate" -H 'Content-Type: application/json' \
  --data-binary @"$T_DIR/inst.json"
is_code "instantiate" 202
check "instantiate: an empty body" test ! -s "$T_DIR/body"
loc=$(header Location)
check "instantiate: Location of the op occurrence" grep -q "^$ep/vnflcm/v1/vnf_lcm_op_occs/[0-9a-f-]*$" <<<"$loc"
op=${loc##*/}
op_done() {
  curl -s -H "X-Auth-Token: $token" "$ep/vnflcm/v1/vnf_lcm_op_occs/$op" | grep -q '"operationState":"COMPLETED"'
}
check "the operation completes within 10 s (woken by the API, not the 60 s poll)" wait_until 10 op_done
req GET "/vnflcm/v1/vnf_lcm_op_occs/$op"
valid "op show" "$lcm_schemas/VnfLcmOpOcc.schema.json"
check "op show: INSTANTIATE of the instance" test "$(field 'd["operation"] + " " + d["vnfInstanceId"]')" = "INSTANTIATE $inst"
req GET "/vnflcm/v1/vnf_instances/$inst"
valid "instantiated instance" "$lcm_schemas/vnfInstance.schema.json"
check "the instance is INSTANTIATED with flavour simple" \
  test "$(field 'd["instantiationState"] + " " + d["instantiatedVnfInfo"]["flavourId"]')" = "INSTANTIATED simple"
check "the CLI sees the operation COMPLETED" test "$(op_state "$op")" = COMPLETED
req POST "/vnflcm/v1/vnf_instances/$inst/instantiate" -H 'Content-Type: application/json' \
  --data-binary @"$T_DIR/inst.json"
problem "instantiate of an INSTANTIATED instance" 409
req DELETE "/vnflcm/v1/vnf_instances/$inst"
problem "delete of an INSTANTIATED instance" 409

# --- op occurrences: filters, selectors (the client's exclude-fields too)
req GET "/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,vnfInstanceId,$inst);(in,operation,INSTANTIATE,SCALE)"
is_code "op list, filtered" 200
valid "op list" "$lcm_schemas/VnfLcmOpOccs.schema.json"
check "op list: the one operation" test "$(field '[o["id"] for o in d]')" = "['$op']"
req GET "/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,operationState,FAILED_TEMP)"
check "op list: no FAILED_TEMP operation" test "$(field 'len(d)')" = 0
req GET "/vnflcm/v1/vnf_lcm_op_occs?exclude-fields=operationParams"
check "exclude-fields drops operationParams" test "$(field '"operationParams" in d[0]')" = False
req GET "/vnflcm/v1/vnf_lcm_op_occs"
check "a plain op list keeps operationParams" test "$(field '"operationParams" in d[0]')" = True

# --- delete of an instance never instantiated
req DELETE "/vnflcm/v1/vnf_instances/$cli_inst"
is_code "delete" 204
req GET "/vnflcm/v1/vnf_instances/$cli_inst"
problem "show of a deleted instance" 404

# --- bad requests: the right 4xx, a ProblemDetails, nothing changed
before=$("$v" instance list --json | md5sum)$("$v" op list --json | md5sum)
big=$T_DIR/big.json
/usr/bin/python3 -c 'import sys; sys.stdout.write("{\"vnfdId\":\"" + "x" * (2 << 20) + "\"}")' >"$big"
deep=$T_DIR/deep.json
/usr/bin/python3 -c 'import sys; sys.stdout.write("[" * 100000)' >"$deep"
long=$T_DIR/long.json
/usr/bin/python3 -c 'import sys; sys.stdout.write("{\"vnfdId\":\"'$vnfd'\",\"vnfInstanceName\":\"" + "n" * 900000 + "\"}")' >"$long"
I=/vnflcm/v1/vnf_instances
O=/vnflcm/v1/vnf_lcm_op_occs
P=/vnfpkgm/v1/vnf_packages
J='Content-Type: application/json'
# STATUS METHOD PATH [curl args...]
while IFS='|' read -r status method path args; do
  [[ -z $status || $status == \#* ]] && continue
  eval "extra=($args)"
  req "$method" "$path" "${extra[@]}"
  problem "$method ${path:0:70} ${args:0:40}" "$status"
  [[ $code == 5* ]] && bad "a 5xx for $method $path"
done <<EOF
404|GET|/
404|GET|/vnflcm/v1
404|GET|/vnflcm/v3/vnf_instances
404|GET|/vnflcm/v1/nothing
404|GET|$I/nosuch
404|GET|$I/$(printf 'x%.0s' {1..300})
404|GET|$I/%2e%2e%2f%2e%2e%2fetc%2fpasswd
404|GET|$P/../../etc/passwd|--path-as-is
404|GET|$O/nosuch
404|GET|$P/nosuch
404|GET|$I/$inst/nosuchtask
404|POST|$I/nosuch/instantiate|-H '$J' --data-binary @$T_DIR/inst.json
404|POST|$O/nosuch/retry
405|PUT|$I
405|PATCH|$O
405|DELETE|$P
405|POST|/vnflcm/v1/api_versions
405|GET|$I/$inst/terminate
405|POST|$P/$pkg
400|GET|$I?filter=(eq,a
400|GET|$I?filter=(xx,a,b)
400|GET|$I?filter=(eq,a,b,c)
400|GET|$I?filter=(eq,a//b,c)
400|GET|$I?filter=(eq,a,'open)
400|GET|$I?filter
400|GET|$I?filter=%zz
400|GET|$I?filter=$(printf '(eq,a,b);%.0s' {1..40})(eq,a,b)
400|GET|$I?unknown=1
400|GET|$I?all_fields&fields=a
400|GET|$I?fields=a&exclude_fields=b
400|GET|$I?exclude_fields=a&exclude-fields=b
400|GET|$I?nextpage_opaque_marker=nosuch
400|GET|$O?filter=(eq,operationState)
400|GET|$P?fields=a,,b
400|GET|$I?a=1&a=2
400|POST|$I|-H '$J' --data-binary '{'
400|POST|$I|-H '$J' --data-binary '[]'
400|POST|$I|-H '$J' --data-binary '{}'
400|POST|$I|-H '$J' --data-binary '{"vnfdId":5}'
400|POST|$I|-H '$J' --data-binary '{"vnfdId":"$vnfd","bogus":1}'
400|POST|$I|-H '$J' --data-binary '{"vnfdId":"$vnfd","vnfInstanceName":["x"]}'
400|POST|$I|-H '$J' --data-binary @$deep
400|POST|$I|-H '$J' --data-binary @$long
400|POST|$I/$inst/terminate|-H '$J' --data-binary '{"terminationType":"SOMETIMES"}'
400|POST|$I/$inst/scale|-H '$J' --data-binary '{"type":"SCALE_OUT"}'
400|POST|$I/$inst/heal|-H '$J' --data-binary '{"cause":5}'
422|POST|$I|-H '$J' --data-binary '{"vnfdId":"nosuch"}'
415|POST|$I|-H 'Content-Type: text/plain' --data-binary '{"vnfdId":"$vnfd"}'
413|POST|$I|-H '$J' --data-binary @$big
409|POST|$O/$op/retry
409|POST|$O/$op/rollback
409|POST|$O/$op/fail
431|GET|$I|-H "X-Big: $(printf 'a%.0s' {1..20000})"
EOF
after=$("$v" instance list --json | md5sum)$("$v" op list --json | md5sum)
check "the bad requests changed nothing" test "$before" = "$after"

# An unauthenticated request is refused after its header: a 60 MB Content-Length is not read.
check "401 before an unauthenticated body is read" /usr/bin/python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"PUT /vnfpkgm/v1/vnf_packages/x/package_content HTTP/1.1\r\nHost: h\r\n"
          b"Content-Type: application/zip\r\nContent-Length: 60000000\r\n\r\n")
answer = s.recv(4096).decode("latin-1")
sys.exit(0 if answer.startswith("HTTP/1.1 401") else 1)
PY

# --- python-tackerclient from Debian, unmodified (openstack vnflcm / vnf package)
command -v openstack >/dev/null && /usr/bin/python3 -c 'import tackerclient' 2>/dev/null ||
  die "Debian's python3-openstackclient and python3-tackerclient are missing (tools/install-deps.sh)"
osc() {  # a clean environment: no caller OS_* variables, no clouds.yaml
  env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_TYPE=admin_token OS_TOKEN="$token" OS_ENDPOINT="$ep" \
    timeout 60 openstack "$@"
}
check "openstack vnflcm list" osc vnflcm list -f value -c ID
has "... lists the instance made over HTTP" "$T_DIR/check.out" -x "$inst"
check "openstack vnflcm show" osc vnflcm show "$inst" -f value -c 'Instantiation State'
has "... INSTANTIATED" "$T_DIR/check.out" -x INSTANTIATED
check "openstack vnflcm create" osc vnflcm create "$vnfd" --name osc-1 --description by-osc -f value -c ID
inst3=$(cat "$T_DIR/check.out")
req GET "/vnflcm/v1/vnf_instances/$inst3"
check "... a new instance, NOT_INSTANTIATED" test "$(field 'd["vnfInstanceName"] + " " + d["instantiationState"]')" = "osc-1 NOT_INSTANTIATED"
check "openstack vnflcm instantiate" osc vnflcm instantiate "$inst3" "$T_DIR/inst.json"
has "... accepted" "$T_DIR/check.out" "Instantiate request for VNF Instance $inst3 has been accepted."
inst3_done() {
  req GET "/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,vnfInstanceId,$inst3);(eq,operationState,COMPLETED)"
  [[ $(field 'len(d)') == 1 ]]
}
check "... the daemon completes it" wait_until 60 inst3_done
op3=$(field 'd[0]["id"]')
check "openstack vnflcm op list --filter" osc vnflcm op list --filter "(eq,vnfInstanceId,$inst3)" -f value -c 'Operation State' -c Operation
has "... COMPLETED INSTANTIATE" "$T_DIR/check.out" -x "COMPLETED INSTANTIATE"
check "openstack vnflcm op show" osc vnflcm op show "$op3" -f value -c 'VNF Instance ID'
has "... of the instance" "$T_DIR/check.out" -x "$inst3"
check_exit "openstack vnflcm instantiate of an INSTANTIATED instance fails" 1 osc vnflcm instantiate "$inst3" "$T_DIR/inst.json"
has "... with the engine's reason" "$T_ERR" "is already INSTANTIATED"
check_exit "openstack vnflcm op fail of a COMPLETED operation fails" 1 osc vnflcm op fail "$op3"
has "... saying it needs FAILED_TEMP" "$T_ERR" "FAILED_TEMP"
printf '{"vnfInstanceName": "osc-renamed", "vnfInstanceDescription": "changed"}' >"$T_DIR/mod.json"
check "openstack vnflcm update (PATCH, modify_info)" osc vnflcm update "$inst3" --I "$T_DIR/mod.json"
has "... accepted" "$T_DIR/check.out" "Update vnf:$inst3"
renamed() {
  req GET "/vnflcm/v1/vnf_instances/$inst3"
  [[ $(field 'd["vnfInstanceName"] + " " + d.get("vnfInstanceDescription", "")') == "osc-renamed changed" ]]
}
check "... the daemon renames the instance" wait_until 60 renamed
req PATCH "/vnflcm/v1/vnf_instances/$inst3" -H 'Content-Type: application/merge-patch+json' \
  --data-binary '{"vnfInstanceName": "merged"}'
is_code "PATCH as application/merge-patch+json" 202
check "openstack vnf package list" osc vnf package list -f value -c Id -c 'Onboarding State'
has "... the package, ONBOARDED" "$T_DIR/check.out" -x "$pkg ONBOARDED"
check "openstack vnf package show" osc vnf package show "$pkg" -f value -c 'Usage State'
has "... IN_USE" "$T_DIR/check.out" -x IN_USE
check "openstack with http_basic credentials" env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_TYPE=http_basic \
  OS_USERNAME=alice OS_PASSWORD=pa:ss OS_ENDPOINT="$ep" timeout 60 openstack vnflcm list -f value -c ID
check_exit "openstack with a wrong token fails" 1 env -i PATH="$PATH" HOME="$T_DIR" \
  OS_AUTH_TYPE=admin_token OS_TOKEN=wrong OS_ENDPOINT="$ep" timeout 60 openstack vnflcm list

# The daemon still serves, then drains on SIGTERM.
req GET /vnflcm/v1/api_versions
is_code "still serving after the bad requests" 200
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "the daemon stopped on SIGTERM" test $? -eq 0
daemon_pid=
t_finish
