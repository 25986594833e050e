#!/usr/bin/env bash
# Seed 004 end to end: csar-samples/ladybug-cluster creates a Kubernetes cluster the way
# CB-Ladybug does, against a stand-in of CB-Tumblebug's REST API (tests/fakes/rest_api.py on
# 127.0.0.1, basic auth) whose "VMs" are the test's network-namespace VMs with a real sshd
# (tools/vms/vm.sh). Checks every seed-004 step happened, in order (the API's log, the VMs'
# files), that a resource shared with another cluster is found and not created again, that a
# failure at VM creation rolls back exactly what that operation created, newest first, and
# that the history holds no secret (the API's password, the SSH key, the join token).
# Usage: ladybug_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
T_WAIT_SECS=180
t_init ladybug "$v"
py=/usr/bin/python3
work=$T_DIR/w
mkdir -p "$work"
export VNFLOW_VMS_DIR=$work/vms VNFLOW_DB=$work/vnflow.db
vm=$root/tools/vms/vm.sh
names=(lbcp1 lbcp2 lbcp3 lbw1)
addrs=(10.231.44.11 10.231.44.12 10.231.44.13 10.231.44.14)
api_pid= daemon_pid=
cleanup() {
  [[ -z $daemon_pid ]] || { kill -9 "$daemon_pid"; wait "$daemon_pid"; } 2>/dev/null
  [[ -z $api_pid ]] || { kill "$api_pid"; wait "$api_pid"; } 2>/dev/null
  for n in "${names[@]}"; do bash "$vm" down "$n" >/dev/null 2>&1; done
}
show_logs() { echo "daemon log (tail):"; t_show "$work/daemon.log"; }
T_ON_DIE=show_logs

bash "$vm" setup >"$work/vm-setup.log" 2>&1 || { t_show "$work/vm-setup.log"; die "vm.sh setup"; }
for k in "${!names[@]}"; do
  bash "$vm" up "${names[$k]}" "${addrs[$k]}" || die "vm.sh up ${names[$k]}"
done
on_vm() { bash "$vm" exec "$1" "${@:2}"; }

# Tumblebug as far as the flow goes: the namespace, three connections and their regions, the
# spec lookup; an image of the GCP connection some other cluster registered already.
tb=/tumblebug
cat >"$work/seed.json" <<EOF
{"resources": {
  "$tb/ns/ns01": {"id": "ns01", "name": "ns01"},
  "$tb/connConfig/config-aws-ap": {"configName": "config-aws-ap", "providerName": "AWS", "regionName": "ap-northeast-2"},
  "$tb/connConfig/config-gcp-as": {"configName": "config-gcp-as", "providerName": "GCP", "regionName": "asia-northeast3"},
  "$tb/connConfig/config-azure-kr": {"configName": "config-azure-kr", "providerName": "AZURE", "regionName": "koreacentral"},
  "$tb/connConfig/config-mock": {"configName": "config-mock", "providerName": "MOCK", "regionName": "mock-1"},
  "$tb/region/ap-northeast-2": {"regionName": "ap-northeast-2"},
  "$tb/region/asia-northeast3": {"regionName": "asia-northeast3"},
  "$tb/region/koreacentral": {"regionName": "koreacentral"},
  "$tb/ns/ns01/resources/image/config-gcp-as-image": {"name": "config-gcp-as-image", "by": "another cluster"}},
 "echo": ["$tb/lookupSpec"],
 "collections": ["mcis"]}
EOF
tb_pass=tb-pass-$RANDOM$RANDOM
port=$($py "$root/tests/api/free_port.py")
$py "$root/tests/fakes/rest_api.py" --port "$port" --log "$work/api.log" --basic "default:$tb_pass" \
  --seed "$work/seed.json" --addresses "$(IFS=,; echo "${addrs[*]}")" \
  --ssh-key "$VNFLOW_VMS_DIR/client/id_ed25519" 2>"$work/api.err" &
api_pid=$!
wait_until 10 curl -s -o /dev/null "http://127.0.0.1:$port/" || die "the Tumblebug stand-in did not start"
url=http://127.0.0.1:$port$tb

request() {  # request FILE CLUSTER CP_CONNECTION WORKER_CONNECTION [CP_COUNT]
  jq -n --arg url "$url" --arg pass "$tb_pass" --arg cluster "$2" --arg cp "$3" --arg w "$4" \
    --argjson n "${5:-3}" \
    '{flavourId: "simple", additionalParams: {
       tumblebug: {url: $url, username: "default", password: $pass},
       namespace: "ns01", cluster: $cluster,
       controlPlane: [{connection: $cp, count: $n, spec: "t3.medium"}],
       worker: [{connection: $w, count: 1, spec: "n1-standard-2"}],
       config: {kubernetes: {networkCni: "canal", podCidr: "10.244.0.0/16"}},
       vm_user: "vnfuser"}}' >"$1"
}
request "$work/create.json" cb-cluster config-aws-ap config-gcp-as
request "$work/fail.json" cb-fail config-aws-ap config-azure-kr 1
request "$work/even.json" cb-even config-aws-ap config-gcp-as 2
request "$work/mock.json" cb-mock config-mock config-gcp-as 1

p=$("$v" package onboard "$root/csar-samples/ladybug-cluster" 2>"$work/err") &&
  ok "the ladybug-cluster package onboards" || { t_show "$work/err"; die "onboard"; }
"$v" daemon --workers 8 --work-dir "$work/wd" --poll-ms 10 2>>"$work/daemon.log" &
daemon_pid=$!

# --- validation returns early, with the reason, before anything is created
i0=$("$v" instance create --package "$p")
o0=$("$v" instance instantiate "$i0" --request "$work/even.json")
wait_op "$o0" 60
check "an even control-plane count is refused (FAILED_TEMP)" test "$(op_state "$o0")" = FAILED_TEMP
check "... with the package's reason" grep -q 'controlPlane is one set of an odd number of nodes' <("$v" op show "$o0")
"$v" op fail "$o0" >/dev/null
i0b=$("$v" instance create --package "$p")
o0b=$("$v" instance instantiate "$i0b" --request "$work/mock.json")
wait_op "$o0b" 60
check "an unsupported cloud is refused, named" grep -q 'config-mock is on MOCK, which Ladybug does not support' <("$v" op show "$o0b")
"$v" op fail "$o0b" >/dev/null
check "... and nothing was created" bash -c "! jq -r .method '$work/api.log' | grep -qE 'POST|DELETE|PUT'"

# --- the cluster. Another client creates the AWS region's security group between its probe
# and its POST (the 404-then-create race: the stand-in answers 409).
: >"$work/api.log"
curl -s -o /dev/null -X POST "http://127.0.0.1:$port/_control/fault" \
  -d '{"method": "POST", "path": "/tumblebug/ns/ns01/resources/securityGroup", "race": true, "times": 1}'
i1=$("$v" instance create --package "$p")
o1=$("$v" instance instantiate "$i1" --request "$work/create.json")
wait_op "$o1" 180
check "the cluster is created (COMPLETED)" test "$(op_state "$o1")" = COMPLETED ||
  { "$v" op show "$o1"; t_show "$work/daemon.log"; }

calls=$(jq -r '"\(.method) \(.path | sub("^/tumblebug"; "")) \(.status)"' "$work/api.log")
printf '%s\n' "$calls" >"$work/calls.txt"
expected="GET /ns/ns01 200
GET /connConfig/config-aws-ap 200
GET /connConfig/config-gcp-as 200
GET /ns/ns01/mcis/cb-cluster 404
POST /lookupSpec 200
GET /region/ap-northeast-2 200
GET /ns/ns01/resources/vNet/config-aws-ap-vpc 404
POST /ns/ns01/resources/vNet 201
GET /ns/ns01/resources/securityGroup/config-aws-ap-sg 404
POST /ns/ns01/resources/securityGroup 409
GET /ns/ns01/resources/securityGroup/config-aws-ap-sg 200
GET /ns/ns01/resources/sshKey/config-aws-ap-sshkey 404
POST /ns/ns01/resources/sshKey 201
GET /ns/ns01/resources/image/config-aws-ap-image 404
POST /ns/ns01/resources/image 201
GET /ns/ns01/resources/spec/config-aws-ap-t3.medium 404
POST /ns/ns01/resources/spec 201
POST /lookupSpec 200
GET /region/asia-northeast3 200
GET /ns/ns01/resources/vNet/config-gcp-as-vpc 404
POST /ns/ns01/resources/vNet 201
GET /ns/ns01/resources/securityGroup/config-gcp-as-sg 404
POST /ns/ns01/resources/securityGroup 201
GET /ns/ns01/resources/sshKey/config-gcp-as-sshkey 404
POST /ns/ns01/resources/sshKey 201
GET /ns/ns01/resources/image/config-gcp-as-image 200
GET /ns/ns01/resources/spec/config-gcp-as-n1-standard-2 404
POST /ns/ns01/resources/spec 201
POST /ns/ns01/mcis 201"
# The two connections are checked at once (one fan-out): compared as a set. The rest is one
# call after the other, as seed 004 draws it: the validation, then each connection in turn
# (Workflows/region.yaml: spec lookup, region, vNet, SG, key, image, spec), then the MCIS.
check "every seed-004 step of 1-3 happened: validation, then get-or-create per region, then the MCIS" \
  test "$(sort "$work/calls.txt" | md5sum)" = "$(printf '%s\n' "$expected" | sort | md5sum)"
check "... in the seed's order: namespace, connections, MCIS absent, then each region in turn (spec, region, vNet, SG, key, image, spec), then the MCIS" \
  test "$(sed -n '1p;4,$p' "$work/calls.txt")" = "$(printf '%s\n' "$expected" | sed -n '1p;4,$p')"
check "the security group another client made meanwhile was taken as found (probed), the GCP one created" \
  test "$("$v" op history "$o1" --json | jq -r '[.[] | select(.kind == "succeeded" and .state == "instantiate_end.regions.security_group") | .data.probed | tostring] | join(" ")')" = "true false"
check "the GCP image another cluster registered was found, not registered again" \
  test "$(jq -r 'select(.method == "POST" and (.path | endswith("/image"))) | .body | fromjson | .name' "$work/api.log")" = config-aws-ap-image
check "every call carried Tumblebug's credentials" test "$(jq -r .auth "$work/api.log" | sort -u)" = ok
check "the MCIS asked for 3 control-plane VMs and 1 worker, on their connections" \
  test "$(jq -r 'select(.method == "POST" and (.path | endswith("/mcis"))) | .body | fromjson | .vm[] | "\(.name) \(.label) \(.connectionName) \(.specId)"' "$work/api.log" | tr '\n' ';')" = \
  "cb-cluster-c-1 control-plane config-aws-ap config-aws-ap-t3.medium;cb-cluster-c-2 control-plane config-aws-ap config-aws-ap-t3.medium;cb-cluster-c-3 control-plane config-aws-ap config-aws-ap-t3.medium;cb-cluster-w-1-1 worker config-gcp-as config-gcp-as-n1-standard-2;"

# Steps 4-7 on the VMs (10.231.44.11-13 the control plane, .14 the worker).
at() { on_vm "$1" sh -c "sed -n 's/.* at=\([0-9]*\) .*/\1/p' /var/lib/ladybug-standin/$2"; }
for k in 0 1 2 3; do
  n=${names[$k]}
  check "$n: bootstrapped with its name and role" \
    on_vm "$n" grep -q "name=cb-cluster-$([[ $k -lt 3 ]] && echo "c-$((k + 1)) role=control-plane" || echo "w-1-1 role=worker")" /var/lib/ladybug-standin/bootstrap
  check "$n: the service unit is installed" on_vm "$n" test -f /etc/systemd/system/kubelet.service
done
check "lbcp1 is the leader: init with the request's pod CIDR and CNI" \
  on_vm lbcp1 grep -q 'cluster=cb-cluster pod_cidr=10.244.0.0/16 cni=canal' /var/lib/ladybug-standin/init
check "... its load balancer has the 3 control-plane nodes as backends" \
  test "$(on_vm lbcp1 cat /var/lib/ladybug-standin/haproxy.cfg | awk '{print $3}' | tr '\n' ' ')" = "10.231.44.11:6443 10.231.44.12:6443 10.231.44.13:6443 "
token_sha=$(on_vm lbcp1 sh -c 'printf %s "$(cat /var/lib/ladybug-standin/token)" | sha256sum | cut -c1-16')
for n in lbcp2 lbcp3 lbw1; do
  role=control-plane; [[ $n == lbw1 ]] && role=worker
  check "$n joined as $role, to the leader, with its token" \
    on_vm "$n" grep -q "role=$role leader=10.231.44.11 token_sha=$token_sha" /var/lib/ladybug-standin/joined
done
check "lbcp1 (the leader) did not join itself" bash -c "! bash '$vm' exec lbcp1 test -e /var/lib/ladybug-standin/joined"
latest_bootstrap=0
for n in "${names[@]}"; do
  b=$(at "$n" bootstrap); ((b > latest_bootstrap)) && latest_bootstrap=$b
done
init_at=$(at lbcp1 init)
check "every node was bootstrapped before the leader's init" test "$latest_bootstrap" -lt "$init_at"
joins_after=1
for n in lbcp2 lbcp3 lbw1; do
  j=$(at "$n" joined)
  [[ -n $j ]] && ((j > init_at)) || joins_after=0
done
check "every join came after the init" test "$joins_after" = 1
"$v" instance show "$i1" --json >"$work/instance.json"
check "the instance records the cluster: provisioned, its endpoint, its 4 nodes" \
  test "$(jq -r '.metadata | "\(.phase) \(.endpoint) \(.nodes | length) \(.nodes[3].role)"' "$work/instance.json")" = "provisioned 10.231.44.11:6443 4 worker"

"$v" op history "$o1" --json >"$work/hist.json"
"$v" op show "$o1" --json >"$work/show.json"
# Line 3 of the key: its material (line 2 starts with the format's constant header).
key_line=$(sed -n 3p "$VNFLOW_VMS_DIR/client/id_ed25519")
check "the views were read" test -s "$work/hist.json" -a -s "$work/show.json" -a -s "$work/instance.json" -a ${#key_line} -gt 20
token=$(on_vm lbcp1 cat /var/lib/ladybug-standin/token)
for f in hist.json show.json daemon.log instance.json; do
  check "$f holds no secret (Tumblebug's password, the SSH key, the join token)" \
    bash -c "! grep -qF -e '$tb_pass' -e '$key_line' -e '$token' '$work/$f'"
done
check "none of them is in the database in clear" \
  bash -c "! grep -saqF -e '$tb_pass' -e '$key_line' -e '$token' '$VNFLOW_DB' '$VNFLOW_DB-wal'"
check "replay --dry-run reproduces the cluster create" "$v" op replay "$o1" --dry-run

# --- a failure at VM creation: rollback removes exactly what that operation created
: >"$work/api.log"
curl -s -o /dev/null -X POST "http://127.0.0.1:$port/_control/fault" \
  -d '{"method": "POST", "path": "/tumblebug/ns/ns01/mcis", "status": 500, "times": 2}'
i2=$("$v" instance create --package "$p")
o2=$("$v" instance instantiate "$i2" --request "$work/fail.json")
wait_op "$o2" 120
check "a cluster whose VMs cannot be created stops in FAILED_TEMP" test "$(op_state "$o2")" = FAILED_TEMP
check "... at the MCIS, after its retry, with Tumblebug's reason" \
  grep -q 'instantiate_end.mcis: transient: .*HTTP 500: {"message": "injected fault 500"}' <("$v" op show "$o2")
created=$(jq -r 'select(.method == "POST" and .status == 201) | .path + "/" + (.body | fromjson | .name)' "$work/api.log")
check "it created the Azure region's resources and found the AWS ones" \
  test "$(echo "$created" | sed 's|.*/resources/||' | tr '\n' ' ')" = \
  "vNet/config-azure-kr-vpc securityGroup/config-azure-kr-sg sshKey/config-azure-kr-sshkey image/config-azure-kr-image spec/config-azure-kr-n1-standard-2 "
: >"$work/api.log"
"$v" op rollback "$o2" >/dev/null
wait_until 60 bash -c "[[ \$('$v' op show '$o2' | awk '\$1 == \"state\" {print \$2}') == ROLLED_BACK ]]"
check "op rollback ends ROLLED_BACK" test "$(op_state "$o2")" = ROLLED_BACK
deleted=$(jq -r 'select(.method == "DELETE") | .path' "$work/api.log")
check "the rollback deleted exactly what the operation created, newest first" \
  test "$(echo "$deleted" | tr '\n' ' ')" = "$(echo "$created" | tac | tr '\n' ' ')"
check "... and nothing of the AWS region, which cb-cluster uses" \
  bash -c "! jq -r 'select(.method == \"DELETE\") | .path' '$work/api.log' | grep -q aws"
check "the resources of cb-cluster are all still there" \
  bash -c "for r in vNet/config-aws-ap-vpc securityGroup/config-aws-ap-sg sshKey/config-aws-ap-sshkey image/config-aws-ap-image; do
    [[ \$(curl -s -o /dev/null -w '%{http_code}' -u 'default:$tb_pass' '$url/ns/ns01/resources/'\$r) == 200 ]] || exit 1; done"
"$v" op history "$o2" --json >"$work/hist2.json"
check "the failed cluster's history (its probe found the AWS key, with its private part) holds no secret" \
  bash -c "test -s '$work/hist2.json' && ! grep -qF -e '$tb_pass' -e '$key_line' '$work/hist2.json'"
check "the instance's phase was undone" \
  test "$("$v" instance show "$i2" --json | jq -r '.metadata.phase // "none"')" = none

t_finish
