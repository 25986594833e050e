#!/usr/bin/env bash
# Formats the C++ sources with clang-format 14 (.clang-format); --check only reports.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format)
mapfile -t files < <(git ls-files -co --exclude-standard '*.cpp' '*.h' | grep -v '^subprojects/')
if [[ ${1:-} == --check ]]; then
  "$fmt" --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
else
  "$fmt" -i "${files[@]}"
fi
