# Sourced by the bench scripts: they time the release build (build-release/: -O3, NDEBUG,
# with the bench programs: -Dbench=true), never the debug-optimised developer build in build/.
#   release_build ROOT [TARGETS...]
#                        sets up the release build if needed (BENCH_BUILD=DIR picks another
#                        folder than ROOT/build-release), turns the bench option on, brings
#                        it up to date (ninja TARGETS and the hook supervisor local.exec
#                        runs, default everything; on stderr), then
#                        sets $build, $vnflow, $build_type (read back with
#                        `meson introspect --buildoptions`) and $build_line, "build: TYPE
#                        (DIR)", which every report prints
release_build() {
  local root=$1
  shift
  build=${BENCH_BUILD:-$root/build-release}
  [[ $build == /* ]] || build=$root/$build
  (cd "$root" &&
    { [[ -f $build/build.ninja ]] ||
      meson setup "$build" --buildtype=release --wrap-mode=nodownload -Dbench=true; } &&
    { [[ $(option_of "$build" bench 2>/dev/null) == True ]] ||
      meson setup --reconfigure "$build" --wrap-mode=nodownload -Dbench=true; } &&
    ninja -C "$build" "$@" ${1:+actions/vnflow-hook}) >&2
  vnflow=$build/cli/vnflow  # where the CLI lives (engine/vnflow before it had a folder)
  [[ -x $vnflow ]] || vnflow=$build/engine/vnflow
  build_type=$(option_of "$build" buildtype)
  build_line="build: $build_type ($build)"
}

option_of() {  # option_of BUILD_DIR NAME: a Meson option's value, as Python prints it
  meson introspect --buildoptions "$1" | /usr/bin/python3 -c \
    'import json, sys; print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]), ""))' "$2"
}

# wait_quiet [SECONDS]: waits (at most SECONDS, default $QUIET_WAIT or 180) until the 1-minute
# load average is under 0.5, so the runs start on a quiet machine (the setup before them, a
# build or VMs, raises it), then prints "load average before: ..." and whether it got there.
# A figure taken while the load is higher is still printed, with that load beside it.
wait_quiet() {
  local limit=${1:-${QUIET_WAIT:-180}} waited=0 l
  while l=$(cut -d' ' -f1 /proc/loadavg); (($(awk -v l="$l" 'BEGIN{print (l >= 0.5)}'))) &&
    ((waited < limit)); do
    sleep 5
    waited=$((waited + 5))
  done
  if (($(awk -v l="$l" 'BEGIN{print (l < 0.5)}'))); then
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (quiet after ${waited} s)"
  else
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (NOT quiet: still >= 0.5 after ${limit} s)"
  fi
}
