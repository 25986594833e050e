#!/bin/bash
# Stand-in for Scripts/k8s_node_real.sh (k8s_cluster_installation_param.install_mode:
# standin): the same sub-commands and the same output, on machines where neither Docker
# nor Kubernetes can run. It leaves everything a test can observe (registry configuration,
# /etc/hosts, the node list a control plane would hold) and never installs a package, never
# starts a service and writes only under /etc, /root, /var and /opt (and /tmp).
#
# Cluster state ("what the API server would know") is kept under
# /var/lib/vnflow-standin/k8s/ of the master that ran `init`:
#   pki/ca.crt, pki/ca.key  the cluster CA, made once with openssl (re-runs print the same)
#   token, cert_key         the join token and certificate key, made once
#   bearer_token            the token vim-info returns, made once
#   nodes                   one line per joined node: "NAME IP ROLE"
#   etcd_members            one line per control-plane node: "NAME IP"
#   drained                 one line per drained node: "NAME"
# and on every node:
#   installed               "role=... k8s_version=..." (what `prepare` would have installed)
#   joined                  "name=... role=... endpoint=... ca_cert_hash=..." of the cluster it joined
#
# Usage (as root; the workflow runs it with sudo): k8s_node.sh COMMAND
#   environment: VNFC_ID (this node), TARGET (a VNFC record, JSON), JOIN_TOKEN,
#   CA_CERT_HASH, CERT_KEY_SECRET, DROP_IDS (JSON list of VNFC ids), DRAIN_TOLERANT
set -euo pipefail
umask 022
HERE=$(cd "$(dirname "$0")" && pwd)
PY=(python3 "$HERE/k8s_node_common.py")
S=/var/lib/vnflow-standin/k8s
MODE=standin

die() { echo "k8s_node_standin: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (sudo)"
mkdir -p "$S"

me() { read -r ROLE IP NAME < <("${PY[@]}" node "${VNFC_ID:?VNFC_ID is not set}"); }
target() { read -r T_ROLE T_IP T_NAME < <("${PY[@]}" node "${TARGET:?TARGET is not set}"); }
masters() { "${PY[@]}" members master | wc -l; }
endpoint() {
  local ip port=6443
  ip=$("${PY[@]}" get cluster_ip)
  [[ -n $ip ]] || die "cluster.json has no cluster_ip"
  (($(masters) > 1)) && port=16443
  echo "https://$ip:$port"
}
ca_hash() {
  echo "sha256:$(openssl x509 -pubkey -noout -in "$S/pki/ca.crt" | openssl pkey -pubin -outform der 2>/dev/null |
    openssl dgst -sha256 -hex | sed 's/^.* //')"
}
# once FILE GENERATOR...: FILE keeps the first value ever generated (re-runs print the same)
once() {
  local f=$1; shift
  [[ -s $f ]] || { "$@" >"$f.tmp" && chmod 600 "$f.tmp" && mv "$f.tmp" "$f"; }
  cat "$f"
}
rand() { tr -dc "$1" </dev/urandom 2>/dev/null | head -c "$2" || true; }
gen_token() { echo "$(rand a-z0-9 6).$(rand a-z0-9 16)"; }
gen_hex() { rand 0-9a-f 64; echo; }
gen_bearer() { echo "vnflow-standin.$(rand A-Za-z0-9 48)"; }
need_ca() { [[ -s $S/pki/ca.crt ]] || die "this node holds no control plane (run init on it first)"; }

cmd=${1:-}
case $cmd in
prepare)
  me
  "${PY[@]}" proxy "$MODE" >/dev/null
  printf 'role=%s k8s_version=%s runtime=containerd\n' "$ROLE" "$("${PY[@]}" get k8s_version)" >"$S/installed"
  "${PY[@]}" registries "$MODE" | grep -v '^changed$' || true
  "${PY[@]}" login "$MODE"
  echo "prepared $NAME ($ROLE, $IP)"
  ;;
hosts)
  "${PY[@]}" hosts
  ;;
haproxy)
  "${PY[@]}" haproxy | grep -v '^changed$'
  ;;
haproxy-drop)
  mapfile -t ips < <("${PY[@]}" ids-to-ips "${DROP_IDS:-[]}")
  "${PY[@]}" haproxy-drop "${ips[@]}" | grep -v '^changed$'
  ;;
ca-bundle)
  "${PY[@]}" ca-bundle
  ;;
init)
  me
  [[ $ROLE == master ]] || die "init runs on a master, not on $NAME"
  mkdir -p "$S/pki"
  if [[ ! -s $S/pki/ca.crt ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=kubernetes" \
      -keyout "$S/pki/ca.key.tmp" -out "$S/pki/ca.crt.tmp" 2>/dev/null
    chmod 600 "$S/pki/ca.key.tmp"
    mv "$S/pki/ca.key.tmp" "$S/pki/ca.key"
    mv "$S/pki/ca.crt.tmp" "$S/pki/ca.crt"
    echo "generated the cluster CA"
  fi
  once "$S/token" gen_token >/dev/null
  once "$S/cert_key" gen_hex >/dev/null
  ep=$(endpoint)
  "${PY[@]}" list-add "$S/nodes" "$NAME $IP master"
  "${PY[@]}" list-add "$S/etcd_members" "$NAME $IP"
  printf 'name=%s role=master endpoint=%s ca_cert_hash=%s\n' "$NAME" "$ep" "$(ca_hash)" >"$S/joined"
  echo "control plane on $NAME ($IP), endpoint $ep"
  ;;
join-info)
  need_ca
  echo "server: $(endpoint)"
  echo "join_token: $(once "$S/token" gen_token)"
  echo "ca_cert_hash: $(ca_hash)"
  echo "cert_key_secret: $(once "$S/cert_key" gen_hex)"
  ;;
join)
  me
  [[ ${JOIN_TOKEN:-} =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || die "JOIN_TOKEN is not a bootstrap token"
  [[ ${CA_CERT_HASH:-} =~ ^sha256:[0-9a-f]{64}$ ]] || die "CA_CERT_HASH is not sha256:<hex>"
  [[ $ROLE == worker || ${CERT_KEY_SECRET:-} =~ ^[0-9a-f]{64}$ ]] || die "a master joins with CERT_KEY_SECRET"
  ep=$(endpoint)
  if [[ -s $S/joined ]] && grep -q "ca_cert_hash=$CA_CERT_HASH\$" "$S/joined"; then
    echo "$NAME already joined the cluster at $ep"
    exit 0
  fi
  [[ -s $S/joined ]] && echo "reset: $NAME was joined to another cluster ($(cat "$S/joined"))"
  printf 'name=%s role=%s endpoint=%s ca_cert_hash=%s\n' "$NAME" "$ROLE" "$ep" "$CA_CERT_HASH" >"$S/joined"
  echo "$NAME joined the cluster at $ep as a $ROLE"
  ;;
node-add)
  need_ca
  target
  "${PY[@]}" list-add "$S/nodes" "$T_NAME $T_IP $T_ROLE"
  [[ $T_ROLE == master ]] && "${PY[@]}" list-add "$S/etcd_members" "$T_NAME $T_IP"
  "${PY[@]}" list-del "$S/drained" "$T_NAME"
  echo "node $T_NAME is Ready ($T_ROLE, $T_IP)"
  ;;
drain)
  need_ca
  target
  if grep -q "^$T_NAME " "$S/nodes" 2>/dev/null; then
    "${PY[@]}" list-add "$S/drained" "$T_NAME"
    echo "node $T_NAME drained"
  else
    echo "node $T_NAME is not in the cluster (nothing to drain)"
  fi
  ;;
delete-node)
  need_ca
  target
  "${PY[@]}" list-del "$S/nodes" "$T_NAME"
  "${PY[@]}" list-del "$S/drained" "$T_NAME"
  [[ $T_ROLE == master ]] && "${PY[@]}" list-del "$S/etcd_members" "$T_NAME"
  echo "node $T_NAME deleted"
  ;;
vim-info)
  need_ca
  echo "server: $(endpoint)"
  echo "bearer_token: $(once "$S/bearer_token" gen_bearer)"
  cat "$S/pki/ca.crt"
  ;;
*)
  die "usage: k8s_node.sh {prepare|hosts|haproxy|haproxy-drop|ca-bundle|init|join-info|join|node-add|drain|delete-node|vim-info}"
  ;;
esac
