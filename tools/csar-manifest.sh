#!/usr/bin/env bash
# Writes (or, with --check, verifies) a package folder's SOL004 manifest: metadata plus a
# SHA-256 entry for every file except TOSCA-Metadata/ and the manifest itself.
# Usage: tools/csar-manifest.sh PACKAGE_DIR MANIFEST_NAME PROVIDER PRODUCT VERSION [--check]
set -euo pipefail
dir=$1; mf=$2; provider=$3; product=$4; version=$5; mode=${6:-write}
cd "$dir"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
  echo "metadata:"
  echo "  vnf_provider_id: $provider"
  echo "  vnf_product_name: $product"
  echo "  vnf_release_date_time: 2026-11-22T00:00:00+00:00"
  echo "  vnf_package_version: '$version'"
  echo "  compatible_specification_versions: 2.6.1"
  find . -type f ! -path './TOSCA-Metadata/*' ! -name "$mf" | sed 's|^\./||' | LC_ALL=C sort |
  while read -r f; do
    echo
    echo "Source: $f"
    echo "Algorithm: SHA-256"
    echo "Hash: $(sha256sum "$f" | cut -d' ' -f1)"
  done
} > "$out"
if [[ $mode == --check ]]; then
  diff -u "$mf" "$out" && echo "manifest $dir/$mf is current"
else
  cp "$out" "$mf"
  echo "wrote $dir/$mf"
fi
