#!/usr/bin/env bash
# SOL005 package management over the REST API with real parts (docs/api.md): the daemon
# serving --listen on 127.0.0.1 with a temporary database, curl and Debian's
# python3-tackerclient (`openstack vnf package ...`, unmodified) as clients, packages zipped
# and signed by the test (zip, openssl cms), an HTTP server of the test's own on 127.0.0.1
# for upload_from_uri. Every /vnfpkgm/v1 body is validated against ETSI's conformance
# schemas; hostile requests get a 4xx ProblemDetails and change nothing. Then the local
# demo's lifecycle from an uploaded package, and a daemon that requires signatures.
#   tests/api/packages_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init api_packages "$1"
root=$2
v=$T_VNFLOW
schemas=$root/../shared/etsi-schemas
pkg_schemas=$schemas/SOL005/VNFPackageManagement-API
validate=$root/tests/api/validate.py
sample=$root/csar-samples/local-demo
[[ -d $pkg_schemas ]] || die "the ETSI schemas are missing ($schemas)"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null ||
  die "Debian's python3-jsonschema is missing (tools/install-deps.sh)"
for tool in curl zip openssl; do
  command -v $tool >/dev/null || die "$tool is missing (tools/install-deps.sh)"
done
command -v openstack >/dev/null && /usr/bin/python3 -c 'import tackerclient' 2>/dev/null ||
  die "Debian's python3-openstackclient and python3-tackerclient are missing (tools/install-deps.sh)"

export VNFLOW_DB=$T_DIR/db/vnflow.db
mkdir -p "$T_DIR/db" "$T_DIR/vnfs" "$T_DIR/www"
chmod 700 "$T_DIR/db"
daemon_pid=
www_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill -9 "$daemon_pid" 2>/dev/null
  [[ -n $www_pid ]] && kill -9 "$www_pid" 2>/dev/null
}
T_ON_DIE='t_show "$T_DIR/daemon.log" 30'

free_port() { /usr/bin/python3 "$root/tests/api/free_port.py"; }
port=$(free_port)
[[ -n $port ]] || die "no free port"
ep=http://127.0.0.1:$port
P=/vnfpkgm/v1/vnf_packages
token=t-$RANDOM$RANDOM$RANDOM
printf 'token %s\n' "$token" >"$T_DIR/auth"
chmod 600 "$T_DIR/auth"

# --- packages made by the test: zips of the local demo that differ only in their zip
# comment (the same files, another digest), a broken one, signed ones.
variant() {  # variant NAME [FOLDER]: $T_DIR/NAME.zip
  (cd "${2:-$sample}" && zip -q -r -X "$T_DIR/$1.zip" . && echo "$1" | zip -q -z "$T_DIR/$1.zip") ||
    die "zip $1"
}
for n in first osc fromfile fromhttp unsigned; do variant $n; done
rm -rf "$T_DIR/broken-src"
cp -r "$sample" "$T_DIR/broken-src"
printf 'this: [is not\n' >>"$T_DIR/broken-src/Definitions/local_demo_df_simple.yaml"
variant broken "$T_DIR/broken-src"

# --- options refused before anything is served
check_exit "--require-signature without --trust is a usage error" 2 \
  "$v" daemon --listen $port --auth none --require-signature
has "... saying it needs --trust" "$T_ERR" -- '--require-signature needs --trust'
check_exit "--trust without --listen is a usage error" 2 "$v" daemon --trust "$sample/local-demo.mf"
has "... naming --listen" "$T_ERR" -- 'need --listen or --api'

start_daemon() {  # start_daemon [OPTIONS...]
  "$v" daemon --listen 127.0.0.1:$port --auth-file "$T_DIR/auth" --poll-ms 60000 "$@" \
    >>"$T_DIR/daemon.log" 2>&1 &
  daemon_pid=$!
  up() { curl -s -o /dev/null "$ep/vnflcm/v1/api_versions"; }
  wait_until 20 up || die "the API did not come up on $ep"
}
stop_daemon() {
  kill -TERM "$daemon_pid"
  wait_pid "$daemon_pid" 30
  check "the daemon stopped on SIGTERM" test $? -eq 0
  daemon_pid=
}
start_daemon
ok "the daemon serves the API on $ep"

# req METHOD PATH [curl args...]: $code, the body in $T_DIR/body, headers in $T_DIR/headers
req() {
  local m=$1 p=$2
  shift 2
  code=$(curl -s --path-as-is -o "$T_DIR/body" -D "$T_DIR/headers" -w '%{http_code}' -X "$m" \
    -H "X-Auth-Token: $token" "$@" "$ep$p")
}
json_req() { req "$1" "$2" -H 'Content-Type: application/json' --data-binary "$3"; }
zip_put() { req PUT "$P/$1/package_content" -H 'Content-Type: application/zip' --data-binary @"$2"; }
is_code() { check "$1: HTTP $2" test "$code" = "$2"; }
header() { tr -d '\r' <"$T_DIR/headers" | awk -v h="$1" 'tolower($1) == tolower(h) ":" {sub(/^[^:]*: */, ""); print}'; }
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T_DIR/body" "$1"; }
valid() {  # valid WHAT SCHEMA: the last body against one of ETSI's SOL005 schemas
  check "$1 matches $2" /usr/bin/python3 "$validate" "$pkg_schemas/$2.schema.json" "$T_DIR/body"
}
problem() {  # problem WHAT STATUS: the last answer is a ProblemDetails of STATUS
  is_code "$1" "$2"
  check "$1: application/problem+json" test "$(header Content-Type)" = application/problem+json
  valid "$1: ProblemDetails" ProblemDetails
  check "$1: status $2 in the body" test "$(field 'd["status"]')" = "$2"
}
state_of() {  # state_of ID: "onboarding operational usage"
  req GET "$P/$1"
  field 'd["onboardingState"] + " " + d["operationalState"] + " " + d["usageState"]'
}
snapshot() { "$v" package list --json 2>/dev/null; curl -s -H "X-Auth-Token: $token" "$ep$P"; }

# --- create
json_req POST "$P" '{"userDefinedData": {"owner": "ci", "n": 1}}'
is_code "create" 201
valid "create" vnfPkgInfo
p1=$(field 'd["id"]')
check "create: Location of the package" test "$(header Location)" = "$ep$P/$p1"
check "create: CREATED DISABLED NOT_IN_USE" \
  test "$(field 'd["onboardingState"] + " " + d["operationalState"] + " " + d["usageState"]')" = \
  "CREATED DISABLED NOT_IN_USE"
check "create: the user data" test "$(field 'd["userDefinedData"]')" = "{'owner': 'ci', 'n': 1}"
check "create: no VNFD fields before onboarding" test "$(field '"vnfdId" in d or "checksum" in d')" = False
req GET "$P/$p1"
is_code "show a CREATED package" 200
valid "show" vnfPkgInfo
req GET "$P/$p1/package_content"
problem "content of a CREATED package" 409
req GET "$P/$p1/vnfd"
problem "VNFD of a CREATED package" 409

# --- bad uploads change nothing
zip_put "$p1" /dev/null
problem "an empty upload" 400
printf 'not a zip' >"$T_DIR/notzip"
zip_put "$p1" "$T_DIR/notzip"
problem "an upload that is not a zip" 400
has "... saying so" "$T_DIR/body" 'not a zip archive'
req PUT "$P/$p1/package_content" -H 'Content-Type: text/plain' --data-binary @"$T_DIR/first.zip"
problem "an upload as text/plain" 415
check "... the package is still CREATED" test "$(state_of "$p1")" = "CREATED DISABLED NOT_IN_USE"

# --- a package that does not load: back to CREATED with the located reason
zip_put "$p1" "$T_DIR/broken.zip"
is_code "upload of a broken package" 202
check "... an empty body" test ! -s "$T_DIR/body"
req GET "$P/$p1"
valid "a failed onboarding" vnfPkgInfo
check "... CREATED again" test "$(field 'd["onboardingState"]')" = CREATED
field 'd["onboardingFailureDetails"]["detail"]' >"$T_DIR/why"
has "... with the located diagnostic" "$T_DIR/why" 'local_demo_df_simple.yaml:[0-9]*:[0-9]*: error'
check "... as a ProblemDetails" test "$(field 'd["onboardingFailureDetails"]["status"]')" = 422
t_say "why the broken package was refused:"
t_show "$T_DIR/why" 4

# --- the real package onboards into the same resource
zip_put "$p1" "$T_DIR/first.zip"
is_code "upload of the local demo" 202
req GET "$P/$p1"
valid "an onboarded package" vnfPkgInfo
check "... ONBOARDED ENABLED NOT_IN_USE" test "$(state_of "$p1")" = "ONBOARDED ENABLED NOT_IN_USE"
req GET "$P/$p1"
vnfd=$(field 'd["vnfdId"]')
check "... the VNFD's id" test "$vnfd" = 3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c
check "... the SHA-256 of the upload" test "$(field 'd["checksum"]["hash"]')" = "$(sha256sum <"$T_DIR/first.zip" | cut -d' ' -f1)"
check "... no failure left" test "$(field '"onboardingFailureDetails" in d')" = False
check "... the user data kept" test "$(field 'd["userDefinedData"]["owner"]')" = ci
check "the CLI lists it" "$v" package list
has "... by id" "$T_DIR/check.out" "$p1"
zip_put "$p1" "$T_DIR/osc.zip"
problem "upload to an ONBOARDED package" 409

# --- downloads
req GET "$P/$p1/package_content" -H 'Accept: application/zip'
is_code "package content" 200
check "... exactly application/zip" test "$(header Content-Type)" = application/zip
check "... the bytes uploaded" cmp -s "$T_DIR/body" "$T_DIR/first.zip"
req GET "$P/$p1/vnfd" -H 'Accept: application/zip'
is_code "VNFD as application/zip" 200
check "... exactly application/zip" test "$(header Content-Type)" = application/zip
cp "$T_DIR/body" "$T_DIR/vnfd.zip"
check "... a valid zip" /usr/bin/python3 -m zipfile -t "$T_DIR/vnfd.zip"
/usr/bin/python3 -m zipfile -l "$T_DIR/vnfd.zip" >"$T_DIR/vnfd.list"
has "... with the top VNFD" "$T_DIR/vnfd.list" 'Definitions/local_demo_top.vnfd.yaml'
has "... and TOSCA.meta" "$T_DIR/vnfd.list" 'TOSCA-Metadata/TOSCA.meta'
hasnt "... and no workflow" "$T_DIR/vnfd.list" 'Workflows/'
req GET "$P/$p1/vnfd" -H 'Accept: text/plain'
problem "VNFD as text/plain when it is 3 files" 406
req GET "$P/$p1/vnfd" -H 'Accept: text/plain,application/zip'
check "VNFD with both types: the zip" test "$code $(header Content-Type)" = "200 application/zip"
req GET "$P/$p1/vnfd" -H 'Accept: application/json'
problem "VNFD as application/json" 406
req GET "$P/$p1/artifacts/Workflows/instantiate_end.yaml" -H 'Accept: application/json'
is_code "an artifact" 200
check "... its bytes" cmp -s "$T_DIR/body" "$sample/Workflows/instantiate_end.yaml"

# --- hostile and wrong requests: 4xx ProblemDetails, nothing changes
snapshot >"$T_DIR/before"
J='Content-Type: application/json'
while IFS='|' read -r want method path args; do
  [[ -z $want || $want == \#* ]] && continue
  eval "req $method \"$path\" $args"
  problem "$method $path" "$want"
done <<EOF
400|GET|$P/$p1/artifacts/../../../../etc/passwd
400|GET|$P/$p1/artifacts/Workflows/../../db/vnflow.db
400|GET|$P/$p1/artifacts/%2e%2e/%2e%2e/etc/passwd
400|GET|$P/$p1/artifacts/%2Fetc%2Fpasswd
400|GET|$P/$p1/artifacts/Workflows%2F..%2F..%2Fetc%2Fpasswd
400|GET|$P/$p1/artifacts/./TOSCA-Metadata/TOSCA.meta
404|GET|$P/$p1/artifacts/Workflows/nosuch.yaml
404|GET|$P/$p1/artifacts/etc/passwd
400|POST|$P|-H '$J' --data-binary '{"userDefinedData":'
400|POST|$P|-H '$J' --data-binary '[1, 2]'
400|POST|$P|-H '$J' --data-binary '{"userDefinedData": "x"}'
400|POST|$P|-H '$J' --data-binary '{"vnfdId": "x"}'
415|POST|$P|-H 'Content-Type: text/plain' --data-binary '{}'
400|PATCH|$P/$p1|-H '$J' --data-binary '{"operationalState": "MAYBE"}'
400|PATCH|$P/$p1|-H '$J' --data-binary '{"onboardingState": "CREATED"}'
400|PATCH|$P/$p1|-H '$J' --data-binary '{}'
400|PATCH|$P/$p1|-H '$J' --data-binary '{"userDefinedData": [1]}'
400|PATCH|$P/$p1|-H '$J' --data-binary 'not json'
409|PATCH|$P/$p1|-H '$J' --data-binary '{"operationalState": "ENABLED"}'
409|PATCH|$P/$p1|-H '$J' --data-binary '{"userDefinedData": {"owner": "ci"}}'
409|DELETE|$P/$p1
404|GET|$P/nosuch
404|PATCH|$P/nosuch|-H '$J' --data-binary '{"operationalState": "DISABLED"}'
404|DELETE|$P/nosuch
404|PUT|$P/nosuch/package_content|-H 'Content-Type: application/zip' --data-binary @$T_DIR/osc.zip
404|POST|$P/nosuch/package_content/upload_from_uri|-H '$J' --data-binary '{"addressInformation": "file://$T_DIR/osc.zip"}'
404|GET|$P/nosuch/vnfd
404|GET|$P/nosuch/package_content
404|GET|$P/$p1/nosuch
405|PUT|$P
405|DELETE|$P
405|POST|$P/$p1
405|PUT|$P/$p1
405|POST|$P/$p1/package_content
405|DELETE|$P/$p1/vnfd
405|GET|$P/$p1/package_content/upload_from_uri
405|DELETE|$P/$p1/artifacts/Workflows/instantiate_end.yaml
400|POST|$P/$p1/package_content/upload_from_uri|-H '$J' --data-binary '{"addressInformation": 7}'
400|POST|$P/$p1/package_content/upload_from_uri|-H '$J' --data-binary '{"url": "x"}'
400|GET|$P?filter=(eq,onboardingState
400|GET|$P?nosuch=1
EOF
head -c $((64 * 1024 * 1024 + 1)) /dev/zero >"$T_DIR/huge"
zip_put "$p1" "$T_DIR/huge"
problem "a package over 64 MiB" 413
rm -f "$T_DIR/huge"
snapshot >"$T_DIR/after"
check "the hostile requests changed nothing" cmp -s "$T_DIR/before" "$T_DIR/after"
req GET /vnflcm/v1/api_versions
is_code "still serving" 200

# --- PATCH: user data merged, operational state
json_req PATCH "$P/$p1" '{"userDefinedData": {"owner": "ops", "n": null, "new": "x"}}'
is_code "PATCH user data" 200
valid "PATCH user data" VnfPkgInfoModification
check "... answers what changed" test "$(field 'd')" = "{'userDefinedData': {'owner': 'ops', 'n': None, 'new': 'x'}}"
req GET "$P/$p1"
check "... merged (n removed)" test "$(field 'd["userDefinedData"]')" = "{'owner': 'ops', 'new': 'x'}"

# --- list: filter, selectors
req GET "$P?filter=(eq,onboardingState,ONBOARDED)"
is_code "list with a filter" 200
valid "list" vnfPkgsInfo
check "... the onboarded one" test "$(field '[p["id"] for p in d]')" = "['$p1']"
req GET "$P?filter=(eq,onboardingState,CREATED)&exclude_default"
check "... none CREATED" test "$(field 'len(d)')" = 0

# --- upload_from_uri: a file, then our own HTTP server (basic credentials)
json_req POST "$P" '{}'
p2=$(field 'd["id"]')
json_req POST "$P/$p2/package_content/upload_from_uri" '{"addressInformation": "ftp://127.0.0.1/x.zip"}'
problem "upload_from_uri of an ftp URL" 400
has "... naming the schemes read" "$T_DIR/body" 'only file://, http:// and https://'
json_req POST "$P/$p2/package_content/upload_from_uri" '{"addressInformation": "file://relative.zip"}'
problem "upload_from_uri of a relative file URL" 400
json_req POST "$P/$p2/package_content/upload_from_uri" "{\"addressInformation\": \"file://$T_DIR\"}"
problem "upload_from_uri of a folder" 400
check "... still CREATED" test "$(state_of "$p2")" = "CREATED DISABLED NOT_IN_USE"
json_req POST "$P/$p2/package_content/upload_from_uri" "{\"addressInformation\": \"file://$T_DIR/fromfile.zip\"}"
is_code "upload_from_uri of a file" 202
check "... ONBOARDED" test "$(state_of "$p2")" = "ONBOARDED ENABLED NOT_IN_USE"

www_port=$(free_port)
cp "$T_DIR/fromhttp.zip" "$T_DIR/www/pkg.zip"
/usr/bin/python3 - "$www_port" "$T_DIR/www" >"$T_DIR/www.log" 2>&1 <<'EOF' &
import base64, http.server, os, sys
port, root = int(sys.argv[1]), sys.argv[2]
want = "Basic " + base64.b64encode(b"fetch:s3cret").decode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != want:
            self.send_response(401); self.send_header("Content-Length", "0"); self.end_headers(); return
        path = os.path.join(root, os.path.basename(self.path))
        if not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        data = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
www_pid=$!
www_up() { curl -s -o /dev/null "http://127.0.0.1:$www_port/"; }
wait_until 10 www_up || die "the test's HTTP server did not come up"
json_req POST "$P" '{}'
p3=$(field 'd["id"]')
url=http://127.0.0.1:$www_port/pkg.zip
json_req POST "$P/$p3/package_content/upload_from_uri" "{\"addressInformation\": \"$url\", \"userName\": \"fetch\", \"password\": \"wrong\"}"
problem "upload_from_uri with a wrong password" 400
has "... the server's answer" "$T_DIR/body" 'HTTP 401'
hasnt "... never the password" "$T_DIR/body" wrong
check "... still CREATED" test "$(state_of "$p3")" = "CREATED DISABLED NOT_IN_USE"
json_req POST "$P/$p3/package_content/upload_from_uri" "{\"addressInformation\": \"http://127.0.0.1:$www_port/nosuch.zip\", \"userName\": \"fetch\", \"password\": \"s3cret\"}"
problem "upload_from_uri of a missing file" 400
json_req POST "$P/$p3/package_content/upload_from_uri" "{\"addressInformation\": \"$url\", \"userName\": \"fetch\", \"password\": \"s3cret\"}"
is_code "upload_from_uri over http with basic credentials" 202
check "... ONBOARDED" test "$(state_of "$p3")" = "ONBOARDED ENABLED NOT_IN_USE"
req GET "$P/$p3/package_content"
check "... the bytes served" cmp -s "$T_DIR/body" "$T_DIR/fromhttp.zip"
hasnt "the password is not logged" "$T_DIR/daemon.log" s3cret
kill "$www_pid"
wait "$www_pid" 2>/dev/null
www_pid=

# --- python-tackerclient from Debian, unmodified
osc() {  # a clean environment: no caller OS_* variables, no clouds.yaml
  env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_TYPE=admin_token OS_TOKEN="$token" OS_ENDPOINT="$ep" \
    timeout 60 openstack "$@"
}
check "openstack vnf package create" osc vnf package create --user-data owner=osc -f value -c ID
po=$(cat "$T_DIR/check.out")
check "openstack vnf package show (CREATED)" osc vnf package show "$po" -f value -c 'Onboarding State'
has "... CREATED" "$T_DIR/check.out" -x CREATED
check "openstack vnf package show (DISABLED)" osc vnf package show "$po" -f value -c 'Operational State'
has "... DISABLED" "$T_DIR/check.out" -x DISABLED
check "openstack vnf package upload --path" osc vnf package upload --path "$T_DIR/osc.zip" "$po"
has "... accepted" "$T_DIR/check.out" "Upload request for VNF package $po has been accepted."
check "openstack vnf package show (ONBOARDED)" osc vnf package show "$po" -f value -c 'Onboarding State'
has "... ONBOARDED" "$T_DIR/check.out" -x ONBOARDED
check "openstack vnf package show (VNFD ID)" osc vnf package show "$po" -f value -c 'VNFD ID'
has "... the VNFD id" "$T_DIR/check.out" -x "$vnfd"
check "openstack vnf package show (table)" osc vnf package show "$po"
has "... prints the user data" "$T_DIR/check.out" "owner='osc'\|owner.*osc"
check "openstack vnf package list" osc vnf package list -f value -c Id -c 'Onboarding State'
has "... lists it ONBOARDED" "$T_DIR/check.out" -x "$po ONBOARDED"
has "... and the first" "$T_DIR/check.out" -x "$p1 ONBOARDED"
check "openstack vnf package list --filter" osc vnf package list --filter "(eq,id,$po)" -f value -c Id
check "... only it" test "$(cat "$T_DIR/check.out")" = "$po"
check "openstack vnf package download" osc vnf package download "$po" --file "$T_DIR/dl.zip"
check "... the bytes uploaded" cmp -s "$T_DIR/dl.zip" "$T_DIR/osc.zip"
check "openstack vnf package download --vnfd --type application/zip" \
  osc vnf package download "$po" --vnfd --type application/zip --file "$T_DIR/dl-vnfd.zip"
check "... a zip" /usr/bin/python3 -m zipfile -t "$T_DIR/dl-vnfd.zip"
check_exit "openstack vnf package download --vnfd --type text/plain of a 3-file VNFD fails" 1 \
  osc vnf package download "$po" --vnfd --type text/plain --file "$T_DIR/dl-vnfd.yaml"
check "openstack vnf package artifact download" \
  osc vnf package artifact download "$po" Workflows/heal_end.yaml --file "$T_DIR/art.yaml"
check "... the artifact's bytes" cmp -s "$T_DIR/art.yaml" "$sample/Workflows/heal_end.yaml"
check_exit "openstack vnf package upload to an ONBOARDED package fails" 1 \
  osc vnf package upload --path "$T_DIR/osc.zip" "$po"
has "... saying why" "$T_ERR" 'content is accepted only while it is CREATED'
check_exit "openstack vnf package delete of an ENABLED package fails" 1 osc vnf package delete "$po"
has "... saying why" "$T_ERR" 'is ENABLED; disable it first'
check "openstack vnf package update --operational-state DISABLED" \
  osc vnf package update "$po" --operational-state DISABLED -f value -c 'Operational State'
has "... DISABLED" "$T_DIR/check.out" -x DISABLED
check_exit "openstack vnf package update to the same state fails" 1 \
  osc vnf package update "$po" --operational-state DISABLED
check "openstack vnf package update --user-data" osc vnf package update "$po" --user-data stage=2
has "... the change" "$T_DIR/check.out" stage
check "openstack vnf package delete" osc vnf package delete "$po"
has "... deleted" "$T_DIR/check.out" 'All specified vnf-package(s) deleted successfully'
check_exit "openstack vnf package show of the deleted package fails" 1 osc vnf package show "$po"
has "... not found" "$T_ERR" "no package"

# --- the local demo's lifecycle from an uploaded package (p3, the newest with its vnfdId)
json_req PATCH "$P/$p1" '{"operationalState": "DISABLED"}'
is_code "disable the first package" 200
json_req PATCH "$P/$p2" '{"operationalState": "DISABLED"}'
json_req PATCH "$P/$p3" '{"operationalState": "DISABLED"}'
json_req POST /vnflcm/v1/vnf_instances "{\"vnfdId\": \"$vnfd\"}"
problem "an instance of a VNFD whose packages are all DISABLED" 422
json_req PATCH "$P/$p3" '{"operationalState": "ENABLED"}'
is_code "enable the package uploaded over HTTP again" 200
json_req POST /vnflcm/v1/vnf_instances "{\"vnfdId\": \"$vnfd\", \"vnfInstanceName\": \"from-upload\"}"
is_code "an instance of the uploaded VNFD" 201
inst=$(field 'd["id"]')
check "... of the package uploaded over HTTP" test "$(field 'd["vnfPkgId"]')" = "$p3"
check "the package is IN_USE" test "$(state_of "$p3")" = "ONBOARDED ENABLED IN_USE"
cat >"$T_DIR/inst.json" <<EOF
{"flavourId": "simple", "additionalParams": {"work_dir": "$T_DIR/vnfs", "nodes": ["n1"]}}
EOF
run_op() {  # run_op WHAT TASK [BODY FILE]: 202, then COMPLETED within 30 s
  req POST "/vnflcm/v1/vnf_instances/$inst/$2" -H 'Content-Type: application/json' --data-binary @"$3"
  is_code "$1" 202
  op=$(header Location)
  op=${op##*/}
  check "... COMPLETED" wait_state "$op" COMPLETED 30
}
run_op "instantiate" instantiate "$T_DIR/inst.json"
json_req PATCH "$P/$p3" '{"operationalState": "DISABLED"}'
is_code "disable the package in use" 200
req DELETE "$P/$p3"
problem "delete of a package in use" 409
has "... naming the instance" "$T_DIR/body" "$inst"
printf '{"terminationType": "FORCEFUL", "additionalParams": {"work_dir": "%s"}}' "$T_DIR/vnfs" >"$T_DIR/term.json"
run_op "terminate" terminate "$T_DIR/term.json"
req DELETE "/vnflcm/v1/vnf_instances/$inst"
is_code "delete the instance" 204
req DELETE "$P/$p3"
is_code "delete the package no instance uses" 204
req GET "$P/$p3"
problem "the deleted package" 404
stop_daemon

# --- a daemon that requires signatures on uploads (issue 13): packages signed with openssl cms
ossl() { openssl "$@" 2>>"$T_DIR/openssl.log" >/dev/null || die "openssl $1 failed"; }
d=$T_DIR/pki
mkdir -p "$d"
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 30 -subj "/CN=test-ca"
ossl req -newkey rsa:2048 -nodes -keyout "$d/vendor.key" -out "$d/vendor.csr" -subj "/CN=vendor"
ossl x509 -req -in "$d/vendor.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
  -out "$d/vendor.pem" -days 10
signed_copy() {  # signed_copy NAME: a copy of the demo whose manifest is signed by vendor
  rm -rf "$T_DIR/$1-src"
  cp -r "$sample" "$T_DIR/$1-src"
  local mf=$T_DIR/$1-src/local-demo.mf
  ossl cms -sign -binary -in "$mf" -signer "$d/vendor.pem" -inkey "$d/vendor.key" -outform PEM \
    -out "$d/$1.cms"
  cat "$d/$1.cms" >>"$mf"
}
signed_copy good
variant good "$T_DIR/good-src"
signed_copy tampered
sed -i 's/vnf_product_name: Local demo/vnf_product_name: Tampered/' "$T_DIR/tampered-src/local-demo.mf"
variant tampered "$T_DIR/tampered-src"
start_daemon --trust "$d/ca.pem" --require-signature
for n in good tampered unsigned; do
  json_req POST "$P" '{}'
  id=$(field 'd["id"]')
  zip_put "$id" "$T_DIR/$n.zip"
  is_code "upload of the $n package (signatures required)" 202
  req GET "$P/$id"
  valid "the $n package" vnfPkgInfo
  case $n in
    good)
      check "... ONBOARDED" test "$(field 'd["onboardingState"]')" = ONBOARDED ;;
    *)
      check "... CREATED, not onboarded" test "$(field 'd["onboardingState"]')" = CREATED
      field 'd["onboardingFailureDetails"]["detail"]' >"$T_DIR/why-$n" ;;
  esac
done
has "the unsigned package: the reason" "$T_DIR/why-unsigned" 'local-demo.mf: error: the package is not signed.*\[S0001\]'
has "the tampered package: a signature error" "$T_DIR/why-tampered" 'local-demo.mf.*error.*\[S00'
t_say "why the tampered package was refused:"
t_show "$T_DIR/why-tampered" 4
stop_daemon
t_finish
