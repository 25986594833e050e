#!/usr/bin/env bash
# Heat bench: instantiate -> terminate of csar-samples/heat-demo through vnflow (daemon,
# built-in Heat steps) beside the same stack create/delete made by python-openstackclient
# (`openstack stack create --wait`, `openstack stack delete --wait -y`), in the same run,
# against the same real Keystone + Heat on 127.0.0.1 (tools/openstack/start.sh).
#
# vnflow's own overhead = the client's wall time (`instance instantiate --wait`, then
# `instance terminate --wait`) minus the time its heat.* actions spent in Heat calls and polls
# and the time of the package's hook (from the operation histories); the floor (issue 19) is
# <= 1% of Heat's time. The daemon's part of it (queue + stepping + commits) is printed too.
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
# One operation's time as its history records it, in seconds: "HEAT HOOK ENGINE" = its calls
# to Heat (dispatch -> result of the stack, resources and wait_ states), the package's hook
# actions (the other states), and vnflow's own time inside the daemon (op show --timing:
# queue + own: stepping, commits, hand-offs).
op_times() {
  { "$vnflow" op history "$1" --json; "$vnflow" op show "$1" --timing --json; } | $PY -c '
import json,sys,datetime
dec=json.JSONDecoder(); text=sys.stdin.read(); ev,i=dec.raw_decode(text); tm,_=dec.raw_decode(text[i:].lstrip())
ts=lambda s: datetime.datetime.strptime(s,"%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
heat_state=lambda st: any(x in st for x in ("stack","resources","wait_"))
t={}; heat=0.0
for e in ev:
  st=e.get("state") or ""
  if not heat_state(st): continue
  if e["kind"]=="dispatched": t[st]=ts(e["time"])
  elif e["kind"] in ("succeeded","failed") and st in t: heat+=ts(e["time"])-t.pop(st)
hook=sum(s["action_ms"] for s in tm["states"] if not heat_state(s["state"]))/1000
print("%.4f %.4f %.4f"%(heat,hook,(tm["queue_ms"]+tm["own_ms"])/1000))'
}
echo "heat bench: $(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$root" describe --always --dirty), $(nproc) CPUs, $rounds rounds"
echo "$build_line"
wait_quiet
vsum=0 hsum=0 csum=0 ksum=0 esum=0
for i in $(seq 1 "$rounds"); do
  inst=$("$vnflow" instance create --package "$pkg" --name "b$i")
  t0=$(now)
  "$vnflow" instance instantiate "$inst" --request "$work/inst.json" --wait --json >"$work/op1.json" || true
  "$vnflow" instance terminate "$inst" --request "$root/csar-samples/heat-demo/Requests/terminate.json" \
    --wait --json >"$work/op2.json" || true
  t1=$(now)
  op1=$(jq -r .id "$work/op1.json") op2=$(jq -r .id "$work/op2.json")
  [[ $(jq -r .operationState "$work/op1.json") == COMPLETED && $(jq -r .operationState "$work/op2.json") == COMPLETED ]] ||
    { echo "round $i: an operation did not complete" >&2; "$vnflow" op show "$op1" >&2; "$vnflow" op show "$op2" >&2; exit 1; }
  v=$(echo "$t1 - $t0" | bc -l)
  read -r h1 k1 e1 < <(op_times "$op1") && read -r h2 k2 e2 < <(op_times "$op2") &&
    [[ -n $h1 && -n $h2 ]] || { echo "round $i: cannot read the operations' histories" >&2; exit 1; }
  h=$(echo "$h1 + $h2" | bc -l) k=$(echo "$k1 + $k2" | bc -l) e=$(echo "$e1 + $e2" | bc -l)
  t0=$(now)
  (cd "$work" && openstack stack create -t heat_demo.yaml -e env.yaml --parameter "nfv=$nfv" --wait "cli-$i" >/dev/null &&
    openstack stack delete --wait -y "cli-$i" >/dev/null)
  t1=$(now)
  c=$(echo "$t1 - $t0" | bc -l)
  printf 'round %d: vnflow %.2f s (in Heat calls %.2f s, hook %.3f s, own %.3f s of which the daemon %.3f s), openstack CLI %.2f s\n' \
    "$i" "$v" "$h" "$k" "$(echo "$v - $h - $k" | bc -l)" "$e" "$c"
  vsum=$(echo "$vsum + $v" | bc -l); hsum=$(echo "$hsum + $h" | bc -l); csum=$(echo "$csum + $c" | bc -l)
  ksum=$(echo "$ksum + $k" | bc -l); esum=$(echo "$esum + $e" | bc -l)
done
# Where the last round's time went, as the engine recorded it (queue, vnflow's own, action).
echo "last round, instantiate:"; "$vnflow" op show "$op1" --timing | sed 's/^/  /'
echo "last round, terminate:"; "$vnflow" op show "$op2" --timing | sed 's/^/  /'
own=$(echo "($vsum - $hsum - $ksum) / $rounds" | bc -l)
pct=$(echo "100 * ($vsum - $hsum - $ksum) / $hsum" | bc -l)
printf 'vnflow_instantiate_terminate_mean: %.2f s\n' "$(echo "$vsum / $rounds" | bc -l)"
printf 'openstack_cli_create_delete_mean: %.2f s\n' "$(echo "$csum / $rounds" | bc -l)"
printf 'vnflow_vs_cli_ratio: %.2f x\n' "$(echo "$vsum / $csum" | bc -l)"
printf 'package_hook_mean: %.3f s (the package'"'"'s own actions, neither Heat nor vnflow)\n' "$(echo "$ksum / $rounds" | bc -l)"
# Own: the client's wall time less Heat and the hook (two CLI processes, the request, queue,
# stepping, commits); the daemon's part of it as the operations' histories account it.
printf 'vnflow_own_overhead_mean: %.3f s = %.2f %% of the time in Heat\n' "$own" "$pct"
printf 'vnflow_daemon_own_mean: %.3f s = %.2f %% of the time in Heat\n' "$(echo "$esum / $rounds" | bc -l)" "$(echo "100 * $esum / $hsum" | bc -l)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if (( $(echo "$pct <= 1" | bc -l) )); then echo "floor vnflow_own_overhead <= 1%: PASS"; else echo "floor vnflow_own_overhead <= 1%: FAIL"; fi
