#!/usr/bin/env bash
# The command line end to end: exit codes, text and JSON output.
set -uo pipefail
vnflow=$1; root=$2
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init cli "$vnflow"
out=$T_OUT; err=$T_ERR  # stdout and stderr of the last check_exit
py=/usr/bin/python3; [[ -x $py ]] || py=python3
sample=$root/csar-samples/private-registry
bad=$root/tests/golden/bad/T0030-unknown-node-type/pkg

# libpq and what it brings (GnuTLS, LDAP, Kerberos...) are loaded only for a PostgreSQL store.
check "vnflow is not linked to libpq (loaded when a PostgreSQL store connects)" \
  bash -c '! ldd "$0" | grep -q "libpq\.so"' "$vnflow"
check_exit "validate a valid sample exits 0" 0 "$vnflow" csar validate "$sample"
check_exit "validate a bad package exits 1" 1 "$vnflow" csar validate "$bad"
has "... with the T0030 diagnostic on stderr" $err '\[T0030\]'
check_exit "validate with good and bad exits 1" 1 "$vnflow" csar validate "$sample" "$bad"
check_exit "validate without a path exits 2" 2 "$vnflow" csar validate
check_exit "unknown option exits 2" 2 "$vnflow" csar validate --frobnicate "$sample"
check_exit "unknown command exits 2" 2 "$vnflow" frobnicate
# A step_deltas entry no VduScalingAspectDeltas policy defines: a warning (Tacker never
# checks it), an error under --strict.
delta=$root/tests/golden/bad/T0071-undefined-step-delta/pkg
check_exit "an undefined step delta is a warning by default" 0 "$vnflow" csar validate "$delta"
has "... naming it" $err '\[T0071\]'
check_exit "... and an error under --strict" 1 "$vnflow" csar validate --strict "$delta"
has "... naming it" $err '\[T0071\]'
check_exit "validate --json exits 1 for a bad package" 1 "$vnflow" csar validate --json "$bad"
check "... a document with valid false and the T0030 diagnostic" \
  $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["valid"] is False; assert any(x["code"]=="T0030" for x in d["packages"][0]["diagnostics"])' $out
check_exit "inspect a sample exits 0" 0 "$vnflow" csar inspect "$sample"
has "... listing instantiate_end" $out instantiate_end
check_exit "inspect --json exits 0" 0 "$vnflow" csar inspect --json "$sample"
check "... a document with VDUs and LCM operations" \
  $py -c 'import json,sys; d=json.load(open(sys.argv[1])); f=d["flavours"][0]; assert f["vdus"] and f["lcm_operations"], d' $out
tmp=$(mktemp -d); cleanup() { rm -rf "$tmp"; }
(cd "$sample" && zip -qr "$tmp/private-registry.csar" .)
check_exit "validate a zipped CSAR exits 0" 0 "$vnflow" csar validate "$tmp/private-registry.csar"
printf 'not a zip' > "$tmp/garbage.csar"
check_exit "validate a corrupt archive exits 1" 1 "$vnflow" csar validate "$tmp/garbage.csar"
has "... reporting C0002" $err '\[C0002\]'
check_exit "inspect an unknown flavour exits 2" 2 "$vnflow" csar inspect --flavour nope "$sample"

# --- issue #12 (item 17): options, --help, escaping, JSON, --limit; items 13 and 6
export VNFLOW_DB=$tmp/nodb/vnflow.db  # must never be created by a usage error or --help

check_exit "op list --bd: unknown option exits 2" 2 "$vnflow" op list --bd "$tmp/x.db"
has "... naming it with a hint" $err -F 'unknown option --bd (did you mean --db?)'
check_exit "csar validate --jsn exits 2" 2 "$vnflow" csar validate --jsn "$sample"
has "... with a hint" $err -F 'did you mean --json?'
check_exit "daemon --wrokers exits 2" 2 timeout 10 "$vnflow" daemon --wrokers 2
check_exit "a flag another command has is refused (op show --force)" 2 "$vnflow" op show X --force
check_exit "op show A B: an extra argument exits 2" 2 "$vnflow" op show A B
check_exit "op list --limit 0 exits 2" 2 "$vnflow" op list --limit 0
check_exit "op list --limit abc exits 2" 2 "$vnflow" op list --limit abc
check_exit "op list --limit -5 exits 2" 2 "$vnflow" op list --limit -5
check_exit "op wait --timeout soon exits 2" 2 "$vnflow" op wait X --timeout soon
check_exit "daemon --max-redispatch 0 exits 2" 2 timeout 10 "$vnflow" daemon --max-redispatch 0
check_exit "daemon --hook-user with no such user exits 2" 2 timeout 10 "$vnflow" daemon --hook-user no-such-user-xyz
has "... saying so" $err -F 'no user "no-such-user-xyz"'
check "no database was created by a usage error" test ! -e "$tmp/nodb"

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
    check_exit "$c $h exits 0" 0 timeout 10 "$vnflow" "${words[@]}" "$h"
    has "... with its usage on stdout" $out -F "usage: vnflow $c"
  done
done
check_exit "op list --bd x --help: --help wins" 0 "$vnflow" op list --bd x --help
"$vnflow" op list --help >$out; has "op list --help documents --limit" $out -e '--limit N  '
"$vnflow" op fail --help >$out; has "op fail --help documents --force" $out -e '--force  '
timeout 10 "$vnflow" daemon --help >$out; has "daemon --help documents --hook-user" $out -e '--hook-user USER  '
has "... and --max-redispatch" $out -e '--max-redispatch N  '
has "... and SIGHUP" $out -e SIGHUP
has "README documents op list --limit" "$root/README.md" -e 'op list.*--limit'
check "--help opened no database" test ! -e "$tmp/nodb"

# A package and instances to look at (no daemon: requests stay queued). The package is
# named after its folder, whose name holds control characters.
evil=$'evil\e[31mRED\e]0;title\a\x7f'$'\xc2\x9b''2J'$'\n''fake line'
pkg=$tmp/$evil
cp -r "$root/csar-samples/local-demo" "$pkg"
t_demo_manifest "$root" "$pkg"
export VNFLOW_DB=$tmp/db/vnflow.db
p=$("$vnflow" package onboard "$pkg" 2>$err) || { bad "onboard"; t_show $err; }

# Item 13: the database's folder, file and key.
check "a fresh database folder is 0700" test "$(stat -c %a "$tmp/db")" = 700
check "the database file is 0600" test "$(stat -c %a "$tmp/db/vnflow.db")" = 600
check "the key file is 0600" test "$(stat -c %a "$tmp/db/vnflow.db.key")" = 600
check_exit "nested missing folders are created" 0 "$vnflow" package list --db "$tmp/new/a/b/v.db"
check "... each 0700" test "$(stat -c %a "$tmp/new/a")$(stat -c %a "$tmp/new/a/b")" = 700700
mkdir -m 0777 "$tmp/open"
check_exit "a group/world-writable folder is refused" 1 "$vnflow" package list --db "$tmp/open/v.db"
has "... saying why" $err -F 'is writable by group or others (mode 0777)'
check "... and nothing is created in it" test -z "$(ls -A "$tmp/open")"
chmod 1777 "$tmp/open"
check_exit "sticky does not help" 1 "$vnflow" package list --db "$tmp/open/v.db"
if [[ $(id -u) -eq 0 ]]; then
  mkdir -m 0700 "$tmp/theirs" && chown nobody "$tmp/theirs"
  check_exit "a folder owned by another user is refused" 1 "$vnflow" package list --db "$tmp/theirs/v.db"
  has "... saying whose it is" $err -F 'belongs to uid 65534 (nobody), not to uid 0 (root)'
  check "... and nothing is created in it" test -z "$(ls -A "$tmp/theirs")"
  mkdir -m 0700 "$tmp/mixed" && cp "$tmp/db/vnflow.db" "$tmp/mixed/v.db" && chown nobody "$tmp/mixed/v.db"
  check_exit "a database file owned by another user is refused" 1 "$vnflow" package list --db "$tmp/mixed/v.db"
  has "... saying so" $err -F 'the database "'"$tmp/mixed/v.db"'" belongs to uid 65534'
  mkdir -m 0700 "$tmp/keyown" && cp -p "$tmp/db/vnflow.db" "$tmp/db/vnflow.db.key" "$tmp/keyown/"
  chown nobody "$tmp/keyown/vnflow.db.key"
  check_exit "a key file owned by another user is refused" 1 "$vnflow" package list --db "$tmp/keyown/vnflow.db"
fi
mkdir -m 0700 "$tmp/keymode" && cp -p "$tmp/db/vnflow.db" "$tmp/db/vnflow.db.key" "$tmp/keymode/"
chmod 0644 "$tmp/keymode/vnflow.db.key"
check_exit "a key file with mode 0644 is refused" 1 "$vnflow" package list --db "$tmp/keymode/vnflow.db"
has "... saying so" $err -F 'has mode 0644: others could read or change it'
mkdir -m 0700 "$tmp/link"
ln -s "$tmp/open/target.db" "$tmp/link/v.db"; cp "$tmp/db/vnflow.db" "$tmp/open/target.db"
check_exit "a link to a database in a world-writable folder is refused" 1 "$vnflow" package list --db "$tmp/link/v.db"

# Item 17: a 0-byte database is not a new one.
mkdir -m 0700 "$tmp/empty" && : > "$tmp/empty/v.db"
check_exit "a 0-byte database is refused" 1 "$vnflow" package list --db "$tmp/empty/v.db"
has "... with a clear message" $err -F 'is empty: not a vnflow database; remove it to start a new one'
check "... and left empty" test ! -s "$tmp/empty/v.db"

# --json of create and of LCM requests; names with control characters.
check_exit "instance create --json" 0 "$vnflow" instance create --package "$p" --name plain --json
check "... prints {id, name}" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert set(d)=={"id","name"} and d["name"]=="plain", d' $out
i1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' $out)
check_exit "instance instantiate --json" 0 "$vnflow" instance instantiate "$i1" --request "$root/csar-samples/local-demo/Requests/instantiate.json" --json
check "... prints the operation (id, operationState)" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["operationState"]=="STARTING" and len(d["id"])>8, d' $out
o1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' $out)
check "instance list --json is a JSON array" $py -c 'import json,sys; assert isinstance(json.load(open(sys.argv[1])), list)' /dev/stdin < <("$vnflow" instance list --json)

# Names with control characters are printed escaped.
check_exit "package list" 0 "$vnflow" package list
hasnt "... prints no ESC" $out -P '\x1b'
hasnt "... no BEL or DEL" $out -P '[\x07\x7f]'
hasnt "... no C1 control" $out -P '\xc2\x9b'
has "... but \\x1b, \\x07, \\x7f, \\u009b and \\n for them" $out -F 'evil\x1b[31mRED\x1b]0;title\x07\x7f\u009b2J\nfake line'
check "... one line per package" test "$(wc -l <$out)" -eq 1
check_exit "package list --json" 0 "$vnflow" package list --json
check "... keeps the name exactly" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[0]["name"]==sys.argv[2], d' $out "$evil"
hasnt "... with no raw control in the JSON text" $out -P '[\x1b\x7f]|\xc2\x9b'
check_exit "csar validate of that folder" 0 "$vnflow" csar validate "$tmp/$evil"
hasnt "... prints its path escaped" $out -P '\x1b'
check_exit "csar validate --json of that folder" 0 "$vnflow" csar validate --json "$tmp/$evil"
check "... is JSON that keeps the path exactly" \
  $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["packages"][0]["path"].endswith(sys.argv[2]), d' $out "$evil"
hasnt "... with no raw control in the JSON text" $out -P '[\x1b\x07\x7f]|\xc2\x9b'
check_exit "an error naming a hostile id" 1 "$vnflow" op show $'\e[2Jgone'
hasnt "... prints no ESC on the vnflow: line" $err -P '\x1b'
has "... but \\x1b" $err -F 'vnflow: no operation "\x1b[2Jgone"'
check_exit "an unknown option with an escape" 2 "$vnflow" op list $'--\e[2J'
hasnt "... is printed escaped" $err -P '\x1b'

# op list says when it is cut at --limit.
for k in 1 2; do
  i=$("$vnflow" instance create --package "$p")
  "$vnflow" instance instantiate "$i" --request "$root/csar-samples/local-demo/Requests/instantiate.json" >/dev/null
done
check_exit "op list --limit 2 of 3" 0 "$vnflow" op list --limit 2
check "... prints 2" test "$(wc -l <$out)" -eq 2
has "... and says it cut the list" $err -F 'showing the newest 2 operations; --limit N for more'
check_exit "op list --limit 3 of 3" 0 "$vnflow" op list --limit 3
check "... prints 3 and says nothing" test "$(wc -l <$out)" -eq 3 -a ! -s $err
check_exit "op list --json --limit 1" 0 "$vnflow" op list --json --limit 1
check "... is still one JSON array" $py -c 'import json,sys; assert len(json.load(open(sys.argv[1])))==1' $out
has "... and stderr says so" $err -F 'showing the newest 1 operations'

# op fail --force (item 5 of the task list): a queued operation is not FAILED_TEMP.
check_exit "op fail of a STARTING operation is refused" 1 "$vnflow" op fail "$o1"
has "... with the --force hint" $err -F -e '--force moves an operation in any non-final state to FAILED'
check_exit "op fail --force fails it" 0 "$vnflow" op fail "$o1" --force
has "... FAILED" $out -F "$o1 FAILED"

# Item 6: request files are bounded.
$py -c 'import sys; open(sys.argv[1],"w").write("{\"flavourId\": \"simple\"" + " " * (2 << 20) + "}")' "$tmp/big.json"
i=$("$vnflow" instance create --package "$p")
check_exit "a 2 MiB request file is refused" 1 "$vnflow" instance instantiate "$i" --request "$tmp/big.json"
has "... naming its size and the limit" $err -F "request file \"$tmp/big.json\" is 2097175 bytes; the limit is 1 MiB"
check_exit "a request on a pipe is bounded too" 1 bash -c "head -c 2000000 /dev/zero | tr '\\0' ' ' | \"\$0\" instance instantiate \"\$1\" --request /dev/stdin" "$vnflow" "$i"
has "... saying so" $err -F 'is more than 1 MiB; the limit is 1 MiB'

# A hook that loops for ever: one error, in the package's file, naming the loop (not one per
# state, nor any in the built-in steps that lead into it).
loop_pkg=$tmp/loop-pkg
cp -r "$root/csar-samples/local-demo" "$loop_pkg"
cat >"$loop_pkg/Workflows/instantiate_end.yaml" <<'EOF'
description: a loop with no way out
start: a
states:
  a:
    action: local.exec
    with: {command: ["true"]}
    timeout: 10s
    next: b
  b:
    wait: 1s
    next: a
EOF
t_demo_manifest "$root" "$loop_pkg"
check_exit "a looping hook does not compile" 1 "$vnflow" workflow check "$loop_pkg" --op instantiate
check "... one W0031, in the hook's file, naming the loop" test "$(grep -c 'W0031' $err)" -eq 1
has "... which counts the states leading into it" $err -F 'Workflows/instantiate_end.yaml:4:3: error: states "a", "b" loop with no way out: none reaches a succeed or fail state (8 other states lead only into it) [W0031]'

# The action reference: the catalog's actions, each shown whole; docs/actions.md current.
check_exit "action list" 0 "$vnflow" action list
has "... names every action of the catalog, with what it talks to" $out -E '^ssh\.put +VMs +write a file'
check "... as many lines as the catalog has actions" test "$(wc -l <$out)" -eq \
  "$(sed -n '/^actions:/,$p' "$root/workflows/builtin/actions.yaml" | grep -cE '^  [a-z_.]+:$')"
check_exit "action show heat.stack.wait" 0 "$vnflow" action show heat.stack.wait
has "... its inputs with types and the catalog's notes" $out -E '^  until +string +CREATE_COMPLETE'
has "... what a re-dispatch does" $out -F 're-dispatch: side effects outside vnflow'
has "... an example state" $out -F '    action: heat.stack.wait'
check_exit "action show --json" 0 "$vnflow" action show local.exec --json
check "... JSON naming its exactly-one group" $py -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["one_of"] != [["command", "shell"]])' $out
check_exit "an unknown action exits 1" 1 "$vnflow" action show heat.stack.creat
has "... with the closest name" $err -F 'did you mean "heat.stack.create"?'
check_exit "action list --markdown" 0 "$vnflow" action list --markdown
check "docs/actions.md is what vnflow action list --markdown prints (regenerate it)" \
  cmp -s $out "$root/docs/actions.md"

# The seeds' diagram form: docs/diagrams/ holds one operation's PlantUML as vnflow prints it.
check_exit "workflow show --format plantuml" 0 "$vnflow" workflow show "$root/csar-samples/ladybug-cluster" \
  --op instantiate --format plantuml
check "docs/diagrams/ladybug-cluster-instantiate.puml is what it prints (tools/docs-diagrams.sh)" \
  cmp -s $out "$root/docs/diagrams/ladybug-cluster-instantiate.puml"
has "... a sequence diagram with the REST API the package calls" $out -e '^participant "tumblebug"'
has "... and its VMs" $out -e '^participant "VMs"'
hasnt "... and without the Heat steps a flavour without a stack never takes" $out -e 'Heat'

t_finish
