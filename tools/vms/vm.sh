#!/usr/bin/env bash
# Test "VMs" for vnflow's SSH/SFTP integration tests: each VM is a network
# namespace (veth on bridge vnfbr0, 10.231.0.0/16) plus a mount and UTS
# namespace whose /etc /home /root /var /opt /usr/local are overlays of the
# host's (writes stay in the VM) and whose /tmp and /run are fresh tmpfs. A
# holder process ("vnfvm-hold:NAME", a bounded sleep) keeps the namespaces;
# a real OpenSSH sshd runs in them on ADDR:22. See tools/vms/README.md.
#
# Usage: vm.sh setup | up NAME ADDR | down NAME | down-all | teardown
#        | exec NAME CMD... | kill-sshd NAME | start-sshd NAME | replace NAME | list
# Environment: VNFLOW_VMS_DIR (/tmp/vnflow-vms), VM_USER (vnfuser),
#   VM_PASSWORD (vnf-password), VM_LIFETIME (86400 s, the holder's lifetime),
#   VM_UP_TIMEOUT (10 s, wait for port 22), VM_NO_APT=1 (setup never runs apt-get).
set -euo pipefail
umask 022

STATE=$(realpath -m "${VNFLOW_VMS_DIR:-/tmp/vnflow-vms}")
BR=vnfbr0
HOST_ADDR=10.231.0.1
NET_PREFIX=10.231
VM_USER=${VM_USER:-vnfuser}
VM_PASSWORD=${VM_PASSWORD:-vnf-password}
LIFETIME=${VM_LIFETIME:-86400}
UP_TIMEOUT=${VM_UP_TIMEOUT:-10}
PACKAGES=(openssh-server openssh-sftp-server openssh-client sudo iproute2 sshpass util-linux)
OVERLAYS=(etc home root var opt usr/local)
CLIENT_KEY=$STATE/client/id_ed25519
IN_VM=/run/vnfvm # the VM's state dir as the VM sees it (bind mount)

die() {
  echo "vm.sh: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ $LIFETIME =~ ^[0-9]+$ && $UP_TIMEOUT =~ ^[0-9]+$ ]] || die "VM_LIFETIME and VM_UP_TIMEOUT must be whole seconds"
[[ $VM_USER =~ ^[a-z_][a-z0-9_-]{0,30}$ ]] || die "bad VM_USER '$VM_USER'"
# The state dir holds the overlays' upper dirs: it must not lie inside a
# directory that the VM overlays, nor in /run (replaced by a tmpfs).
for d in "${OVERLAYS[@]}" run; do
  [[ $STATE/ != /$d/* ]] || die "VNFLOW_VMS_DIR ($STATE) must not be under /$d"
done

# ---------------------------------------------------------------- helpers
now_ms() { echo $(($(date +%s%N) / 1000000)); }
check_name() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ ]] || die "bad VM name '$1' (1-40 of A-Za-z0-9_.-)"; }
vmdir() { echo "$STATE/$1"; }
netns_of() { echo "vnfvm-$1"; }
# host end of the veth: vnfh + 8 hex digits of the name's md5 (<= 15 chars)
veth_of() { echo "vnfh$(printf '%s' "$1" | md5sum | cut -c1-8)"; }
check_addr() {
  local a=$1 o1 o2 o3 o4
  [[ $a =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || die "bad address '$a'"
  o1=${BASH_REMATCH[1]} o2=${BASH_REMATCH[2]} o3=$((10#${BASH_REMATCH[3]})) o4=$((10#${BASH_REMATCH[4]}))
  [[ $o1.$o2 == "$NET_PREFIX" ]] || die "address $a is outside $NET_PREFIX.0.0/16"
  ((o3 <= 255 && o4 <= 255)) || die "bad address '$a'"
  [[ $a != "$HOST_ADDR" ]] || die "$a is the host's address on $BR"
  ((!(o3 == 0 && o4 == 0) && !(o3 == 255 && o4 == 255))) || die "$a is the subnet's network or broadcast address"
}

exec 9>/dev/null # placeholder; lock fds are opened by lock_*
mkdir -p "$STATE/.locks"
lock_global() {
  exec 9>"$STATE/.locks/global"
  flock -w 60 9 || die "timed out waiting for $STATE/.locks/global"
}
unlock_global() { exec 9>/dev/null; }
lock_name() {
  exec 8>"$STATE/.locks/$1"
  flock -w 90 8 || die "timed out waiting for the lock of VM $1"
}

# holder_pid NAME: the live holder of the VM, or nothing
holder_pid() {
  local d pid
  d=$(vmdir "$1")
  pid=$(cat "$d/holder.pid" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") == "vnfvm-hold:$1 "* ]] || return 0
  [[ $(readlink "/proc/$pid/ns/mnt" 2>/dev/null) == "$(cat "$d/mntns" 2>/dev/null)" ]] || return 0
  echo "$pid"
}
# sshd_pid NAME: the live listening sshd of the VM, or nothing
sshd_pid() {
  local d pid
  d=$(vmdir "$1")
  pid=$(cat "$d/sshd.pid" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == /usr/sbin/sshd ]] || return 0
  [[ $(readlink "/proc/$pid/ns/mnt" 2>/dev/null) == "$(cat "$d/mntns" 2>/dev/null)" ]] || return 0
  echo "$pid"
}
# vm_pids NAME [KEEP_PID]: every process in the VM's mount or network namespace
vm_pids() {
  local d mnt net keep=${2:-} host_mnt host_net
  d=$(vmdir "$1")
  mnt=$(cat "$d/mntns" 2>/dev/null || true)
  net=$(cat "$d/netns" 2>/dev/null || true)
  host_mnt=$(readlink /proc/$$/ns/mnt)
  host_net=$(readlink /proc/$$/ns/net)
  [[ $mnt != "$host_mnt" && $mnt != "$(readlink /proc/self/ns/mnt)" ]] || mnt=
  [[ $net != "$host_net" && $net != "$(readlink /proc/self/ns/net)" ]] || net=
  # A VM's processes are in both its mount and its network namespace. Once the VM's
  # namespaces are gone (kill_all's later rounds), the kernel may give their inode numbers
  # to new namespaces: a hook's sandbox (a mount namespace of its own, the host's network)
  # must not be taken for the VM. So with both recorded, only processes in both count.
  local by_mnt by_net
  by_mnt=$([[ -z $mnt ]] || find /proc/[0-9]*/ns/mnt -maxdepth 0 -printf '%p %l\n' 2>/dev/null | awk -v m="$mnt" '$2 == m {split($1, a, "/"); print a[3]}' | sort -u)
  by_net=$([[ -z $net ]] || find /proc/[0-9]*/ns/net -maxdepth 0 -printf '%p %l\n' 2>/dev/null | awk -v n="$net" '$2 == n {split($1, a, "/"); print a[3]}' | sort -u)
  {
    if [[ -n $mnt && -n $net ]]; then
      comm -12 <(printf '%s\n' "$by_mnt") <(printf '%s\n' "$by_net") | grep -v '^$' || true
    else
      printf '%s\n' "$by_mnt" "$by_net" | grep -v '^$' || true
    fi
    # namespace files lost (crash between steps): whatever ip finds in the netns
    if [[ -z $net ]] && netns_exists "$(netns_of "$1")"; then
      ip netns pids "$(netns_of "$1")" 2>/dev/null || true
    fi
  } | sort -un | grep -vxF -e "$$" -e "${keep:-$$}" || true
}
# kill_all NAME [KEEP_PID]: SIGKILL them, wait (bounded) until they are gone
kill_all() {
  local pids i
  for ((i = 0; i < 50; i++)); do
    pids=$(vm_pids "$@")
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  pids=$(vm_pids "$@")
  [[ -z $pids ]] || die "processes of VM $1 survived SIGKILL for 5 s: $pids"
}
# banner ADDR: the SSH server at ADDR:22 sends its version line
banner() {
  # shellcheck disable=SC2016
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/22" && IFS= read -r -t 1.5 l <&3 && [[ $l == SSH-2.0-* ]]' "$1" 2>/dev/null
}
# (no "cmd | grep -q" under pipefail: grep's early exit makes cmd fail with SIGPIPE)
netns_exists() { [[ -e /run/netns/$1 ]]; }
flush_neigh() {
  local ns
  ip neigh flush to "$1" dev "$BR" 2>/dev/null || true
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^vnfvm-/ {print $1}'); do
    ip -n "$ns" neigh flush to "$1" 2>/dev/null || true
  done
}

# ------------------------------------------------------------------ setup
pkg_missing() {
  local p ok
  ok=$(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null | awk '/ install ok installed$/ {print $1}')
  for p in "${PACKAGES[@]}"; do
    grep -qxF "$p" <<<"$ok" || printf '%s ' "$p"
  done
}
# what up needs on the host (cheaper than asking dpkg)
tools_missing() {
  local f
  for f in /usr/sbin/sshd /usr/lib/openssh/sftp-server /usr/bin/ssh-keygen /usr/bin/sudo /usr/bin/nsenter /usr/bin/unshare; do
    [[ -x $f ]] || printf '%s ' "$f"
  done
}
# stop_system_sshd: an sshd of the host's own namespaces (started by the
# package's postinst) would take port 22 on every address of the host.
stop_system_sshd() {
  local pid host_mnt host_net p
  host_mnt=$(readlink /proc/$$/ns/mnt)
  host_net=$(readlink /proc/$$/ns/net)
  pid=$(cat /run/sshd.pid 2>/dev/null || true)
  for p in $pid $(pgrep -x sshd 2>/dev/null || true); do
    [[ $p =~ ^[0-9]+$ && $(readlink "/proc/$p/exe" 2>/dev/null) == /usr/sbin/sshd ]] || continue
    [[ $(readlink "/proc/$p/ns/mnt") == "$host_mnt" && $(readlink "/proc/$p/ns/net") == "$host_net" ]] || continue
    # only a listener started by the init script: no -f of ours
    [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") == *"$IN_VM/"* ]] && continue
    kill -TERM "$p" 2>/dev/null || true
  done
  rm -f /run/sshd.pid
}
ensure_net() {
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge stp_state 0 ||
    die "cannot create bridge $BR"
  [[ $(ip addr show dev "$BR") == *" $HOST_ADDR/16 "* ]] || ip addr add "$HOST_ADDR/16" dev "$BR" ||
    die "cannot add $HOST_ADDR/16 to $BR"
  ip link set "$BR" up
  if [[ $(ip route show "$NET_PREFIX.0.0/16") != *"dev $BR"* ]]; then
    ip route replace "$NET_PREFIX.0.0/16" dev "$BR" src "$HOST_ADDR" || die "cannot route $NET_PREFIX.0.0/16 via $BR"
  fi
  [[ $(ip route get "$NET_PREFIX.1.2" 2>/dev/null) == *" dev $BR "* ]] ||
    die "host traffic to $NET_PREFIX.0.0/16 does not go via $BR: $(ip route get "$NET_PREFIX.1.2" 2>&1)"
}
cmd_setup() {
  local missing tmp_policy=
  missing=$(pkg_missing)
  missing=${missing% }
  if [[ -n $missing ]]; then
    [[ ${VM_NO_APT:-0} != 1 ]] || die "missing Debian packages: $missing"
    mkdir -p "$STATE"
    # no init script may start the packaged sshd: policy-rc.d 101 (unless the
    # machine has one already), and sshd_not_to_be_run (Debian's own switch)
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d
      tmp_policy=1
    fi
    mkdir -p /etc/ssh
    touch /etc/ssh/sshd_not_to_be_run
    # shellcheck disable=SC2086
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; }; } \
      >"$STATE/apt.log" 2>&1; then
      [[ -z $tmp_policy ]] || rm -f /usr/sbin/policy-rc.d
      tail -n 20 "$STATE/apt.log" >&2
      die "apt-get install $missing failed (log: $STATE/apt.log)"
    fi
    [[ -z $tmp_policy ]] || rm -f /usr/sbin/policy-rc.d
    missing=$(pkg_missing)
    [[ -z ${missing% } ]] || die "still missing after apt-get: $missing"
  fi
  [[ -e /etc/ssh/sshd_not_to_be_run ]] || touch /etc/ssh/sshd_not_to_be_run
  stop_system_sshd
  ensure_net
  mkdir -p "$STATE/client"
  chmod 700 "$STATE/client"
  if [[ ! -s $CLIENT_KEY || ! -s $CLIENT_KEY.pub ]]; then
    rm -f "$CLIENT_KEY" "$CLIENT_KEY.pub"
    ssh-keygen -q -t ed25519 -N '' -C vnflow-vms-client -f "$CLIENT_KEY" </dev/null >/dev/null ||
      die "ssh-keygen of the client key failed"
  fi
}

# ------------------------------------------------------------- in the VM
# shellcheck disable=SC2153 # NAME ADDR VMDIR come from the environment
# vm_init: runs inside the VM's fresh mount+UTS(+net) namespaces (nsenter
# into the holder) with VMDIR NAME VM_USER VM_PASSWORD in the environment.
vm_init() {
  set -euo pipefail
  local d u w key
  for d in etc home root var opt usr/local; do
    u=$VMDIR/fs/upper/${d//\//_}
    w=$VMDIR/fs/overlay-work/${d//\//_}
    mkdir -p "$u" "$w" "/$d"
    mount -t overlay "vnfvm-$NAME" -o "lowerdir=/$d,upperdir=$u,workdir=$w" "/$d"
  done
  # the copies of the host's netns mounts would keep other VMs' netns alive
  umount -R -l /run/netns 2>/dev/null || true
  mount -t tmpfs -o mode=755,size=64m "vnfvm-$NAME-run" /run
  mkdir -p /run/vnfvm /run/sshd /run/lock
  chmod 1777 /run/lock
  mount --bind "$VMDIR" /run/vnfvm
  mount -t tmpfs -o mode=1777,size=1g "vnfvm-$NAME-tmp" /tmp
  hostname "$NAME"
  echo "$NAME" >/etc/hostname
  printf '127.0.1.1\t%s\n' "$NAME" >>/etc/hosts
  # host keys of this VM only (the host's are whited out in the overlay)
  rm -f /etc/ssh/ssh_host_*
  cp -p /run/vnfvm/newkeys/ssh_host_* /etc/ssh/
  rm -rf /run/vnfvm/newkeys
  ssh-keygen -A >/dev/null
  : >/run/vnfvm/known_hosts.tmp
  : >/run/vnfvm/hostkeys.tmp
  for key in /etc/ssh/ssh_host_*_key.pub; do
    ssh-keygen -l -f "$key" >>/run/vnfvm/hostkeys.tmp
    echo "$ADDR $(cut -d' ' -f1,2 "$key")" >>/run/vnfvm/known_hosts.tmp
  done
  mv /run/vnfvm/hostkeys.tmp /run/vnfvm/hostkeys
  mv /run/vnfvm/known_hosts.tmp /run/vnfvm/known_hosts
  # the test user: bash, password, the client key, passwordless sudo
  id "$VM_USER" >/dev/null 2>&1 || useradd -m -U -s /bin/bash "$VM_USER"
  echo "$VM_USER:$VM_PASSWORD" | chpasswd
  for u in "$VM_USER" root; do
    d=$(getent passwd "$u" | cut -d: -f6)
    mkdir -p "$d/.ssh"
    cat /run/vnfvm/client.pub >"$d/.ssh/authorized_keys"
    chmod 700 "$d/.ssh"
    chmod 600 "$d/.ssh/authorized_keys"
    chown -R "$u:" "$d/.ssh"
  done
  echo "$VM_USER ALL=(ALL:ALL) NOPASSWD: ALL" >/etc/sudoers.d/90-vnfvm
  chmod 440 /etc/sudoers.d/90-vnfvm
}

write_sshd_config() {
  local addr=$1 d=$2
  cat >"$d/sshd_config" <<EOF
# vnflow test VM (tools/vms/vm.sh); paths as the VM sees them ($IN_VM = $d)
Port 22
ListenAddress $addr
AddressFamily inet
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
HostKey /etc/ssh/ssh_host_rsa_key
PidFile $IN_VM/sshd.pid
LogLevel VERBOSE
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication yes
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
AcceptEnv LANG LC_*
MaxStartups 100:30:200
MaxSessions 64
LoginGraceTime 60
# A user with ~/.vnflow-sftp-dies gets an SFTP server that answers the handshake and
# then loses its input: the session dies mid-request (tests of a lost connection).
Subsystem sftp if [ -e .vnflow-sftp-dies ]; then { head -c 9; sleep 1; } | /usr/lib/openssh/sftp-server; else exec /usr/lib/openssh/sftp-server; fi
EOF
}

# start_sshd NAME HOLDER ADDR: sshd -D in the holder's namespaces, detached
start_sshd() {
  local name=$1 holder=$2 addr=$3 d pid deadline
  d=$(vmdir "$name")
  rm -f "$d/sshd.pid"
  setsid nsenter -t "$holder" -m -u -n -- /usr/sbin/sshd -D -f "$IN_VM/sshd_config" -E "$IN_VM/sshd.log" \
    </dev/null >/dev/null 2>>"$d/sshd.stderr" 8>&- 9>&- &
  local launched=$!
  disown "$launched" # no "Killed" job notice when a failed up cleans up
  deadline=$(($(now_ms) + UP_TIMEOUT * 1000))
  while (($(now_ms) < deadline)); do
    pid=$(sshd_pid "$name")
    if [[ -n $pid ]] && banner "$addr"; then
      return 0
    fi
    if [[ -z $pid ]] && ! kill -0 "$launched" 2>/dev/null; then
      die "sshd of VM $name exited: $(tail -n 5 "$d/sshd.stderr" "$d/sshd.log" 2>/dev/null | tr '\n' ' ')"
    fi
    sleep 0.05
  done
  die "sshd of VM $name does not answer on $addr:22 within ${UP_TIMEOUT}s: $(tail -n 5 "$d/sshd.log" 2>/dev/null | tr '\n' ' ')"
}

# ------------------------------------------------------------- commands
cmd_up() {
  local name=$1 addr=$2 d ns veth other hpid i t0 err keygen
  check_name "$name"
  check_addr "$addr"
  t0=$(now_ms)
  d=$(vmdir "$name")
  ns=$(netns_of "$name")
  veth=$(veth_of "$name")
  [[ -s $CLIENT_KEY.pub ]] || die "no client key $CLIENT_KEY.pub: run vm.sh setup first"
  [[ -z $(tools_missing) ]] || die "missing $(tools_missing): run vm.sh setup first"
  lock_name "$name"
  if [[ -d $d ]]; then
    if [[ $(cat "$d/addr" 2>/dev/null) == "$addr" && -n $(holder_pid "$name") && -n $(sshd_pid "$name") ]]; then
      return 0 # already up
    fi
    [[ $(cat "$d/addr" 2>/dev/null) == "$addr" || ! -s $d/addr ]] ||
      die "VM $name exists with address $(cat "$d/addr"); down it first"
    vm_down "$name"
  fi
  # reserve the address and the name
  lock_global
  for other in "$STATE"/*/addr; do
    [[ -f $other ]] || continue
    [[ $(cat "$other") != "$addr" ]] || die "address $addr is taken by VM $(basename "$(dirname "$other")")"
  done
  mkdir -p "$d"
  echo "$addr" >"$d/addr"
  unlock_global
  ensure_net
  # on any failure from here on: remove what exists, keep the reason
  err=$(mktemp)
  trap 'rc=$?; if ((rc != 0)); then (vm_down "$name") >/dev/null 2>&1 || true; fi; rm -f "$err"' EXIT
  # RSA 3072 takes ~1 s: make it while the network and the holder come up
  mkdir -m 700 "$d/newkeys"
  ssh-keygen -q -t rsa -b 3072 -N '' -C "root@$name" -f "$d/newkeys/ssh_host_rsa_key" </dev/null >/dev/null 2>&1 8>&- 9>&- &
  keygen=$!
  echo "$veth" >"$d/veth"
  cp "$CLIENT_KEY.pub" "$d/client.pub"
  ! netns_exists "$ns" || ip netns del "$ns"
  ! ip link show "$veth" >/dev/null 2>&1 || ip link del "$veth"
  ip netns add "$ns" 2>"$err" || die "ip netns add $ns: $(cat "$err")"
  ip netns exec "$ns" sh -c 'echo 1 >/proc/sys/net/ipv4/conf/all/arp_notify; echo 1 >/proc/sys/net/ipv4/conf/default/arp_notify' 2>/dev/null || true
  ip link add "$veth" type veth peer name eth0 netns "$ns" 2>"$err" || die "veth $veth: $(cat "$err")"
  {
    ip link set "$veth" master "$BR" &&
      ip link set "$veth" up &&
      ip -n "$ns" link set lo up &&
      ip -n "$ns" addr add "$addr/16" dev eth0 &&
      ip -n "$ns" link set eth0 up
  } 2>"$err" || die "network of VM $name: $(cat "$err")"
  flush_neigh "$addr"
  # the holder: owns the mount and UTS namespaces (bounded lifetime)
  rm -f "$d/holder.pid"
  # shellcheck disable=SC2016
  setsid nsenter --net="/run/netns/$ns" -- unshare --mount --uts --propagation private -- \
    /bin/bash -c 'echo $$ >"$0/holder.pid.tmp" && mv "$0/holder.pid.tmp" "$0/holder.pid" && exec -a "vnfvm-hold:$1" sleep "$2"' \
    "$d" "$name" "$LIFETIME" </dev/null >/dev/null 2>"$d/holder.stderr" 8>&- 9>&- &
  disown $!
  for ((i = 0; i < 500; i++)); do # 10 s: a loaded machine can be slow to exec
    hpid=$(cat "$d/holder.pid" 2>/dev/null || true)
    [[ -n $hpid && $(tr '\0' ' ' 2>/dev/null <"/proc/$hpid/cmdline") == "vnfvm-hold:$name "* ]] && break
    hpid=
    sleep 0.02
  done
  [[ -n $hpid ]] || die "the namespace holder of VM $name did not start: $(cat "$d/holder.stderr" 2>/dev/null)"
  readlink "/proc/$hpid/ns/mnt" >"$d/mntns"
  readlink "/proc/$hpid/ns/net" >"$d/netns"
  [[ $(cat "$d/mntns") != "$(readlink /proc/$$/ns/mnt)" ]] || die "holder of VM $name is in the host's mount namespace"
  wait "$keygen" || die "ssh-keygen -t rsa failed"
  if ! VMDIR=$d NAME=$name ADDR=$addr VM_USER=$VM_USER VM_PASSWORD=$VM_PASSWORD \
    timeout 60 nsenter -t "$hpid" -m -u -n -- /bin/bash -c "$(declare -f vm_init); vm_init" >"$err" 2>&1; then
    die "setting up VM $name failed: $(tail -n 5 "$err" | tr '\n' ' ')"
  fi
  write_sshd_config "$addr" "$d"
  start_sshd "$name" "$hpid" "$addr"
  echo "$(($(now_ms) - t0))" >"$d/up_ms"
  trap - EXIT
  rm -f "$err"
}

# vm_down NAME: everything of the VM goes; no error when nothing is there
vm_down() {
  local name=$1 d ns veth addr
  d=$(vmdir "$name")
  ns=$(netns_of "$name")
  veth=$(cat "$d/veth" 2>/dev/null || veth_of "$name")
  addr=$(cat "$d/addr" 2>/dev/null || true)
  kill_all "$name" # the mounts live only in the VM's mount namespace: they go with it
  if netns_exists "$ns"; then
    ip netns del "$ns" || die "ip netns del $ns failed"
  fi
  ! ip link show "$veth" >/dev/null 2>&1 || ip link del "$veth" 2>/dev/null || true
  [[ -z $addr ]] || flush_neigh "$addr"
  rm -rf "$d"
}
cmd_down() {
  check_name "$1"
  lock_name "$1"
  if [[ ! -d $(vmdir "$1") && -n $(ip netns pids "$(netns_of "$1")" 2>/dev/null) ]]; then
    die "netns $(netns_of "$1") has processes but no VM $1 in $STATE (another VNFLOW_VMS_DIR?): left alone"
  fi
  vm_down "$1"
  rm -f "$STATE/.locks/$1"
}
cmd_down_all() {
  local n names=()
  for n in "$STATE"/*/; do
    n=$(basename "$n")
    [[ $n != client ]] && [[ -e $STATE/$n/addr || -e $STATE/$n/veth || -e $STATE/$n/holder.pid ]] && names+=("$n")
  done
  # leftovers (state dir lost): vnfvm-* netns with no process in them. A netns
  # with processes but no dir here belongs to another VNFLOW_VMS_DIR: kept.
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^vnfvm-/ {sub(/^vnfvm-/, "", $1); print $1}'); do
    [[ -d $STATE/$n || -z $(ip netns pids "vnfvm-$n" 2>/dev/null) ]] && names+=("$n")
  done
  local failed=()
  for n in $(printf '%s\n' "${names[@]}" | sort -u); do
    [[ -z $n ]] || (cmd_down "$n") || failed+=("$n")
  done
  ((${#failed[@]} == 0)) || die "down-all: could not remove ${failed[*]}"
}
cmd_teardown() {
  cmd_down_all
  ! ip link show "$BR" >/dev/null 2>&1 || ip link del "$BR"
}
running_vm() {
  check_name "$1"
  [[ -s $(vmdir "$1")/addr ]] || die "no VM $1"
  HOLDER=$(holder_pid "$1")
  [[ -n $HOLDER ]] || die "VM $1 has no live namespace holder (VM_LIFETIME over? down/up it again)"
}
cmd_exec() {
  local name=$1
  shift
  (($# > 0)) || die "usage: vm.sh exec NAME CMD..."
  check_name "$name"
  [[ -s $(vmdir "$name")/addr ]] || die "no VM $name"
  # the holder, or (its lifetime over) the sshd, which shares its namespaces
  HOLDER=$(holder_pid "$name")
  HOLDER=${HOLDER:-$(sshd_pid "$name")}
  [[ -n $HOLDER ]] || die "VM $name has neither its namespace holder nor its sshd (down/up it again)"
  exec 8>&- 9>&-
  exec nsenter -t "$HOLDER" -m -u -n -- "$@"
}
cmd_kill_sshd() {
  running_vm "$1"
  lock_name "$1"
  kill_all "$1" "$HOLDER"
  rm -f "$(vmdir "$1")/sshd.pid"
}
cmd_start_sshd() {
  running_vm "$1"
  lock_name "$1"
  [[ -z $(sshd_pid "$1") ]] || return 0
  start_sshd "$1" "$HOLDER" "$(cat "$(vmdir "$1")/addr")"
}
cmd_replace() {
  local addr
  check_name "$1"
  addr=$(cat "$(vmdir "$1")/addr" 2>/dev/null) || die "no VM $1"
  (cmd_down "$1")
  cmd_up "$1" "$addr"
}
cmd_list() {
  local d n state pid
  for d in "$STATE"/*/; do
    n=$(basename "$d")
    [[ -s $d/addr ]] || continue
    pid=$(sshd_pid "$n")
    if [[ -n $pid ]]; then
      state=up
    elif [[ -n $(holder_pid "$n") ]]; then
      state=sshd-down
    else
      state=dead
    fi
    printf '%s %s %s %s\n' "$n" "$(cat "$d/addr")" "${pid:--}" "$state"
  done
}

usage() {
  sed -n '9,13p' "$0" >&2
  exit 2
}
(($# > 0)) || usage
cmd=$1
shift
case $cmd in
  setup) (($# == 0)) || usage; cmd_setup ;;
  up) (($# == 2)) || usage; cmd_up "$1" "$2" ;;
  down) (($# == 1)) || usage; cmd_down "$1" ;;
  down-all) (($# == 0)) || usage; cmd_down_all ;;
  teardown) (($# == 0)) || usage; cmd_teardown ;;
  exec) (($# >= 2)) || usage; cmd_exec "$@" ;;
  kill-sshd) (($# == 1)) || usage; cmd_kill_sshd "$1" ;;
  start-sshd) (($# == 1)) || usage; cmd_start_sshd "$1" ;;
  replace) (($# == 1)) || usage; cmd_replace "$1" ;;
  list) (($# == 0)) || usage; cmd_list ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
