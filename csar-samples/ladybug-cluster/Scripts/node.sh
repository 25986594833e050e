#!/bin/sh
# A node's part of seed 004's cluster create, as a stand-in of the Kubernetes steps CB-Ladybug
# runs (no kubeadm here): each step leaves a file under $STATE that says what it did and when,
# so a test reads the order of the steps on every VM.
#   node.sh bootstrap NAME ROLE          test the node, install the service unit, mark it
#   node.sh init CLUSTER POD_CIDR CNI    on the control plane's leader, with CONTROL_PLANE
#                                        (its members' addresses, space-separated) in the
#                                        environment: the load balancer's backends, init,
#                                        the network plugin; prints TOKEN= and ENDPOINT=
#   node.sh join ROLE                    with LEADER and TOKEN in the environment (the token
#                                        never on a command line)
# Idempotent: a step already done with the same VNFLOW_IDEMPOTENCY_KEY does nothing again.
set -eu
STATE=/var/lib/ladybug-standin
now() { date +%s%N; }
done_before() { [ -f "$STATE/$1" ] && grep -qs "key=${VNFLOW_IDEMPOTENCY_KEY:-none}" "$STATE/$1"; }
mkdir -p "$STATE"
step=${1:-}
shift || true
case $step in
  bootstrap)
    name=$1 role=$2
    done_before bootstrap && exit 0
    test -d /etc && test -w "$STATE"
    mkdir -p /etc/systemd/system
    printf '[Unit]\nDescription=kubelet (ladybug stand-in)\n[Service]\nExecStart=/bin/true\n' \
      >/etc/systemd/system/kubelet.service
    printf 'name=%s role=%s at=%s key=%s\n' "$name" "$role" "$(now)" "${VNFLOW_IDEMPOTENCY_KEY:-none}" \
      >"$STATE/bootstrap"
    ;;
  init)
    cluster=$1 pod_cidr=$2 cni=$3
    if ! done_before init; then
      : >"$STATE/haproxy.cfg"
      for a in $CONTROL_PLANE; do echo "server cp-$a $a:6443 check" >>"$STATE/haproxy.cfg"; done
      head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STATE/token"
      printf 'cluster=%s pod_cidr=%s cni=%s at=%s key=%s\n' "$cluster" "$pod_cidr" "$cni" "$(now)" \
        "${VNFLOW_IDEMPOTENCY_KEY:-none}" >"$STATE/init"
    fi
    echo "TOKEN=$(cat "$STATE/token")"
    echo "ENDPOINT=$(hostname -I 2>/dev/null | cut -d' ' -f1):6443"
    ;;
  join)
    role=$1
    done_before joined && exit 0
    [ -n "${LEADER:-}" ] && [ -n "${TOKEN:-}" ] || { echo "join needs LEADER and TOKEN" >&2; exit 2; }
    printf 'role=%s leader=%s token_sha=%s at=%s key=%s\n' "$role" "$LEADER" \
      "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" "$(now)" "${VNFLOW_IDEMPOTENCY_KEY:-none}" \
      >"$STATE/joined"
    ;;
  *)
    echo "usage: node.sh bootstrap|init|join ..." >&2
    exit 2
    ;;
esac
