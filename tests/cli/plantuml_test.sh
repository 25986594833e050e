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
# A package's text is shown, never obeyed: no %function expanded, no <img:FILE> embedded
# (a reader's own file), no [[link]]. And a choice a request decides is drawn with its
# branches, even when it evaluates without one (default(request..., false)).
pkg=$T_DIR/pkg
cp -r "$root/csar-samples/local-demo" "$pkg"
printf '@startuml\na -> b\n@enduml\n' >"$T_DIR/x.puml"
(cd "$T_DIR" && plantuml -tpng x.puml) || die "plantuml could not make a PNG"
cat >"$pkg/Workflows/instantiate_end.yaml" <<EOF2
description: hostile text
start: fast
states:
  fast:
    choice:
      - when: \${default(request.additionalParams.fast, false)}
        next: done
    default: step
  step:
    description: 'see <img:$T_DIR/x.png> %getenv("HOME") [[http://127.0.0.1:9/x]] "q"'
    action: local.exec
    with:
      shell: "true"
    timeout: 10s
    next: done
  done:
    succeed: true
EOF2
t_demo_manifest "$root" "$pkg"
check "a package with hostile text renders" bash -c "'$v' workflow show '$pkg' --op instantiate --format plantuml >'$T_DIR/h.puml'"
check "... PlantUML draws it" bash -c "cd '$T_DIR' && plantuml -tsvg h.puml"
hasnt "... no file embedded (a PNG of the reader's)" "$T_DIR/h.svg" -e '<image'
has "... no %function expanded: the text shown as written" "$T_DIR/h.svg" -F 'getenv('
hasnt "... no link" "$T_DIR/h.svg" -e '<a '
has "a choice the request decides keeps its branches (alt)" "$T_DIR/h.puml" -e '^alt default(request.additionalParams.fast, false)'
printf '@startuml\nvnflow -> client : x\nnot a plantuml line\n@enduml\n' >"$T_DIR/broken.puml"
check_not "... which refuses a broken one" plantuml -checkonly "$T_DIR/broken.puml"
t_finish
