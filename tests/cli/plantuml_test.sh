#!/usr/bin/env bash
# vnflow workflow show --format plantuml, read by the real PlantUML (Debian's plantuml):
# every operation of every sample package renders without a syntax error, and the checker
# does refuse a broken diagram (so a pass means something).
# Usage: plantuml_test.sh VNFLOW_BINARY SOURCE_ROOT
set -uo pipefail
v=$(realpath "$1")
root=$(realpath "$2")
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init plantuml "$v"
command -v plantuml >/dev/null || die "plantuml is missing (tools/install-deps.sh)"
mkdir -p "$T_DIR/d"
n=0
for pkg in "$root"/csar-samples/*/; do
  s=$(basename "$pkg")
  for op in instantiate terminate heal scale change_ext_conn modify_info; do
    if "$v" workflow show "$pkg" --op "$op" --format plantuml >"$T_DIR/d/$s-$op.puml" 2>"$T_ERR"; then
      n=$((n + 1))
    else
      bad "$s $op: workflow show --format plantuml failed"
      t_show "$T_ERR"
    fi
  done
done
check "$n diagrams (every operation of every sample) pass plantuml -checkonly" \
  plantuml -checkonly "$T_DIR"/d/*.puml
printf '@startuml\nvnflow -> client : x\nnot a plantuml line\n@enduml\n' >"$T_DIR/broken.puml"
check_not "... which refuses a broken one" plantuml -checkonly "$T_DIR/broken.puml"
t_finish
