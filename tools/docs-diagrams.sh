#!/usr/bin/env bash
# Regenerates docs/diagrams/: each listed operation of a sample as PlantUML (the text vnflow
# prints, which tests/cli/cli_test.sh checks is current) and as SVG rendered by Debian's
# plantuml. Usage: tools/docs-diagrams.sh [VNFLOW_BINARY]   (default: build/cli/vnflow)
set -euo pipefail
cd "$(dirname "$0")/.."
v=${1:-build/cli/vnflow}
command -v plantuml >/dev/null || { echo "docs-diagrams: plantuml is missing (apt-get install plantuml)" >&2; exit 1; }
for d in ladybug-cluster:instantiate; do
  sample=${d%%:*} op=${d##*:}
  out=docs/diagrams/$sample-$op.puml
  "$v" workflow show "csar-samples/$sample" --op "$op" --format plantuml >"$out"
  (cd docs/diagrams && plantuml -tsvg "$(basename "$out")")
  echo "wrote $out and ${out%.puml}.svg"
done
