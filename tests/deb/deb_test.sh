#!/usr/bin/env bash
# The Debian package end to end on this machine (Debian 12, root):
#   1. dpkg-buildpackage -us -uc -b in a scratch copy of the tree (the checkout stays clean;
#      the package build runs the unit and golden suites);
#   2. lintian: no error, and no warning that debian/vnflow.lintian-overrides does not accept;
#   3. apt-get install ./vnflow_*.deb: program, man page, completion, samples, unit, the
#      system user vnflow, /var/lib/vnflow (0700, vnflow);
#   4. the README's main job against the INSTALLED vnflow: the samples validated and
#      inspected, then the local demo's lifecycle (onboard, create, instantiate, scale, heal,
#      terminate) through the daemon running as vnflow on /var/lib/vnflow/vnflow.db: the
#      service when systemd runs, else `setpriv` to vnflow, stopped with SIGTERM (drains);
#   5. apt-get purge: nothing left (program, data, docs, unit, /var/lib/vnflow); the system
#      user stays, as Debian policy has it.
# Bounded (DEB_TEST_TIMEOUT seconds, default 2700, for everything) and cleaned up on any
# exit: daemon stopped, package purged, a user the test created deleted, scratch removed.
# Usage: tests/deb/deb_test.sh [SOURCE_ROOT]       exit 0 pass, 1 fail
# Environment: DEB_TEST_NOCHECK=1 builds with DEB_BUILD_OPTIONS=nocheck; KEEP=1 keeps the
# scratch folder (the build log, lintian's output, the daemon log).
set -uo pipefail
if [[ -z ${DEB_TEST_BOUNDED:-} ]]; then
  # timeout signals the whole process group: the build, the daemon, then this script's trap.
  export DEB_TEST_BOUNDED=1
  exec timeout --kill-after=60 "${DEB_TEST_TIMEOUT:-2700}" bash "$0" "$@"
fi
root=$(realpath "${1:-$(dirname "$0")/../..}")
cd /  # every path below is absolute; the service user may enter /
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8

# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
t_init deb vnflow
quiet() { "$@" >/dev/null; }
logged() {  # logged FILE COMMAND...: output to FILE, shown (escaped) when the command fails
  local f=$1; shift
  "$@" >"$f" 2>&1 || { t_show "$f" 60; false; }
}
log() { echo "== $* ($((SECONDS / 60))m$((SECONDS % 60))s)"; }

if [[ $(id -u) -ne 0 ]]; then bad "needs root (installs and purges a package)"; t_finish; fi
if dpkg-query -W -f='${Status}' vnflow 2>/dev/null | grep -q 'ok installed'; then
  bad "vnflow is installed already; this test installs and purges it, so it leaves it alone"
  t_finish
fi

work=$(mktemp -d /tmp/vnflow-deb-test.XXXXXX)
# Other users must reach the build tree: the package build's tests run the freshly built
# vnflow as nobody (engine_cli), and the installed one runs as vnflow.
chmod 0755 "$work"
user_existed=0; getent passwd vnflow >/dev/null && user_existed=1
daemon_pid=
stop_daemon() {  # SIGTERM drains; give it 30 s, then SIGKILL
  [[ -n $daemon_pid ]] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$daemon_pid" 2>/dev/null
  wait "$daemon_pid"; local rc=$?
  daemon_pid=
  return $rc
}
cleanup() {
  trap - EXIT INT TERM
  stop_daemon >/dev/null 2>&1
  if dpkg-query -W -f='${Status}' vnflow 2>/dev/null | grep -q 'installed'; then
    apt-get purge -y -qq vnflow >/dev/null 2>&1 || dpkg --purge vnflow >/dev/null 2>&1
  fi
  if [[ $user_existed -eq 0 ]] && getent passwd vnflow >/dev/null; then
    deluser --system --quiet vnflow >/dev/null 2>&1
    getent group vnflow >/dev/null && delgroup --system --quiet vnflow >/dev/null 2>&1
  fi
  if [[ ${KEEP:-} ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap 'bad "interrupted (the time limit, DEB_TEST_TIMEOUT?)"; t_finish' INT TERM

bash "$root/tools/install-deps.sh" --deb >/dev/null || { bad "tools/install-deps.sh --deb"; t_finish; }

# ---- 1. build the package in a scratch copy
log "dpkg-buildpackage -us -uc -b (a copy of $root)"
src=$work/src/vnflow
mkdir -p "$src"
tar -C "$root" --exclude-vcs --exclude=./build --exclude='./build-*' --exclude='./obj-*' \
  --exclude=./.cache --exclude=./debian/.debhelper --exclude=./debian/vnflow \
  --exclude=./debian/files --exclude='./debian/*.substvars' \
  --exclude=./debian/debhelper-build-stamp -cf - . | tar -C "$src" -xf -
opts="parallel=$(nproc)"
[[ ${DEB_TEST_NOCHECK:-} ]] && opts+=" nocheck"
t0=$SECONDS
if (cd "$src" && DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
  ok "dpkg-buildpackage"
  grep -E '^(Ok|Fail|Skipped|Timeout): ' "$work/build.log" | tr '\n' ' ' | sed 's/^/package build tests: /'
  echo "(built in $((SECONDS - t0)) s)"
else
  t_show "$work/build.log" 60
  bad "dpkg-buildpackage"
  t_finish
fi
version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
arch=$(dpkg --print-architecture)
deb=$work/src/vnflow_${version}_${arch}.deb
changes=$work/src/vnflow_${version}_${arch}.changes
check "the .deb exists ($deb)" test -f "$deb"

# ---- 2. lintian
log "lintian"
# Shown with the informational tags and the overridden ones (which --show-overrides would
# also count for --fail-on); the verdict comes from a second run without them.
lintian -I --show-overrides --fail-on none "$changes" 2>&1 | grep -v 'root privileges'
check "lintian: no error, no warning outside debian/vnflow.lintian-overrides" \
  logged "$work/lintian.log" lintian --fail-on error,warning "$changes"

# ---- 3. install
log "apt-get install $deb"
if logged "$work/install.log" apt-get install -y -qq "$deb"; then ok "apt-get install"; else
  bad "apt-get install"; t_finish
fi
check "vnflow is on PATH as /usr/bin/vnflow" test "$(command -v vnflow)" = /usr/bin/vnflow
check "vnflow version" test "$(vnflow version)" = "vnflow ${version%%-*}"
check "the man page" test -f /usr/share/man/man1/vnflow.1.gz
check "man renders it cleanly" bash -c \
  'out=$(man --warnings -l /usr/share/man/man1/vnflow.1.gz 2>&1 >/dev/null); [[ -z $out ]] || { echo "$out"; false; }'
check "the bash completion loads" bash -c \
  'source /usr/share/bash-completion/completions/vnflow && complete -p vnflow >/dev/null'
check "the documents" test -f /usr/share/doc/vnflow/README.md.gz -o -f /usr/share/doc/vnflow/README.md
check "the systemd unit" test -f /lib/systemd/system/vnflow.service
check "the unit is enabled" test -L /etc/systemd/system/multi-user.target.wants/vnflow.service
check "the unit runs the installed program as vnflow" bash -c \
  'grep -qx "ExecStart=/usr/bin/vnflow daemon --db /var/lib/vnflow/vnflow.db" /lib/systemd/system/vnflow.service &&
   grep -qx "User=vnflow" /lib/systemd/system/vnflow.service'
if command -v systemd-analyze >/dev/null; then
  check "systemd-analyze verify vnflow.service" systemd-analyze verify /lib/systemd/system/vnflow.service
fi
check "the system user vnflow (uid < 1000, no login shell)" bash -c \
  'IFS=: read -r _ _ uid gid _ home shell < <(getent passwd vnflow) && [[ $uid -lt 1000 ]] &&
   [[ $home == /var/lib/vnflow ]] && [[ $shell == */nologin || $shell == */false ]] &&
   [[ $(getent group vnflow | cut -d: -f3) == "$gid" ]]'
check "/var/lib/vnflow is 0700 vnflow:vnflow" test "$(stat -c '%a %U %G' /var/lib/vnflow)" = "700 vnflow vnflow"
samples=/usr/share/vnflow/csar-samples
n_samples=$(find "$root/csar-samples" -mindepth 1 -maxdepth 1 -type d | wc -l)
check "the $n_samples sample packages of the tree" \
  test "$(find "$samples" -mindepth 1 -maxdepth 1 -type d | wc -l)" -eq "$n_samples"

# ---- 4. the main job, on the installed program, as the service user
as_vnflow() {
  setpriv --reuid=vnflow --regid=vnflow --init-groups --no-new-privs -- \
    env HOME=/var/lib/vnflow "$@"
}
db=/var/lib/vnflow/vnflow.db
v() { as_vnflow vnflow "$@" --db "$db"; }
log "vnflow csar validate $samples/*/ (as vnflow)"
check "csar validate of the samples" as_vnflow vnflow csar validate "$samples"/*/
for s in "$samples"/*/; do
  check "csar inspect $s" quiet as_vnflow vnflow csar inspect "$s"
done
check "workflow show local-demo --op instantiate" \
  quiet as_vnflow vnflow workflow show "$samples/local-demo" --op instantiate

log "the local demo's lifecycle through the daemon, as vnflow on $db"
if [[ -d /run/systemd/system ]]; then
  check "the package started vnflow.service" systemctl is-active --quiet vnflow.service
  check "the service runs as vnflow" test "$(ps -o user= -p "$(systemctl show -p MainPID --value vnflow.service)")" = vnflow
else
  echo "(systemd is not running here: the daemon runs under setpriv, as the unit would run it)"
  # A simple command, not the function: $! is then the daemon itself (setpriv and env exec).
  setpriv --reuid=vnflow --regid=vnflow --init-groups --no-new-privs -- \
    env HOME=/var/lib/vnflow vnflow daemon --db "$db" --workers 4 2>"$work/daemon.log" &
  daemon_pid=$!
  sleep 1
  check "the daemon runs as vnflow" test "$(ps -o user= -p "$daemon_pid")" = vnflow
fi
# The demo's hooks write under the request's work_dir: a folder the service may write.
demo=$(as_vnflow mktemp -d /var/lib/vnflow/deb-test.XXXXXX)
for r in instantiate scale_out heal terminate; do
  sed "s|/tmp/vnflow-demo|$demo/vnfs|" "$samples/local-demo/Requests/$r.json" |
    as_vnflow tee "$demo/$r.json" >/dev/null
done
pkg=$(v package onboard "$samples/local-demo") && ok "package onboard" || bad "package onboard"
inst=$(v instance create --package "$pkg" --name deb-test) && ok "instance create" || bad "instance create"
for step in "instantiate instantiate" "scale scale_out" "heal heal" "terminate terminate"; do
  set -- $step
  op=$(v instance "$1" "$inst" --request "$demo/$2.json") && ok "instance $1" || bad "instance $1"
  check "$1 completes" quiet v op wait "$op" --timeout 60
  case $1 in
    instantiate)
      check "instantiate wrote the 3 node files, as vnflow" bash -c \
        "[[ \$(find '$demo/vnfs/$inst' -name '*.conf' -user vnflow | wc -l) -eq 3 ]]"
      check "op history of the instantiate" test -n "$(v op history "$op")" ;;
    scale) check "scale_end recorded the level" grep -q 'node_aspect 1' "$demo/vnfs/$inst/scale.log" ;;
    heal) check "heal_end ran" test -s "$demo/vnfs/$inst/heal.log" ;;
    terminate) check "terminate removed the VNF's folder" test ! -e "$demo/vnfs/$inst" ;;
  esac
done
check "the database belongs to vnflow" test "$(stat -c %U "$db")" = vnflow
if [[ -n $daemon_pid ]]; then
  log "SIGTERM to the daemon (drains)"
  stop_daemon; rc=$?
  check "the daemon drained and exited 0 (rc $rc)" test "$rc" -eq 0
  check "the daemon logged its stop" grep -q 'stopped:' "$work/daemon.log"
fi

# ---- 5. purge
log "apt-get purge vnflow"
check "apt-get purge" logged "$work/purge.log" apt-get purge -y -qq vnflow
check "dpkg forgot vnflow" bash -c '! dpkg-query -W -f="\${Status}" vnflow 2>/dev/null | grep -q installed'
for p in /usr/bin/vnflow /usr/libexec/vnflow /usr/share/vnflow /var/lib/vnflow /usr/share/doc/vnflow \
  /usr/share/man/man1/vnflow.1.gz /usr/share/bash-completion/completions/vnflow \
  /lib/systemd/system/vnflow.service /etc/systemd/system/multi-user.target.wants/vnflow.service; do
  check "purge removed $p" test ! -e "$p"
done
if getent passwd vnflow >/dev/null; then
  ok "the system user vnflow stays"
  echo "(the system user vnflow stays after the purge, as Debian policy has it)"
else
  bad "the system user vnflow disappeared at purge (expected to stay)"
fi
t_finish
