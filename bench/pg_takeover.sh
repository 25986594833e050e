#!/usr/bin/env bash
# Takeover after a SIGKILL, on real daemons (issue 18's floor: a dead daemon's operations
# are PROCESSING again within lease TTL + 1 s).
#
# pg_bench's (e) times the store alone (a lease that stops being renewed). This script
# kills a real `vnflow daemon` process: two daemons share one PostgreSQL; the victim holds N
# operations, each in the middle of a long local.exec step; it is SIGKILLed; the survivor
# must claim every one of them and commit its next transition (the step dispatched again,
# with the same idempotency key). The time of an operation's takeover is the commit time of
# its first event under the survivor's name minus the moment of the kill (both this host's
# clock). Rounds alternate the victim: the killed daemon is restarted under its name (which
# waits for its old lease to run out) and becomes the survivor of the next round.
#
# Usage: bench/pg_takeover.sh            (a release build; progress on stderr, report on stdout)
# Environment:
#   LEASE_MS=1000   the daemons' --lease-ms (the TTL the floor is measured against)
#   OPS=20          operations the victim holds in each round
#   ROUNDS=3        kills
#   PG_URL          an existing database to use (else a throwaway cluster on PG_PORT, fsync on)
#   PG_PORT=15438   the throwaway cluster's port (below 32768)
#   VNFLOW_BIN      the vnflow binary to time (default: the release build, built if needed)
#   CHECK_FLOORS=1  exit 3 when a round's slowest takeover is over LEASE_MS + 1000
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
lease_ms=${LEASE_MS:-1000}
ops=${OPS:-20}
rounds=${ROUNDS:-3}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
[[ $lease_ms =~ ^[0-9]+$ && $ops =~ ^[0-9]+$ && $rounds =~ ^[0-9]+$ ]] ||
  { echo "pg_takeover: LEASE_MS, OPS and ROUNDS are whole numbers" >&2; exit 2; }
say() { echo "== $*" >&2; }
die() { echo "pg_takeover: $*" >&2; exit 1; }

if [[ -n ${VNFLOW_BIN:-} ]]; then
  vnflow=$(realpath "$VNFLOW_BIN")
  build_line="build: $vnflow (VNFLOW_BIN)"
else
  # shellcheck source=bench/release_build.sh
  source bench/release_build.sh
  release_build "$root" cli/vnflow
fi
[[ -x $vnflow ]] || die "no vnflow binary at $vnflow"

work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-takeover.XXXXXX")
chmod 0755 "$work"  # a throwaway cluster runs as the postgres user when this runs as root
declare -A pid=()
cleanup() {
  for n in "${!pid[@]}"; do { kill -9 "${pid[$n]}"; wait "${pid[$n]}"; } 2>/dev/null || true; done
  pkill -9 -f "$work/" 2>/dev/null || true
  if [[ -z ${PG_URL:-} ]]; then
    bash "$root/tools/postgres/stop.sh" "$work/pg" --purge >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "$build_line"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n ${PG_URL:-} ]]; then
  base_url=$PG_URL
else
  base_url=$(PG_PORT=${PG_PORT:-15438} PG_FSYNC=on VNFLOW_PG_NO_APT=1 \
    bash tools/postgres/start.sh "$work/pg" | tail -n 1)
fi
schema=vnflow_takeover_$$
psql_q() { PGOPTIONS=-cclient_min_messages=warning "$BIN/psql" "$base_url" -Atq -v ON_ERROR_STOP=1 -c "$1"; }
psql_q "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema" >/dev/null
sep='?'; [[ $base_url == *\?* ]] && sep='&'
export VNFLOW_DB="$base_url${sep}options=-csearch_path%3D$schema"
export VNFLOW_DB_KEY=$work/keys/pg.key
q() { psql_q "SET search_path TO $schema; $1"; }

# The package: local-demo whose instantiate_end is one long step ("hold"), so every
# operation sits in the middle of a call when its daemon is killed.
pkg=$work/pkg
cp -r csar-samples/local-demo "$pkg"
cat > "$pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: one long step, for the takeover bench
start: hold
states:
  hold:
    action: local.exec
    with:
      shell: sleep 600
    timeout: 900s
    next: done
  done:
    succeed: true
EOF
bash tools/csar-manifest.sh "$pkg" local-demo.mf vnflow "Local demo" 1.0 >/dev/null
package=$("$vnflow" package onboard "$pkg")
echo '{"flavourId": "simple", "additionalParams": {"work_dir": "'"$work"'/vnfs", "nodes": ["n"]}}' \
  > "$work/inst.json"

start_daemon() {  # start_daemon NAME
  : >"$work/$1.log"
  "$vnflow" daemon --name "$1" --lease-ms "$lease_ms" --workers 64 --work-dir "$work/wd-$1" \
    2>>"$work/$1.log" &
  pid[$1]=$!
  local i
  for ((i = 0; i < 200; i++)); do  # a restart waits for the name's old lease: up to TTL + 1 s
    grep -q 'vnflow daemon on' "$work/$1.log" && return 0
    kill -0 "${pid[$1]}" 2>/dev/null || break
    sleep 0.05
  done
  tail -5 "$work/$1.log" >&2
  die "daemon $1 did not start"
}
# held_count NAME: operations NAME holds whose hold step was dispatched under its name.
held_count() {
  q "SELECT count(DISTINCT o.id) FROM ops o JOIN events e ON e.op_id = o.id
     WHERE o.owner = '$1' AND e.owner = '$1' AND e.kind = 'dispatched'
       AND e.state = 'instantiate_end.hold' AND o.state = 'PROCESSING'"
}

victim=A survivor=B
start_daemon A
worst_all=0
failed_floor=0
for ((r = 1; r <= rounds; r++)); do
  # The victim alone takes N new operations (the survivor is the daemon killed in the round
  # before, or not started yet); then the survivor starts beside it.
  before=$(held_count "$victim")
  for ((i = 0; i < ops; i++)); do
    inst=$("$vnflow" instance create --package "$package")
    "$vnflow" instance instantiate "$inst" --request "$work/inst.json" >/dev/null
  done
  want=$((before + ops))
  for ((i = 0; i < 600; i++)); do
    [[ $(held_count "$victim") -ge $want ]] && break
    sleep 0.05
  done
  [[ $(held_count "$victim") -ge $want ]] || die "round $r: $victim did not start its $ops operations"
  start_daemon "$survivor"
  q "SELECT id FROM ops WHERE owner = '$victim' AND state = 'PROCESSING'" > "$work/held"
  n=$(wc -l < "$work/held")
  ids=$(sed "s/.*/'&'/" "$work/held" | paste -sd,)
  sleep 0.3  # the survivor polls; nothing is free to claim while the victim's lease lives
  kill_ms=$(date +%s%3N)
  { kill -KILL "${pid[$victim]}"; wait "${pid[$victim]}"; } 2>/dev/null || true
  unset "pid[$victim]"
  # Every operation the victim held: the first event the survivor committed for it.
  taken=0
  for ((i = 0; i < 600; i++)); do  # 30 s at most
    taken=$(q "SELECT count(DISTINCT op_id) FROM events
               WHERE op_id IN ($ids) AND owner = '$survivor' AND at_ms >= $kill_ms")
    [[ $taken -ge $n ]] && break
    sleep 0.05
  done
  [[ $taken -ge $n ]] || die "round $r: only $taken of $n operations were taken over in 30 s"
  q "SELECT min(at_ms) - $kill_ms FROM events
     WHERE op_id IN ($ids) AND owner = '$survivor' AND at_ms >= $kill_ms GROUP BY op_id
     ORDER BY 1" > "$work/times"
  first=$(head -1 "$work/times")
  worst=$(tail -1 "$work/times")
  median=$(sed -n "$(( (n + 1) / 2 ))p" "$work/times")
  verdict=PASS
  if ((worst > lease_ms + 1000)); then verdict=FAIL; failed_floor=1; fi
  ((worst > worst_all)) && worst_all=$worst
  echo "round $r: $survivor took over $n operations of SIGKILLed $victim: first ${first} ms," \
    "median ${median} ms, last ${worst} ms after the kill (TTL ${lease_ms} ms; floor" \
    "TTL + 1000 = $((lease_ms + 1000)) ms: $verdict)"
  tmp=$victim; victim=$survivor; survivor=$tmp
done
echo "takeover_worst_ms: $worst_all"
echo "lease_ttl_ms: $lease_ms"
echo "floor_takeover_within_ttl_plus_1s: $([[ $failed_floor == 0 ]] && echo PASS || echo FAIL)"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ${CHECK_FLOORS:-0} == 1 && $failed_floor == 1 ]]; then exit 3; fi
