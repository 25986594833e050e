#!/usr/bin/env bash
# Installs every Debian package vnflow needs to build, test and benchmark.
# Idempotent: packages already present are skipped quickly by apt.
# Usage: tools/install-deps.sh [--bench] [--deb]
#   --bench  adds the peers the bench/ scripts run
#   --deb    adds what building and checking the Debian package needs (tests/deb/deb_test.sh)
set -euo pipefail

packages=(
  meson ninja-build pkgconf g++ clang libclang-rt-14-dev
  libboost1.81-dev libyaml-cpp-dev libzip-dev libdeflate-dev zip unzip libssh-dev
  libsqlitecpp-dev libsqlite3-dev libpq-dev postgresql-15 libspdlog-dev libfmt-dev catch2 libssl-dev
  clang-format-14 procps util-linux openssl
  # tests/api: clients of the REST API (curl; python-tackerclient's openstack vnflcm ...) and
  # ETSI's response schemas checked with python3-jsonschema
  curl python3-jsonschema python3-openstackclient python3-tackerclient
  # tests/service: the JSON log read with jq (Prometheus: tools/prometheus/start.sh)
  jq
  # tests/cli/plantuml_test.sh and tools/docs-diagrams.sh: the diagrams read by PlantUML
  plantuml
)
for flag in "$@"; do
  case $flag in
    --bench)
      packages+=(python3-tosca-parser python3-yaml time python3-openstackclient
        python3-heatclient bc ansible-core openssh-client) ;;
    --deb)
      packages+=(build-essential debhelper dpkg-dev lintian adduser python3) ;;
    *)
      echo "install-deps: unknown option $flag (--bench, --deb)" >&2
      exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
