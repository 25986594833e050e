#!/usr/bin/env bash
# The command line end to end: exit codes, text and JSON output.
set -uo pipefail
vnflow=$1; root=$2
fail=0; n=0
py=/usr/bin/python3; [[ -x $py ]] || py=python3
check() {  # check NAME EXPECTED_STATUS COMMAND...
  local name=$1 want=$2; shift 2
  n=$((n+1))
  "$@" >/tmp/vnflow-cli.$$.out 2>/tmp/vnflow-cli.$$.err
  local got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL $name: exit $got, expected $want"; sed 's/^/  | /' /tmp/vnflow-cli.$$.err | head -20
    fail=$((fail+1))
  else
    echo "ok   $name"
  fi
}
sample=$root/csar-samples/private-registry
bad=$root/tests/golden/bad/T0030-unknown-node-type/pkg

check "validate a valid sample exits 0" 0 "$vnflow" csar validate "$sample"
check "validate a bad package exits 1" 1 "$vnflow" csar validate "$bad"
grep -q '\[T0030\]' /tmp/vnflow-cli.$$.err || { echo "FAIL: T0030 diagnostic not on stderr"; fail=$((fail+1)); }
check "validate with good and bad exits 1" 1 "$vnflow" csar validate "$sample" "$bad"
check "validate without a path exits 2" 2 "$vnflow" csar validate
check "unknown option exits 2" 2 "$vnflow" csar validate --frobnicate "$sample"
check "unknown command exits 2" 2 "$vnflow" frobnicate
check "validate --json exits 1 for a bad package" 1 "$vnflow" csar validate --json "$bad"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["valid"] is False; assert any(x["code"]=="T0030" for x in d["packages"][0]["diagnostics"])' /tmp/vnflow-cli.$$.out \
  || { echo "FAIL: validate --json document"; fail=$((fail+1)); }
check "inspect a sample exits 0" 0 "$vnflow" csar inspect "$sample"
grep -q 'instantiate_end' /tmp/vnflow-cli.$$.out || { echo "FAIL: inspect lists no instantiate_end"; fail=$((fail+1)); }
check "inspect --json exits 0" 0 "$vnflow" csar inspect --json "$sample"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); f=d["flavours"][0]; assert f["vdus"] and f["lcm_operations"], d' /tmp/vnflow-cli.$$.out \
  || { echo "FAIL: inspect --json document"; fail=$((fail+1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$sample" && zip -qr "$tmp/private-registry.csar" .)
check "validate a zipped CSAR exits 0" 0 "$vnflow" csar validate "$tmp/private-registry.csar"
printf 'not a zip' > "$tmp/garbage.csar"
check "validate a corrupt archive exits 1" 1 "$vnflow" csar validate "$tmp/garbage.csar"
grep -q '\[C0002\]' /tmp/vnflow-cli.$$.err || { echo "FAIL: C0002 not reported"; fail=$((fail+1)); }
check "inspect an unknown flavour exits 2" 2 "$vnflow" csar inspect --flavour nope "$sample"

# --- issue #12 (item 17): options, --help, escaping, JSON, --limit; items 13 and 6
out=/tmp/vnflow-cli.$$.out; err=/tmp/vnflow-cli.$$.err
has() {  # has NAME FILE PATTERN: grep -q, counted
  local name=$1 file=$2; shift 2
  n=$((n+1))
  if grep -q "$@" "$file"; then echo "ok   $name"; else
    echo "FAIL $name: no \"$*\" in:"; sed 's/^/  | /' "$file" | head -10; fail=$((fail+1)); fi
}
hasnt() {  # hasnt NAME FILE PATTERN
  local name=$1 file=$2; shift 2
  n=$((n+1))
  if ! grep -q "$@" "$file"; then echo "ok   $name"; else
    echo "FAIL $name: \"$*\" in:"; sed 's/^/  | /' "$file" | head -10; fail=$((fail+1)); fi
}
truth() {  # truth NAME COMMAND...: the command succeeds
  local name=$1; shift
  n=$((n+1))
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=$((fail+1)); fi
}
export VNFLOW_DB=$tmp/nodb/vnflow.db  # must never be created by a usage error or --help

check "op list --bd: unknown option exits 2" 2 "$vnflow" op list --bd "$tmp/x.db"
has "... naming it with a hint" $err -F 'unknown option --bd (did you mean --db?)'
check "csar validate --jsn exits 2" 2 "$vnflow" csar validate --jsn "$sample"
has "... with a hint" $err -F 'did you mean --json?'
check "daemon --wrokers exits 2" 2 timeout 10 "$vnflow" daemon --wrokers 2
check "a flag another command has is refused (op show --force)" 2 "$vnflow" op show X --force
check "op show A B: an extra argument exits 2" 2 "$vnflow" op show A B
check "op list --limit 0 exits 2" 2 "$vnflow" op list --limit 0
check "op list --limit abc exits 2" 2 "$vnflow" op list --limit abc
check "op list --limit -5 exits 2" 2 "$vnflow" op list --limit -5
check "op wait --timeout soon exits 2" 2 "$vnflow" op wait X --timeout soon
check "daemon --max-redispatch 0 exits 2" 2 timeout 10 "$vnflow" daemon --max-redispatch 0
check "daemon --hook-user with no such user exits 2" 2 timeout 10 "$vnflow" daemon --hook-user no-such-user-xyz
has "... saying so" $err -F 'no user "no-such-user-xyz"'
truth "no database was created by a usage error" test ! -e "$tmp/nodb"

# Every command and subcommand answers --help (and -h) on stdout, exit 0, opening nothing.
helps=("csar" "csar validate" "csar inspect" "workflow" "workflow show" "workflow check"
  "package" "package onboard" "package list" "instance" "instance create" "instance list"
  "instance show" "instance delete" "instance instantiate" "instance heal" "instance scale"
  "instance terminate" "instance change-ext-conn" "instance modify" "op" "op list" "op show"
  "op history" "op wait" "op watch" "op retry" "op rollback" "op fail" "op cancel" "op replay"
  "vim" "vim register" "vim list" "vim show" "vim delete" "daemon" "version")
for c in "${helps[@]}"; do
  read -ra words <<<"$c"
  for h in --help -h; do
    check "$c $h exits 0" 0 timeout 10 "$vnflow" "${words[@]}" "$h"
    has "... with its usage on stdout" $out -F "usage: vnflow $c"
  done
done
check "op list --bd x --help: --help wins" 0 "$vnflow" op list --bd x --help
"$vnflow" op list --help >$out; has "op list --help documents --limit" $out -e '--limit N  '
"$vnflow" op fail --help >$out; has "op fail --help documents --force" $out -e '--force  '
timeout 10 "$vnflow" daemon --help >$out; has "daemon --help documents --hook-user" $out -e '--hook-user USER  '
has "... and --max-redispatch" $out -e '--max-redispatch N  '
has "... and SIGHUP" $out -e SIGHUP
has "README documents op list --limit" "$root/README.md" -e 'op list.*--limit'
truth "--help opened no database" test ! -e "$tmp/nodb"

# A package and instances to look at (no daemon: requests stay queued). The package is
# named after its folder, whose name holds control characters.
evil=$'evil\e[31mRED\e]0;title\a\x7f'$'\xc2\x9b''2J'$'\n''fake line'
pkg=$tmp/$evil
cp -r "$root/csar-samples/local-demo" "$pkg"
(cd "$root" && bash tools/csar-manifest.sh "$pkg" local-demo.mf vnflow "Local demo" 1.0 >/dev/null)
export VNFLOW_DB=$tmp/db/vnflow.db
p=$("$vnflow" package onboard "$pkg" 2>$err) || { echo "FAIL onboard"; cat $err; fail=$((fail+1)); }

# Item 13: the database's folder, file and key.
truth "a fresh database folder is 0700" test "$(stat -c %a "$tmp/db")" = 700
truth "the database file is 0600" test "$(stat -c %a "$tmp/db/vnflow.db")" = 600
truth "the key file is 0600" test "$(stat -c %a "$tmp/db/vnflow.db.key")" = 600
check "nested missing folders are created" 0 "$vnflow" package list --db "$tmp/new/a/b/v.db"
truth "... each 0700" test "$(stat -c %a "$tmp/new/a")$(stat -c %a "$tmp/new/a/b")" = 700700
mkdir -m 0777 "$tmp/open"
check "a group/world-writable folder is refused" 1 "$vnflow" package list --db "$tmp/open/v.db"
has "... saying why" $err -F 'is writable by group or others (mode 0777)'
truth "... and nothing is created in it" test -z "$(ls -A "$tmp/open")"
chmod 1777 "$tmp/open"
check "sticky does not help" 1 "$vnflow" package list --db "$tmp/open/v.db"
if [[ $(id -u) -eq 0 ]]; then
  mkdir -m 0700 "$tmp/theirs" && chown nobody "$tmp/theirs"
  check "a folder owned by another user is refused" 1 "$vnflow" package list --db "$tmp/theirs/v.db"
  has "... saying whose it is" $err -F 'belongs to uid 65534 (nobody), not to uid 0 (root)'
  truth "... and nothing is created in it" test -z "$(ls -A "$tmp/theirs")"
  mkdir -m 0700 "$tmp/mixed" && cp "$tmp/db/vnflow.db" "$tmp/mixed/v.db" && chown nobody "$tmp/mixed/v.db"
  check "a database file owned by another user is refused" 1 "$vnflow" package list --db "$tmp/mixed/v.db"
  has "... saying so" $err -F 'the database "'"$tmp/mixed/v.db"'" belongs to uid 65534'
  mkdir -m 0700 "$tmp/keyown" && cp -p "$tmp/db/vnflow.db" "$tmp/db/vnflow.db.key" "$tmp/keyown/"
  chown nobody "$tmp/keyown/vnflow.db.key"
  check "a key file owned by another user is refused" 1 "$vnflow" package list --db "$tmp/keyown/vnflow.db"
fi
mkdir -m 0700 "$tmp/keymode" && cp -p "$tmp/db/vnflow.db" "$tmp/db/vnflow.db.key" "$tmp/keymode/"
chmod 0644 "$tmp/keymode/vnflow.db.key"
check "a key file with mode 0644 is refused" 1 "$vnflow" package list --db "$tmp/keymode/vnflow.db"
has "... saying so" $err -F 'has mode 0644: others could read or change it'
mkdir -m 0700 "$tmp/link"
ln -s "$tmp/open/target.db" "$tmp/link/v.db"; cp "$tmp/db/vnflow.db" "$tmp/open/target.db"
check "a link to a database in a world-writable folder is refused" 1 "$vnflow" package list --db "$tmp/link/v.db"

# Item 17: a 0-byte database is not a new one.
mkdir -m 0700 "$tmp/empty" && : > "$tmp/empty/v.db"
check "a 0-byte database is refused" 1 "$vnflow" package list --db "$tmp/empty/v.db"
has "... with a clear message" $err -F 'is empty: not a vnflow database; remove it to start a new one'
truth "... and left empty" test ! -s "$tmp/empty/v.db"

# --json of create and of LCM requests; names with control characters.
check "instance create --json" 0 "$vnflow" instance create --package "$p" --name plain --json
truth "... prints {id, name}" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert set(d)=={"id","name"} and d["name"]=="plain", d' $out
i1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' $out)
check "instance instantiate --json" 0 "$vnflow" instance instantiate "$i1" --request "$root/csar-samples/local-demo/Requests/instantiate.json" --json
truth "... prints the operation (id, operationState)" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["operationState"]=="STARTING" and len(d["id"])>8, d' $out
o1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' $out)
truth "instance list --json is a JSON array" $py -c 'import json,sys; assert isinstance(json.load(open(sys.argv[1])), list)' /dev/stdin < <("$vnflow" instance list --json)

# Names with control characters are printed escaped.
check "package list" 0 "$vnflow" package list
hasnt "... prints no ESC" $out -P '\x1b'
hasnt "... no BEL or DEL" $out -P '[\x07\x7f]'
hasnt "... no C1 control" $out -P '\xc2\x9b'
has "... but \\x1b, \\x07, \\x7f, \\u009b and \\n for them" $out -F 'evil\x1b[31mRED\x1b]0;title\x07\x7f\u009b2J\nfake line'
truth "... one line per package" test "$(wc -l <$out)" -eq 1
check "package list --json" 0 "$vnflow" package list --json
truth "... keeps the name exactly" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[0]["name"]==sys.argv[2], d' $out "$evil"
hasnt "... with no raw control in the JSON text" $out -P '[\x1b\x7f]|\xc2\x9b'
check "csar validate of that folder" 0 "$vnflow" csar validate "$tmp/$evil"
hasnt "... prints its path escaped" $out -P '\x1b'
check "an error naming a hostile id" 1 "$vnflow" op show $'\e[2Jgone'
hasnt "... prints no ESC on the vnflow: line" $err -P '\x1b'
has "... but \\x1b" $err -F 'vnflow: no operation "\x1b[2Jgone"'
check "an unknown option with an escape" 2 "$vnflow" op list $'--\e[2J'
hasnt "... is printed escaped" $err -P '\x1b'

# op list says when it is cut at --limit.
for k in 1 2; do
  i=$("$vnflow" instance create --package "$p")
  "$vnflow" instance instantiate "$i" --request "$root/csar-samples/local-demo/Requests/instantiate.json" >/dev/null
done
check "op list --limit 2 of 3" 0 "$vnflow" op list --limit 2
truth "... prints 2" test "$(wc -l <$out)" -eq 2
has "... and says it cut the list" $err -F 'showing the newest 2 operations; --limit N for more'
check "op list --limit 3 of 3" 0 "$vnflow" op list --limit 3
truth "... prints 3 and says nothing" test "$(wc -l <$out)" -eq 3 -a ! -s $err
check "op list --json --limit 1" 0 "$vnflow" op list --json --limit 1
truth "... is still one JSON array" $py -c 'import json,sys; assert len(json.load(open(sys.argv[1])))==1' $out
has "... and stderr says so" $err -F 'showing the newest 1 operations'

# op fail --force (item 5 of the task list): a queued operation is not FAILED_TEMP.
check "op fail of a STARTING operation is refused" 1 "$vnflow" op fail "$o1"
has "... with the --force hint" $err -F -e '--force moves an operation in any non-final state to FAILED'
check "op fail --force fails it" 0 "$vnflow" op fail "$o1" --force
has "... FAILED" $out -F "$o1 FAILED"

# Item 6: request files are bounded.
$py -c 'import sys; open(sys.argv[1],"w").write("{\"flavourId\": \"simple\"" + " " * (2 << 20) + "}")' "$tmp/big.json"
i=$("$vnflow" instance create --package "$p")
check "a 2 MiB request file is refused" 1 "$vnflow" instance instantiate "$i" --request "$tmp/big.json"
has "... naming its size and the limit" $err -F "request file \"$tmp/big.json\" is 2097175 bytes; the limit is 1 MiB"
check "a request on a pipe is bounded too" 1 bash -c "head -c 2000000 /dev/zero | tr '\\0' ' ' | \"\$0\" instance instantiate \"\$1\" --request /dev/stdin" "$vnflow" "$i"
has "... saying so" $err -F 'is more than 1 MiB; the limit is 1 MiB'

rm -f /tmp/vnflow-cli.$$.out /tmp/vnflow-cli.$$.err
echo "$((n-fail)) passed, $fail failed"
[[ $fail -eq 0 ]]
