#!/usr/bin/env bash
# Heat bench: instantiate -> terminate of csar-samples/heat-demo through vnflow (daemon,
# built-in Heat steps) beside the same stack create/delete made by python-openstackclient
# (`openstack stack create --wait`, `openstack stack delete --wait -y`), in the same run,
# against the same real Keystone + Heat on 127.0.0.1 (tools/openstack/start.sh).
#
# vnflow's own overhead = its wall time minus the time its heat.* actions spent in Heat
# calls and polls (from the operation histories); the floor (issue 19) is <= 1% of Heat's time.
# Usage: bench/heat.sh [ROUNDS]   (default 3; builds build-release/ first)
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
rounds=${1:-3}
PY=/usr/bin/python3
# shellcheck source=bench/release_build.sh
source "$here/release_build.sh"
release_build "$root"   # build-release/: $vnflow, $build_line
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-heat-bench.XXXXXX")
export KEYSTONE_PORT=${KEYSTONE_PORT:-15300} HEAT_PORT=${HEAT_PORT:-18304}
daemon_pid=
cleanup() {
  [[ -n $daemon_pid ]] && { kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; }
  bash "$root/tools/openstack/stop.sh" "$work/os" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
bash "$root/tools/openstack/start.sh" "$work/os" >"$work/start.log" 2>&1 || { tail -30 "$work/start.log"; exit 1; }
# shellcheck disable=SC1091
source "$work/os/openrc"
export VNFLOW_DB=$work/vnflow.db
"$vnflow" vim register --name bench --from-env --heat-env "$root/tests/openstack/fake-env.yaml" --default >/dev/null
pkg=$("$vnflow" package onboard "$root/csar-samples/heat-demo")
"$vnflow" daemon --work-dir "$work/wd" >"$work/daemon.log" 2>&1 &
daemon_pid=$!
sed "s|/tmp/vnflow-heat-demo|$work/inv|" "$root/csar-samples/heat-demo/Requests/instantiate.json" >"$work/inst.json"
# The same files and parameter for the CLI.
hot=$root/csar-samples/heat-demo/BaseHOT/simple
cp "$hot"/*.yaml "$work/"
cp "$root/tests/openstack/fake-env.yaml" "$work/env.yaml"
cp -r "$root/tests/openstack/fake" "$work/fake"
nfv='{"VDU":{"frontVDU":{"flavor":"frontVDU","desired_capacity":1},"workerVDU":{"flavor":"workerVDU","desired_capacity":1}},"CP":{"front_CP1":{"network":"net-ext0"},"worker_CP1":{"network":""}}}'
now() { date +%s.%N; }
heat_time() {  # seconds spent in heat.* actions of an operation (dispatch -> result)
  "$vnflow" op history "$1" --json | $PY -c '
import json,sys,datetime
ev=json.load(sys.stdin); t={}; total=0.0
ts=lambda s: datetime.datetime.strptime(s,"%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
for e in ev:
  st=e.get("state") or ""
  if not any(x in st for x in ("stack","resources","wait_")): continue
  if e["kind"]=="dispatched": t[st]=ts(e["time"])
  elif e["kind"] in ("succeeded","failed") and st in t: total+=ts(e["time"])-t.pop(st)
print("%.3f"%total)'
}
echo "heat bench: $(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$root" describe --always --dirty), $(nproc) CPUs, $rounds rounds"
echo "$build_line"
wait_quiet
vsum=0 hsum=0 csum=0
for i in $(seq 1 "$rounds"); do
  inst=$("$vnflow" instance create --package "$pkg" --name "b$i")
  t0=$(now)
  op1=$("$vnflow" instance instantiate "$inst" --request "$work/inst.json")
  "$vnflow" op wait "$op1" >/dev/null
  op2=$("$vnflow" instance terminate "$inst" --request "$root/csar-samples/heat-demo/Requests/terminate.json")
  "$vnflow" op wait "$op2" >/dev/null
  t1=$(now)
  v=$(echo "$t1 - $t0" | bc -l)
  h=$(echo "$(heat_time "$op1") + $(heat_time "$op2")" | bc -l)
  t0=$(now)
  (cd "$work" && openstack stack create -t heat_demo.yaml -e env.yaml --parameter "nfv=$nfv" --wait "cli-$i" >/dev/null &&
    openstack stack delete --wait -y "cli-$i" >/dev/null)
  t1=$(now)
  c=$(echo "$t1 - $t0" | bc -l)
  printf 'round %d: vnflow %.2f s (in Heat calls %.2f s, own %.3f s), openstack CLI %.2f s\n' "$i" "$v" "$h" "$(echo "$v - $h" | bc -l)" "$c"
  vsum=$(echo "$vsum + $v" | bc -l); hsum=$(echo "$hsum + $h" | bc -l); csum=$(echo "$csum + $c" | bc -l)
done
# Where the last round's time went, as the engine recorded it (queue, vnflow's own, action).
echo "last round, instantiate:"; "$vnflow" op show "$op1" --timing | sed 's/^/  /'
echo "last round, terminate:"; "$vnflow" op show "$op2" --timing | sed 's/^/  /'
own=$(echo "($vsum - $hsum) / $rounds" | bc -l)
printf 'vnflow_instantiate_terminate_mean: %.2f s\n' "$(echo "$vsum / $rounds" | bc -l)"
printf 'openstack_cli_create_delete_mean: %.2f s\n' "$(echo "$csum / $rounds" | bc -l)"
printf 'vnflow_vs_cli_ratio: %.2f x\n' "$(echo "$vsum / $csum" | bc -l)"
printf 'vnflow_own_overhead_mean: %.3f s = %.1f %% of the time in Heat\n' "$own" "$(echo "100 * ($vsum - $hsum) / $hsum" | bc -l)"
pct=$(echo "100 * ($vsum - $hsum) / $hsum" | bc -l)
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if (( $(echo "$pct <= 1" | bc -l) )); then echo "floor vnflow_own_overhead <= 1%: PASS"; else echo "floor vnflow_own_overhead <= 1%: FAIL"; fi
