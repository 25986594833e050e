#!/usr/bin/env bash
# Smoke test of the local Keystone + Heat (tools/openstack/start.sh) with the
# vnflow fake Nova/Neutron templates, using curl and jq only:
#   1. token for tester (Keystone v3), Heat endpoint from the catalog
#   2. csar-samples private-registry BaseHOT: create, ports' fixed_ips, outputs
#   3. csar-samples k8s-cluster BaseHOT (AutoScalingGroup of worker.hot.yaml):
#      create with 2 workers, scale to 3 (PATCH nfv), heal one worker (mark
#      it unhealthy in its member stack + PATCH {}; it must get a new
#      physical_resource_id)
#   4. delete both stacks, wait until they are gone (404)
# Exits non-zero at the first failure, naming the call that failed.
#
# Usage: tools/openstack/smoke.sh [DIR]      (DIR as given to start.sh)
# Environment: OS_AUTH_URL, OS_USERNAME, OS_PASSWORD, OS_PROJECT_NAME override
#   DIR/openrc; HEAT_URL overrides the catalog's endpoint (e.g. a faultproxy);
#   SMOKE_TIMEOUT (seconds per wait, 180); SMOKE_KEEP=1 keeps stacks on failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${1:-${VNFLOW_OPENSTACK_DIR:-/tmp/vnflow-openstack}}
FAKE=$REPO/tests/openstack
REGISTRY_HOT=$REPO/csar-samples/private-registry/BaseHOT/simple/private_registry.yaml
K8S_DIR=$REPO/csar-samples/k8s-cluster/BaseHOT/simple
TIMEOUT=${SMOKE_TIMEOUT:-180}

if [[ -z ${OS_AUTH_URL:-} ]]; then
  [[ -f $DIR/openrc ]] || {
    echo "smoke: no OS_AUTH_URL and no $DIR/openrc (run start.sh first)" >&2
    exit 1
  }
  # shellcheck source=/dev/null
  source "$DIR/openrc"
fi

WORK=$(mktemp -d /tmp/vnflow-smoke.XXXXXX)
CREATED=()
T0=$(date +%s%N)
ms() { echo "$((($(date +%s%N) - $1) / 1000000))"; }
step() { echo "[smoke +$(ms "$T0")ms] $*"; }
fail() {
  echo "[smoke] FAILED: $*" >&2
  exit 1
}
cleanup() {
  local rc=$? s
  if ((rc != 0)) && [[ ${SMOKE_KEEP:-0} != 1 && -n ${TOKEN:-} ]]; then
    for s in "${CREATED[@]}"; do
      curl -s -o /dev/null -m 10 -X DELETE -H "X-Auth-Token: $TOKEN" "$HEAT_URL/stacks/$s" || true
    done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# api METHOD URL EXPECTED [BODY_FILE]: response body in $WORK/resp, headers in
# $WORK/hdr; fails (printing the call and the answer) unless the status is one
# of EXPECTED (a regex alternative such as "200|204"). A 401 from Heat (token
# expired, e.g. with a short KEYSTONE_TOKEN_EXPIRATION) re-authenticates once.
api() {
  local method=$1 url=$2 expected=$3 body=${4:-} code try
  for try in 1 2; do
    local args=(-s -m 60 -X "$method" -o "$WORK/resp" -D "$WORK/hdr" -w '%{http_code}'
      -H 'Accept: application/json')
    [[ -n ${TOKEN:-} ]] && args+=(-H "X-Auth-Token: $TOKEN")
    [[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data-binary "@$body")
    code=$(curl "${args[@]}" "$url") || true
    if [[ $code == 401 && $try == 1 && -n ${TOKEN:-} && $expected != *401* ]]; then
      step "  $method $url -> 401 (token expired?): authenticating again"
      authenticate
      continue
    fi
    break
  done
  if [[ ! $code =~ ^($expected)$ ]]; then
    echo "[smoke] $method $url -> HTTP $code (expected $expected)" >&2
    head -c 2000 "$WORK/resp" >&2 2>/dev/null || true
    echo >&2
    fail "$method $url"
  fi
}

# authenticate: password token for the test user; sets TOKEN (and HEAT_URL
# from the catalog unless it was given)
authenticate() {
  jq -n --arg u "$OS_USERNAME" --arg p "$OS_PASSWORD" --arg proj "$OS_PROJECT_NAME" \
    --arg ud "${OS_USER_DOMAIN_NAME:-Default}" --arg pd "${OS_PROJECT_DOMAIN_NAME:-Default}" \
    '{auth: {identity: {methods: ["password"], password: {user: {name: $u, domain: {name: $ud}, password: $p}}},
             scope: {project: {name: $proj, domain: {name: $pd}}}}}' >"$WORK/auth.json"
  TOKEN=
  api POST "${OS_AUTH_URL%/}/auth/tokens" 201 "$WORK/auth.json"
  TOKEN=$(tr -d '\r' <"$WORK/hdr" | awk 'tolower($1) == "x-subject-token:" {print $2}')
  [[ -n $TOKEN ]] || fail "no X-Subject-Token in the answer of POST $OS_AUTH_URL/auth/tokens"
  if [[ -z ${HEAT_URL:-} ]]; then
    HEAT_URL=$(jq -r '.token.catalog[] | select(.type == "orchestration") | .endpoints[]
                      | select(.interface == "public") | .url' "$WORK/resp" | head -n 1)
  fi
  [[ -n $HEAT_URL ]] || fail "no orchestration endpoint in the token's catalog"
  step "  token ok, expires $(jq -r .token.expires_at "$WORK/resp"); heat at $HEAT_URL"
}

# wait_stack PATH BUSY_STATUS WANTED_STATUS: poll, bounded in count and time
wait_stack() {
  local path=$1 busy=$2 wanted=$3 started status deadline i
  started=$(date +%s%N)
  deadline=$(($(date +%s) + TIMEOUT))
  for ((i = 0; i < TIMEOUT * 4; i++)); do
    api GET "$HEAT_URL/stacks/$path" 200
    status=$(jq -r .stack.stack_status "$WORK/resp")
    [[ $status != "$busy" ]] && break
    (($(date +%s) < deadline)) || break
    sleep 0.25
  done
  if [[ $status != "$wanted" ]]; then
    fail "stack $path is $status, wanted $wanted: $(jq -r .stack.stack_status_reason "$WORK/resp")"
  fi
  step "  $path: $status after $(ms "$started") ms"
}

# wait_gone NAME: GET /stacks/NAME until 404 (deleted stacks stay readable by id)
wait_gone() {
  local name=$1 started code deadline i
  started=$(date +%s%N)
  deadline=$(($(date +%s) + TIMEOUT))
  for ((i = 0; i < TIMEOUT * 4; i++)); do
    api GET "$HEAT_URL/stacks/$name" '200|302|404'
    code=$(awk 'NR == 1 {print $2}' "$WORK/hdr")
    [[ $code == 404 ]] && break
    (($(date +%s) < deadline)) || break
    sleep 0.25
  done
  [[ $code == 404 ]] || fail "GET $HEAT_URL/stacks/$name still answers $code after delete"
  step "  $name: gone (404) after $(ms "$started") ms"
}

# files map: the fake templates and the environment under the names the
# environment uses ("fake/server.yaml", ...), plus the given nested templates
# under their base names
files_map() {
  local f
  {
    for f in "$FAKE"/fake/*.yaml; do
      jq -n --arg k "fake/$(basename "$f")" --rawfile v "$f" '{($k): $v}'
    done
    jq -n --rawfile v "$FAKE/fake-env.yaml" '{"fake-env.yaml": $v}'
    for f in "$@"; do
      jq -n --arg k "$(basename "$f")" --rawfile v "$f" '{($k): $v}'
    done
  } | jq -s add
}

# create_body NAME TEMPLATE PARAMS_JSON KNOBS_JSON [NESTED...]
# Heat ignores an inline "environment" when "environment_files" is given, so
# the knobs travel as a second environment file (JSON is YAML), which
# overrides the defaults in fake-env.yaml.
create_body() {
  local name=$1 template=$2 params=$3 knobs=$4
  shift 4
  files_map "$@" >"$WORK/files.json"
  jq -n --arg name "$name" --rawfile template "$template" --slurpfile files "$WORK/files.json" \
    --argjson params "$params" --argjson knobs "$knobs" \
    '{stack_name: $name, template: $template,
      files: ($files[0] + {"knobs.json": ({parameter_defaults: $knobs} | tojson)}),
      environment_files: ["fake-env.yaml", "knobs.json"],
      parameters: $params, timeout_mins: 10, disable_rollback: true}' >"$WORK/create.json"
}

# resources PATH: every resource down to nested_depth 2, with attributes
resources() {
  api GET "$HEAT_URL/stacks/$1/resources?nested_depth=2&with_detail=true" 200
  cp "$WORK/resp" "$WORK/resources.json"
}
print_ports() {
  jq -r '.resources[] | select(.resource_type == "OS::Neutron::Port")
         | "    port \(.resource_name) (\(.physical_resource_id)): fixed_ips \(.attributes.fixed_ips | tojson)"' \
    "$WORK/resources.json"
}
# every server reports the address of the port beside it (same stack)
check_servers() {
  local bad
  jq -r '.resources[] | select(.resource_type == "OS::Nova::Server")
         | "    server \(.resource_name): first_address \(.attributes.first_address), networks \(.attributes.networks | tojson)"' \
    "$WORK/resources.json"
  bad=$(jq -r '[.resources[] | {stack: (.links[] | select(.rel == "stack") | .href), r: .}]
               | group_by(.stack)[]
               | ([.[].r | select(.resource_type == "OS::Neutron::Port") | .attributes.fixed_ips[0].ip_address]) as $ports
               | .[].r | select(.resource_type == "OS::Nova::Server")
               | select(.attributes.first_address as $a | $ports | index($a) | not) | .resource_name' \
    "$WORK/resources.json")
  [[ -z $bad ]] || fail "server(s) not reporting their port's address: $bad"
}

# ------------------------------------------------------------------ token
step "token for $OS_USERNAME/$OS_PROJECT_NAME at $OS_AUTH_URL"
authenticate

SUFFIX=$(date +%s)-$$

# ------------------------------------------------------ private registry
REG=smoke-registry-$SUFFIX
step "create $REG from $(basename "$REGISTRY_HOT") (fake_ips: CP1 -> 127.0.10.1)"
create_body "$REG" "$REGISTRY_HOT" \
  '{"nfv": {"VDU": {"PrivateRegistryVDU": {"flavor": "m1.small", "image": "ubuntu"}}, "CP": {"CP1": {"network": "net0"}}}}' \
  '{"fake_ips": {"CP1": "127.0.10.1", "PrivateRegistryVDU": "127.0.10.1"}}'
t=$(date +%s%N)
api POST "$HEAT_URL/stacks" 201 "$WORK/create.json"
REG_PATH=$REG/$(jq -r .stack.id "$WORK/resp")
CREATED+=("$REG_PATH")
step "  POST /stacks -> 201 in $(ms "$t") ms"
wait_stack "$REG_PATH" CREATE_IN_PROGRESS CREATE_COMPLETE
jq -r '.stack.outputs[] | "    output \(.output_key) = \(.output_value | tojson)"' "$WORK/resp"
resources "$REG_PATH"
print_ports
[[ $(jq -r '[.resources[] | select(.resource_name == "CP1")][0].attributes.fixed_ips[0].ip_address' \
  "$WORK/resources.json") == 127.0.10.1 ]] || fail "CP1 does not report 127.0.10.1"
check_servers

# ----------------------------------------------------------- k8s cluster
K8S=smoke-k8s-$SUFFIX
NFV='{"VDU": {"masterNode": {"flavor": "m1.medium", "image": "ubuntu"},
              "workerNode": {"flavor": "m1.small", "image": "ubuntu", "desired_capacity": 2}},
      "CP": {"masterNode_CP1": {"network": "net0"}, "workerNode_CP2": {"network": "net0"}}}'
step "create $K8S from $(basename "$K8S_DIR/k8s_cluster.yaml") + worker.hot.yaml (fake_ip_from_stack_id)"
create_body "$K8S" "$K8S_DIR/k8s_cluster.yaml" "{\"nfv\": $NFV}" '{"fake_ip_from_stack_id": true}' \
  "$K8S_DIR/worker.hot.yaml"
t=$(date +%s%N)
api POST "$HEAT_URL/stacks" 201 "$WORK/create.json"
K8S_PATH=$K8S/$(jq -r .stack.id "$WORK/resp")
CREATED+=("$K8S_PATH")
step "  POST /stacks -> 201 in $(ms "$t") ms"
wait_stack "$K8S_PATH" CREATE_IN_PROGRESS CREATE_COMPLETE
resources "$K8S_PATH"
print_ports
check_servers
workers() { jq '[.resources[] | select(.resource_name == "workerNode")] | length' "$WORK/resources.json"; }
[[ $(workers) == 2 ]] || fail "expected 2 workerNode servers, found $(workers)"
distinct=$(jq '[.resources[] | select(.resource_type == "OS::Neutron::Port") | .attributes.fixed_ips[0].ip_address] | unique | length' \
  "$WORK/resources.json")
[[ $distinct == 3 ]] || fail "expected 3 distinct port addresses, found $distinct"

step "scale out: PATCH nfv.VDU.workerNode.desired_capacity = 3"
jq -n --argjson nfv "$NFV" '{parameters: {nfv: ($nfv | .VDU.workerNode.desired_capacity = 3)}}' >"$WORK/scale.json"
t=$(date +%s%N)
api PATCH "$HEAT_URL/stacks/$K8S_PATH" 202 "$WORK/scale.json"
wait_stack "$K8S_PATH" UPDATE_IN_PROGRESS UPDATE_COMPLETE
resources "$K8S_PATH"
print_ports
check_servers
[[ $(workers) == 3 ]] || fail "expected 3 workerNode servers after scale out, found $(workers)"
step "  scale out done in $(ms "$t") ms: 3 workers"

step "heal: mark one workerNode unhealthy in its member stack, then PATCH {}"
MEMBER=$(jq -r '[.resources[] | select(.resource_name == "workerNode")][0].links[] | select(.rel == "stack") | .href' \
  "$WORK/resources.json")
OLD_ID=$(jq -r '[.resources[] | select(.resource_name == "workerNode")][0].physical_resource_id' "$WORK/resources.json")
[[ -n $MEMBER && $MEMBER != null ]] || fail "no rel=stack link on the workerNode resource"
echo '{"mark_unhealthy": true, "resource_status_reason": "vnflow smoke heal"}' >"$WORK/unhealthy.json"
t=$(date +%s%N)
api PATCH "$MEMBER/resources/workerNode" 200 "$WORK/unhealthy.json"
api GET "$MEMBER/resources/workerNode" 200
[[ $(jq -r .resource.resource_status "$WORK/resp") == CHECK_FAILED ]] ||
  fail "workerNode is $(jq -r .resource.resource_status "$WORK/resp") after mark_unhealthy, wanted CHECK_FAILED"
echo '{}' >"$WORK/empty.json"
api PATCH "$HEAT_URL/stacks/$K8S_PATH" 202 "$WORK/empty.json"
wait_stack "$K8S_PATH" UPDATE_IN_PROGRESS UPDATE_COMPLETE
api GET "$MEMBER/resources/workerNode" 200
NEW_ID=$(jq -r .resource.physical_resource_id "$WORK/resp")
[[ $NEW_ID != "$OLD_ID" && -n $NEW_ID ]] || fail "workerNode was not replaced (physical_resource_id still $OLD_ID)"
step "  heal done in $(ms "$t") ms: workerNode $OLD_ID -> $NEW_ID ($(jq -r .resource.resource_status "$WORK/resp"))"
resources "$K8S_PATH"
check_servers
[[ $(workers) == 3 ]] || fail "expected 3 workerNode servers after heal, found $(workers)"

# ---------------------------------------------------------------- delete
step "delete both stacks"
t=$(date +%s%N)
for path in "$REG_PATH" "$K8S_PATH"; do
  api DELETE "$HEAT_URL/stacks/$path" 204
done
wait_gone "$REG"
wait_gone "$K8S"
CREATED=()
step "  deletes done in $(ms "$t") ms"
step "PASSED"
