# Sourced by the bench scripts: they time the release build (build-release/: -O3, NDEBUG),
# never the debug-optimised developer build in build/.
#   release_build ROOT   sets up ROOT/build-release if needed and brings it up to date
#                        (ninja, on stderr), then sets $build, $vnflow, $build_type (read
#                        back with `meson introspect --buildoptions`) and $build_line,
#                        "build: TYPE (DIR)", which every report prints
release_build() {
  local root=$1
  build=$root/build-release
  (cd "$root" &&
    { [[ -f build-release/build.ninja ]] ||
      meson setup build-release --buildtype=release --wrap-mode=nodownload; } &&
    ninja -C build-release) >&2
  vnflow=$build/engine/vnflow
  build_type=$(meson introspect --buildoptions "$build" | /usr/bin/python3 -c \
    'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))')
  build_line="build: $build_type ($build)"
}
