#!/usr/bin/env bash
# The command line end to end: exit codes, text and JSON output.
set -uo pipefail
vnflow=$1; root=$2
fail=0; n=0
py=/usr/bin/python3; [[ -x $py ]] || py=python3
check() {  # check NAME EXPECTED_STATUS COMMAND...
  local name=$1 want=$2; shift 2
  n=$((n+1))
  "$@" >/tmp/vnflow-cli.$$.out 2>/tmp/vnflow-cli.$$.err
  local got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL $name: exit $got, expected $want"; sed 's/^/  | /' /tmp/vnflow-cli.$$.err | head -20
    fail=$((fail+1))
  else
    echo "ok   $name"
  fi
}
sample=$root/csar-samples/private-registry
bad=$root/tests/golden/bad/T0030-unknown-node-type/pkg

check "validate a valid sample exits 0" 0 "$vnflow" csar validate "$sample"
check "validate a bad package exits 1" 1 "$vnflow" csar validate "$bad"
grep -q '\[T0030\]' /tmp/vnflow-cli.$$.err || { echo "FAIL: T0030 diagnostic not on stderr"; fail=$((fail+1)); }
check "validate with good and bad exits 1" 1 "$vnflow" csar validate "$sample" "$bad"
check "validate without a path exits 2" 2 "$vnflow" csar validate
check "unknown option exits 2" 2 "$vnflow" csar validate --frobnicate "$sample"
check "unknown command exits 2" 2 "$vnflow" frobnicate
check "validate --json exits 1 for a bad package" 1 "$vnflow" csar validate --json "$bad"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["valid"] is False; assert any(x["code"]=="T0030" for x in d["packages"][0]["diagnostics"])' /tmp/vnflow-cli.$$.out \
  || { echo "FAIL: validate --json document"; fail=$((fail+1)); }
check "inspect a sample exits 0" 0 "$vnflow" csar inspect "$sample"
grep -q 'instantiate_end' /tmp/vnflow-cli.$$.out || { echo "FAIL: inspect lists no instantiate_end"; fail=$((fail+1)); }
check "inspect --json exits 0" 0 "$vnflow" csar inspect --json "$sample"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); f=d["flavours"][0]; assert f["vdus"] and f["lcm_operations"], d' /tmp/vnflow-cli.$$.out \
  || { echo "FAIL: inspect --json document"; fail=$((fail+1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$sample" && zip -qr "$tmp/private-registry.csar" .)
check "validate a zipped CSAR exits 0" 0 "$vnflow" csar validate "$tmp/private-registry.csar"
printf 'not a zip' > "$tmp/garbage.csar"
check "validate a corrupt archive exits 1" 1 "$vnflow" csar validate "$tmp/garbage.csar"
grep -q '\[C0002\]' /tmp/vnflow-cli.$$.err || { echo "FAIL: C0002 not reported"; fail=$((fail+1)); }
check "inspect an unknown flavour exits 2" 2 "$vnflow" csar inspect --flavour nope "$sample"
rm -f /tmp/vnflow-cli.$$.out /tmp/vnflow-cli.$$.err
echo "$((n-fail)) passed, $fail failed"
[[ $fail -eq 0 ]]
