#!/usr/bin/env bash
# Bounded fuzz smoke: run_smoke.sh FUZZER SEED_DIR [SECONDS] [DICT]
# libFuzzer writes new inputs into its first corpus folder, so that is in a fresh temporary
# folder; the seed folder is only read (tools/fuzz.sh merges campaigns into it). A finding
# exits 1 (libFuzzer's default, 77, is what Meson reads as "skipped").
set -euo pipefail
fuzzer=$(realpath "$1"); seeds=$(realpath "$2"); seconds=${3:-60}
dict=()
if [[ -n ${4:-} ]]; then
  dict=(-dict="$(realpath "$4")")
fi
# UBSan stops at its first report, as ASan does (tools/test.sh exports the same).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# New inputs go to new/; a target's own temporary files (api_request's store) to tmp/, so a
# crash leaves nothing behind.
mkdir "$work/new" "$work/tmp"
export TMPDIR=$work/tmp
cd "$work"
mkdir -p "${FUZZ_ARTIFACTS:-/tmp/vnflow-fuzz-artifacts}"
"$fuzzer" -artifact_prefix="${FUZZ_ARTIFACTS:-/tmp/vnflow-fuzz-artifacts}/" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  "${dict[@]}" "$work/new" "$seeds"
