# tests/lib.sh: the one harness of the shell test suites (sourced, never run).
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
#   t_init SUITE [VNFLOW_BINARY]    counters, a scratch folder $T_DIR, the EXIT trap
#   ... checks ...
#   t_finish                        prints "SUITE: N passed, M failed"; exit 0 only when
#                                   nothing failed and something was checked
#
# A script that needs cleaning up defines cleanup(); the EXIT trap set by t_init calls it
# (on every exit: t_finish, die, set -e, a signal; the exit status is in $T_RC) and then
# removes $T_DIR. Scripts do not set an EXIT trap of their own.
#
# Checks (each one counted; the message and any output shown go through t_printable):
#   ok WHAT                   a passed check ("ok   WHAT")
#   bad WHAT                  a failed check ("FAIL WHAT")
#   check WHAT CMD...         CMD exits 0; its output is kept in $T_DIR/check.out and shown
#                             (the last lines, escaped) when it does not
#   check_not WHAT CMD...     CMD exits non-zero
#   check_exit WHAT STATUS CMD...
#                             CMD exits STATUS; its stdout and stderr stay in $T_OUT and
#                             $T_ERR for the checks after it (stderr shown on a failure)
#   has WHAT FILE GREP_ARGS...    grep -q GREP_ARGS FILE finds something
#   hasnt WHAT FILE GREP_ARGS...  it finds nothing
#   die WHAT                  a failure that ends the suite: T_ON_DIE (a command, e.g. one
#                             that shows the daemon's log) runs, then the summary, exit 1
# With T_STOP_ON_FAIL=1 every failed check is a die (for suites whose later checks make no
# sense once one failed).
#
# Output:
#   t_printable               stdin to stdout with control characters escaped: C0 (but
#                             newline and tab) and DEL as \xHH, C1 as \u00HH, bytes that are
#                             not UTF-8 as \xHH; nothing a terminal acts on gets through
#   t_show FILE [LINES]       the last LINES (20) lines of FILE, escaped, indented "  | "
#   t_say MSG                 a progress line ("== MSG")
#
# Packages:
#   t_demo_manifest ROOT DIR  rewrites the SOL004 manifest of DIR, a changed copy of ROOT's
#                             csar-samples/local-demo, so the changed files onboard
#
# Certificates (openssl; its output appended to DIR/openssl.log; keys 0600):
#   t_tls_server DIR [N]      DIR/caN.pem (+ .key), a CA, and DIR/serverN.pem (+ .key), a
#                             certificate for 127.0.0.1 and localhost it signed
#   t_self_signed DIR NAME    DIR/NAME.pem (+ .key), a CA that signed nothing else
#
# Waits: each is bounded and returns 1 when its time is up; none waits forever.
#   wait_until SECS CMD...            CMD every 0.1 s until it exits 0
#   op_state OP                       the operation's state (vnflow op show)
#   wait_op OP [SECS]                 vnflow op wait OP: its exit status (0 COMPLETED)
#   wait_state OP STATE [SECS]        until op_state is STATE
#   wait_dispatched OP STATE [SECS]   until op history shows STATE dispatched
#   wait_pid PID [SECS]               waits for a child process (a daemon told to drain),
#                                     SIGKILLs it after SECS (60): its exit status
# SECS defaults to $T_WAIT_SECS (60; suites against a real cloud set more).
# They run $T_VNFLOW (t_init's second argument) with the environment's VNFLOW_DB.

t_init() {  # t_init SUITE [VNFLOW_BINARY]
  T_SUITE=$1
  T_VNFLOW=${2:-${T_VNFLOW:-vnflow}}
  T_PASSED=0
  T_FAILED=0
  T_ON_DIE=${T_ON_DIE:-}
  T_STOP_ON_FAIL=${T_STOP_ON_FAIL:-0}
  T_WAIT_SECS=${T_WAIT_SECS:-60}
  T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/vnflow-$T_SUITE.XXXXXX")
  T_OUT=$T_DIR/out
  T_ERR=$T_DIR/err
  : >"$T_OUT"
  : >"$T_ERR"
  trap t_exit EXIT
}

t_exit() {
  local rc=$?
  T_RC=$rc
  trap - EXIT
  set +e
  if declare -F cleanup >/dev/null; then cleanup; fi
  rm -rf "$T_DIR"
  exit "$rc"
}

t_printable() {
  LC_ALL=C perl -pe '
    s{([\x00-\x08\x0b-\x1f\x7f])|\xc2([\x80-\x9f])|
      ([\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3})|([\x80-\xff])}
     {defined $1 ? sprintf("\\x%02x", ord $1) : defined $2 ? sprintf("\\u%04x", ord $2)
      : defined $3 ? $3 : sprintf("\\x%02x", ord $4)}gex'
}

t_show() {  # t_show FILE [LINES]
  [[ -f $1 ]] || return 0
  tail -n "${2:-20}" "$1" | t_printable | sed 's/^/  | /'
}

t_say() { printf '== %s\n' "$*" | t_printable; }

ok() {
  T_PASSED=$((T_PASSED + 1))
  printf 'ok   %s\n' "$*" | t_printable
}

bad() {
  T_FAILED=$((T_FAILED + 1))
  printf 'FAIL %s\n' "$*" | t_printable
  if [[ $T_STOP_ON_FAIL == 1 ]]; then
    T_FAILED=$((T_FAILED - 1))
    die "$*"
  fi
  return 0
}

check() {  # check WHAT CMD...
  local what=$1
  shift
  if "$@" >"$T_DIR/check.out" 2>&1; then
    ok "$what"
  else
    bad "$what"
    t_show "$T_DIR/check.out"
  fi
}

check_not() {  # check_not WHAT CMD...
  local what=$1
  shift
  if "$@" >"$T_DIR/check.out" 2>&1; then
    bad "$what (it succeeded)"
    t_show "$T_DIR/check.out"
  else
    ok "$what"
  fi
}

check_exit() {  # check_exit WHAT STATUS CMD...
  local what=$1 want=$2 got=0
  shift 2
  "$@" >"$T_OUT" 2>"$T_ERR" || got=$?
  if [[ $got -eq $want ]]; then
    ok "$what"
  else
    bad "$what: exit $got, expected $want"
    t_show "$T_ERR"
  fi
}

has() {  # has WHAT FILE GREP_ARGS...
  local what=$1 file=$2
  shift 2
  if grep -q "$@" "$file"; then
    ok "$what"
  else
    bad "$what: no \"$*\" in:"
    t_show "$file" 10
  fi
}

hasnt() {  # hasnt WHAT FILE GREP_ARGS...
  local what=$1 file=$2
  shift 2
  if ! grep -q "$@" "$file"; then
    ok "$what"
  else
    bad "$what: \"$*\" in:"
    t_show "$file" 10
  fi
}

die() {
  T_FAILED=$((T_FAILED + 1))
  printf 'FAIL %s\n' "$*" | t_printable
  if [[ -n $T_ON_DIE ]]; then $T_ON_DIE || true; fi
  t_summary
  exit 1
}

t_summary() { echo "$T_SUITE: $T_PASSED passed, $T_FAILED failed"; }

t_finish() {
  t_summary
  if [[ $T_FAILED -ne 0 ]]; then
    if [[ -n $T_ON_DIE ]]; then $T_ON_DIE || true; fi
    exit 1
  fi
  if [[ $T_PASSED -eq 0 ]]; then
    echo "$T_SUITE: nothing was checked"
    exit 1
  fi
  exit 0
}

t_tls_server() {  # t_tls_server DIR [N]
  (
    cd "$1" || exit 1
    local n=${2:-}
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "ca$n.key" -out "ca$n.pem" -days 2 \
      -subj "/CN=test-ca$n" &&
      openssl req -newkey rsa:2048 -nodes -keyout "server$n.key" -out "server$n.csr" \
        -subj /CN=127.0.0.1 &&
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"ext$n.cnf" &&
      openssl x509 -req -in "server$n.csr" -CA "ca$n.pem" -CAkey "ca$n.key" -CAcreateserial \
        -out "server$n.pem" -days 2 -extfile "ext$n.cnf" &&
      chmod 600 "ca$n.key" "server$n.key"
  ) >>"$1/openssl.log" 2>&1
}

t_self_signed() {  # t_self_signed DIR NAME
  (
    cd "$1" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$2.key" -out "$2.pem" -days 2 \
      -subj "/CN=$2" && chmod 600 "$2.key"
  ) >>"$1/openssl.log" 2>&1
}

t_demo_manifest() {  # t_demo_manifest ROOT DIR
  (cd "$1" && bash tools/csar-manifest.sh "$2" local-demo.mf vnflow "Local demo" 1.0 >/dev/null)
}

wait_until() {  # wait_until SECS CMD...
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
}

op_state() { "$T_VNFLOW" op show "$1" 2>/dev/null | awk '$1 == "state" {print $2}'; }

wait_op() {  # wait_op OP [SECS]
  local secs=${2:-$T_WAIT_SECS}
  timeout "$((secs + 10))" "$T_VNFLOW" op wait "$1" --timeout "$secs" >/dev/null 2>&1
}

t_state_is() { [[ $(op_state "$1") == "$2" ]]; }
wait_state() { wait_until "${3:-$T_WAIT_SECS}" t_state_is "$1" "$2"; }  # wait_state OP STATE [SECS]

t_dispatched() { "$T_VNFLOW" op history "$1" 2>/dev/null | grep -q "dispatched $2"; }
wait_dispatched() { wait_until "${3:-$T_WAIT_SECS}" t_dispatched "$1" "$2"; }  # wait_dispatched OP STATE [SECS]

wait_pid() {  # wait_pid PID [SECS]
  local pid=$1 rc=0
  # The watchdog ends by itself once PID is gone (reaped by the wait below); it is never
  # signalled: a subshell killed right after its fork would still run this shell's EXIT
  # trap (bash's fatal-signal handler), and with it the suite's cleanup.
  (
    end=$((SECONDS + ${2:-60}))
    while kill -0 "$pid" 2>/dev/null; do
      if ((SECONDS >= end)); then
        kill -9 "$pid"
        break
      fi
      sleep 0.1
    done
  ) >/dev/null 2>&1 &
  wait "$pid" || rc=$?
  return "$rc"
}
