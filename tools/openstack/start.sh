#!/usr/bin/env bash
# Runs a real OpenStack Keystone (v3) + Heat (API and engine in one heat-all
# process) on 127.0.0.1 for vnflow's integration tests, from Debian 12's
# python3-* packages: SQLite databases, no systemd, no MySQL, no RabbitMQ.
#
# Usage: tools/openstack/start.sh [DIR]        stop with tools/openstack/stop.sh [DIR]
#
# Idempotent: with both services up and unchanged settings it only reprints
# the connection details; a changed setting (port, password, token lifetime,
# poll interval) restarts what it affects; stopped services are restarted on
# the data already in DIR.
#
# Settings (environment):
#   VNFLOW_OPENSTACK_DIR        DIR when no argument is given (/tmp/vnflow-openstack)
#   KEYSTONE_PORT=15000 HEAT_PORT=18004   (below 32768, the ephemeral range)
#   ADMIN_PASSWORD TESTER_PASSWORD HEAT_PASSWORD HEAT_DOMAIN_ADMIN_PASSWORD
#   KEYSTONE_TOKEN_EXPIRATION=86400       token lifetime in seconds
#   HEAT_TASK_POLL_SECS=0.2     cap on Heat's 1 s sleep between polls of
#                               in-progress resources (1 = stock behaviour)
#   OPENSTACK_START_TIMEOUT=90  seconds each service may take to answer
#   VNFLOW_OPENSTACK_NO_APT=1   never run apt-get (fail if packages are missing)
# Everything listens on 127.0.0.1 only.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=$(realpath -m "${1:-${VNFLOW_OPENSTACK_DIR:-/tmp/vnflow-openstack}}")
BIND=127.0.0.1
KEYSTONE_PORT=${KEYSTONE_PORT:-15000}
HEAT_PORT=${HEAT_PORT:-18004}
ADMIN_PASSWORD=${ADMIN_PASSWORD:-vnflow-admin}
TESTER_PASSWORD=${TESTER_PASSWORD:-vnflow-tester}
HEAT_PASSWORD=${HEAT_PASSWORD:-vnflow-heat}
HEAT_DOMAIN_ADMIN_PASSWORD=${HEAT_DOMAIN_ADMIN_PASSWORD:-vnflow-heat-domain}
KEYSTONE_TOKEN_EXPIRATION=${KEYSTONE_TOKEN_EXPIRATION:-86400}
HEAT_TASK_POLL_SECS=${HEAT_TASK_POLL_SECS:-0.2}
START_TIMEOUT=${OPENSTACK_START_TIMEOUT:-90}
PY=/usr/bin/python3 # Debian's interpreter: the python3 on PATH may lack dist-packages

KEYSTONE_URL="http://$BIND:$KEYSTONE_PORT/v3"
HEAT_URL_TEMPLATE="http://$BIND:$HEAT_PORT/v1/%(tenant_id)s"
PACKAGES=(python3-keystone python3-heat python3-keystoneclient python3-waitress curl jq)

T_START=$(date +%s%N)
elapsed() { echo "$((($(date +%s%N) - ${1:-$T_START}) / 1000000))"; }
say() { echo "[openstack-start +$(elapsed)ms] $*"; }
die() {
  echo "[openstack-start] ERROR: $*" >&2
  exit 1
}

for port in "$KEYSTONE_PORT" "$HEAT_PORT"; do
  if [[ ! $port =~ ^[0-9]+$ ]] || ((port <= 1024 || port >= 32768)); then
    die "port $port must be a number in 1025..32767 (32768 and up is the ephemeral range)"
  fi
done
[[ $KEYSTONE_PORT != "$HEAT_PORT" ]] || die "KEYSTONE_PORT and HEAT_PORT must differ"
if [[ ! $KEYSTONE_TOKEN_EXPIRATION =~ ^[0-9]+$ ]] || ((KEYSTONE_TOKEN_EXPIRATION < 1)); then
  die "KEYSTONE_TOKEN_EXPIRATION must be a positive number of seconds"
fi
[[ $HEAT_TASK_POLL_SECS =~ ^[0-9]*\.?[0-9]+$ ]] || die "HEAT_TASK_POLL_SECS must be a number"
[[ $START_TIMEOUT =~ ^[0-9]+$ ]] || die "OPENSTACK_START_TIMEOUT must be a number of seconds"

# ------------------------------------------------------------- packages
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  [[ ${VNFLOW_OPENSTACK_NO_APT:-0} != 1 ]] || die "missing Debian packages: ${missing[*]}"
  [[ $(id -u) -eq 0 ]] || die "missing Debian packages: ${missing[*]} (run as root, or apt-get install them)"
  t=$(date +%s%N)
  say "installing ${missing[*]} (apt-get, noninteractive)"
  mkdir -p "$DIR/log"
  export DEBIAN_FRONTEND=noninteractive
  # Library packages only: the service packages (keystone, heat-api, ...) add
  # debconf questions, dbconfig-common and init scripts that nothing here uses.
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$DIR/log/apt.log" 2>&1; then
    tail -n 20 "$DIR/log/apt.log" >&2
    die "apt-get install failed, see $DIR/log/apt.log"
  fi
  say "packages installed in $(elapsed "$t") ms"
fi

mkdir -p "$DIR"/{bin,log,run,etc,keystone/fernet-keys,keystone/credential-keys,heat/lock}
chmod 700 "$DIR/keystone/fernet-keys" "$DIR/keystone/credential-keys"
install -m 755 "$HERE/keystone-wsgi.py" "$HERE/heat-all.py" "$HERE/identity-setup.py" "$DIR/bin/"

# -------------------------------------------------------------- helpers
pid_of() { cat "$DIR/run/$1.pid" 2>/dev/null || true; }
# running NAME: its pid file names a live process that is still our launcher
running() {
  local pid
  pid=$(pid_of "$1")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$DIR/bin/"
}
http_status() { curl -s -o /dev/null -m 3 -w '%{http_code}' "$1" 2>/dev/null || true; }
listening() { (: <"/dev/tcp/$BIND/$1") 2>/dev/null; }
keystone_ready() { [[ $(http_status "$KEYSTONE_URL") == 200 ]]; }
heat_ready() { [[ $(http_status "http://$BIND:$HEAT_PORT/") == 300 ]]; }
log_tail() {
  local f
  for f in "$@"; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 25 "$f" >&2
  done
}
# install_if_changed NEW DEST: replace DEST by NEW; status 0 when it changed
install_if_changed() {
  if [[ -f $2 ]] && cmp -s "$1" "$2"; then
    rm -f "$1"
    return 1
  fi
  mv "$1" "$2"
}
# wait_ready NAME CHECK LOG...: bounded wait for a started service
wait_ready() {
  local name=$1 check=$2 deadline i
  shift 2
  deadline=$(($(date +%s) + START_TIMEOUT))
  for ((i = 0; i < START_TIMEOUT * 10; i++)); do
    "$check" && return 0
    if ! running "$name"; then
      log_tail "$@"
      die "$name exited during start-up (logs above, all in $DIR/log)"
    fi
    (($(date +%s) < deadline)) || break
    sleep 0.1
  done
  "$check" && return 0
  log_tail "$@"
  die "$name did not answer within ${START_TIMEOUT}s (logs above, all in $DIR/log)"
}
# run_quiet LOG CMD...: run a setup command, its output to LOG; show LOG's tail on failure
run_quiet() {
  local logf=$1
  shift
  if ! "$@" >>"$logf" 2>&1; then
    log_tail "$logf"
    die "failed: $*"
  fi
}
# one stamp per thing whose inputs may change between runs
stamp_is() { [[ -f $DIR/run/$1.stamp && $(cat "$DIR/run/$1.stamp") == "$2" ]]; }

# ------------------------------------------------------- configurations
# auth_encryption_key: random, made once, kept with the databases it encrypts
[[ -s $DIR/heat/auth_encryption_key ]] ||
  (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$DIR/heat/auth_encryption_key")
AUTH_KEY=$(cat "$DIR/heat/auth_encryption_key")

cat >"$DIR/etc/keystone.conf.new" <<EOF
# written by tools/openstack/start.sh
[DEFAULT]
log_file = $DIR/log/keystone.log
use_stderr = false
[database]
connection = sqlite:///$DIR/keystone/keystone.sqlite
[token]
provider = fernet
expiration = $KEYSTONE_TOKEN_EXPIRATION
[fernet_tokens]
key_repository = $DIR/keystone/fernet-keys
[fernet_receipts]
key_repository = $DIR/keystone/fernet-keys
[credential]
key_repository = $DIR/keystone/credential-keys
[cache]
enabled = true
# in-process cache that stores copies: with plain dogpile.cache.memory,
# Keystone mutates a cached credential (pops encrypted_blob) and the next
# GET/DELETE /v3/credentials/ID fails with a 500 (KeyError), which makes
# Heat's delete of any stack with a ScalingPolicy DELETE_FAILED
backend = dogpile.cache.memory_pickle
[identity]
# cheapest bcrypt cost: a password check costs ~1 ms instead of ~250 ms
password_hash_rounds = 4
EOF

cat >"$DIR/etc/heat.conf.new" <<EOF
# written by tools/openstack/start.sh; heat-all runs with HEAT_TASK_POLL_SECS=$HEAT_TASK_POLL_SECS
[DEFAULT]
log_file = $DIR/log/heat.log
use_stderr = false
host = vnflow-heat
# API and engine share one process, so the in-memory RPC driver is enough
transport_url = fake://
num_engine_workers = 1
# without it the API keeps serving ~60 s after SIGTERM
graceful_shutdown_timeout = 5
region_name_for_services = RegionOne
auth_encryption_key = $AUTH_KEY
deferred_auth_method = trusts
# Heat creates a project and users per stack in this domain (signals, scaling policies)
stack_user_domain_name = heat
stack_domain_admin = heat_domain_admin
stack_domain_admin_password = $HEAT_DOMAIN_ADMIN_PASSWORD
# every fake OpenStack resource is a nested stack: one level more
max_nested_stack_depth = 10
max_stacks_per_tenant = 10000
# heat-api-cfn is not run; these only appear in attributes such as alarm_url
heat_metadata_server_url = http://$BIND:$((HEAT_PORT + 1))
heat_waitcondition_server_url = http://$BIND:$((HEAT_PORT + 1))/v1/waitcondition
[heat_all]
enabled_services = engine,api
[heat_api]
bind_host = $BIND
bind_port = $HEAT_PORT
workers = 1
[database]
connection = sqlite:///$DIR/heat/heat.sqlite
[paste_deploy]
api_paste_config = $DIR/etc/heat-api-paste.ini
[oslo_messaging_notifications]
driver = noop
[oslo_concurrency]
lock_path = $DIR/heat/lock
[clients_keystone]
auth_uri = http://$BIND:$KEYSTONE_PORT
[keystone_authtoken]
www_authenticate_uri = $KEYSTONE_URL
auth_url = $KEYSTONE_URL
auth_type = password
username = heat
password = $HEAT_PASSWORD
project_name = service
user_domain_name = Default
project_domain_name = Default
service_token_roles_required = false
[trustee]
auth_type = password
auth_url = $KEYSTONE_URL
username = heat
password = $HEAT_PASSWORD
user_domain_name = Default
EOF

# The heat-api WSGI pipeline (heat-common's api-paste.ini is not installed)
cat >"$DIR/etc/heat-api-paste.ini.new" <<'EOF'
[pipeline:heat-api]
pipeline = request_id faultwrap versionnegotiation authurl authtoken context apiv1app

[app:apiv1app]
paste.app_factory = heat.common.wsgi:app_factory
heat.app_factory = heat.api.openstack.v1:API

[filter:request_id]
paste.filter_factory = oslo_middleware.request_id:RequestId.factory

[filter:faultwrap]
paste.filter_factory = heat.common.wsgi:filter_factory
heat.filter_factory = heat.api.openstack:faultwrap_filter

[filter:versionnegotiation]
paste.filter_factory = heat.common.wsgi:filter_factory
heat.filter_factory = heat.api.openstack:version_negotiation_filter

[filter:authurl]
paste.filter_factory = heat.common.auth_url:filter_factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory

[filter:context]
paste.filter_factory = heat.common.context:ContextMiddleware_filter_factory
EOF

keystone_conf_changed=0
heat_conf_changed=0
install_if_changed "$DIR/etc/keystone.conf.new" "$DIR/etc/keystone.conf" && keystone_conf_changed=1
install_if_changed "$DIR/etc/heat.conf.new" "$DIR/etc/heat.conf" && heat_conf_changed=1
install_if_changed "$DIR/etc/heat-api-paste.ini.new" "$DIR/etc/heat-api-paste.ini" && heat_conf_changed=1

# A running service started with other settings is stopped and started again.
stop_service() {
  local name=$1 pid i
  pid=$(pid_of "$name")
  if running "$name"; then
    say "restarting $name (pid $pid): its settings changed"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/run/$name.pid"
}
if ((keystone_conf_changed)); then stop_service keystone; fi
# Heat caches Keystone tokens and connections: restart it together with Keystone.
if ((heat_conf_changed || keystone_conf_changed)); then stop_service heat; fi

# ------------------------------------------------------------- keystone
KEYSTONE_MANAGE=(keystone-manage --config-file "$DIR/etc/keystone.conf")
KEYSTONE_LOGS=("$DIR/log/keystone-server.log" "$DIR/log/keystone.log")
set_wal() { "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL")' "$1"; }

if ! running keystone; then
  if [[ ! -f $DIR/keystone/db.ready ]]; then
    t=$(date +%s%N)
    run_quiet "$DIR/log/keystone-manage.log" "${KEYSTONE_MANAGE[@]}" db_sync
    # WAL: readers no longer block writers ("database is locked" 500s otherwise)
    set_wal "$DIR/keystone/keystone.sqlite"
    [[ -e $DIR/keystone/fernet-keys/0 ]] || run_quiet "$DIR/log/keystone-manage.log" \
      "${KEYSTONE_MANAGE[@]}" fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
    [[ -e $DIR/keystone/credential-keys/0 ]] || run_quiet "$DIR/log/keystone-manage.log" \
      "${KEYSTONE_MANAGE[@]}" credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
    touch "$DIR/keystone/db.ready"
    say "keystone database and keys created in $(elapsed "$t") ms"
  fi
  if listening "$KEYSTONE_PORT"; then die "$BIND:$KEYSTONE_PORT is already taken by another process"; fi
  t=$(date +%s%N)
  setsid "$PY" "$DIR/bin/keystone-wsgi.py" --host "$BIND" --port "$KEYSTONE_PORT" \
    --config "$DIR/etc/keystone.conf" --access-log "$DIR/log/keystone-access.log" \
    >>"$DIR/log/keystone-server.log" 2>&1 </dev/null &
  echo $! >"$DIR/run/keystone.pid"
  wait_ready keystone keystone_ready "${KEYSTONE_LOGS[@]}"
  say "keystone answers on $KEYSTONE_URL after $(elapsed "$t") ms (pid $(pid_of keystone))"
elif ! keystone_ready; then
  wait_ready keystone keystone_ready "${KEYSTONE_LOGS[@]}"
fi

# admin user, RegionOne and the identity endpoints; again when the URL or admin password changes
bootstrap_stamp="$KEYSTONE_URL $(printf '%s' "$ADMIN_PASSWORD" | sha256sum | cut -c1-16)"
if ! stamp_is keystone-bootstrap "$bootstrap_stamp"; then
  t=$(date +%s%N)
  run_quiet "$DIR/log/keystone-manage.log" "${KEYSTONE_MANAGE[@]}" bootstrap \
    --bootstrap-username admin --bootstrap-password "$ADMIN_PASSWORD" \
    --bootstrap-project-name admin --bootstrap-role-name admin \
    --bootstrap-service-name keystone --bootstrap-region-id RegionOne \
    --bootstrap-admin-url "$KEYSTONE_URL/" --bootstrap-internal-url "$KEYSTONE_URL/" \
    --bootstrap-public-url "$KEYSTONE_URL/"
  echo "$bootstrap_stamp" >"$DIR/run/keystone-bootstrap.stamp"
  say "keystone bootstrap (admin user, RegionOne, identity endpoints) in $(elapsed "$t") ms"
fi

# Projects, users, roles, the heat stack-user domain and the catalog: get or
# create, so that a re-run is harmless; skipped when nothing changed.
identity_stamp=$(printf '%s\n' "$KEYSTONE_URL" "$HEAT_URL_TEMPLATE" "$ADMIN_PASSWORD" "$TESTER_PASSWORD" \
  "$HEAT_PASSWORD" "$HEAT_DOMAIN_ADMIN_PASSWORD" | sha256sum | cut -c1-32)
if ! stamp_is identity "$identity_stamp" || [[ ! -s $DIR/run/vnf.project_id ]]; then
  t=$(date +%s%N)
  KEYSTONE_URL=$KEYSTONE_URL HEAT_URL_TEMPLATE=$HEAT_URL_TEMPLATE ADMIN_PASSWORD=$ADMIN_PASSWORD \
    TESTER_PASSWORD=$TESTER_PASSWORD HEAT_PASSWORD=$HEAT_PASSWORD \
    HEAT_DOMAIN_ADMIN_PASSWORD=$HEAT_DOMAIN_ADMIN_PASSWORD \
    "$PY" "$DIR/bin/identity-setup.py" >"$DIR/run/vnf.project_id" 2>"$DIR/log/identity-setup.log" || {
    log_tail "$DIR/log/identity-setup.log"
    die "creating the identity objects failed"
  }
  echo "$identity_stamp" >"$DIR/run/identity.stamp"
  say "identity objects in place in $(elapsed "$t") ms"
fi
PROJECT_ID=$(cat "$DIR/run/vnf.project_id")

# ----------------------------------------------------------------- heat
HEAT_LOGS=("$DIR/log/heat-server.log" "$DIR/log/heat.log")
if ! running heat; then
  if [[ ! -f $DIR/heat/db.ready ]]; then
    t=$(date +%s%N)
    run_quiet "$DIR/log/heat-manage.log" "$PY" -c 'import sys; from heat.cmd.manage import main; sys.exit(main())' \
      --config-file "$DIR/etc/heat.conf" db_sync
    set_wal "$DIR/heat/heat.sqlite"
    touch "$DIR/heat/db.ready"
    say "heat database created in $(elapsed "$t") ms"
  fi
  if listening "$HEAT_PORT"; then die "$BIND:$HEAT_PORT is already taken by another process"; fi
  t=$(date +%s%N)
  HEAT_TASK_POLL_SECS=$HEAT_TASK_POLL_SECS setsid "$PY" "$DIR/bin/heat-all.py" \
    --config-file "$DIR/etc/heat.conf" >>"$DIR/log/heat-server.log" 2>&1 </dev/null &
  echo $! >"$DIR/run/heat.pid"
  wait_ready heat heat_ready "${HEAT_LOGS[@]}"
  say "heat answers on http://$BIND:$HEAT_PORT after $(elapsed "$t") ms (pid $(pid_of heat))"
elif ! heat_ready; then
  wait_ready heat heat_ready "${HEAT_LOGS[@]}"
fi

# ---------------------------------------------------- client settings
cat >"$DIR/openrc" <<EOF
# vnflow test cloud (tools/openstack/start.sh); source it for curl/openstack
export OS_AUTH_URL=$KEYSTONE_URL
export OS_IDENTITY_API_VERSION=3
export OS_USERNAME=tester
export OS_PASSWORD=$TESTER_PASSWORD
export OS_PROJECT_NAME=vnf
export OS_USER_DOMAIN_NAME=Default
export OS_PROJECT_DOMAIN_NAME=Default
export OS_REGION_NAME=RegionOne
export OS_INTERFACE=public
EOF
cat >"$DIR/clouds.yaml" <<EOF
# vnflow test cloud (tools/openstack/start.sh): OS_CLIENT_CONFIG_FILE=$DIR/clouds.yaml OS_CLOUD=vnflow-test
clouds:
  vnflow-test:
    auth:
      auth_url: $KEYSTONE_URL
      username: tester
      password: $TESTER_PASSWORD
      project_name: vnf
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
    interface: public
EOF
chmod 600 "$DIR/openrc" "$DIR/clouds.yaml"

say "ready"
cat <<EOF
Keystone v3     $KEYSTONE_URL   (admin / $ADMIN_PASSWORD, project admin)
Heat v1         http://$BIND:$HEAT_PORT/v1/$PROJECT_ID   (catalog type orchestration)
test user       tester / $TESTER_PASSWORD, project vnf ($PROJECT_ID), domain Default
token lifetime  ${KEYSTONE_TOKEN_EXPIRATION}s; heat poll cap ${HEAT_TASK_POLL_SECS}s
logs, pids      $DIR/log  $DIR/run
==> $DIR/openrc
$(cat "$DIR/openrc")
==> $DIR/clouds.yaml
$(cat "$DIR/clouds.yaml")
EOF
