#!/bin/sh
# Docker private registry on the registry VM (after Tacker's private_registry_mgmt.py),
# one step per call so that the workflow gives each its own timeout and retries:
#
#   install_registry.sh prepare            check the OS, wait for cloud-init, apt proxy
#   install_registry.sh install-docker     install Docker, /etc/docker/daemon.json, proxy
#   install_registry.sh load-image FILE    docker load a `docker save` file of the package
#   install_registry.sh pull-image         docker pull $REGISTRY_IMAGE
#   install_registry.sh run                run the registry container on $REGISTRY_PORT
#   install_registry.sh check              GET http://127.0.0.1:$REGISTRY_PORT/v2/ answers
#
# Runs as root (the workflow uses ssh.exec with sudo). Every step is idempotent: run
# again (a retry, a re-dispatch after a crash of the engine, a heal), it converges to the
# same state and does not redo finished work. Steps of one VM are serialized by a lock,
# so a retry after a timeout waits for a previous, still running try instead of racing it.
#
# Environment (set by the workflow): REGISTRY_PORT (5000), REGISTRY_IMAGE (registry:2),
# HTTP_PROXY, HTTPS_PROXY, NO_PROXY (optional), VNFLOW_IDEMPOTENCY_KEY.
set -eu
exec </dev/null # a sudo password may still be on stdin
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

STATE_DIR=/var/lib/vnflow/private-registry  # what this script did: image.ref, image.sha256
DATA_DIR=/var/lib/vnflow/private-registry/data  # the registry's storage (a volume)
CONTAINER=private_registry
PORT=${REGISTRY_PORT:-5000}
IMAGE=${REGISTRY_IMAGE:-registry:2}
HTTP_PROXY=${HTTP_PROXY:-} HTTPS_PROXY=${HTTPS_PROXY:-} NO_PROXY=${NO_PROXY:-}

log() { echo "install_registry: $*"; }
die() {
  echo "install_registry: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "must run as root (sudo)"
case $PORT in
  '' | *[!0-9]*) die "REGISTRY_PORT '$PORT' is not a port number" ;;
esac
if [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then die "REGISTRY_PORT $PORT is out of range"; fi
mkdir -p "$STATE_DIR"

# One step at a time per VM; bounded wait for a previous try that is still running.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$STATE_DIR/lock"
  flock -w 900 9 || die "another step holds $STATE_DIR/lock for 15 minutes"
fi

# write_if_changed FILE MODE: stdin to FILE unless identical; exit status 0 = changed
write_if_changed() {
  tmp=$(mktemp "$1.XXXXXX")
  cat >"$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
    return 1
  fi
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
  return 0
}

apt_get() {
  timeout 1800 apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3 -y -qq "$@"
}

# Bounded wait until dockerd answers.
wait_docker() {
  i=0
  until docker info >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -le 90 ] || die "dockerd does not answer after 180 s: $(systemctl is-active docker 2>&1 || true)"
    sleep 2
  done
}

step_prepare() {
  [ -r /etc/os-release ] || die "no /etc/os-release"
  # shellcheck disable=SC1091
  . /etc/os-release
  case " ${ID:-} ${ID_LIKE:-} " in
    *" ubuntu "* | *" debian "*) ;;
    *) die "unsupported OS '${PRETTY_NAME:-unknown}': needs Ubuntu or Debian (apt)" ;;
  esac
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found"
  case $(uname -m) in
    x86_64 | aarch64) ;;
    *) die "unsupported architecture $(uname -m)" ;;
  esac
  # cloud-init may still be installing packages (apt lock) on a freshly booted VM.
  if command -v cloud-init >/dev/null 2>&1; then
    timeout 600 cloud-init status --wait >/dev/null 2>&1 || log "cloud-init did not finish in 10 min (or failed); going on"
  fi
  conf=/etc/apt/apt.conf.d/95vnflow-proxy
  if [ -n "$HTTP_PROXY$HTTPS_PROXY" ]; then
    {
      [ -z "$HTTP_PROXY" ] || echo "Acquire::http::Proxy \"$HTTP_PROXY\";"
      [ -z "$HTTPS_PROXY" ] || echo "Acquire::https::Proxy \"$HTTPS_PROXY\";"
    } | if write_if_changed "$conf" 0644; then log "wrote $conf"; fi
  else
    rm -f "$conf"
  fi
  log "prepared: ${PRETTY_NAME:-} $(uname -m)"
}

step_install_docker() {
  if ! command -v docker >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    apt_get update
    apt_get install --no-install-recommends docker.io ca-certificates curl
    log "installed docker.io"
  else
    log "docker is installed already: $(docker --version 2>/dev/null || true)"
  fi
  changed=0
  mkdir -p /etc/docker
  # Bounded container logs; containers keep running while dockerd restarts.
  if write_if_changed /etc/docker/daemon.json 0644 <<'EOF'; then changed=1; fi
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
    } >"$STATE_DIR/http-proxy.conf"
    if write_if_changed "$dropin" 0644 <"$STATE_DIR/http-proxy.conf"; then changed=1; fi
  elif [ -f "$dropin" ]; then
    rm -f "$dropin"
    changed=1
  fi
  systemctl daemon-reload
  systemctl enable docker >/dev/null 2>&1 || true
  if [ $changed -eq 1 ]; then
    log "configuration changed: restarting docker"
    systemctl restart docker
  else
    systemctl start docker
  fi
  wait_docker
  log "docker is running: $(docker version --format '{{.Server.Version}}' 2>/dev/null || true)"
}

step_load_image() {
  file=${1:-}
  [ -f "$file" ] || die "image file '$file' not found"
  wait_docker
  sha=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$(cat "$STATE_DIR/image.sha256" 2>/dev/null || true)" = "$sha" ] && [ -s "$STATE_DIR/image.ref" ] &&
    docker image inspect "$(cat "$STATE_DIR/image.ref")" >/dev/null 2>&1; then
    log "image $(cat "$STATE_DIR/image.ref") (file sha256:$sha) is loaded already"
    return 0
  fi
  out=$(timeout 900 docker load -i "$file") || die "docker load -i $file failed"
  echo "$out"
  # "Loaded image: registry:2", or "Loaded image ID: sha256:..." for an untagged save.
  ref=$(echo "$out" | sed -n 's/^Loaded image: //p' | head -n 1)
  if [ -z "$ref" ]; then
    id=$(echo "$out" | sed -n 's/^Loaded image ID: //p' | head -n 1)
    [ -n "$id" ] || die "docker load did not name the image it loaded"
    docker tag "$id" "$IMAGE"
    ref=$IMAGE
  fi
  docker image inspect "$ref" >/dev/null 2>&1 || die "image $ref is not there after docker load"
  echo "$ref" | write_if_changed "$STATE_DIR/image.ref" 0644 || true
  echo "$sha" | write_if_changed "$STATE_DIR/image.sha256" 0644 || true
  log "loaded image $ref from $file (sha256:$sha)"
}

step_pull_image() {
  wait_docker
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE is there already"
  else
    timeout 1200 docker pull -q "$IMAGE" || die "docker pull $IMAGE failed"
    log "pulled $IMAGE"
  fi
  echo "$IMAGE" | write_if_changed "$STATE_DIR/image.ref" 0644 || true
  rm -f "$STATE_DIR/image.sha256"
}

step_run() {
  wait_docker
  ref=$(cat "$STATE_DIR/image.ref" 2>/dev/null || true)
  [ -n "$ref" ] || die "no image loaded or pulled yet ($STATE_DIR/image.ref)"
  want="$ref port=$PORT"
  have=$(docker inspect --format '{{index .Config.Labels "vnflow.registry"}} {{.State.Status}}' "$CONTAINER" 2>/dev/null) || have=
  case $have in
    "$want running")
      log "container $CONTAINER runs already ($want)"
      return 0
      ;;
    "$want "*)
      docker start "$CONTAINER" >/dev/null
      log "container $CONTAINER started again ($want)"
      return 0
      ;;
    "") ;;
    *)
      log "container $CONTAINER differs ($have): replacing it"
      docker rm -f "$CONTAINER" >/dev/null
      ;;
  esac
  mkdir -p "$DATA_DIR"
  docker run -d -p "$PORT:5000" -v "$DATA_DIR:/var/lib/registry" --restart=always \
    --label "vnflow.registry=$want" --name "$CONTAINER" "$ref" >/dev/null
  log "container $CONTAINER runs $ref on port $PORT"
}

step_check() {
  status=$(docker inspect --format '{{.State.Status}}' "$CONTAINER" 2>/dev/null) || status=missing
  [ "$status" = running ] || die "container $CONTAINER is $status"
  curl -fsS --noproxy '*' --max-time 5 -o /dev/null "http://127.0.0.1:$PORT/v2/" ||
    die "the registry does not answer on http://127.0.0.1:$PORT/v2/ yet"
  log "the registry answers on port $PORT"
}

step=${1:-}
[ $# -eq 0 ] || shift
case $step in
  prepare) step_prepare ;;
  install-docker) step_install_docker ;;
  load-image) step_load_image "$@" ;;
  pull-image) step_pull_image ;;
  run) step_run ;;
  check) step_check ;;
  *) die "usage: install_registry.sh prepare|install-docker|load-image FILE|pull-image|run|check" ;;
esac
