#!/usr/bin/env bash
# Enforces docs/layering.md: which module may include which. Fails on a violation.
#   base      <- nothing of ours
#   tosca     <- base
#   workflows <- base, tosca
#   actions   <- base
#   engine    <- base, tosca, workflows, actions (never another module's internal/)
#   api       <- base, engine (the REST API over the engine's commands)
#   cli       <- base, tosca, workflows, engine, api (the vnflow program; nothing includes cli/)
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [base]="base"
  [tosca]="base tosca"
  [workflows]="base tosca workflows"
  [actions]="base actions"
  [engine]="base tosca workflows actions engine"
  [api]="base engine api"
  [cli]="base tosca workflows engine api cli"
)
bad=0
for module in "${!allowed[@]}"; do
  [[ -d $module ]] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
    target=${inc%%/*}
    case " base tosca workflows actions engine api cli " in *" $target "*) ;; *) continue ;; esac
    if [[ " ${allowed[$module]} " != *" $target "* ]]; then
      echo "layering: $file includes \"$inc\" ($module may not use $target)"; bad=1
    elif [[ $target != "$module" && $inc == */internal/* ]]; then
      echo "layering: $file includes \"$inc\" (another module's internal header)"; bad=1
    fi
  done < <(grep -rn '#include "' "$module" --include='*.h' --include='*.cpp' || true)
done
# The program is the top: no module, test or bench program includes cli/.
while IFS= read -r line; do
  echo "layering: ${line%%:*} includes a cli/ header (nothing may use cli)"; bad=1
done < <(grep -rln --include='*.h' --include='*.cpp' '#include "cli/' . --exclude-dir=cli \
           --exclude-dir='build*' --exclude-dir=subprojects --exclude-dir=.git || true)
[[ $bad -eq 0 ]] && echo "layering: ok"
exit $bad
