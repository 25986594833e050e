#!/usr/bin/env bash
# Times the REST API: GET /vnflcm/v1/vnf_instances/{id} beside a minimal Beast server
# answering the same body (same run, same client, same server threads), and the time from
# POST .../instantiate to the operation's first committed transition. Prints `name: value
# unit` lines, two floor checks and the load average. See bench/README.md, "API bench".
#
# Usage: bench/api.sh [api_bench options...]   (from anywhere)
# Environment (all optional):
#   BENCH_BUILD=DIR                  the release build folder (default build-release)
#   BENCH_DIR=/tmp/vnflow-api-bench  the database and work folders
#   CHECK_FLOORS=1                   exit 3 if a floor check fails (default: report only)
#   QUIET_WAIT=S                     wait at most S s for a load average under 0.5 (180)
# Extra options go to the program: --clients C --secs S --ops N --threads T.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/vnflow-api-bench}
CHECK_FLOORS=${CHECK_FLOORS:-0}

echo "== building bench/api_bench (release, Meson)" >&2
# shellcheck source=bench/release_build.sh
source "$here/release_build.sh"
release_build "$root" bench/api_bench

args=(--root "$root" --dir "$BENCH_DIR")
[[ $CHECK_FLOORS == 1 ]] && args+=(--check-floors)
echo "api bench: $(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')," \
  "$(nproc) CPUs; uptime: $(uptime)"
echo "$build_line"
wait_quiet  # the build above raised it (QUIET_WAIT=S: at most S seconds, default 180)
"$build/bench/api_bench" "${args[@]}" "$@"
rm -rf "$BENCH_DIR"
