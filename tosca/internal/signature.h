// SOL004 package security (ETSI GS NFV-SOL 004 §5): detached CMS signatures checked with
// OpenSSL against the operator's trust store. The only file that includes OpenSSL's CMS
// and X.509 headers is signature.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tosca::internal {

enum class SignatureFault {
  kNone,           // signed by a certificate that chains to a trusted CA
  kMalformed,      // not a CMS SignedData structure (PEM or DER)
  kNoCertificate,  // the signing certificate is neither in the signature nor given
  kTampered,       // the content does not match the signature
  kUntrusted,      // the signing certificate does not chain to a trusted CA
  kExpired,        // the signing certificate (or one of its chain) is out of its validity
};

struct SignatureCheck {
  SignatureFault fault = SignatureFault::kNone;
  std::string reason;  // OpenSSL's words for the fault, e.g. "certificate has expired"
  std::string signer;  // subject of the signing certificate, when it was found
};

// Verifies `cms` (PEM "-----BEGIN CMS-----" or DER), a detached signature of `content`
// (binary, no MIME canonicalisation). `certs_pem` holds more certificates (the package's
// or the operator's) to find the signer and build its chain; `trust_pem` the trusted CAs.
// `at_time`: the time of the check, seconds since the epoch; 0 is now.
SignatureCheck verify_detached_cms(std::string_view content, std::string_view cms,
                                   std::string_view certs_pem, std::string_view trust_pem,
                                   int64_t at_time);

// The number of certificates in PEM text (0 when there are none or the text is not PEM).
size_t count_pem_certificates(std::string_view pem);

// A manifest split at its CMS block (SOL004 §5.3: the signature covers everything before
// it). `cms` is empty for an unsigned manifest; `line` is the 1-based line of "-----BEGIN";
// `unsigned_line` that of the first text after the block's "-----END" line (0: none).
struct ManifestSignature {
  std::string_view signed_part, cms;
  uint32_t line = 0;
  uint32_t unsigned_line = 0;
};
ManifestSignature split_manifest_signature(std::string_view text);

// The Signature / Certificate keys of manifest entries (SOL004 §4.3.6): one per Source that
// has a Signature. Paths as written; `line` is the Signature key's.
struct ArtifactSignature {
  std::string source, signature, certificate;
  uint32_t line = 0;
};
std::vector<ArtifactSignature> manifest_artifact_signatures(std::string_view text);

}  // namespace tosca::internal
