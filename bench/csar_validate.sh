#!/usr/bin/env bash
# Times `vnflow csar validate` on every package of the Tacker sample corpus beside
# OpenStack's tosca-parser (Debian's python3-tosca-parser 2.6.0), in the same run on the
# same .csar files, and prints a per-package table, the ratios and `name: value unit`
# summary lines with four floor checks. A second set, the same packages with their SOL001
# type file copies re-serialised (other indentation, comments, quotes, CRLF; same
# meaning; bench/sol001_variants.py), is timed the same way: it tells whether the speed
# holds on copies vnflow does not know byte for byte. See bench/README.md.
#
# Usage: bench/csar_validate.sh            (from anywhere; paths are relative to this file)
# Environment (all optional):
#   REPEATS=3          tosca-parser parses per package (median taken), one warm interpreter
#   VNFLOW_REPEAT=20   loads per package inside one vnflow process (--repeat)
#   PROC_RUNS=5        whole `vnflow csar validate PKG.csar` runs per package (median taken)
#   CORPUS_RUNS=5      whole-corpus runs (median wall time taken; peak RSS from one more run)
#   CORPUS=DIR         default ../shared/corpus/tacker-samples beside the repository
#   CHECK_FLOORS=1     exit 3 if a floor check fails (default: report only, exit 0)
#   VNFLOW_BIN=PATH    time this vnflow binary instead of building one (e.g. an older
#                      commit's, for a before/after figure)
set -euo pipefail
export LC_ALL=C   # "." as the decimal point in $EPOCHREALTIME, awk and printf

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
shared=$(cd "$root/.." && pwd)/shared
corpus=${CORPUS:-$shared/corpus/tacker-samples}
tp_data=$shared/research/bench/tosca-parser-2.6.0-data
tp_installed=/usr/lib/python3/dist-packages/toscaparser
py=/usr/bin/python3   # Debian's interpreter: the one that sees dist-packages
peer=$here/tosca_parser_peer.py

REPEATS=${REPEATS:-3}
VNFLOW_REPEAT=${VNFLOW_REPEAT:-20}
PROC_RUNS=${PROC_RUNS:-5}
CORPUS_RUNS=${CORPUS_RUNS:-5}
CHECK_FLOORS=${CHECK_FLOORS:-0}
for n in REPEATS VNFLOW_REPEAT PROC_RUNS CORPUS_RUNS; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "csar_validate.sh: $n must be a positive integer" >&2; exit 2; }
done
[[ $VNFLOW_REPEAT -ge 2 ]] || { echo "csar_validate.sh: VNFLOW_REPEAT must be at least 2" >&2; exit 2; }

die() { echo "csar_validate.sh: $*" >&2; exit 1; }
log() { echo "== $*" >&2; }

apt_install() {
  local sudo=()
  [[ $EUID -eq 0 ]] || sudo=(sudo)
  log "installing $*"
  "${sudo[@]}" apt-get install -y "$@" >&2 ||
    { "${sudo[@]}" apt-get update >&2 && "${sudo[@]}" apt-get install -y "$@" >&2; }
}

# ---- prerequisites
[[ -d $corpus ]] || die "no corpus at $corpus"
[[ -f $tp_data/toscaparser/elements/TOSCA_definition_1_0.yaml ]] ||
  die "no tosca-parser 2.6.0 data files at $tp_data"
[[ -x $py ]] || apt_install python3
[[ -d $tp_installed ]] || apt_install python3-tosca-parser
[[ -x /usr/bin/time ]] || apt_install time
if [[ -n ${VNFLOW_BIN:-} ]]; then
  vnflow=$VNFLOW_BIN
  build_line="build: given (VNFLOW_BIN=$VNFLOW_BIN)"
else
  log "building vnflow (release)"
  # shellcheck source=bench/release_build.sh
  source "$here/release_build.sh"
  release_build "$root" cli/vnflow
fi
[[ -x $vnflow ]] || die "no vnflow binary at $vnflow"

load_start=$(cut -d' ' -f1-3 /proc/loadavg)  # a ratio measured under load is not a result
work=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tmp"

# Every vnflow figure comes from one snapshot of the binary, so a rebuild during the run
# (the binary is replaced while it is linked) cannot mix two builds or fail a run.
for attempt in 1 2 3 4 5; do
  if cp "$vnflow" "$work/vnflow" 2>/dev/null && "$work/vnflow" version >/dev/null 2>&1; then
    break
  fi
  [[ $attempt -lt 5 ]] || die "cannot take a working copy of $vnflow"
  sleep 3
done
vnflow_id="$("$work/vnflow" version), built $(date -u -r "$vnflow" '+%Y-%m-%d %H:%M UTC'),"
vnflow_id+=" sha256 $(sha256sum "$work/vnflow" | cut -c1-12)"
vnflow_id+=", tree $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')"
vnflow=$work/vnflow

# ---- the CSARs both tools read
log "zipping the packages of $corpus"
n_packages=$("$py" "$peer" pack "$corpus" "$work/csars")
mapfile -t csars < <(cut -f1 "$work/csars/index.tsv")
[[ ${#csars[@]} -eq $n_packages ]] || die "index has ${#csars[@]} entries, expected $n_packages"

log "re-serialising the SOL001 copies of every package"
n_variants=$("$py" "$here/sol001_variants.py" "$work/csars/index.tsv" "$work/csars" "$work/variants")

# ---- tosca-parser: the installed package plus the 3 data files its .deb lacks
overlay=$work/overlay
mkdir -p "$overlay"
cp -r "$tp_installed" "$overlay/"
rm -rf "$overlay/toscaparser/tests"
find "$overlay" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$tp_data/toscaparser/." "$overlay/toscaparser/"
chmod -R u+w "$overlay"
tosca_parser() {  # tosca_parser INDEX NAME: times every CSAR of INDEX into $work/NAME.tsv
  if ! TMPDIR=$work/tmp PYTHONPATH=$overlay PYTHONNOUSERSITE=1 \
      timeout $((300 + 60 * REPEATS)) "$py" "$peer" time "$1" "$work/$2.tsv" \
      --repeats "$REPEATS" --expect-under "$overlay" 2>"$work/$2.log"; then
    tail -n 30 "$work/$2.log" >&2
    die "the tosca-parser peer failed on $1"
  fi
}
log "tosca-parser: $n_packages packages x $REPEATS parses"
tosca_parser "$work/csars/index.tsv" tp
tp_info=$(tail -n 1 "$work/tp.log")
log "tosca-parser: the variant set"
tosca_parser "$work/variants/index.tsv" tp_variants

# ---- vnflow, on the same files. Exit 1 means "a package is invalid"; only >1 is an error.
run_ok() {  # run_ok RC WHAT
  [[ $1 -le 1 ]] || die "$2 exited with $1"
}
elapsed_us() {  # elapsed_us START END  (two $EPOCHREALTIME values)
  echo $(( ${2/./} - ${1/./} ))
}

in_process() {  # in_process DIR OUT_TSV: each CSAR of DIR, --repeat loads in one process
  : >"$2"
  for csar in "${csars[@]}"; do
    rc=0
    timeout 300 "$vnflow" csar validate --repeat "$VNFLOW_REPEAT" --json "$1/$csar" \
      >"$work/one.json" 2>/dev/null || rc=$?
    run_ok "$rc" "vnflow csar validate --repeat $VNFLOW_REPEAT --json $1/$csar"
    "$py" -c '
import json, sys
p = json.load(open(sys.argv[1]))["packages"][0]
print("%.4f\t%s" % (p["median_ms"], "valid" if p["valid"] else "invalid"))' \
      "$work/one.json" >"$work/one.tsv"
    printf '%s\t%s\n' "$csar" "$(cat "$work/one.tsv")" >>"$2"
  done
}
log "vnflow in-process: $n_packages packages x --repeat $VNFLOW_REPEAT"
in_process "$work/csars" "$work/vnflow.tsv"
log "vnflow in-process, the variant set"
in_process "$work/variants" "$work/vnflow_variants.tsv"

log "vnflow process: $n_packages packages x $PROC_RUNS runs, and $PROC_RUNS runs of 'vnflow version'"
: >"$work/startup.tsv"
for ((i = 0; i < PROC_RUNS; i++)); do   # the fixed cost of a vnflow process: exec, linking, init
  t0=$EPOCHREALTIME
  "$vnflow" version >/dev/null
  t1=$EPOCHREALTIME
  elapsed_us "$t0" "$t1" >>"$work/startup.tsv"
done
: >"$work/process.tsv"
for csar in "${csars[@]}"; do
  for ((i = 0; i < PROC_RUNS; i++)); do
    rc=0
    t0=$EPOCHREALTIME
    "$vnflow" csar validate "$work/csars/$csar" >/dev/null 2>&1 || rc=$?
    t1=$EPOCHREALTIME
    run_ok "$rc" "vnflow csar validate $csar"
    printf '%s\t%s\n' "$csar" "$(elapsed_us "$t0" "$t1")" >>"$work/process.tsv"
  done
done

log "vnflow whole corpus: $CORPUS_RUNS runs + 1 for the peak RSS"
paths=("${csars[@]/#/$work/csars/}")
: >"$work/corpus.tsv"
for ((i = 0; i < CORPUS_RUNS; i++)); do
  rc=0
  t0=$EPOCHREALTIME
  "$vnflow" csar validate "${paths[@]}" >/dev/null 2>&1 || rc=$?
  t1=$EPOCHREALTIME
  run_ok "$rc" "vnflow csar validate (whole corpus)"
  elapsed_us "$t0" "$t1" >>"$work/corpus.tsv"
done
rc=0
/usr/bin/time -f %M -o "$work/rss.txt" "$vnflow" csar validate "${paths[@]}" >/dev/null 2>&1 || rc=$?
run_ok "$rc" "vnflow csar validate (whole corpus, under /usr/bin/time)"
rss_kib=$(tail -n 1 "$work/rss.txt")   # GNU time puts "Command exited with ..." first
[[ $rss_kib =~ ^[0-9]+$ ]] || die "cannot read the peak RSS from /usr/bin/time: $(cat "$work/rss.txt")"

# ---- report
echo "vnflow csar validate vs tosca-parser, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "host: $(uname -sr), nproc $(nproc)"
echo "load average (1, 5, 15 min): $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "vnflow: $vnflow_id"
echo "$build_line"
echo "peer: $tp_info"
echo "corpus: $corpus ($n_packages packages)"
echo "variant set: the same packages, $n_variants SOL001 copies re-serialised (bench/sol001_variants.py)"
echo "runs: tosca-parser median of $REPEATS; vnflow in-process median of $VNFLOW_REPEAT loads;" \
  "process median of $PROC_RUNS runs; corpus median of $CORPUS_RUNS runs"
echo
awk -F'\t' -v rss_kib="$rss_kib" -v check="$CHECK_FLOORS" '
  function median(a, n,    i, j, t, b) {   # a[1..n], not modified
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
  }
  FILENAME ~ /tp_variants.tsv$/     { vtp[$1] = $4; vtpres[$1] = $3; next }
  FILENAME ~ /vnflow_variants.tsv$/ { vin[$1] = $2; vverdict[$1] = $3; next }
  FILENAME ~ /tp.tsv$/      { n++; csar[n] = $1; pkg[n] = $2; tpres[$1] = $3; tp[$1] = $4; why[$1] = $6; next }
  FILENAME ~ /vnflow.tsv$/  { inproc[$1] = $2; verdict[$1] = $3; next }
  FILENAME ~ /process.tsv$/ { runs[$1] = runs[$1] " " $2 / 1000; next }
  FILENAME ~ /corpus.tsv$/  { nc++; cw[nc] = $1 / 1000; next }
  FILENAME ~ /startup.tsv$/ { ns++; st[ns] = $1 / 1000; next }
  END {
    w = length("package")
    for (i = 1; i <= n; i++) if (length(pkg[i]) > w) w = length(pkg[i])
    fmt = "%-" w "s  %-8s %9s  %-7s %9s %9s %10s %10s\n"
    printf fmt, "package", "tp", "tp ms", "vnflow", "in-proc", "process", "tp/in-proc", "tp/process"
    for (i = 1; i <= n; i++) {
      c = csar[i]
      k = split(substr(runs[c], 2), r, " ")
      proc = median(r, k)
      ratio_in[i] = tp[c] / inproc[c]; ratio_proc[i] = tp[c] / proc
      tps[i] = tp[c]; ins[i] = inproc[c]; procs[i] = proc
      if (tpres[c] == "accepted") ratio_acc[++acc] = ratio_in[i]
      if (verdict[c] == "valid") val++
      printf fmt, pkg[i], tpres[c], sprintf("%.1f", tp[c]), verdict[c], sprintf("%.3f", inproc[c]),
        sprintf("%.2f", proc), sprintf("%.1f", ratio_in[i]), sprintf("%.1f", ratio_proc[i])
    }
    mr = median(ratio_in, n); cwall = median(cw, nc)
    printf "\nvariant set (SOL001 copies re-serialised):\n"
    vfmt = "%-" w "s  %-8s %9s  %-7s %9s %10s\n"
    printf vfmt, "package", "tp", "tp ms", "vnflow", "in-proc", "tp/in-proc"
    for (i = 1; i <= n; i++) {
      c = csar[i]
      vratio[i] = vtp[c] / vin[c]; vtps[i] = vtp[c]; vins[i] = vin[c]
      if (vverdict[c] != verdict[c]) vdiff++
      printf vfmt, pkg[i], vtpres[c], sprintf("%.1f", vtp[c]), vverdict[c], sprintf("%.3f", vin[c]),
        sprintf("%.1f", vratio[i])
    }
    vmr = median(vratio, n)
    printf "\ntosca-parser rejections (first error):\n"
    for (i = 1; i <= n; i++) if (tpres[csar[i]] != "accepted") printf "  %s: %s\n", pkg[i], why[csar[i]]
    printf "\n"
    printf "packages: %d packages\n", n
    printf "tosca_parser_accepted: %d packages\n", acc
    printf "vnflow_valid: %d packages\n", val
    printf "tosca_parser_median_ms: %.1f ms\n", median(tps, n)
    printf "vnflow_median_ms: %.3f ms\n", median(ins, n)
    printf "vnflow_process_median_ms: %.2f ms\n", median(procs, n)
    printf "median_ratio_in_process: %.1f x\n", mr
    printf "median_ratio_process: %.1f x\n", median(ratio_proc, n)
    printf "median_ratio_in_process_tp_accepted: %.1f x\n", acc ? median(ratio_acc, acc) : 0
    printf "variants_tosca_parser_median_ms: %.1f ms\n", median(vtps, n)
    printf "variants_vnflow_median_ms: %.3f ms\n", median(vins, n)
    printf "variants_median_ratio_in_process: %.1f x\n", vmr
    printf "variants_verdicts_changed: %d packages\n", vdiff
    printf "vnflow_startup_ms: %.2f ms\n", median(st, ns)
    printf "corpus_wall_ms: %.1f ms\n", cwall
    printf "corpus_peak_rss_kib: %d KiB\n", rss_kib
    f1 = mr >= 100; f2 = cwall < 1000; f3 = rss_kib < 64 * 1024; f4 = vmr >= 100 && vdiff == 0
    printf "floor median_ratio >= 100: %s\n", f1 ? "PASS" : "FAIL"
    printf "floor variants_median_ratio >= 100 (same verdicts): %s\n", f4 ? "PASS" : "FAIL"
    printf "floor corpus < 1 s: %s\n", f2 ? "PASS" : "FAIL"
    printf "floor rss < 64 MiB: %s\n", f3 ? "PASS" : "FAIL"
    exit (check == 1 && !(f1 && f2 && f3 && f4)) ? 3 : 0
  }' "$work/tp_variants.tsv" "$work/vnflow_variants.tsv" "$work/tp.tsv" "$work/vnflow.tsv" "$work/process.tsv" "$work/corpus.tsv" "$work/startup.tsv"
