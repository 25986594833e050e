#!/usr/bin/env bash
# Bounded fuzz smoke: libFuzzer writes new inputs into its first corpus folder, so that
# is a fresh temporary folder; the seed folder is only read. A finding exits
# 1 (libFuzzer's default, 77, is what Meson reads as "skipped").
set -euo pipefail
fuzzer=$(realpath "$1"); seeds=$(realpath "$2"); seconds=${3:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir -p "${FUZZ_ARTIFACTS:-/tmp/vnflow-fuzz-artifacts}"
"$fuzzer" -artifact_prefix="${FUZZ_ARTIFACTS:-/tmp/vnflow-fuzz-artifacts}/" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  "$work" "$seeds"
