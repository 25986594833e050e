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
