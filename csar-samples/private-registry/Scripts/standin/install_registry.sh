#!/bin/sh
# STAND-IN for Scripts/real/install_registry.sh, selected by the instantiate request
# (additionalParams.private_registry_installation_param.install_mode: standin), for test
# machines where Docker cannot run. Same steps, same arguments, same environment; it
# installs nothing and writes only under /etc, /var, /opt and /tmp. What it leaves:
#
#   /etc/docker/daemon.json                      the same file the real install writes
#   /etc/systemd/system/docker.service.d/http-proxy.conf   with a proxy only (as real)
#   /etc/apt/apt.conf.d/95vnflow-proxy           with a proxy only (as real)
#   /var/lib/vnflow-standin/registry/
#     prepared        "prepared <os> <arch>"
#     docker          "installed (stand-in)"
#     image           "loaded sha256:<hex of the image file>"  or  "pulled <image>"
#     image.ref       the image the container would run
#     container       "running <image> port=<port>"
#     responder.pid   the HTTP responder's process id
#     responder.port  the port it listens on
#     responder.py    its code; responder.log its log
#     changes.log     one line per effective change ("<step> wrote <file>", "<step> started
#                     responder"): a re-run that changes nothing adds nothing
#
# Fault injection, for tests of the workflows (inputs, never a guess about the machine):
#   STANDIN_FAIL_TIMES "install-docker=3 run=1": the first N runs of a step fail
#   STANDIN_STEP_SECS  every step first sleeps this long (a slow machine; default 0)
# The HTTP responder answers GET /v2/ with 200 and the body {} (what the Docker registry
# API answers), anything else with 404. It runs detached, is started once (run again, the
# step keeps a live responder on the same port), and exits by itself after
# $STANDIN_LIFETIME seconds (default 3600).
set -eu
exec </dev/null # a sudo password may still be on stdin
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

STATE_DIR=/var/lib/vnflow-standin/registry
PORT=${REGISTRY_PORT:-5000}
IMAGE=${REGISTRY_IMAGE:-registry:2}
LIFETIME=${STANDIN_LIFETIME:-3600}
HTTP_PROXY=${HTTP_PROXY:-} HTTPS_PROXY=${HTTPS_PROXY:-} NO_PROXY=${NO_PROXY:-}
PY=/usr/bin/python3

log() { echo "install_registry (stand-in): $*"; }
die() {
  echo "install_registry (stand-in): $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "must run as root (sudo)"
case $PORT in
  '' | *[!0-9]*) die "REGISTRY_PORT '$PORT' is not a port number" ;;
esac
if [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then die "REGISTRY_PORT $PORT is out of range"; fi
case $LIFETIME in
  '' | *[!0-9]*) die "STANDIN_LIFETIME '$LIFETIME' is not a number of seconds" ;;
esac
if [ "$LIFETIME" -lt 1 ] || [ "$LIFETIME" -gt 86400 ]; then die "STANDIN_LIFETIME must be 1..86400 s"; fi
mkdir -p "$STATE_DIR"

if command -v flock >/dev/null 2>&1; then
  exec 9>"$STATE_DIR/lock"
  flock -w 60 9 || die "another step holds $STATE_DIR/lock"
fi

write_if_changed() {
  tmp=$(mktemp "$1.XXXXXX")
  cat >"$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
    return 1
  fi
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
  echo "$step wrote $1" >>"$STATE_DIR/changes.log"
  return 0
}

inject_faults() {
  for kv in ${STANDIN_FAIL_TIMES:-}; do
    case $kv in
      "$step="*)
        n=${kv#*=}
        c=$(cat "$STATE_DIR/failures.$step" 2>/dev/null || echo 0)
        if [ "$c" -lt "$n" ]; then
          echo $((c + 1)) >"$STATE_DIR/failures.$step"
          die "injected failure $((c + 1)) of $n of step $step (standin_fail_times)"
        fi
        ;;
    esac
  done
  secs=${STANDIN_STEP_SECS:-0}
  case $secs in '' | *[!0-9]*) secs=0 ;; esac
  [ "$secs" -eq 0 ] || sleep "$secs"
}

step_prepare() {
  [ -x $PY ] || die "$PY is needed by the stand-in responder"
  os=unknown
  if [ -r /etc/os-release ]; then
    # shellcheck disable=SC1091
    os=$(. /etc/os-release && echo "${ID:-unknown}-${VERSION_ID:-}")
  fi
  conf=/etc/apt/apt.conf.d/95vnflow-proxy
  if [ -n "$HTTP_PROXY$HTTPS_PROXY" ]; then
    mkdir -p "${conf%/*}"
    {
      [ -z "$HTTP_PROXY" ] || echo "Acquire::http::Proxy \"$HTTP_PROXY\";"
      [ -z "$HTTPS_PROXY" ] || echo "Acquire::https::Proxy \"$HTTPS_PROXY\";"
    } | write_if_changed "$conf" 0644 || true
  else
    rm -f "$conf"
  fi
  echo "prepared $os $(uname -m)" | write_if_changed "$STATE_DIR/prepared" 0644 || true
  log "prepared: $os $(uname -m)"
}

step_install_docker() {
  mkdir -p /etc/docker
  cat <<'EOF' | write_if_changed /etc/docker/daemon.json 0644 || true
{
  "live-restore": true,
  "log-driver": "json-file",
  "log-opts": { "max-size": "10m", "max-file": "3" }
}
EOF
  dropin=/etc/systemd/system/docker.service.d/http-proxy.conf
  if [ -n "$HTTP_PROXY$HTTPS_PROXY" ]; then
    mkdir -p "${dropin%/*}"
    {
      echo "[Service]"
      [ -z "$HTTP_PROXY" ] || echo "Environment=\"HTTP_PROXY=$HTTP_PROXY\""
      [ -z "$HTTPS_PROXY" ] || echo "Environment=\"HTTPS_PROXY=$HTTPS_PROXY\""
      [ -z "$NO_PROXY" ] || echo "Environment=\"NO_PROXY=$NO_PROXY\""
    } | write_if_changed "$dropin" 0644 || true
  else
    rm -f "$dropin"
  fi
  echo "installed (stand-in)" | write_if_changed "$STATE_DIR/docker" 0644 || true
  log "docker 'installed' (stand-in: /etc/docker/daemon.json written, nothing installed)"
}

step_load_image() {
  file=${1:-}
  [ -f "$file" ] || die "image file '$file' not found"
  [ -f "$STATE_DIR/docker" ] || die "docker is not 'installed' (run install-docker first)"
  sha=$(sha256sum "$file" | cut -d' ' -f1)
  # A `docker save` file is a tar: refuse anything else, as docker load would.
  tar -tf "$file" >/dev/null 2>&1 || die "$file is not a tar archive (docker load would refuse it)"
  echo "loaded sha256:$sha" | write_if_changed "$STATE_DIR/image" 0644 || true
  echo "$IMAGE" | write_if_changed "$STATE_DIR/image.ref" 0644 || true
  log "image 'loaded' from $file (sha256:$sha)"
}

step_pull_image() {
  [ -f "$STATE_DIR/docker" ] || die "docker is not 'installed' (run install-docker first)"
  echo "pulled $IMAGE" | write_if_changed "$STATE_DIR/image" 0644 || true
  echo "$IMAGE" | write_if_changed "$STATE_DIR/image.ref" 0644 || true
  log "image $IMAGE 'pulled'"
}

# responder_pid: the live responder of this VM, or nothing
responder_pid() {
  pid=$(cat "$STATE_DIR/responder.pid" 2>/dev/null || true)
  case $pid in '' | *[!0-9]*) return 0 ;; esac
  kill -0 "$pid" 2>/dev/null || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE_DIR/responder.py" || return 0
  echo "$pid"
}

write_responder() {
  cat <<'EOF' | write_if_changed "$STATE_DIR/responder.py" 0644 || true
# Stand-in for the Docker registry container (vnflow private-registry sample): answers
# GET /v2/ with 200 {} and exits after LIFETIME seconds. Usage: responder.py PORT LIFETIME PIDFILE
import http.server, os, signal, socketserver, sys

port, lifetime, pidfile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
signal.alarm(lifetime)  # SIGALRM ends the process: never unbounded


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "vnflow-standin-registry/1"

    def do_GET(self):
        if self.path.split("?")[0] in ("/v2", "/v2/"):
            body, code = b"{}", 200
        else:
            body, code = b'{"errors":[{"code":"NOT_FOUND"}]}', 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    allow_reuse_address = True
    daemon_threads = True


server = Server(("0.0.0.0", port), Handler)
with open(pidfile + ".tmp", "w") as f:
    f.write("%d\n" % os.getpid())
os.replace(pidfile + ".tmp", pidfile)
sys.stderr.write("listening on %d for %d s\n" % (port, lifetime))
sys.stderr.flush()
server.serve_forever()
EOF
}

step_run() {
  ref=$(cat "$STATE_DIR/image.ref" 2>/dev/null || true)
  [ -n "$ref" ] || die "no image 'loaded' or 'pulled' yet ($STATE_DIR/image.ref)"
  write_responder
  pid=$(responder_pid)
  if [ -n "$pid" ] && [ "$(cat "$STATE_DIR/responder.port" 2>/dev/null || true)" = "$PORT" ]; then
    log "responder $pid runs already on port $PORT"
  else
    if [ -n "$pid" ]; then
      log "responder $pid listens on another port: stopping it"
      kill "$pid" 2>/dev/null || true
      i=0
      while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
      done
    fi
    rm -f "$STATE_DIR/responder.pid"
    echo "$PORT" >"$STATE_DIR/responder.port"
    # Detached: own session, no terminal, no inherited descriptors (the lock, ssh's pipes).
    setsid $PY "$STATE_DIR/responder.py" "$PORT" "$LIFETIME" "$STATE_DIR/responder.pid" \
      </dev/null >"$STATE_DIR/responder.log" 2>&1 9>&- &
    i=0
    until [ -n "$(responder_pid)" ]; do
      i=$((i + 1))
      [ $i -le 100 ] || die "the responder did not start: $(tail -n 3 "$STATE_DIR/responder.log" 2>/dev/null | tr '\n' ' ')"
      sleep 0.1
    done
    echo "$step started responder" >>"$STATE_DIR/changes.log"
    log "responder $(responder_pid) listens on port $PORT for at most $LIFETIME s"
  fi
  echo "running $ref port=$PORT" | write_if_changed "$STATE_DIR/container" 0644 || true
}

step_check() {
  [ -n "$(responder_pid)" ] || die "the responder is not running"
  $PY - "$PORT" <<'EOF' || die "the registry stand-in does not answer on http://127.0.0.1:$PORT/v2/ yet"
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open("http://127.0.0.1:%s/v2/" % sys.argv[1], timeout=5) as r:
    body = r.read()
    sys.exit(0 if r.status == 200 and body == b"{}" else 1)
EOF
  log "the registry stand-in answers on port $PORT"
}

step=${1:-}
[ $# -eq 0 ] || shift
inject_faults
case $step in
  prepare) step_prepare ;;
  install-docker) step_install_docker ;;
  load-image) step_load_image "$@" ;;
  pull-image) step_pull_image ;;
  run) step_run ;;
  check) step_check ;;
  *) die "usage: install_registry.sh prepare|install-docker|load-image FILE|pull-image|run|check" ;;
esac
