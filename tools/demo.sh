#!/usr/bin/env bash
# vnflow's main job on its embedded defaults, on a fresh Debian 12 machine: install what it
# needs, build, validate the bundled sample packages and inspect them.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build --wrap-mode=nodownload
ninja -C build
echo "== vnflow csar validate csar-samples/*"
build/engine/vnflow csar validate csar-samples/*/
for s in csar-samples/*/; do
  echo
  echo "== vnflow csar inspect $s"
  build/engine/vnflow csar inspect "$s"
done
