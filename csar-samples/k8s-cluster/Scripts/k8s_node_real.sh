#!/bin/bash
# One node of the Kubernetes cluster VNF (k8s_cluster_installation_param.install_mode:
# real, the default): kubeadm on Ubuntu 22.04 with containerd, Docker CE (for `docker
# login` and /etc/docker/certs.d, as in Tacker's cir-k8s-cluster spec) and Calico.
# After Tacker's samples/mgmt_driver/kubernetes/install_k8s_cluster.sh, split into
# idempotent steps that the package's workflows call one at a time, per node and in
# parallel where that is safe. Every step can run again: it checks before it acts.
#
# Inputs: /etc/vnflow-k8s/cluster.json and secrets.json (uploaded by the workflow; see
# k8s_node_common.py) and the environment: VNFC_ID (this node), TARGET (a VNFC record,
# JSON), JOIN_TOKEN, CA_CERT_HASH, CERT_KEY_SECRET, DROP_IDS (JSON list of VNFC ids),
# DRAIN_TOLERANT, DRAIN_TIMEOUT (seconds, default 300).
# Output that the workflow parses: "server: URL", "join_token: T", "ca_cert_hash: sha256:H",
# "cert_key_secret: K", "bearer_token: T" and a PEM block (the cluster CA).
#
# Usage (as root; the workflow runs it with sudo): k8s_node.sh COMMAND
set -euo pipefail
umask 022
HERE=$(cd "$(dirname "$0")" && pwd)
PY=(python3 "$HERE/k8s_node_common.py")
MODE=real
LOG=/var/log/vnflow-k8s
CALICO_VERSION=${CALICO_VERSION:-v3.26.4}
export DEBIAN_FRONTEND=noninteractive
export KUBECONFIG=/etc/kubernetes/admin.conf

die() { echo "k8s_node_real: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (sudo)"
install -d -m 0700 "$LOG" # kubeadm's output names tokens: root only
# The proxy settings of secrets.json (written by `prepare`) apply to apt, curl and kubeadm.
if [[ -f /etc/vnflow-k8s/proxy.env ]]; then
  set -a
  . /etc/vnflow-k8s/proxy.env
  set +a
fi

me() { read -r ROLE IP NAME < <("${PY[@]}" node "${VNFC_ID:?VNFC_ID is not set}"); }
target() { read -r T_ROLE T_IP T_NAME < <("${PY[@]}" node "${TARGET:?TARGET is not set}"); }
masters() { "${PY[@]}" members master | wc -l; }
endpoint_hostport() {
  local ip port=6443
  ip=$("${PY[@]}" get cluster_ip)
  [[ -n $ip ]] || die "cluster.json has no cluster_ip"
  (($(masters) > 1)) && port=16443 # HA: haproxy on every master (see `haproxy`)
  echo "$ip:$port"
}
ca_hash() { # the CA of a PEM file, as kubeadm's --discovery-token-ca-cert-hash wants it
  echo "sha256:$(openssl x509 -pubkey -noout -in "$1" | openssl pkey -pubin -outform der 2>/dev/null |
    openssl dgst -sha256 -hex | sed 's/^.* //')"
}
retry() { # retry N DELAY CMD...: apt mirrors and image registries fail now and then
  local n=$1 d=$2 i
  shift 2
  for ((i = 1; ; i++)); do
    "$@" && return 0
    ((i < n)) || return 1
    echo "retry $i/$n in ${d}s: $*" >&2
    sleep "$d"
  done
}
apt_get() { apt-get -o DPkg::Lock::Timeout=600 -y "$@"; }
systemd_up() { [[ -d /run/systemd/system ]]; }
restart() {
  if systemd_up; then
    systemctl daemon-reload
    systemctl restart "$@"
  fi
}
wait_for() { # wait_for SECONDS WHAT CMD...
  local until=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || die "timed out waiting for $what"
    sleep 5
  done
}

install_packages() {
  local ver
  ver=$("${PY[@]}" get k8s_version)
  [[ $ver =~ ^1\.[0-9]+$ ]] || die "k8s_version must be like 1.26, not '$ver'"
  if command -v kubeadm >/dev/null && [[ $(kubeadm version -o short 2>/dev/null) == v$ver.* ]] &&
    command -v containerd >/dev/null && command -v docker >/dev/null; then
    echo "packages: kubeadm $(kubeadm version -o short), containerd and docker are installed"
    return
  fi
  . /etc/os-release
  [[ $ID == ubuntu ]] || echo "warning: tested on Ubuntu 22.04, this is $PRETTY_NAME" >&2
  retry 3 30 apt_get update
  retry 3 30 apt_get install apt-transport-https ca-certificates curl gnupg
  install -m 0755 -d /etc/apt/keyrings
  if [[ ! -s /etc/apt/keyrings/docker.gpg ]]; then
    retry 3 10 curl -fsSL "https://download.docker.com/linux/ubuntu/gpg" -o /tmp/docker.gpg.asc
    gpg --batch --yes --dearmor -o /etc/apt/keyrings/docker.gpg /tmp/docker.gpg.asc
  fi
  echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/ubuntu $VERSION_CODENAME stable" \
    >/etc/apt/sources.list.d/docker.list
  retry 3 10 curl -fsSL "https://pkgs.k8s.io/core:/stable:/v$ver/deb/Release.key" -o /tmp/k8s.key.asc
  gpg --batch --yes --dearmor -o "/etc/apt/keyrings/kubernetes-v$ver.gpg" /tmp/k8s.key.asc
  echo "deb [signed-by=/etc/apt/keyrings/kubernetes-v$ver.gpg] https://pkgs.k8s.io/core:/stable:/v$ver/deb/ /" \
    >/etc/apt/sources.list.d/kubernetes.list
  retry 3 30 apt_get update
  apt-mark unhold kubelet kubeadm kubectl >/dev/null 2>&1 || true
  retry 3 30 apt_get install docker-ce docker-ce-cli containerd.io kubelet kubeadm kubectl
  apt-mark hold kubelet kubeadm kubectl >/dev/null
}

configure_runtime() {
  # Kubernetes' prerequisites: no swap, overlay + br_netfilter, forwarding.
  swapoff -a
  sed -ri '/\sswap\s/ s/^([^#])/#\1/' /etc/fstab
  printf 'overlay\nbr_netfilter\n' >/etc/modules-load.d/vnflow-k8s.conf
  modprobe overlay || true
  modprobe br_netfilter || true
  printf 'net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n' \
    >/etc/sysctl.d/90-vnflow-k8s.conf
  sysctl --system >/dev/null
  # containerd as the CRI, systemd cgroups, registry hosts from /etc/containerd/certs.d.
  local conf=/etc/containerd/config.toml changed=0
  if ! grep -q 'SystemdCgroup = true' "$conf" 2>/dev/null || grep -q 'disabled_plugins = \["cri"\]' "$conf"; then
    containerd config default >"$conf.new"
    sed -i -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
      -e 's|config_path = ""|config_path = "/etc/containerd/certs.d"|' "$conf.new"
    mv "$conf.new" "$conf"
    changed=1
  fi
  ((changed)) && restart containerd
  if systemd_up; then systemctl enable --now containerd docker kubelet >/dev/null 2>&1 || true; fi
}

kubectl_root_config() {
  install -d -m 0700 /root/.kube
  install -m 0600 /etc/kubernetes/admin.conf /root/.kube/config
}

cmd=${1:-}
case $cmd in
prepare)
  me
  exec > >(tee -a "$LOG/prepare.log") 2>&1
  echo "== prepare $NAME ($ROLE, $IP) $(date -Is)"
  out=$("${PY[@]}" proxy "$MODE")
  if grep -qx changed <<<"$out"; then restart containerd docker 2>/dev/null || true; fi
  [[ $(hostname) == "$NAME" ]] || hostnamectl set-hostname "$NAME" 2>/dev/null || hostname "$NAME"
  install_packages
  configure_runtime
  out=$("${PY[@]}" registries "$MODE")
  grep -vx changed <<<"$out" || true
  if grep -qx changed <<<"$out"; then restart docker containerd; fi
  "${PY[@]}" login "$MODE"
  echo "prepared $NAME ($ROLE, $IP)"
  ;;
hosts)
  "${PY[@]}" hosts
  ;;
haproxy)
  # HA clusters: haproxy on every master spreads :16443 over the masters' :6443.
  if (($(masters) > 1)) && ! command -v haproxy >/dev/null; then
    retry 3 30 apt_get install haproxy
  fi
  out=$("${PY[@]}" haproxy)
  grep -vx changed <<<"$out" || true
  if grep -qx changed <<<"$out" && command -v haproxy >/dev/null; then
    if systemd_up; then
      systemctl enable haproxy >/dev/null 2>&1 || true
      systemctl restart haproxy
    fi
  fi
  ;;
haproxy-drop)
  mapfile -t ips < <("${PY[@]}" ids-to-ips "${DROP_IDS:-[]}")
  out=$("${PY[@]}" haproxy-drop "${ips[@]}")
  grep -vx changed <<<"$out" || true
  if grep -qx changed <<<"$out"; then
    if systemd_up; then systemctl reload-or-restart haproxy; fi
  fi
  ;;
ca-bundle)
  "${PY[@]}" ca-bundle
  ;;
init)
  me
  [[ $ROLE == master ]] || die "init runs on a master, not on $NAME"
  ep=$(endpoint_hostport)
  if [[ -f /etc/kubernetes/admin.conf ]]; then
    echo "control plane already initialized on $NAME"
  else
    if [[ -n $(ls -A /etc/kubernetes/manifests 2>/dev/null) || -f /etc/kubernetes/kubelet.conf ]]; then
      echo "reset: an earlier kubeadm init or join did not finish"
      kubeadm reset -f
    fi
    # kubeadm prints the join command with its token and certificate key: to the log only
    kubeadm init --control-plane-endpoint "$ep" --apiserver-advertise-address "$IP" \
      --node-name "$NAME" --pod-network-cidr "$("${PY[@]}" get pod_cidr)" \
      --service-cidr "$("${PY[@]}" get service_cidr)" --upload-certs >>"$LOG/init.log" 2>&1 ||
      die "kubeadm init failed: $(grep -iE 'error|fatal' "$LOG/init.log" | tail -n 3 | tr '\n' ' ')"
    echo "kubeadm init done (log: $LOG/init.log)"
  fi
  kubectl_root_config
  wait_for 300 "the API server" kubectl get --raw=/readyz
  if ! kubectl -n kube-system get daemonset calico-node >/dev/null 2>&1; then
    retry 5 20 curl -fsSL "https://raw.githubusercontent.com/projectcalico/calico/$CALICO_VERSION/manifests/calico.yaml" \
      -o "$LOG/calico.yaml"
    sed -i -e 's|# - name: CALICO_IPV4POOL_CIDR|- name: CALICO_IPV4POOL_CIDR|' \
      -e "s|#   value: \"192.168.0.0/16\"|  value: \"$("${PY[@]}" get pod_cidr)\"|" "$LOG/calico.yaml"
    retry 5 20 kubectl apply -f "$LOG/calico.yaml"
  fi
  wait_for 600 "node $NAME to be Ready" bash -c "kubectl get node '$NAME' | grep -qw Ready"
  echo "control plane on $NAME ($IP), endpoint https://$ep"
  ;;
join-info)
  [[ -f /etc/kubernetes/admin.conf ]] || die "this node holds no control plane"
  token=$(kubeadm token create --ttl 2h)
  key=$(kubeadm init phase upload-certs --upload-certs 2>/dev/null | tail -n 1)
  echo "server: https://$(endpoint_hostport)"
  echo "join_token: $token"
  echo "ca_cert_hash: $(ca_hash /etc/kubernetes/pki/ca.crt)"
  echo "cert_key_secret: $key"
  ;;
join)
  me
  exec > >(tee -a "$LOG/join.log") 2>&1
  ep=$(endpoint_hostport)
  if [[ -f /etc/kubernetes/kubelet.conf ]]; then
    if [[ -f /etc/kubernetes/pki/ca.crt && $(ca_hash /etc/kubernetes/pki/ca.crt) == "${CA_CERT_HASH:-}" ]]; then
      echo "$NAME already joined the cluster at $ep"
      exit 0
    fi
    echo "reset: $NAME was joined to another cluster"
    kubeadm reset -f
    rm -rf /etc/cni/net.d /root/.kube
  fi
  args=(join "$ep" --token "${JOIN_TOKEN:?}" --discovery-token-ca-cert-hash "${CA_CERT_HASH:?}" --node-name "$NAME")
  if [[ $ROLE == master ]]; then
    args+=(--control-plane --certificate-key "${CERT_KEY_SECRET:?}" --apiserver-advertise-address "$IP")
  fi
  join_once() { kubeadm "${args[@]}" || { kubeadm reset -f >/dev/null 2>&1 || true; return 1; }; }
  retry 3 30 join_once
  [[ $ROLE == master ]] && kubectl_root_config
  echo "$NAME joined the cluster at $ep as a $ROLE"
  ;;
node-add)
  target
  wait_for 600 "node $T_NAME to be Ready" bash -c "kubectl get node '$T_NAME' | grep -qw Ready"
  [[ $T_ROLE == worker ]] && kubectl label node "$T_NAME" node-role.kubernetes.io/worker= --overwrite >/dev/null
  echo "node $T_NAME is Ready ($T_ROLE, $T_IP)"
  ;;
drain)
  target
  if ! kubectl get node "$T_NAME" >/dev/null 2>&1; then
    echo "node $T_NAME is not in the cluster (nothing to drain)"
    exit 0
  fi
  if kubectl drain "$T_NAME" --ignore-daemonsets --delete-emptydir-data --force \
    --timeout="${DRAIN_TIMEOUT:-300}s"; then
    echo "node $T_NAME drained"
  elif [[ ${DRAIN_TOLERANT:-0} == 1 ]]; then
    echo "warning: node $T_NAME did not drain in ${DRAIN_TIMEOUT:-300}s (it is being healed); going on" >&2
  else
    die "node $T_NAME did not drain"
  fi
  ;;
delete-node)
  target
  if [[ $T_ROLE == master ]]; then
    # Remove the master from etcd through a healthy member (not the one being removed).
    pod=$(kubectl -n kube-system get pods -l component=etcd -o name | grep -v -- "-$T_NAME\$" | head -n 1 || true)
    if [[ -n $pod ]]; then
      etcdctl=(kubectl -n kube-system exec "${pod#pod/}" -- etcdctl --endpoints https://127.0.0.1:2379
        --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/etcd/server.crt
        --key /etc/kubernetes/pki/etcd/server.key)
      for id in $("${etcdctl[@]}" member list | awk -F', ' -v n="$T_NAME" '$3 == n {print $1}'); do
        "${etcdctl[@]}" member remove "$id"
      done
    fi
  fi
  kubectl delete node "$T_NAME" --ignore-not-found
  echo "node $T_NAME deleted"
  ;;
vim-info)
  [[ -f /etc/kubernetes/admin.conf ]] || die "this node holds no control plane"
  # A cluster-admin service account with a long-lived token Secret (Kubernetes >= 1.24 no
  # longer makes token Secrets by itself, which Tacker's driver relied on).
  kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: ServiceAccount
metadata: {name: vnflow-admin, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: vnflow-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: vnflow-admin, namespace: kube-system}]
---
apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: vnflow-admin-token
  namespace: kube-system
  annotations: {kubernetes.io/service-account.name: vnflow-admin}
EOF
  wait_for 120 "the vnflow-admin token" bash -c \
    "[[ -n \$(kubectl -n kube-system get secret vnflow-admin-token -o jsonpath='{.data.token}') ]]"
  echo "server: https://$(endpoint_hostport)"
  echo "bearer_token: $(kubectl -n kube-system get secret vnflow-admin-token -o jsonpath='{.data.token}' | base64 -d)"
  cat /etc/kubernetes/pki/ca.crt
  ;;
*)
  die "usage: k8s_node.sh {prepare|hosts|haproxy|haproxy-drop|ca-bundle|init|join-info|join|node-add|drain|delete-node|vim-info}"
  ;;
esac
