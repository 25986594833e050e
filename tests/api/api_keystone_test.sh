#!/usr/bin/env bash
# The REST API with --auth keystone against a real Keystone (tools/openstack/start.sh, on
# its own ports; stopped at the end): the daemon asks Keystone about each X-Auth-Token
# with the service user of its --auth-file (admin, project admin) and requires the role
# admin.
#   - `openstack vnflcm list` with Keystone password auth (admin) gets through: the
#     catalog's nfv-orchestration endpoint is the daemon;
#   - no token, a made-up token and a revoked one get 401, tester's token (member on vnf,
#     no admin role) 403, as do the same through `openstack` (exit 1 with the detail);
#   - SIGHUP with a service user Keystone refuses is refused (tokens still validated), one
#     that logs in is taken;
#   - Keystone stopped: a token not yet cached gets 503, a cached one still works;
#   - no token or password appears in the daemon's log or in any answer.
#   tests/api/api_keystone_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init api-keystone "$1"
root=$2
v=$T_VNFLOW
command -v openstack >/dev/null || die "python3-openstackclient / tackerclient are missing (tools/install-deps.sh)"
osdir=${VNFLOW_OPENSTACK_DIR:-$T_DIR/openstack}
export KEYSTONE_PORT=${KEYSTONE_PORT:-15200} HEAT_PORT=${HEAT_PORT:-18204}
export VNFLOW_DB=$T_DIR/db/vnflow.db
mkdir -p "$T_DIR/db"
chmod 700 "$T_DIR/db"
daemon_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill -9 "$daemon_pid" 2>/dev/null
  [[ ${OS_SKIP_STOP:-0} == 1 ]] || bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1
}
T_ON_DIE='t_show "$T_DIR/daemon.log" 30'

bash "$root/tools/openstack/start.sh" "$osdir" >"$T_DIR/start.log" 2>&1 ||
  { t_show "$T_DIR/start.log" 40; die "tools/openstack/start.sh failed"; }
kurl=http://127.0.0.1:$KEYSTONE_PORT/v3
admin_pw=${ADMIN_PASSWORD:-vnflow-admin}
tester_pw=${TESTER_PASSWORD:-vnflow-tester}

port=$(/usr/bin/python3 "$root/tests/api/free_port.py")
[[ -n $port ]] || die "no free port"
ep=http://127.0.0.1:$port

# token USER PASSWORD PROJECT: a project-scoped token (X-Subject-Token)
token() {
  curl -sS -D - -o /dev/null -X POST "$kurl/auth/tokens" -H 'Content-Type: application/json' -d "{
    \"auth\": {\"identity\": {\"methods\": [\"password\"], \"password\": {\"user\": {
      \"name\": \"$1\", \"domain\": {\"name\": \"Default\"}, \"password\": \"$2\"}}},
    \"scope\": {\"project\": {\"name\": \"$3\", \"domain\": {\"name\": \"Default\"}}}}}" |
    tr -d '\r' | awk 'tolower($1) == "x-subject-token:" {print $2}'
}
admin_token=$(token admin "$admin_pw" admin)
tester_token=$(token tester "$tester_pw" vnf)
[[ -n $admin_token && -n $tester_token ]] || die "no tokens from Keystone at $kurl"

# The catalog's nfv-orchestration service is this daemon (replacing one of an earlier run).
kapi() { curl -sS -H "X-Auth-Token: $admin_token" -H 'Content-Type: application/json' "$@"; }
for id in $(kapi "$kurl/services?type=nfv-orchestration" | /usr/bin/python3 -c \
  'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)["services"]))'); do
  kapi -X DELETE "$kurl/services/$id" >/dev/null
done
sid=$(kapi -X POST "$kurl/services" -d '{"service": {"type": "nfv-orchestration", "name": "vnflow"}}' |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["service"]["id"])') || die "service create"
kapi -X POST "$kurl/endpoints" -d "{\"endpoint\": {\"service_id\": \"$sid\", \"interface\": \"public\",
  \"region_id\": \"RegionOne\", \"url\": \"$ep\"}}" >/dev/null || die "endpoint create"

printf '# the service user vnflow asks Keystone with\nuser admin\npassword %s\nproject admin\n' \
  "$admin_pw" >"$T_DIR/auth"
chmod 600 "$T_DIR/auth"
check_exit "--auth keystone without --keystone-url is a usage error" 2 \
  "$v" daemon --listen $port --auth keystone --auth-file "$T_DIR/auth"
check_exit "--keystone-url ftp://... is a usage error" 2 \
  "$v" daemon --listen $port --auth keystone --auth-file "$T_DIR/auth" --keystone-url ftp://x/v3
"$v" daemon --listen 127.0.0.1:$port --auth keystone --auth-file "$T_DIR/auth" \
  --keystone-url "$kurl" --keystone-role admin >"$T_DIR/daemon.log" 2>&1 &
daemon_pid=$!
up() { curl -s -o /dev/null "$ep/vnflcm/v1/api_versions"; }
wait_until 20 up || die "the API did not come up on $ep"
ok "the daemon serves $ep with Keystone auth"

get() {  # get TOKEN: $code of GET /vnflcm/v1/vnf_instances, the body in $T_DIR/body
  code=$(curl -s -o "$T_DIR/body" -w '%{http_code}' ${1:+-H "X-Auth-Token: $1"} "$ep/vnflcm/v1/vnf_instances")
  cat "$T_DIR/body" >>"$T_DIR/answers"
}
get ""
check "no token: 401" test "$code" = 401
get "gAAAAAmadeup$RANDOM"
check "a made-up token: 401" test "$code" = 401
get "$tester_token"
check "tester's token (no admin role): 403" test "$code" = 403
check "... a ProblemDetails naming the role" grep -q '"status":403.*role' "$T_DIR/body"
get "$admin_token"
check "admin's token: 200" test "$code" = 200

osk() {  # openstack with Keystone password auth, a clean environment
  env -i PATH="$PATH" HOME="$T_DIR" OS_AUTH_URL="$kurl" OS_IDENTITY_API_VERSION=3 \
    OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default OS_REGION_NAME=RegionOne \
    OS_INTERFACE=public timeout 60 openstack "$@"
}
"$v" package onboard "$root/csar-samples/local-demo" >/dev/null || die "onboard local-demo"
check "openstack vnflcm create (Keystone password auth, admin)" \
  osk --os-username admin --os-password "$admin_pw" --os-project-name admin \
  vnflcm create 3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c --name ks-1 -f value -c ID
inst=$(cat "$T_DIR/check.out")
check "openstack vnflcm list (Keystone password auth, admin)" \
  osk --os-username admin --os-password "$admin_pw" --os-project-name admin vnflcm list -f value -c ID
has "... lists the instance" "$T_DIR/check.out" -x "$inst"
check_exit "openstack vnflcm list as tester (no admin role) fails" 1 \
  osk --os-username tester --os-password "$tester_pw" --os-project-name vnf vnflcm list
has "... with the 403's detail" "$T_ERR" 'lacks the role'

# A revoked token: Keystone says 404 to the next validation (the cache is per token, so a
# token this daemon never saw).
revoked=$(token admin "$admin_pw" admin)
kapi -X DELETE -H "X-Subject-Token: $revoked" "$kurl/auth/tokens" >/dev/null
get "$revoked"
check "a revoked token: 401" test "$code" = 401

# SIGHUP with a service user Keystone refuses: the reload is refused whole and the old
# service user goes on validating; then one that logs in is taken.
wrong_pw=wrong-$RANDOM$RANDOM
printf 'user admin\npassword %s\nproject admin\n' "$wrong_pw" >"$T_DIR/auth"
kill -HUP "$daemon_pid"
refused() { grep -q 'reload refused.*new Keystone service user cannot log in' "$T_DIR/daemon.log"; }
check "a reload whose service user cannot log in is refused" wait_until 20 refused
get "$(token admin "$admin_pw" admin)"
check "... a new token is still validated: 200" test "$code" = 200
printf 'user admin\npassword %s\nproject admin\n' "$admin_pw" >"$T_DIR/auth"
kill -HUP "$daemon_pid"
check "a reload with a service user that logs in is taken" \
  wait_until 20 grep -q 'api: reloaded the credentials file' "$T_DIR/daemon.log"
get "$(token admin "$admin_pw" admin)"
check "... and validates: 200" test "$code" = 200

# Keystone down: a cached token still works, a new one gets 503 (not 401: it may be valid).
fresh=$(token admin "$admin_pw" admin)
bash "$root/tools/openstack/stop.sh" "$osdir" >/dev/null 2>&1
get "$admin_token"
check "Keystone stopped: a cached token still gets 200" test "$code" = 200
get "$fresh"
check "Keystone stopped: an uncached token gets 503" test "$code" = 503

for secret in "$admin_pw" "$admin_token" "$tester_token" "$fresh" "$revoked" "$wrong_pw"; do
  hasnt "no secret in the daemon's log" "$T_DIR/daemon.log" -F -- "$secret"
  hasnt "no secret in an answer" "$T_DIR/answers" -F -- "$secret"
done
kill -TERM "$daemon_pid"
wait_pid "$daemon_pid" 30
check "the daemon stopped on SIGTERM" test $? -eq 0
daemon_pid=
t_finish
