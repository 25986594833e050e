#!/usr/bin/env bash
# Runs a throwaway Prometheus (Debian's prometheus 2.42 binary) that scrapes vnflow's
# /metrics: config, TSDB, log and pid file all in DIR, one scrape job "vnflow" with the
# given targets, the web API on 127.0.0.1:PORT only, one hour of retention.
#
# Usage: tools/prometheus/start.sh DIR TARGET [TARGET...]
#                                           stop with tools/prometheus/stop.sh DIR [--purge]
# Each TARGET is HOST:PORT with HOST 127.x.x.x or localhost (e.g. 127.0.0.1:8080).
# Prints the server's URL last (http://127.0.0.1:PORT), once /-/ready answers; the targets
# show in queries (up{job="vnflow"}) some 5 s later (the scrape manager's first sync).
#
# Idempotent: when the Prometheus of DIR already runs on PORT, its config is rewritten
# with the given targets and reloaded (SIGHUP), and the URL printed again.
# Anything else listening on PORT is an error.
#
# Installing the package never starts Debian's packaged service: a temporary
# /usr/sbin/policy-rc.d (exit 101) unless the machine has one, and a packaged
# prometheus that started anyway (a pid that was not there before) is stopped.
#
# Settings (environment):
#   PROM_PORT=19090      below 32768, the ephemeral range
#   PROM_SCRAPE=1s       scrape_interval and evaluation_interval
#   PROM_WAIT=30         seconds to wait for /-/ready
#   PROM_BIN             /usr/bin/prometheus
#   VNFLOW_PROM_NO_APT=1 never run apt-get (fail if the binary is missing)
set -euo pipefail

die() {
  echo "prometheus: $*" >&2
  exit 1
}

if [[ $# -lt 2 ]]; then
  echo "usage: $0 DIR TARGET [TARGET...]   (TARGET: 127.x.x.x:PORT or localhost:PORT)" >&2
  exit 2
fi
DIR=$(realpath -m "$1")
shift
TARGETS=("$@")
PORT=${PROM_PORT:-19090}
SCRAPE=${PROM_SCRAPE:-1s}
WAIT=${PROM_WAIT:-30}
BIN=${PROM_BIN:-/usr/bin/prometheus}
URL="http://127.0.0.1:$PORT"

if [[ ! $PORT =~ ^[0-9]{1,5}$ ]] || ((10#$PORT < 1 || 10#$PORT > 65535)); then die "PROM_PORT=$PORT is not a port"; fi
[[ $SCRAPE =~ ^([0-9]+(ms|s|m|h|d|w|y))+$ ]] || die "PROM_SCRAPE=$SCRAPE is not a duration (1s, 500ms, 1m30s)"
[[ $WAIT =~ ^[0-9]+$ ]] || die "PROM_WAIT=$WAIT is not a number of seconds"
for t in "${TARGETS[@]}"; do
  if [[ $t =~ ^(127\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})|localhost):([0-9]{1,5})$ ]]; then
    p=${BASH_REMATCH[5]}
    for o in "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" "${BASH_REMATCH[4]}"; do
      [[ -z $o ]] || ((10#$o <= 255)) || die "target $t: not an IPv4 address"
    done
    ((10#$p >= 1 && 10#$p <= 65535)) || die "target $t: port out of range"
  else
    die "target '$t' refused: only 127.x.x.x:PORT or localhost:PORT (this Prometheus scrapes the local machine only)"
  fi
done

# Debian's package, its service kept from starting.
install_prometheus() {
  local tmp_policy='' before after p log started=() n
  mkdir -p "$DIR"
  log=$DIR/apt.log
  before=" $(pgrep -x prometheus | tr '\n' ' ' || true)"
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    tmp_policy=1
    # removed whatever happens (set -e, a signal); reset once done
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  SECONDS=0
  # apt-get update only when the install fails (no lists, stale lists)
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; } \
    >"$log" 2>&1; then
    if [[ -n $tmp_policy ]]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
    tail -n 20 "$log" >&2
    die "apt-get install prometheus failed (log: $log)"
  fi
  if [[ -n $tmp_policy ]]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
  echo "prometheus: installed Debian's prometheus in ${SECONDS}s (log: $log)" >&2
  [[ -x $BIN ]] || die "$BIN still missing after apt-get install prometheus"

  # A packaged service started despite policy-rc.d: only pids that were not there
  # before the install, and only those of the package's user, are stopped.
  after=$(pgrep -x prometheus || true)
  for p in $after; do
    [[ $before == *" $p "* ]] || started+=("$p")
  done
  ((${#started[@]})) || return 0
  echo "prometheus: the install started the packaged service (pid ${started[*]}); stopping it" >&2
  if [[ -d /run/systemd/system ]]; then
    systemctl stop prometheus.service >/dev/null 2>&1 || true
  elif [[ -x /etc/init.d/prometheus ]]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  fi
  for p in "${started[@]}"; do
    [[ -e /proc/$p ]] || continue
    if [[ $(stat -c %U "/proc/$p" 2>/dev/null) == prometheus ]]; then
      kill -TERM "$p" 2>/dev/null || true
    else
      echo "prometheus: pid $p appeared during the install but is not the package's (user prometheus); left alone" >&2
    fi
  done
  for ((n = 0; n < 50; n++)); do
    after=
    for p in "${started[@]}"; do
      if [[ -e /proc/$p && $(stat -c %U "/proc/$p" 2>/dev/null) == prometheus ]]; then after+=" $p"; fi
    done
    [[ -n $after ]] || return 0
    sleep 0.2
  done
  for p in $after; do kill -KILL "$p" 2>/dev/null || true; done
}

if [[ ! -x $BIN ]]; then
  if [[ ${VNFLOW_PROM_NO_APT:-} == 1 ]]; then
    die "$BIN is missing (apt-get install prometheus)"
  fi
  [[ $(id -u) -eq 0 ]] || die "$BIN is missing and installing it needs root (apt-get install prometheus)"
  install_prometheus
fi

# Whether PID is the Prometheus of DIR (not a reused pid).
ours() {
  [[ -r /proc/$1/cmdline ]] && tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null |
    grep -qxF -- "--config.file=$DIR/prometheus.yml"
}
# Whether something accepts connections on 127.0.0.1:PORT.
port_busy() {
  (: <>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}
# Whether PID still runs (a zombie does not). Not `ours`: between the fork and
# the exec the child's command line is still this script's, and a loaded machine
# can keep it there for a while.
alive() {
  local st
  st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}
# Polls /-/ready until WAIT seconds have passed; fails early when PID has exited.
wait_ready() {
  local n
  for ((n = 0; n < WAIT * 5; n++)); do
    if curl -fsS -o /dev/null --max-time 1 "$URL/-/ready" 2>/dev/null; then return 0; fi
    alive "$1" || return 1
    sleep 0.2
  done
  return 1
}

config=$({
  echo "# written by tools/prometheus/start.sh"
  echo "global:"
  echo "  scrape_interval: $SCRAPE"
  echo "  evaluation_interval: $SCRAPE"
  echo "scrape_configs:"
  echo "  - job_name: vnflow"
  echo "    metrics_path: /metrics"
  echo "    static_configs:"
  echo "      - targets:"
  for t in "${TARGETS[@]}"; do echo "          - '$t'"; done
})

# Already running from DIR: reload with the new config.
if [[ -s $DIR/prometheus.pid ]]; then
  pid=$(<"$DIR/prometheus.pid")
  if [[ $pid =~ ^[0-9]+$ ]] && ours "$pid"; then
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "--web.listen-address=127.0.0.1:$PORT" ||
      die "the Prometheus of $DIR (pid $pid) listens on another port than $PORT; stop it first (tools/prometheus/stop.sh $DIR)"
    echo "$config" >"$DIR/prometheus.yml.new"
    mv "$DIR/prometheus.yml.new" "$DIR/prometheus.yml"
    t0=$(date +%s)
    kill -HUP "$pid"
    # the reload is asynchronous: wait for its timestamp to move, or for a failure
    for ((n = 0; n < WAIT * 5; n++)); do
      m=$(curl -fsS --max-time 1 "$URL/metrics" 2>/dev/null | grep '^prometheus_config_last_reload' || true)
      [[ $m != *"reload_successful 0"* ]] ||
        die "the Prometheus of $DIR (pid $pid) rejected the new config (log: $DIR/prometheus.log)"
      ts=$(sed -n 's/^prometheus_config_last_reload_success_timestamp_seconds \([0-9.e+]*\)$/\1/p' <<<"$m")
      if [[ -n $ts ]] && awk -v ts="$ts" -v t0="$t0" 'BEGIN { exit !(ts + 0 >= t0) }'; then
        echo "$URL"
        exit 0
      fi
      sleep 0.2
    done
    die "the Prometheus of $DIR (pid $pid) did not reload within ${WAIT}s (log: $DIR/prometheus.log)"
  fi
  rm -f "$DIR/prometheus.pid" # stale
fi

if port_busy; then
  holder=$(ss -Hltnp "sport = :$PORT" 2>/dev/null | grep -o 'users:(.*)' | head -n 1 || true)
  die "port $PORT on 127.0.0.1 is already in use${holder:+ by $holder}; choose another PROM_PORT or stop that server"
fi
mkdir -p "$DIR/data"
echo "$config" >"$DIR/prometheus.yml"

# setsid: its own session, so the script's terminal and its signals do not reach it.
setsid "$BIN" \
  --config.file="$DIR/prometheus.yml" \
  --storage.tsdb.path="$DIR/data" \
  --storage.tsdb.retention.time=1h \
  --web.listen-address="127.0.0.1:$PORT" \
  </dev/null >"$DIR/prometheus.log" 2>&1 &
pid=$!
echo "$pid" >"$DIR/prometheus.pid"

if ! wait_ready "$pid"; then
  if alive "$pid"; then
    echo "prometheus: not ready on $URL after ${WAIT}s; last lines of $DIR/prometheus.log:" >&2
  else
    echo "prometheus: exited before it was ready; last lines of $DIR/prometheus.log:" >&2
  fi
  tail -n 20 "$DIR/prometheus.log" >&2
  kill -TERM "$pid" 2>/dev/null || true
  for ((n = 0; n < 25; n++)); do alive "$pid" || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$DIR/prometheus.pid"
  exit 1
fi
echo "$URL"
