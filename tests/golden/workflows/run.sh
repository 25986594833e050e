#!/usr/bin/env bash
# Golden tests of the workflow compiler's diagnostics (W codes, docs/diagnostics.md).
#
#   run.sh VNFLOW_BINARY SOURCE_ROOT
#
# From SOURCE_ROOT, for every tests/golden/workflows/<CODE>-<what>.yaml:
#   vnflow workflow check FILE --op OP   (OP from a "# op: OP" line, else instantiate)
# must print exactly <CODE>-<what>.expected on stderr, report <CODE>, and exit 1, or 0
# for a warning (a code whose docs/diagnostics.md heading ends in "(warning)").
# Every tests/golden/workflows/good/*.yaml must compile (exit 0, nothing on stderr).
# Every W code documented in docs/diagnostics.md (except W0040 and W0050, which need a
# package) must have a fixture, and every fixture's code must be documented.
# UPDATE_GOLDEN=1 rewrites the .expected files from the current output.
set -u

if [[ $# -ne 2 ]]; then
  echo "usage: $0 VNFLOW_BINARY SOURCE_ROOT" >&2
  exit 2
fi
vnflow=$(realpath "$1")
cd "$2" || exit 2

dir=tests/golden/workflows
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

op_of() {
  local op
  op=$(sed -n 's/^# op: *\([a-z_]*\).*$/\1/p' "$1" | head -n 1)
  echo "${op:-instantiate}"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

declare -A warning_codes=()
while read -r code; do
  warning_codes[$code]=1
done < <(sed -n 's/^### \(W[0-9]\{4\}\)\b.*(warning)$/\1/p' docs/diagnostics.md)

declare -A fixture_codes=()
count=0
for yaml in "$dir"/W[0-9][0-9][0-9][0-9]-*.yaml; do
  [[ -e $yaml ]] || continue
  count=$((count + 1))
  name=$(basename "$yaml" .yaml)
  code=${name:0:5}
  fixture_codes[$code]=1
  expected="$dir/$name.expected"
  op=$(op_of "$yaml")
  "$vnflow" workflow check "$yaml" --op "$op" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ ${UPDATE_GOLDEN:-} == 1 ]]; then
    cp "$tmp/err" "$expected"
  fi
  want_rc=1 severity=error
  if [[ -n ${warning_codes[$code]:-} ]]; then
    want_rc=0 severity=warning
  fi
  if [[ $rc -ne $want_rc ]]; then
    fail "$name: exit status $rc, expected $want_rc"
  fi
  if ! grep -q ": $severity: .*\[$code\]\$" "$tmp/err"; then
    fail "$name: no $severity with code $code"
  fi
  if [[ ! -f $expected ]]; then
    fail "$name: $expected is missing (UPDATE_GOLDEN=1 writes it)"
  elif ! cmp -s "$tmp/err" "$expected"; then
    fail "$name: stderr differs from $expected:"
    diff "$expected" "$tmp/err" | sed 's/^/    /'
  fi
done
if [[ $count -eq 0 ]]; then
  fail "no fixtures in $dir"
fi

# Fixtures without a workflow, and .expected files without a fixture.
for expected in "$dir"/*.expected; do
  [[ -e $expected ]] || continue
  if [[ ! -f ${expected%.expected}.yaml ]]; then
    fail "$(basename "$expected"): no ${expected%.expected}.yaml"
  fi
done

good=0
for yaml in "$dir"/good/*.yaml; do
  [[ -e $yaml ]] || continue
  good=$((good + 1))
  op=$(op_of "$yaml")
  "$vnflow" workflow check "$yaml" --op "$op" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc -ne 0 || -s $tmp/err ]]; then
    fail "good/$(basename "$yaml"): exit status $rc, expected 0:"
    sed 's/^/    /' "$tmp/err"
  fi
done
if [[ $good -eq 0 ]]; then
  fail "no good examples in $dir/good"
fi

# Every documented W code has a fixture; every fixture's code is documented.
declare -A documented=()
while read -r code; do
  documented[$code]=1
done < <(sed -n 's/^### \(W[0-9]\{4\}\)\b.*$/\1/p' docs/diagnostics.md)
if [[ ${#documented[@]} -eq 0 ]]; then
  fail "docs/diagnostics.md documents no W codes"
fi
for code in $(printf '%s\n' "${!documented[@]}" | sort); do
  case $code in
    W0040 | W0050) continue ;;  # need a package, not a single workflow file
  esac
  if [[ -z ${fixture_codes[$code]:-} ]]; then
    fail "$code is documented in docs/diagnostics.md but has no fixture in $dir"
  fi
done
for code in $(printf '%s\n' "${!fixture_codes[@]}" | sort); do
  if [[ -z ${documented[$code]:-} ]]; then
    fail "$code has a fixture in $dir but is not documented in docs/diagnostics.md"
  fi
done

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok: $count fixtures, $good good examples"
