#!/usr/bin/env bash
# vnflow's main job on its embedded defaults, on a fresh Debian 12 machine: install what it
# needs, build, validate the bundled sample packages and inspect them, run the local demo
# VNF's lifecycle, then the private registry VNF end to end on real Heat and SSH VMs.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build --wrap-mode=nodownload
ninja -C build
echo "== vnflow csar validate csar-samples/*"
build/cli/vnflow csar validate csar-samples/*/
for s in csar-samples/*/; do
  echo
  echo "== vnflow csar inspect $s"
  build/cli/vnflow csar inspect "$s"
done

# The lifecycle of the local demo VNF through the durable executor: its hooks are vnflow
# workflows running on this host, so no cloud is needed.
demo=$(mktemp -d /tmp/vnflow-demo-db.XXXXXX)
export VNFLOW_DB=$demo/vnflow.db
v=build/cli/vnflow
pkg=csar-samples/local-demo
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -TERM "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  [[ ${KEEP_DEMO:-} ]] || rm -rf "$demo"
}
trap cleanup EXIT
echo
echo "== vnflow workflow show $pkg --op instantiate"
$v workflow show $pkg --op instantiate
echo
echo "== the lifecycle of $pkg (database $VNFLOW_DB)"
$v daemon --workers 4 2>"$demo/daemon.log" &
daemon_pid=$!
package=$($v package onboard $pkg)
instance=$($v instance create --package "$package" --name demo)
echo "package $package, instance $instance"
for step in "instantiate instantiate" "scale scale_out" "heal heal" "terminate terminate"; do
  set -- $step
  op=$($v instance "$1" "$instance" --request "$pkg/Requests/$2.json")
  $v op wait "$op" --timeout 60 | sed -n 3p | sed "s/^/$1: /"
done
echo
echo "== vnflow op history (the instantiate)"
$v op history "$($v op list --instance "$instance" | awk '$2 == "instantiate" {print $1}')"

# The seeds' private registry VNF end to end: real Keystone + Heat on 127.0.0.1, a VM (a
# network namespace with a real sshd) booted for the server Heat reports, and the package's
# instantiate_end / heal_end workflows configuring it over SSH and SFTP (stand-in scripts:
# no Docker runs inside the test VMs). Needs root (network namespaces).
echo
echo "== the private registry VNF on real Heat and a VM: instantiate, heal, terminate"
bash tests/e2e/vnf_test.sh build/cli/vnflow . registry
