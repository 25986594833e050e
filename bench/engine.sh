#!/usr/bin/env bash
# Times the durable executor (engine::Engine on the SQLite Store) beside raw SQLite
# commits, in the same run, on the same disk: one long operation, 200 concurrent ones, the
# resume of 10,000 interrupted ones and their memory. Prints `name: value unit` lines and
# four floor checks. See bench/README.md, "Engine bench".
#
# Usage: bench/engine.sh [engine_bench options...]   (from anywhere)
# Environment (all optional):
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

log "building the libraries (release: ninja -C build-release)"
# shellcheck source=bench/release_build.sh
source "$here/release_build.sh"
release_build "$root"

work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-engine-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The release build's flags (-O3, NDEBUG) and the libraries of its link of engine/vnflow
# (`ninja -C build-release -t commands engine/vnflow | tail -1`).
log "compiling bench/engine_bench.cpp"
g++ -std=c++20 -O3 -DNDEBUG -Wall -Wextra -pthread -I"$root" \
  -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DBOOST_ALL_NO_LIB \
  -o "$work/engine_bench" "$here/engine_bench.cpp" \
  -Wl,--start-group "$build/engine/libengine.a" "$build/workflows/libworkflows.a" \
  "$build/actions/libactions.a" "$build/tosca/libtosca.a" "$build/tosca/libtosca_yaml.a" \
  "$build/base/libbase.a" -Wl,--end-group \
  /usr/lib/x86_64-linux-gnu/libSQLiteCpp.a -lsqlite3 -lspdlog -lfmt -lyaml-cpp -lzip -lssl -lcrypto \
  -lssh

mkdir -p "$BENCH_DIR"
args=(--dir "$BENCH_DIR" --sweep "$SWEEP")
[[ $CHECK_FLOORS == 1 ]] && args+=(--check-floors)
echo "engine bench: $(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')," \
  "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), dir $BENCH_DIR ($(df --output=source "$BENCH_DIR" | tail -1))"
echo "$build_line"
"$work/engine_bench" "${args[@]}" "$@"
