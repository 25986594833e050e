#!/usr/bin/env bash
# The local demo VNF (csar-samples/local-demo, as shipped) against a hostile instantiate
# request, with a real daemon: a node named "../../victim" must not write the file
# <work_dir>/../victim.conf (outside the VNF's work directory), the operation must stop in
# FAILED_TEMP with class invalid, and the rollback must not delete that file either. Also:
# a package whose workflow draws a warning (W0043) still onboards.
# Usage: local_demo_hostile_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib.sh"
t_init local_demo_hostile "$v"
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-hostile.XXXXXX")
export VNFLOW_DB=$work/vnflow.db
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
show_details() {
  echo "--- op show"
  t_show "$work/show.txt" 40
  echo "--- daemon log (tail)"
  t_show "$work/daemon.log"
}
T_ON_DIE=show_details
state() { op_state "$1"; }

# The victim: a file beside the VNFs' work directory, where "../../victim" leads from
# <work_dir>/<instance id>/.
vnfs=$work/vnfs
mkdir -p "$vnfs"
echo precious >"$work/victim.conf"
cat >"$work/inst.json" <<EOF
{"flavourId": "simple",
 "additionalParams": {"work_dir": "$vnfs", "nodes": ["node-a", "../../victim"], "port_no": 8080}}
EOF

pkg=$("$v" package onboard "$root/csar-samples/local-demo" 2>"$work/onboard.err")
check "the local demo onboards" test -n "$pkg"
check "... without warnings" test ! -s "$work/onboard.err"
inst=$("$v" instance create --package "$pkg")
"$v" daemon --workers 2 --work-dir "$work/wd" --poll-ms 10 2>>"$work/daemon.log" &
daemon_pid=$!

op=$("$v" instance instantiate "$inst" --request "$work/inst.json")
check "the request is accepted" test -n "$op"
"$v" op wait "$op" --timeout 60 >/dev/null
check "instantiate with a node named ../../victim does not complete" test $? -eq 1
check "... it stops in FAILED_TEMP" test "$(state "$op")" = FAILED_TEMP
"$v" op show "$op" >"$work/show.txt"
check "... at the configure step, class invalid, naming the value" \
  grep -q 'instantiate_end.configure: invalid: .*pathsafe(): "../../victim" is not a safe file name' \
  "$work/show.txt"
check "the file outside the work directory is untouched" \
  test "$(cat "$work/victim.conf" 2>/dev/null)" = precious
check "the good node was configured" test -f "$vnfs/$inst/node-a.conf"

"$v" op rollback "$op" >/dev/null
"$v" op wait "$op" --timeout 60 >/dev/null
check "the rollback ends ROLLED_BACK" test "$(state "$op")" = ROLLED_BACK
check "the rollback removed the good node's file" test ! -e "$vnfs/$inst/node-a.conf"
check "the rollback did not delete the file outside the work directory" \
  test "$(cat "$work/victim.conf" 2>/dev/null)" = precious

# A warning (W0043: a request value unquoted in shell text) does not stop onboarding.
cp -r "$root/csar-samples/local-demo" "$work/warned"
sed -i 's|^      shell: ls "$DIR" .*$|      shell: ls "${request.additionalParams.work_dir}" \| wc -l|' \
  "$work/warned/Workflows/instantiate_end.yaml"
t_demo_manifest "$root" "$work/warned"
warned=$("$v" package onboard "$work/warned" 2>"$work/warned.err")
check "a package with a W0043 warning onboards" test -n "$warned"
check "... and the warning is shown" grep -q 'warning: .*\[W0043\]' "$work/warned.err"

t_finish
