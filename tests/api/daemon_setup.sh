# Sourced by the API test scripts after tests/lib.sh's t_init, with $root set: a database
# in $T_DIR/db (0700) as VNFLOW_DB, $T_DIR/vnfs for the demo's files, a free $port below
# 32768, a static $token in the 0600 credentials file $T_DIR/auth, and a cleanup that
# SIGKILLs $daemon_pid (the daemon's log, $T_DIR/daemon.log, shown when the test dies).
# shellcheck shell=bash
export VNFLOW_DB=$T_DIR/db/vnflow.db
mkdir -p "$T_DIR/db" "$T_DIR/vnfs"
chmod 700 "$T_DIR/db"
daemon_pid=
cleanup() { [[ -n $daemon_pid ]] && kill -9 "$daemon_pid" 2>/dev/null; }
# shellcheck disable=SC2016,SC2034 # expanded by tests/lib.sh's die
T_ON_DIE='t_show "$T_DIR/daemon.log" 30'
# shellcheck disable=SC2154 # root: the sourcing script's
port=$(/usr/bin/python3 "$root/tests/api/free_port.py")
[[ -n $port ]] || die "no free port"
token=t-$RANDOM$RANDOM$RANDOM
printf 'token %s\n' "$token" >"$T_DIR/auth"
chmod 600 "$T_DIR/auth"
