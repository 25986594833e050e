#!/usr/bin/env bash
# Fuzz campaigns over vnflow's libFuzzer targets (tests/fuzz/<target>_fuzz.cpp).
#
#   tools/fuzz.sh [--minutes N] [--jobs J] [--build-dir DIR] [--artifacts DIR] [--keep DIR]
#                 [TARGET...]
#
# Builds the clang ASan+UBSan fuzz build in DIR (default build-san, the one tools/test.sh
# makes), then runs each TARGET (default: every tests/fuzz/*_fuzz.cpp) for N minutes
# (default 10) in libFuzzer's fork mode, J targets at a time (default 1; each uses one core),
# with its dictionary tests/fuzz/<target>.dict. A crash, sanitizer report, timeout or OOM
# does not stop the campaign: the input is kept in the artifact folder (default
# DIR/fuzz-artifacts/<target>/). Afterwards the inputs that add coverage are merged into
# tests/fuzz/<target>-corpus (libFuzzer -merge=1: only new features go in, so the seeds
# accumulate coverage in the repository; commit them). Prints per target: runs, coverage
# (cov: edges, ft: features), the corpus merge, findings, the CPU seconds its fuzzing used
# (user+sys of the libFuzzer process and its forks) and its wall minutes. Exits 1 when a
# target has a finding. With --keep, each target's fuzz.log and merge.log are copied to
# DIR/<target>/ before the work folder goes. The whole run is bounded: each target is
# killed 2 minutes after its N minutes, each merge after 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

minutes=10 jobs=1 build=build-san artifacts= keep=
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --artifacts) artifacts=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 && $jobs =~ ^[0-9]+$ && $jobs -ge 1 ]]; then
  echo "fuzz.sh: --minutes and --jobs take a whole number >= 1" >&2
  exit 2
fi
all=()
for src in tests/fuzz/*_fuzz.cpp; do
  name=$(basename "$src" _fuzz.cpp)
  all+=("$name")
done
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=("${all[@]}")
fi
for t in "${targets[@]}"; do
  if [[ ! -f tests/fuzz/${t}_fuzz.cpp ]]; then
    echo "fuzz.sh: no target \"$t\" (there are: ${all[*]})" >&2
    exit 2
  fi
done
artifacts=${artifacts:-$build/fuzz-artifacts}
artifacts=$(realpath -m "$artifacts")
[[ -n $keep ]] && keep=$(realpath -m "$keep")

# The build (clang: libFuzzer is clang's).
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup "$build" --wrap-mode=nodownload -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false -Dwerror=true
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-fuzz.XXXXXX")
# The logs to --keep's folder first (also when the run is interrupted), then the work folder.
finish() {
  if [[ -n $keep ]]; then
    for t in "${targets[@]}"; do
      for f in fuzz.log merge.log; do
        if [[ -f $work/$t/$f ]]; then
          mkdir -p "$keep/$t" && cp "$work/$t/$f" "$keep/$t/"
        fi
      done
    done
  fi
  rm -rf "$work"
}
trap finish EXIT

# One target: fuzz in fork mode into a fresh folder (the seeds are only read), then merge.
campaign() {
  local t=$1 exe=$root/$build/tests/fuzz_$1 seeds=$root/tests/fuzz/$1-corpus
  local dir=$work/$t
  mkdir -p "$dir/new" "$dir/tmp" "$artifacts/$t" "$seeds"
  find "$artifacts/$t" -type f | sort >"$dir/artifacts.before"
  local dict=()
  [[ -f $root/tests/fuzz/$t.dict ]] && dict=(-dict="$root/tests/fuzz/$t.dict")
  (
    cd "$dir"
    export TMPDIR=$dir/tmp  # what the target makes (api_request's store) goes with $work
    start=$(date +%s)
    timeout --kill-after=10 $((minutes * 60 + 120)) "$exe" -fork=1 -ignore_crashes=1 \
      -ignore_timeouts=1 -ignore_ooms=1 -max_total_time=$((minutes * 60)) -timeout=20 \
      -rss_limit_mb=2048 -artifact_prefix="$artifacts/$t/" "${dict[@]}" new "$seeds" \
      >"$dir/fuzz.log" 2>&1 || echo "exit $?" >"$dir/fuzz.status"
    echo $(($(date +%s) - start)) >"$dir/wall"
    # This subshell's finished children: timeout, the fuzzer and the forks it waited for.
    # The second line of `times` is their user and system time, "XmY.YYYs XmY.YYYs" (not
    # through a pipe: that would run `times` in a subshell of its own).
    times >"$dir/times"
    # Only what adds coverage to the seeds goes in.
    timeout --kill-after=10 300 "$exe" -merge=1 -timeout=20 -rss_limit_mb=2048 "$seeds" new \
      >"$dir/merge.log" 2>&1 || echo "exit $?" >"$dir/merge.status"
  )
}

echo "fuzz: ${targets[*]}: $minutes min each, $jobs at a time; artifacts in $artifacts"
running=0
for t in "${targets[@]}"; do
  if [[ $running -ge $jobs ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  campaign "$t" &
  running=$((running + 1))
done
wait || true

found=0
printf '\n%-15s %12s %8s %8s %14s %-18s %8s %8s %s\n' target runs cov ft merged \
  oom/timeout/crash "cpu s" "wall min" artifacts
for t in "${targets[@]}"; do
  dir=$work/$t
  # Fork mode's status lines: "#RUNS: cov: C ft: F corp: N exec/s E oom/timeout/crash: O/T/C ..."
  last=$(grep -E '^#[0-9]+: cov: ' "$dir/fuzz.log" | tail -n 1 || true)
  runs=$(sed -nE 's/^#([0-9]+): .*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+) .*/\1/p' <<<"$last")
  otc=$(sed -nE 's/.* oom\/timeout\/crash: ([0-9]+\/[0-9]+\/[0-9]+) .*/\1/p' <<<"$last")
  added=$(sed -nE 's/.*MERGE-OUTER: ([0-9]+) new files.*/+\1 files/p' "$dir/merge.log" | tail -n 1)
  [[ -f $dir/merge.status ]] && added="merge failed"
  cpu=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, /[ms]/); s += p[1] * 60 + p[2] }
                       printf "%.0f", s }' "$dir/times" 2>/dev/null || true)
  wall=$(awk '{ printf "%.1f", $1 / 60 }' "$dir/wall" 2>/dev/null || true)
  kept=$(find "$artifacts/$t" -type f | sort | comm -13 "$dir/artifacts.before" - | wc -l)
  note=
  if [[ -f $dir/fuzz.status ]]; then
    note=" ($(cat "$dir/fuzz.status"); log: tail of $t below)"
  fi
  printf '%-15s %12s %8s %8s %14s %-18s %8s %8s %s\n' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" \
    "${added:-?}" "${otc:-?}" "${cpu:-?}" "${wall:-?}" "$kept new in $artifacts/$t$note"
  if [[ $kept -gt 0 || ${otc:-0/0/0} != 0/0/0 || -f $dir/fuzz.status ]]; then
    found=1
  fi
done
for t in "${targets[@]}"; do
  if [[ -f $work/$t/fuzz.status ]]; then
    echo "--- $t: tail of the libFuzzer log"
    tail -n 30 "$work/$t/fuzz.log"
  fi
done
if [[ $found -ne 0 ]]; then
  echo "fuzz: findings; reproduce one with $build/tests/fuzz_TARGET FILE"
  exit 1
fi
echo "fuzz: no findings"
