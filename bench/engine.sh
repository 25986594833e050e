#!/usr/bin/env bash
# Times the durable executor (engine::Engine on the SQLite Store) beside raw SQLite
# commits, in the same run, on the same disk: one long operation, 200 concurrent ones, the
# resume of 10,000 interrupted ones and their memory. Prints `name: value unit` lines and
# four floor checks. See bench/README.md, "Engine bench".
#
# Usage: bench/engine.sh [engine_bench options...]   (from anywhere)
# Environment (all optional):
#   BENCH_BUILD=DIR               the release build folder (default build-release)
#   BENCH_DIR=/tmp/vnflow-bench   where the databases go (same disk as /work here)
#   SWEEP=10,100,500              extra single-operation chain lengths (information only)
#   CHECK_FLOORS=1                exit 3 if a floor check fails (default: report only)
# Extra options go to the program: --raw-n N --chain K --ops P --op-states M --resume R.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/vnflow-bench}
SWEEP=${SWEEP:-10,100,500}
CHECK_FLOORS=${CHECK_FLOORS:-0}

log() { echo "== $*" >&2; }

log "building bench/engine_bench (release, Meson: ninja -C build-release bench/engine_bench)"
# shellcheck source=bench/release_build.sh
source "$here/release_build.sh"
release_build "$root" bench/engine_bench

mkdir -p "$BENCH_DIR"
args=(--dir "$BENCH_DIR" --sweep "$SWEEP")
[[ $CHECK_FLOORS == 1 ]] && args+=(--check-floors)
echo "engine bench: $(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')," \
  "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), dir $BENCH_DIR ($(df --output=source "$BENCH_DIR" | tail -1))"
echo "$build_line"
"$build/bench/engine_bench" "${args[@]}" "$@"
