#!/usr/bin/env bash
# http.request for real: a daemon runs a package whose instantiate_end does get-or-create
# over a REST API (tests/fakes/rest_api.py on 127.0.0.1, over HTTP and HTTPS with a CA the
# test makes), the way seed 004's cluster-create flow does. Checks what the API received
# (probes, creates, idempotency keys, credentials), retries of injected 503s, a secret in an
# answer (secret_fields) usable by the next state and absent from every view, the log and
# the database, a slow answer (a timeout, retried), the 404-then-create race (a 409 read again),
# an untrusted certificate refused as "invalid", replay, and --http-allow.
# Usage: http_request_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init http_request "$v"
py=/usr/bin/python3
command -v openssl >/dev/null || die "openssl is missing"
work=$T_DIR/w
mkdir -p "$work/out"
export VNFLOW_DB=$work/vnflow.db
pids=()
daemon_pid=
cleanup() {
  [[ -z $daemon_pid ]] || { kill -9 "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}
start_daemon() {  # start_daemon [DAEMON_OPTIONS...]
  "$v" daemon --workers 4 --work-dir "$work/wd" --poll-ms 10 "$@" 2>>"$work/daemon.log" &
  daemon_pid=$!
}
stop_daemon() {
  kill -TERM "$daemon_pid" 2>/dev/null
  wait_pid "$daemon_pid" 30 >/dev/null
  daemon_pid=
}

# A CA and a certificate for 127.0.0.1 signed by it; a second CA that signed nothing here.
{ t_tls_server "$T_DIR" && t_self_signed "$T_DIR" other; } ||
  { t_show "$T_DIR/openssl.log"; die "openssl could not make the certificates"; }

token=tok-$RANDOM$RANDOM$RANDOM
start_api() {  # start_api LOG [--tls CERT KEY]: the stand-in on a free port; echoes it
  local port log=$1
  shift
  for _ in 1 2 3 4 5; do
    port=$($py "$root/tests/api/free_port.py")
    $py "$root/tests/fakes/rest_api.py" --port "$port" --log "$log" --token "$token" "$@" \
      2>>"$work/api.err" &
    pids+=($!)
    if wait_until 10 curl -sk -o /dev/null "http${3:+s}://127.0.0.1:$port/v1/x" -H "Authorization: Bearer $token"; then
      echo "$port"
      return 0
    fi
  done
  return 1
}
# Not $(...): the servers must stay children of this shell, for cleanup to stop them.
start_api "$work/api.log" >"$work/port" || die "the REST stand-in did not start"
echo '{"collections": ["networks"]}' >"$work/seed.json"
start_api "$work/tls.log" --tls "$T_DIR/server.pem" "$T_DIR/server.key" --seed "$work/seed.json" >"$work/tls-port" ||
  die "the HTTPS stand-in did not start"
: >"$work/api.log"  # the readiness checks' requests
: >"$work/tls.log"
api=http://127.0.0.1:$(cat "$work/port")
tls=https://127.0.0.1:$(cat "$work/tls-port")
curl_api() { curl -s -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$@"; }
fault() { curl -s -o /dev/null -X POST "$api/_control/fault" -d "$1"; }

# The package: the local demo with an instantiate_end that builds over the REST API.
pkg=$work/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
cat >"$pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: get-or-create over a REST API, as seed 004's cluster create does
start: network
states:
  network:
    action: http.request
    with:
      method: POST
      url: ${request.additionalParams.api}/v1/networks
      auth: {type: bearer, token: "${request.additionalParams.api_token}"}
      json: {name: "net-${instance.id}", cidr: 10.0.0.0/24}
      probe: {url: "${request.additionalParams.api}/v1/networks/net-${instance.id}"}
      expect: [201]
    timeout: 3s
    retry: {attempts: 4, backoff: 100ms, on: [transient, timeout]}
    next: secgroups
  secgroups:
    description: a security group per region, each get-or-create
    action: http.request
    for_each: ${request.additionalParams.regions}
    as: region
    with:
      method: POST
      url: ${request.additionalParams.api}/v1/secgroups
      auth: {type: bearer, token: "${request.additionalParams.api_token}"}
      json: {name: "sg-${region}", index: "${index}"}
      probe: {url: "${request.additionalParams.api}/v1/secgroups/sg-${region}"}
    timeout: 10s
    next: key
  key:
    action: http.request
    with:
      method: POST
      url: ${request.additionalParams.api}/v1/keypairs
      auth: {type: bearer, token: "${request.additionalParams.api_token}"}
      json: {name: "key-${instance.id}"}
      secret_fields: [json.material]
      expect: [201]
    timeout: 10s
    next: use_key
  use_key:
    description: the key is there for the next state (written where the test reads it)
    action: local.exec
    with:
      shell: printf '%s' "$KEY" > "$OUT/key.pem"; sleep "$HOLD"
      env:
        KEY: ${states.key.json.material}
        OUT: ${request.additionalParams.out}
        HOLD: ${string(default(request.additionalParams.hold, 0))}
    timeout: 10s
    next: over_tls
  over_tls:
    action: http.request
    with:
      url: ${request.additionalParams.tls_api}/v1/networks
      auth: {type: bearer, token: "${request.additionalParams.api_token}"}
      ca_cert: ${request.additionalParams.ca}
      query: {owner: "${instance.id}"}
    timeout: 10s
    next: done
  done:
    succeed: true
EOF
t_demo_manifest "$root" "$pkg"
request() {  # request FILE CA_FILE [REGIONS_JSON [HOLD]]
  jq -n --arg api "$api" --arg tls "$tls" --arg token "$token" --arg out "$work/out" \
    --rawfile ca "$2" --argjson regions "${3:-[\"r1\",\"r2\",\"r3\"]}" --argjson hold "${4:-0}" \
    '{flavourId: "simple", additionalParams: {api: $api, tls_api: $tls, api_token: $token,
      ca: $ca, out: $out, regions: $regions, work_dir: ($out + "/vnfs"), hold: $hold}}' >"$1"
}
request "$work/inst-hold.json" "$T_DIR/ca.pem" '["r1","r2","r3"]' 4
request "$work/inst.json" "$T_DIR/ca.pem"
request "$work/inst-other-ca.json" "$T_DIR/other.pem" '["r1"]'

p=$("$v" package onboard "$pkg" 2>"$work/err") && ok "a package using http.request onboards" ||
  { t_show "$work/err"; die "onboard"; }
i1=$("$v" instance create --package "$p")
# sg-r2 exists already (made by someone else): its probe finds it, nothing is created.
curl_api -o /dev/null -X POST "$api/v1/secgroups" -d '{"name": "sg-r2", "by": "test"}'
: >"$work/api.log"
fault '{"method": "POST", "path": "/v1/networks", "status": 503, "times": 2}'

start_daemon
o1=$("$v" instance instantiate "$i1" --request "$work/inst-hold.json")
# The daemon killed while use_key runs (it holds 4 s after writing the key): the restarted
# daemon must learn the key again from what is stored, to keep hiding it.
check "the key reaches use_key" wait_until 60 test -s "$work/out/key.pem"
kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
rm "$work/out/key.pem"
start_daemon
wait_op "$o1" 90
check "instantiate over the REST API completes" test "$(op_state "$o1")" = COMPLETED ||
  { "$v" op show "$o1"; t_show "$work/daemon.log"; }

log() { jq -r "$1" "$work/api.log"; }
check "the network: probed (404), two 503s retried, then created" \
  test "$(log 'select(.path | startswith("/v1/networks")) | "\(.method) \(.status)"' | tr '\n' ' ')" = \
  "GET 404 POST 503 GET 404 POST 503 GET 404 POST 201 "
check "... the history shows the retries as transient" \
  test "$("$v" op history "$o1" | grep -c 'retry_scheduled instantiate_end.network')" -eq 2
keys=$(log 'select(.method == "POST" and .path == "/v1/networks") | .idempotency_key' | sort -u)
check "the three attempts of the POST carried one idempotency key" \
  test "$(echo "$keys" | wc -l)" -eq 1
check "... the call's: the history's key of its attempt without the attempt" \
  grep -qF "\"$keys/3\"" <("$v" op history "$o1" --json)
check "every request carried the bearer token" \
  test "$(log .auth | sort -u)" = ok
check "security groups: created for r1 and r3; r2 found by its probe, not created again" \
  test "$(log 'select(.method == "POST" and .path == "/v1/secgroups") | .body | fromjson | .name' | sort | tr '\n' ' ')" = "sg-r1 sg-r3 "
check "... each with its item's index" \
  test "$(log 'select(.method == "POST" and .path == "/v1/secgroups") | .body | fromjson | .index' | sort | tr '\n' ' ')" = "0 2 "
check "... the probe's answer is r2's result (probed), the others' their creation's" \
  test "$("$v" op history "$o1" --json | jq -r '.[] | select(.kind == "succeeded" and .state == "instantiate_end.secgroups") | "\(.item) \(.data.probed)"' | sort | tr '\n' ' ')" = "0 false 1 true 2 false "
check "the key's private part reached the next state (again, after the restart)" grep -q '^-----BEGIN PRIVATE KEY-----' "$work/out/key.pem"
check "... in a re-dispatch with the same key" \
  test "$("$v" op history "$o1" | grep -c 'redispatched instantiate_end.use_key')" -eq 1
secret=$(sed -n 2p "$work/out/key.pem")
check "... a secret the API made up" test "${secret:0:10}" = SECRETKEY-
"$v" op show "$o1" --json >"$work/show.json"
"$v" op history "$o1" --json >"$work/hist.json"
"$v" op show "$o1" --timing >"$work/timing.txt"
for f in show.json hist.json timing.txt daemon.log; do
  check "the private key is not in $f" bash -c "! grep -qF '$secret' '$work/$f'"
  check "the API token is not in $f" bash -c "! grep -qF '$token' '$work/$f'"
done
check "the key's field shows as ***" grep -q '"material":"\*\*\*"' "$work/hist.json"
check "... and only the secret: after the restart, a later answer's content-type shows" \
  test "$(jq -r '.[] | select(.kind == "succeeded" and .state == "instantiate_end.over_tls") | .data.headers["content-type"]' "$work/hist.json")" = application/json
check "the private key is sealed at rest" bash -c "! grep -saqF '$secret' '$VNFLOW_DB' '$VNFLOW_DB-wal'"
check "the API token is sealed at rest" bash -c "! grep -saqF '$token' '$VNFLOW_DB' '$VNFLOW_DB-wal'"
check "the HTTPS call trusted the CA it was given" \
  test "$(jq -r '"\(.method) \(.path) \(.query) \(.status)"' "$work/tls.log")" = "GET /v1/networks owner=$i1 200"
check "replay --dry-run reproduces the operation from its history" "$v" op replay "$o1" --dry-run

# A slow answer, then the 404-then-create race. The network's probe answers after 4 s, past
# the state's 3 s: a timeout, retried. Then another client creates sg-r9 between the probe
# and the POST (the stand-in answers 409): the state reads it again and takes it as found.
: >"$work/api.log"
request "$work/inst-race.json" "$T_DIR/ca.pem" '["r9"]'
i4=$("$v" instance create --package "$p")
fault '{"method": "GET", "path": "/v1/networks/net-'"$i4"'", "delay_ms": 4000, "times": 1}'
fault '{"method": "POST", "path": "/v1/secgroups", "race": true, "times": 1}'
o4=$("$v" instance instantiate "$i4" --request "$work/inst-race.json")
wait_op "$o4" 60
check "a probe slower than the state's timeout is retried as a timeout" \
  grep -q 'retry_scheduled instantiate_end.network attempt 1: timeout' <("$v" op history "$o4")
check "... and the network is created once" \
  test "$(log 'select(.method == "POST" and .path == "/v1/networks") | .status' | tr '\n' ' ')" = "201 "
check "a get-or-create that loses the race to another client completes" \
  test "$(op_state "$o4")" = COMPLETED || "$v" op show "$o4"
check "... probe 404, POST 409 (someone else's), probe again 200" \
  test "$(log 'select(.path | startswith("/v1/secgroups")) | "\(.method) \(.status)"' | tr '\n' ' ')" = \
  "GET 404 POST 409 GET 200 "
check "... its result is the other client's resource, probed (a rollback leaves it)" \
  test "$("$v" op history "$o4" --json | jq -r '.[] | select(.kind == "succeeded" and .state == "instantiate_end.secgroups") | "\(.data.probed) \(.data.json.by)"')" = "true someone else"

# The slow probe is logged when it answers, 4 s after it began, which can be after everything
# above: wait for it, so that it does not land in a later phase's log.
slow_probe_logged() {
  test "$(log 'select(.method == "GET" and .path == "/v1/networks/net-'"$i4"'") | .method' | wc -l)" -ge 2
}
wait_until 10 slow_probe_logged || echo "# the slow probe was not logged within 10 s"

# A 4xx is the author's mistake: no retry, the answer's message in the reason. Then, after
# an operator's retry, a CA that did not sign the server's certificate: refused at once as
# "invalid", no retry either.
i2=$("$v" instance create --package "$p")
tls_before=$(wc -l <"$work/tls.log")
fault '{"method": "GET", "path": "/v1/networks/net-'"$i2"'", "status": 400, "times": 1}'
o2=$("$v" instance instantiate "$i2" --request "$work/inst-other-ca.json")
wait_op "$o2" 60
check "a probe answered 400 leaves FAILED_TEMP" test "$(op_state "$o2")" = FAILED_TEMP
check "... as invalid, quoting the API's message, not retried" \
  grep -q 'instantiate_end.network: invalid: http.request probe GET http://127.0.0.1:[0-9]*/v1/networks/net-[^ ]*: HTTP 400: {"message": "injected fault 400"}' <("$v" op show "$o2")
"$v" op retry "$o2" >/dev/null
wait_op "$o2" 60
check "an untrusted certificate leaves FAILED_TEMP" test "$(op_state "$o2")" = FAILED_TEMP
"$v" op show "$o2" >"$work/show2.txt"
check "... class invalid, at the TLS handshake" \
  grep -q 'instantiate_end.over_tls: invalid: http.request GET https://127.0.0.1:[0-9]*/v1/networks: TLS handshake' "$work/show2.txt"
check "... nothing reached the HTTPS server" test "$(wc -l <"$work/tls.log")" -eq "$tls_before"
stop_daemon

# --http-allow: a daemon confined to other networks contacts nothing.
start_daemon --http-allow 10.0.0.0/8
: >"$work/api.log"
i3=$("$v" instance create --package "$p")
o3=$("$v" instance instantiate "$i3" --request "$work/inst.json")
wait_op "$o3" 60
check "with --http-allow 10.0.0.0/8 the call to 127.0.0.1 fails" test "$(op_state "$o3")" = FAILED_TEMP
check "... as invalid, naming the allowed networks" \
  grep -q 'invalid: http.request probe GET .*outside the networks allowed' <("$v" op show "$o3")
check "... and the API received nothing" test ! -s "$work/api.log"
stop_daemon
"$v" daemon --http-allow 10.0.0.0/33 >/dev/null 2>"$work/err"
check "a bad --http-allow is a usage error (exit 2)" test $? -eq 2
check "... naming the option" grep -q -- '--http-allow' "$work/err"

t_finish
