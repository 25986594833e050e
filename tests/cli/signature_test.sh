#!/usr/bin/env bash
# SOL004 package signatures end to end (docs/security.md, "Package signatures"), with real
# OpenSSL: the test makes its CAs and certificates and signs copies of
# csar-samples/local-demo with `openssl cms` (option 1: the manifest's CMS block and
# per-artifact signatures; option 2: a zip holding the CSAR, its .cms and .cert), then runs
# `vnflow csar validate` and `vnflow package onboard` on them. Also: `csar validate` compiles
# the hook workflows as onboarding does.
set -uo pipefail
vnflow=$1; root=$2
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_init signature "$vnflow"
command -v openssl >/dev/null || { echo "signature: no openssl, skipped"; exit 77; }
command -v zip >/dev/null || { echo "signature: no zip, skipped"; exit 77; }
out=$T_OUT; err=$T_ERR
d=$T_DIR
sample=$root/csar-samples/local-demo
export VNFLOW_DB=$d/db/vnflow.db
mkdir -m 700 "$d/db"

# --- keys and certificates: a CA, a signer it certifies, an expired signer, another CA
ossl() { openssl "$@" 2>>"$d/openssl.log" >/dev/null || die "openssl $1 failed: $(t_show "$d/openssl.log")"; }
ca() {  # ca NAME: a self-signed CA
  ossl req -x509 -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.pem" -days 30 -subj "/CN=$1"
}
signer() {  # signer NAME CA DAYS: a certificate NAME signed by CA, valid DAYS (negative: expired)
  ossl req -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.csr" -subj "/CN=$1"
  ossl x509 -req -in "$d/$1.csr" -CA "$d/$2.pem" -CAkey "$d/$2.key" -CAcreateserial \
    -out "$d/$1.pem" -days "$3"
}
ca test-ca; ca other-ca
signer vendor test-ca 10
signer expired test-ca -1
signer stranger other-ca 10
# sign_mf PKG SIGNER [cms options]: appends the manifest's CMS signature (SOL004 §5.3: it
# covers the manifest's text before it)
sign_mf() {
  local mf=$1/local-demo.mf
  ossl cms -sign -binary -in "$mf" -signer "$d/$2.pem" -inkey "$d/$2.key" -outform PEM \
    -out "$d/mf.cms" "${@:3}"
  cat "$d/mf.cms" >>"$mf"
}
copy() { rm -rf "$d/$1"; cp -r "$sample" "$d/$1"; }
validate() { "$vnflow" csar validate "$@"; }

# --- unsigned packages: nothing changes unless signatures are required
check_exit "unsigned, no --trust: valid as before" 0 validate "$sample"
hasnt "... with no signature diagnostic" "$err" '\[S00'
check_exit "unsigned, --trust: valid" 0 validate --trust "$d/test-ca.pem" "$sample"
check_exit "unsigned, --require-signature: invalid" 1 \
  validate --trust "$d/test-ca.pem" --require-signature "$sample"
has "... S0001 at the manifest" "$err" 'local-demo.mf: error: the package is not signed.*\[S0001\]'

# --- option 1: the manifest signed in CMS, the signer's certificate inside the signature
copy good; sign_mf "$d/good" vendor
check_exit "signed, no --trust: valid" 0 validate "$d/good"
has "... with a note that the signature was not checked" "$err" \
  'local-demo.mf:[0-9]*:1: note: .*not checked.*\[S0007\]'
check_exit "signed by a trusted CA: valid" 0 validate --trust "$d/test-ca.pem" "$d/good"
hasnt "... with no error" "$err" 'error'
check_exit "... and with --require-signature" 0 \
  validate --trust "$d/test-ca.pem" --require-signature "$d/good"
check_exit "... --json says valid" 0 validate --json --trust "$d/test-ca.pem" "$d/good"
has "... in the document" "$out" '"valid":true'

copy tampered; sign_mf "$d/tampered" vendor
echo "# changed after signing" >>"$d/tampered/Definitions/local_demo_types.yaml"
check_exit "an artifact changed after signing: invalid" 1 validate --trust "$d/test-ca.pem" "$d/tampered"
has "... the digest error names it" "$err" 'local_demo_types.yaml.*does not match.*\[C0016\]'
# The attacker also fixes the digest in the manifest: the manifest no longer matches its CMS.
new=$(sha256sum "$d/tampered/Definitions/local_demo_types.yaml" | cut -d' ' -f1)
old=$(sha256sum "$sample/Definitions/local_demo_types.yaml" | cut -d' ' -f1)
sed -i "s/$old/$new/" "$d/tampered/local-demo.mf"
check_exit "the manifest changed after signing: invalid" 1 validate --trust "$d/test-ca.pem" "$d/tampered"
has "... S0003 at the manifest's signature" "$err" \
  'local-demo.mf:[0-9]*:1: error: the manifest does not match its signature.*\[S0003\]'
hasnt "... and no digest error any more" "$err" '\[C0016\]'

check_exit "signed, checked against another CA: invalid" 1 validate --trust "$d/other-ca.pem" "$d/good"
has "... S0004, not from a trusted CA" "$err" 'local-demo.mf:[0-9]*:1: error: .*not from a trusted CA.*\[S0004\]'

copy expired; sign_mf "$d/expired" expired
check_exit "signed with an expired certificate: invalid" 1 validate --trust "$d/test-ca.pem" "$d/expired"
has "... S0005 saying it expired" "$err" 'local-demo.mf:[0-9]*:1: error: .*certificate has expired.*\[S0005\]'

copy malformed
printf -- '-----BEGIN CMS-----\nbm90IGEgc2lnbmF0dXJl\n-----END CMS-----\n' >>"$d/malformed/local-demo.mf"
check_exit "a malformed CMS block: invalid" 1 validate --trust "$d/test-ca.pem" "$d/malformed"
has "... S0002" "$err" 'local-demo.mf:[0-9]*:1: error: the signature of the manifest is malformed.*\[S0002\]'

copy unlisted; sign_mf "$d/unlisted" vendor
echo 'echo extra' >"$d/unlisted/Workflows/extra.sh"
check_exit "a file the signed manifest does not list: invalid" 1 \
  validate --trust "$d/test-ca.pem" "$d/unlisted"
has "... S0008 at that file" "$err" 'Workflows/extra.sh: error: .*signed manifest.*\[S0008\]'

copy appended; sign_mf "$d/appended" vendor
echo 'echo extra' >"$d/appended/Workflows/extra.sh"
printf '\nSource: Workflows/extra.sh\nAlgorithm: SHA-256\nHash: %s\n' \
  "$(sha256sum "$d/appended/Workflows/extra.sh" | cut -d' ' -f1)" >>"$d/appended/local-demo.mf"
check_exit "an entry appended after the signature block: invalid" 1 \
  validate --trust "$d/test-ca.pem" "$d/appended"
has "... S0002 at that line" "$err" 'local-demo.mf:[0-9]*:1: error: text after the manifest.s signature block is not signed \[S0002\]'
has "... and the file it lists is not covered" "$err" 'Workflows/extra.sh: error: .*\[S0008\]'

# The certificate outside the signature: TOSCA.meta's ETSI-Entry-Certificate, or --signing-cert.
copy entrycert; mkdir -p "$d/entrycert/Files/Certificates"
cp "$d/vendor.pem" "$d/entrycert/Files/Certificates/vendor.cert"
echo "ETSI-Entry-Certificate: Files/Certificates/vendor.cert" >>"$d/entrycert/TOSCA-Metadata/TOSCA.meta"
sign_mf "$d/entrycert" vendor -nocerts
check_exit "signer's certificate from ETSI-Entry-Certificate: valid" 0 \
  validate --trust "$d/test-ca.pem" "$d/entrycert"
copy nocert; sign_mf "$d/nocert" vendor -nocerts
check_exit "no signing certificate anywhere: invalid" 1 validate --trust "$d/test-ca.pem" "$d/nocert"
has "... S0006" "$err" 'local-demo.mf:[0-9]*:1: error: no certificate for the signature of the manifest.*\[S0006\]'
check_exit "... the operator gives it (--signing-cert): valid" 0 \
  validate --trust "$d/test-ca.pem" --signing-cert "$d/vendor.pem" "$d/nocert"

# --- per-artifact signatures (the manifest's Signature / Certificate keys)
artifact_pkg() {  # artifact_pkg NAME SIGNER: Workflows/heal_end.yaml signed by SIGNER
  copy "$1"
  local a=Workflows/heal_end.yaml
  ossl cms -sign -binary -in "$d/$1/$a" -signer "$d/$2.pem" -inkey "$d/$2.key" -outform DER \
    -out "$d/$1/$a.sig.cms" -nocerts
  cp "$d/$2.pem" "$d/$1/Workflows/heal_end.cert"
  awk -v a="$a" '{print} $0=="Source: " a {s=1} s && /^Hash:/ {
    print "Signature: " a ".sig.cms"; print "Certificate: Workflows/heal_end.cert"; s=0}' \
    "$d/$1/local-demo.mf" >"$d/$1/mf.tmp" && mv "$d/$1/mf.tmp" "$d/$1/local-demo.mf"
  sign_mf "$d/$1" vendor
}
artifact_pkg artgood vendor
check_exit "an artifact signed by a trusted CA: valid" 0 validate --trust "$d/test-ca.pem" "$d/artgood"
artifact_pkg artbad stranger
check_exit "an artifact signed by another CA: invalid" 1 validate --trust "$d/test-ca.pem" "$d/artbad"
has "... S0004 located at the artifact" "$err" \
  'artbad/Workflows/heal_end.yaml: error: the signature of "Workflows/heal_end.yaml" is not from a trusted CA.*\[S0004\]'
hasnt "... the manifest itself verified" "$err" 'local-demo.mf.*error'

# --- option 2: a zip holding the CSAR zip, its .cms and its certificate
(cd "$sample" && zip -qr "$d/vnf.csar" .)
ossl cms -sign -binary -in "$d/vnf.csar" -signer "$d/vendor.pem" -inkey "$d/vendor.key" \
  -outform DER -out "$d/vnf.cms"
cp "$d/vendor.pem" "$d/vnf.cert"
(cd "$d" && zip -q signed.zip vnf.csar vnf.cms vnf.cert)
check_exit "option 2, no --trust: valid" 0 validate "$d/signed.zip"
has "... with the note" "$err" 'signed.zip!vnf.cms: note: .*not checked.*\[S0007\]'
check_exit "option 2 signed by a trusted CA: valid, signature required" 0 \
  validate --trust "$d/test-ca.pem" --require-signature "$d/signed.zip"
check_exit "option 2 against another CA: invalid" 1 validate --trust "$d/other-ca.pem" "$d/signed.zip"
has "... S0004 at the .cms" "$err" 'signed.zip!vnf.cms: error: .*not from a trusted CA.*\[S0004\]'
mkdir "$d/swap" && (cd "$sample" && zip -qr "$d/swap/vnf.csar" . -x local-demo.mf)
cp "$d/vnf.cms" "$d/vnf.cert" "$d/swap/"
(cd "$d/swap" && zip -q ../swapped.zip vnf.csar vnf.cms vnf.cert)
check_exit "option 2 with another CSAR under the signature: invalid" 1 \
  validate --trust "$d/test-ca.pem" "$d/swapped.zip"
has "... S0003" "$err" 'swapped.zip!vnf.cms: error: "vnf.csar" does not match its signature.*\[S0003\]'
(cd "$d" && zip -q unsigned2.zip vnf.csar)
check_exit "option 2 without a .cms, signatures required: invalid" 1 \
  validate --trust "$d/test-ca.pem" --require-signature "$d/unsigned2.zip"
has "... S0001 at the CSAR" "$err" 'unsigned2.zip!vnf.csar: error: the CSAR is not signed.*\[S0001\]'

# --- onboarding applies the same rule
check_exit "onboard an unsigned package with --require-signature: refused" 1 \
  "$vnflow" package onboard --trust "$d/test-ca.pem" --require-signature "$sample"
has "... saying why" "$err" '\[S0001\]'
check_exit "onboard option 2 with --require-signature: stored" 0 \
  "$vnflow" package onboard --trust "$d/test-ca.pem" --require-signature "$d/signed.zip"
id=$(cat "$out")
check_exit "... listed" 0 "$vnflow" package list
has "... as the CSAR it holds (its digest)" "$out" "$id.*sha256:$(sha256sum "$d/vnf.csar" | cut -c1-12)"
check_exit "onboard a package signed by another CA: refused" 1 \
  "$vnflow" package onboard --trust "$d/other-ca.pem" "$d/good"

# --- usage errors
check_exit "--require-signature without --trust: usage error" 2 \
  validate --require-signature "$sample"
check_exit "--trust naming no file: usage error" 2 validate --trust "$d/nope.pem" "$sample"
echo "not a certificate" >"$d/junk.pem"
check_exit "--trust with no certificate in it: usage error" 2 validate --trust "$d/junk.pem" "$sample"
has "... saying so" "$err" 'holds no PEM certificate'
check_exit "--trust with --no-digests: usage error" 2 \
  validate --trust "$d/test-ca.pem" --no-digests "$sample"

# --- csar validate compiles the hook workflows and checks the package files they name
copy badhook
sed -i 's/action: local.exec/action: local.exce/' "$d/badhook/Workflows/heal_end.yaml"
check_exit "a hook that does not compile: invalid" 1 validate --no-digests "$d/badhook"
has "... the W0010 error located in the hook" "$err" 'badhook/Workflows/heal_end.yaml:[0-9]*:[0-9]*: error: .*\[W0010\]'
copy nosource
cat >"$d/nosource/Workflows/heal_end.yaml" <<'EOF'
description: puts a script the package does not have
start: put
states:
  put:
    action: ssh.put
    with:
      host: 192.0.2.1
      username: vnf
      password: secret
      source: Scripts/missing.sh
      path: /tmp/missing.sh
    timeout: 1m
    next: done
  done:
    succeed: true
EOF
check_exit "ssh.put names a file the package lacks: invalid" 1 validate --no-digests "$d/nosource"
has "... W0044 located at the state" "$err" \
  'nosource/Workflows/heal_end.yaml:[0-9]*:[0-9]*: error: ssh.put source "Scripts/missing.sh" is not a file of the package \[W0044\]'
mkdir -p "$d/nosource/Scripts" && echo 'echo hi' >"$d/nosource/Scripts/missing.sh"
check_exit "... with the file there: valid" 0 validate --no-digests "$d/nosource"

t_finish
