#!/usr/bin/env bash
# Runs every test of vnflow on a fresh Debian 12 machine: installs the packages, checks the
# layering, builds (gcc, werror, the bench programs too) and runs the unit, golden (loader
# and workflow fixtures), API, corpus, crash, PostgreSQL, service, OpenStack, SSH and
# end-to-end suites; then, on one clang build with ASan+UBSan, the unit, golden, API, corpus
# and crash suites again and bounded libFuzzer smokes of every parser of outside input; and
# the Debian package (built with Debian's flags, its unit and golden suites run, lintian,
# installed, the main job run on the installed vnflow, purged: tests/deb/deb_test.sh).
# Needs root for the test VMs (network namespaces) and the package.
# Usage: tools/test.sh [--quick]     (--quick: the gcc build only: no sanitizers, fuzz or
#                                     package)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=${1:-}

# Everything up front (the package's tools too): the package is built and installed while
# the suites run, and no apt-get may run beside another.
if [[ $quick == --quick ]]; then tools/install-deps.sh; else tools/install-deps.sh --deb; fi
tools/check-layering.sh
tools/format.sh --check

passed=0; failed=0
# lane DIR NAME [--show] SUITES...: one `meson test` of those suites (serial where the
# tests say is_parallel: false; a suite written !S leaves out the tests of suite S), its
# output in DIR/NAME.txt (shown as it runs with --show) and its exit status in DIR/NAME.rc;
# meson's own logs are DIR/meson-logs/NAME.*, so that two lanes can run at once on one build.
lane() {
  local dir=$1 name=$2; shift 2
  local show=; if [[ ${1:-} == --show ]]; then show=1; shift; fi
  local args=()
  for s in "$@"; do
    if [[ $s == !* ]]; then args+=(--no-suite "${s#!}"); else args+=(--suite "$s"); fi
  done
  set +e
  meson test -C "$dir" --no-rebuild --logbase "$name" --print-errorlogs "${args[@]}" 2>&1 |
    if [[ $show ]]; then tee "$dir/$name.txt"; else cat >"$dir/$name.txt"; fi
  echo "${PIPESTATUS[0]}" >"$dir/$name.rc"
  set -e
}
count() {  # count DIR NAME: adds a lane's tests to the totals
  local f=$1/$2.txt ok fail timeouts rc
  ok=$(awk '/^Ok:/ {print $2}' "$f")
  fail=$(awk '/^Fail:/ {print $2}' "$f")
  timeouts=$(awk '/^Timeout:/ {print $2}' "$f")
  rc=$(cat "$1/$2.rc" 2>/dev/null || echo 1)
  passed=$((passed + ${ok:-0})); failed=$((failed + ${fail:-0} + ${timeouts:-0}))
  if [[ $rc -ne 0 && ${fail:-0} -eq 0 && ${timeouts:-0} -eq 0 ]]; then failed=$((failed + 1)); fi
}

setup() {  # setup DIR [-Doption=value...]: a folder made before gets the options too
  local dir=$1; shift
  if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" --wrap-mode=nodownload "$@"
  elif [[ $# -gt 0 ]]; then
    meson configure "$dir" "$@"
  fi
  ninja -C "$dir" ${NINJA_JOBS:+-j "$NINJA_JOBS"}
}

# werror is for CI and developers; users' and packagers' builds leave it off (meson.build).
# The bench programs are compiled here so that a bench cannot rot (they run in bench/*.sh).
setup build -Dwerror=true -Dbench=true

# While the gcc build's suites run (they mostly wait on servers: Keystone, Heat, sshd,
# PostgreSQL), the sanitizer build compiles and then the Debian package is built, checked,
# installed and purged, all at the lowest CPU and I/O priority, in a session of their own so
# that an interrupted run stops every compiler. Two builds, not four: the sanitizer build is
# also the fuzz build (clang), and the release build is the package's (Debian's flags, its
# suites run by dh_auto_test).
bg_pid=
trap '[[ -z $bg_pid ]] || kill -TERM -- "-$bg_pid" 2>/dev/null || true' EXIT
if [[ $quick != --quick ]]; then
  rm -f build/deb.rc build/deb.log build/san.done
  build_others() {
    renice -n 19 -p "$BASHPID" >/dev/null
    ionice -c 3 -p "$BASHPID" 2>/dev/null || true
    export NINJA_JOBS=2  # not ninja's default three: memory
    # -O1 and line tables only: what sanitizer reports need (file:line stacks), at half the
    # compile time of -O2 -g.
    CC=clang CXX=clang++ setup build-san -Dfuzz=true -Db_sanitize=address,undefined \
      -Db_lundef=false -Dwerror=true -Doptimization=1 -Dcpp_args=-gline-tables-only || return 1
    touch build/san.done  # the sanitizer suites start; the package builds beside them
    local rc=0
    bash tests/deb/deb_test.sh "$PWD" >build/deb.log 2>&1 || rc=$?
    echo "$rc" >build/deb.rc
  }
  export -f build_others setup
  setsid bash -c build_others >build/others.log 2>&1 </dev/null &
  bg_pid=$!
fi
# Two lanes at once: the suites on servers of their own that mostly wait (Keystone + Heat,
# the netns VMs: one at a time, they share the VM bridge), niced, beside the local ones.
# Then the timing drills (suite 'drill': API load, many daemons, crash) alone: beside the
# lanes, the load drill's slowest reads passed its clients' 30 s timeout (load average 8).
lane_pid=
( renice -n 5 -p "$BASHPID" >/dev/null; lane build servers openstack ssh e2e ) &
lane_pid=$!
lane build local --show unit golden api corpus crash postgres service '!drill'
count build local
wait "$lane_pid" || true
echo "== the suites on servers (ran beside the ones above)"
cat build/servers.txt
count build servers
lane build drills --show drill
count build drills

if [[ $quick != --quick ]]; then
  echo "== waiting for the sanitizer build (log: build/others.log)"
  while [[ ! -e build/san.done ]] && kill -0 "$bg_pid" 2>/dev/null; do sleep 5; done
  if [[ ! -e build/san.done ]]; then
    tail -n 60 build/others.log
    echo "FAIL: the sanitizer build (build/others.log)"
    echo
    echo "tests: $passed passed, $((failed + 1)) failed"
    exit 1
  fi
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The notification test's 30 s receiver outage ran in the gcc build: 5 s from here on.
  export VNFLOW_NOTIFY_OUTAGE_SECS=5
  lane build-san san --show unit golden api corpus crash fuzz '!load'
  count build-san san
  echo "== waiting for the package test (log: build/deb.log)"
  wait "$bg_pid" || true
  bg_pid=
  echo "== deb: bash tests/deb/deb_test.sh $PWD (ran beside the suites above)"
  cat build/deb.log
  if [[ $(cat build/deb.rc 2>/dev/null) == 0 ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: deb"
  fi
fi

echo
echo "tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
