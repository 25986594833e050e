// SOL004 package security: the manifest's CMS signature (option 1), per-artifact signatures
// and the signed zip that wraps a CSAR (option 2), checked against the operator's trust
// store with OpenSSL's CMS and X.509 verification.
#include "tosca/internal/signature.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

// cms.h declares PEM_read_bio_CMS only when pem.h came before it.
// clang-format off
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/cms.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
// clang-format on

#include "tosca/internal/loader.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

namespace tosca {
namespace internal {

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct CmsFree {
  void operator()(CMS_ContentInfo* c) const { CMS_ContentInfo_free(c); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct CtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct CertsFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certs = std::unique_ptr<STACK_OF(X509), CertsFree>;

Bio memory_bio(std::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return nullptr;
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

Certs read_pem_certs(std::string_view pem) {
  Certs certs(sk_X509_new_null());
  Bio bio = memory_bio(pem);
  while (bio && certs) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (x == nullptr)
      break;
    sk_X509_push(certs.get(), x);
  }
  ERR_clear_error();  // the end of the text is reported as an error
  return certs;
}

std::string subject_of(X509* x) {
  if (x == nullptr)
    return "";
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof buf);
  return buf;
}

// The reason of the first OpenSSL error queued, and whether a CMS reason is among them.
std::string drain_errors(int cms_reason, bool* found) {
  std::string first;
  *found = false;
  while (unsigned long e = ERR_get_error()) {
    if (ERR_GET_LIB(e) == ERR_LIB_CMS && ERR_GET_REASON(e) == cms_reason)
      *found = true;
    if (first.empty()) {
      const char* r = ERR_reason_error_string(e);
      first = r ? r : "unknown OpenSSL error";
    }
  }
  return first;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

size_t count_pem_certificates(std::string_view pem) {
  Certs certs = read_pem_certs(pem);
  return certs ? static_cast<size_t>(sk_X509_num(certs.get())) : 0;
}

SignatureCheck verify_detached_cms(std::string_view content, std::string_view cms_bytes,
                                   std::string_view certs_pem, std::string_view trust_pem,
                                   int64_t at_time) {
  SignatureCheck out;
  ERR_clear_error();
  Bio cms_bio = memory_bio(cms_bytes);
  Bio content_bio = memory_bio(content);
  if (!cms_bio || !content_bio) {
    out.fault = SignatureFault::kMalformed;
    out.reason = "too large";
    return out;
  }
  std::unique_ptr<CMS_ContentInfo, CmsFree> cms(
      starts_with(cms_bytes, "-----BEGIN")
          ? PEM_read_bio_CMS(cms_bio.get(), nullptr, nullptr, nullptr)
          : d2i_CMS_bio(cms_bio.get(), nullptr));
  if (!cms || OBJ_obj2nid(CMS_get0_type(cms.get())) != NID_pkcs7_signed) {
    bool unused;
    std::string why = drain_errors(0, &unused);
    out.fault = SignatureFault::kMalformed;
    out.reason = cms ? "not a CMS SignedData structure" : "not a CMS structure";
    if (!cms && !why.empty())
      out.reason += " (" + why + ")";
    return out;
  }
  if (CMS_is_detached(cms.get()) != 1) {
    out.fault = SignatureFault::kMalformed;
    out.reason = "the signature embeds its content; SOL004 signatures are detached";
    return out;
  }
  Certs extra = read_pem_certs(certs_pem);
  // The signature over the content first, the signer's chain after: each failure then has
  // its own reason (OpenSSL's combined check reports only the first).
  int ok = CMS_verify(cms.get(), extra.get(), nullptr, content_bio.get(), nullptr,
                      CMS_BINARY | CMS_NO_SIGNER_CERT_VERIFY);
  if (ok != 1) {
    bool no_cert = false;
    out.reason = drain_errors(CMS_R_SIGNER_CERTIFICATE_NOT_FOUND, &no_cert);
    out.fault = no_cert ? SignatureFault::kNoCertificate : SignatureFault::kTampered;
    return out;
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  Certs trusted = read_pem_certs(trust_pem);
  for (int i = 0; trusted && i < sk_X509_num(trusted.get()); ++i)
    X509_STORE_add_cert(store.get(), sk_X509_value(trusted.get(), i));
  // Intermediates may come from the signature itself or from the given certificates.
  Certs chain(CMS_get1_certs(cms.get()));
  if (!chain)
    chain.reset(sk_X509_new_null());
  for (int i = 0; extra && i < sk_X509_num(extra.get()); ++i) {
    X509* x = sk_X509_value(extra.get(), i);
    X509_up_ref(x);
    sk_X509_push(chain.get(), x);
  }
  STACK_OF(X509)* signers = CMS_get0_signers(cms.get());
  for (int i = 0; signers && i < sk_X509_num(signers) && out.fault == SignatureFault::kNone; ++i) {
    X509* signer = sk_X509_value(signers, i);
    out.signer = subject_of(signer);
    std::unique_ptr<X509_STORE_CTX, CtxFree> ctx(X509_STORE_CTX_new());
    if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), signer, chain.get()) != 1) {
      out.fault = SignatureFault::kUntrusted;
      out.reason = "cannot set up the certificate check";
      break;
    }
    if (at_time != 0)
      X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(at_time));
    if (X509_verify_cert(ctx.get()) == 1)
      continue;
    int err = X509_STORE_CTX_get_error(ctx.get());
    out.fault = err == X509_V_ERR_CERT_HAS_EXPIRED || err == X509_V_ERR_CERT_NOT_YET_VALID
                    ? SignatureFault::kExpired
                    : SignatureFault::kUntrusted;
    out.reason = X509_verify_cert_error_string(err);
    std::string at = subject_of(X509_STORE_CTX_get_current_cert(ctx.get()));
    if (!at.empty())
      out.reason += " (certificate \"" + at + "\")";
  }
  sk_X509_free(signers);
  ERR_clear_error();
  return out;
}

ManifestSignature split_manifest_signature(std::string_view text) {
  ManifestSignature s;
  s.signed_part = text;
  size_t pos = 0;
  uint32_t line = 1;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view l = text.substr(pos, eol == std::string_view::npos ? eol : eol - pos);
    if (s.line == 0 && starts_with(l, "-----BEGIN CMS-----")) {
      s.signed_part = text.substr(0, pos);
      s.cms = text.substr(pos);
      s.line = line;
    } else if (s.line != 0 && s.cms.data() + s.cms.size() != text.data() + text.size()) {
      // after the block: only blank lines
      if (l.find_first_not_of(" \t\r") != std::string_view::npos) {
        s.unsigned_line = line;
        return s;
      }
    } else if (s.line != 0 && starts_with(l, "-----END CMS-----")) {
      size_t end = eol == std::string_view::npos ? text.size() : eol + 1;
      s.cms = text.substr(s.signed_part.size(), end - s.signed_part.size());
    }
    if (eol == std::string_view::npos)
      break;
    pos = eol + 1;
    ++line;
  }
  return s;
}

std::vector<ArtifactSignature> manifest_artifact_signatures(std::string_view text) {
  std::vector<ArtifactSignature> out;
  ArtifactSignature cur;
  auto flush = [&] {
    if (!cur.signature.empty())
      out.push_back(cur);
    cur = {};
  };
  std::string_view rest = split_manifest_signature(text).signed_part;
  uint32_t line = 0;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view l = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    ++line;
    if (l.empty() || std::isspace(static_cast<unsigned char>(l.front())))
      continue;
    size_t colon = l.find(':');
    if (colon == std::string_view::npos)
      continue;
    std::string key = base::ascii_lower(trim(l.substr(0, colon)));
    std::string value = trim(l.substr(colon + 1));
    if (key == "source") {
      flush();
      cur.source = value;
    } else if (key == "signature" && !cur.source.empty()) {
      cur.signature = value;
      cur.line = line;
    } else if (key == "certificate" && !cur.source.empty()) {
      cur.certificate = value;
    }
  }
  flush();
  return out;
}

namespace {

// An artifact with a signature of its own is read whole to be verified: larger ones are
// refused with a reason rather than held in memory (a VM image is listed, and so signed,
// by the manifest's digest instead).
constexpr uint64_t kMaxSignedArtifactBytes = 256u << 20;

base::Diagnostic make(base::Severity sev, const char* code, base::SourceLocation where,
                      std::string message) {
  return base::Diagnostic{sev, code, std::move(where), std::move(message), {}};
}

// One signature's fault as a diagnostic about `what` ("the manifest", "\"Files/x\"").
void report_fault(const SignatureCheck& c, const std::string& what,
                  const base::SourceLocation& where, base::Diagnostics& diags,
                  std::string note = "") {
  struct Wording {
    const char* code;
    const char* before;  // message: before + what + after (+ OpenSSL's reason)
    const char* after;
    bool reason;
  };
  static const Wording kWording[] = {
      {"", "", "", false},  // kNone
      {"S0002", "the signature of ", " is malformed: ", true},
      {"S0006", "no certificate for the signature of ",
       ": not in the signature, the package (ETSI-Entry-Certificate) or given by the operator",
       false},
      {"S0003", "", " does not match its signature: it was changed after signing", false},
      {"S0004", "the signature of ", " is not from a trusted CA: ", true},
      {"S0005", "the certificate that signed ", " is not valid now: ", true},
  };
  static_assert(static_cast<int>(SignatureFault::kExpired) == 5, "one wording per fault");
  if (c.fault == SignatureFault::kNone)
    return;
  const Wording& w = kWording[static_cast<int>(c.fault)];
  const char* code = w.code;
  std::string message = w.before + what + w.after + (w.reason ? c.reason : "");
  base::Diagnostic d = make(base::Severity::kError, code, where, std::move(message));
  if (c.fault == SignatureFault::kTampered)
    d.notes.push_back("OpenSSL: " + c.reason);
  if (!c.signer.empty() && c.reason.find(c.signer) == std::string::npos)
    d.notes.push_back("signed by \"" + c.signer + "\"");
  if (!note.empty())
    d.notes.push_back(std::move(note));
  diags.add(std::move(d));
}

std::string stem_of(std::string_view path) {
  size_t dot = path.find_last_of('.');
  size_t slash = path.find_last_of('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash))
    return std::string(path);
  return std::string(path.substr(0, dot));
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         base::ascii_lower(s.substr(s.size() - suffix.size())) == suffix;
}

// The certificates a package carries for its manifest: TOSCA.meta's ETSI-Entry-Certificate,
// else a .cert beside the manifest with its name (SOL004 §5.3, a CSAR without TOSCA.meta).
std::string package_certificate_path(const Package& pkg) {
  std::string p;
  if (!pkg.meta.entry_certificate.empty()) {
    if (join_package_path("", pkg.meta.entry_certificate, p))
      return p;
    return "";
  }
  if (pkg.manifest.path.empty())
    return "";
  p = stem_of(pkg.manifest.path) + ".cert";
  return std::binary_search(pkg.files.begin(), pkg.files.end(), p) ? p : "";
}

// Option 1 and per-artifact signatures of a loaded package. `outer_signed`: the package
// came in a signed option-2 zip (already checked), which covers every file.
void check_package(const Package& pkg, const SignatureOptions& so, bool outer_signed,
                   base::Diagnostics& diags) {
  const bool checking = !so.trust_pem.empty();
  std::string mf_text;
  if (!pkg.manifest.path.empty()) {
    auto t = pkg.read_file(pkg.manifest.path);
    if (t.ok())
      mf_text = std::move(t).value();
  }
  ManifestSignature ms = split_manifest_signature(mf_text);
  std::vector<ArtifactSignature> artifacts = manifest_artifact_signatures(mf_text);
  const std::string mf_display =
      pkg.manifest.path.empty() ? pkg.display_name : pkg.display(pkg.manifest.path);

  std::string certs_pem = so.signer_pem;
  std::string cert_path = package_certificate_path(pkg);
  if (!cert_path.empty()) {
    auto c = pkg.read_file(cert_path);
    if (c.ok()) {
      certs_pem += "\n" + c.value();
    } else if (checking) {
      diags.error("S0006", {pkg.display(cert_path), 0, 0},
                  "cannot read the package's certificate: " + c.status().message());
    }
  }

  if (!checking) {
    if (!ms.cms.empty() || !artifacts.empty()) {
      diags.add(make(base::Severity::kNote, "S0007", {mf_display, ms.line, ms.line ? 1u : 0u},
                     "the package is signed; the signature was not checked (no trust store: "
                     "--trust CA.pem)"));
    }
    return;
  }

  bool manifest_verified = false;
  if (!ms.cms.empty()) {
    SignatureCheck c =
        verify_detached_cms(ms.signed_part, ms.cms, certs_pem, so.trust_pem, so.at_time);
    report_fault(c, "the manifest", {mf_display, ms.line, 1}, diags);
    manifest_verified = c.fault == SignatureFault::kNone;
    if (ms.unsigned_line != 0) {
      diags.error("S0002", {mf_display, ms.unsigned_line, 1},
                  "text after the manifest's signature block is not signed");
    }
  } else if (so.required && !outer_signed) {
    diags.error("S0001", {mf_display, 0, 0},
                pkg.manifest.path.empty()
                    ? "the package is not signed (it has no manifest) and signatures are required"
                    : "the package is not signed: the manifest has no CMS signature and "
                      "signatures are required");
  }

  std::set<std::string> signature_files, checked;
  for (const ArtifactSignature& a : artifacts) {
    std::string art, sig, cert;
    base::SourceLocation where{mf_display, a.line, 1};
    if (!join_package_path("", a.source, art) || !join_package_path("", a.signature, sig) ||
        (!a.certificate.empty() && !join_package_path("", a.certificate, cert))) {
      diags.error("S0002", where,
                  "the signature entry of \"" + a.source + "\" names a path outside the package");
      continue;
    }
    if (!checked.insert(art).second)
      continue;  // one check per artifact, however often the manifest names it
    signature_files.insert(sig);
    if (!cert.empty())
      signature_files.insert(cert);
    auto content = pkg.read_file(art, kMaxSignedArtifactBytes);
    auto signature = pkg.read_file(sig);
    std::string pem = certs_pem;
    if (!cert.empty()) {
      auto c = pkg.read_file(cert);
      if (c.ok())
        pem += "\n" + c.value();
    }
    if (!content.ok() || !signature.ok()) {
      diags.error("S0002", where,
                  "cannot read \"" + (content.ok() ? a.signature : a.source) +
                      "\": " + (content.ok() ? signature : content).status().message());
      continue;
    }
    SignatureCheck c =
        verify_detached_cms(content.value(), signature.value(), pem, so.trust_pem, so.at_time);
    report_fault(c, "\"" + a.source + "\"", {pkg.display(art), 0, 0}, diags,
                 "its signature is \"" + a.signature + "\" (" + mf_display + ":" +
                     std::to_string(a.line) + ")");
  }

  // A verified manifest vouches for the files it lists (the loader checks their digests):
  // a file it does not list is not covered by the signature.
  if (manifest_verified && !outer_signed) {
    std::set<std::string> covered(signature_files);
    for (const auto& e : pkg.manifest.sources) {
      std::string p;
      if (e.where.line < ms.line && join_package_path("", e.name, p))  // signed entries only
        covered.insert(p);
    }
    covered.insert(pkg.manifest.path);
    covered.insert("TOSCA-Metadata/TOSCA.meta");
    if (!cert_path.empty())
      covered.insert(cert_path);
    for (const std::string& f : pkg.files) {
      if (!covered.count(f)) {
        diags.error("S0008", {pkg.display(f), 0, 0},
                    "file is not listed in the signed manifest, so the signature does not "
                    "cover it");
      }
    }
  }
}

// SOL004 option 2: a zip holding the CSAR (a .csar or .zip at its root), "<name>.cms" (the
// CSAR's signature) and "<name>.cert" (the signing certificate), and nothing of a CSAR.
std::string option2_inner(const FileSource& src) {
  if (!src.is_archive())
    return "";
  std::string inner;
  for (const std::string& f : src.files()) {
    if (f.find('/') != std::string::npos) {
      if (starts_with(f, "TOSCA-Metadata/"))
        return "";
      continue;
    }
    if (ends_with_ci(f, ".yaml") || ends_with_ci(f, ".yml"))
      return "";
    if (ends_with_ci(f, ".csar") || ends_with_ci(f, ".zip")) {
      if (!inner.empty())
        return "";
      inner = f;
    }
  }
  return inner;
}

// Loads a package from an opened source: unwraps option 2 (checking its signature), runs
// the loader, checks the package's own signatures. `stored` (when given) receives the bytes
// to store: the inner CSAR for option 2, unchanged otherwise.
std::shared_ptr<const Package> load_checked(std::unique_ptr<FileSource> src,
                                            const LoadOptions& options, const SignatureOptions& so,
                                            std::string* stored, base::Diagnostics& diags) {
  if (so.required && so.trust_pem.empty()) {
    diags.error("S0001", {src ? src->display_name() : "", 0, 0},
                "signatures are required but no trust store is configured");
    return nullptr;
  }
  std::string inner = src ? option2_inner(*src) : "";
  if (inner.empty()) {
    auto pkg = load_from_source(std::move(src), options, diags);
    if (pkg)
      check_package(*pkg, so, false, diags);
    return pkg;
  }
  auto bytes = src->read(inner, options.limits.max_total_bytes);
  if (!bytes.ok()) {
    diags.error("C0002", {src->display(inner), 0, 0},
                "cannot read the CSAR: " + bytes.status().message());
    return nullptr;
  }
  std::string stem = stem_of(inner);
  std::string cms_path = stem + ".cms", cert_path = stem + ".cert";
  bool outer_verified = false;
  if (!src->exists(cms_path)) {
    if (so.required) {
      diags.error(
          "S0001", {src->display(inner), 0, 0},
          "the CSAR is not signed: no \"" + cms_path + "\" beside it and signatures are required");
    }
  } else if (so.trust_pem.empty()) {
    diags.add(make(base::Severity::kNote, "S0007", {src->display(cms_path), 0, 0},
                   "the CSAR is signed; the signature was not checked (no trust store: --trust "
                   "CA.pem)"));
  } else {
    auto cms = src->read(cms_path, options.limits.max_text_bytes);
    std::string pem = so.signer_pem;
    if (src->exists(cert_path)) {
      auto c = src->read(cert_path, options.limits.max_text_bytes);
      if (c.ok())
        pem += "\n" + c.value();
    }
    if (!cms.ok()) {
      diags.error("S0002", {src->display(cms_path), 0, 0},
                  "cannot read the signature: " + cms.status().message());
    } else {
      SignatureCheck c =
          verify_detached_cms(bytes.value(), cms.value(), pem, so.trust_pem, so.at_time);
      report_fault(c, "\"" + inner + "\"", {src->display(cms_path), 0, 0}, diags);
      outer_verified = c.fault == SignatureFault::kNone;
    }
  }
  if (stored)
    *stored = bytes.value();
  auto pkg = load_from_source(
      open_zip_bytes(src->display(inner), std::move(bytes).value(), options.limits, diags), options,
      diags);
  if (pkg)
    check_package(*pkg, so, outer_verified, diags);
  return pkg;
}

}  // namespace
}  // namespace internal

base::Result<std::string> read_certificates_pem(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return base::Status::InvalidArgument("cannot read \"" + path + "\": " + ec.message());
  if (size > (1u << 20))
    return base::Status::InvalidArgument("\"" + path + "\" is larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof())
    return base::Status::InvalidArgument("cannot read \"" + path + "\"");
  std::string pem = ss.str();
  if (internal::count_pem_certificates(pem) == 0)
    return base::Status::InvalidArgument("\"" + path + "\" holds no PEM certificate");
  return pem;
}

std::shared_ptr<const Package> load_signed_package(const std::string& path,
                                                   const LoadOptions& options,
                                                   const SignatureOptions& signatures,
                                                   base::Diagnostics& diags) {
  // Opening, signature and loader findings under one cap per kind (a zip of 9,000 entries
  // that leave the package is 51 lines, not 9,001).
  base::Diagnostics found;
  found.cap_per_kind(kMaxFindingsPerKind);
  std::error_code ec;
  auto src = std::filesystem::is_directory(path, ec)
                 ? internal::open_directory(path, options.limits, found)
                 : internal::open_zip_file(path, options.limits, found);
  auto pkg = internal::load_checked(std::move(src), options, signatures, nullptr, found);
  diags.merge(found);
  return pkg;
}

std::shared_ptr<const Package> load_signed_package_from_zip_bytes(
    std::string display_name, std::string& bytes, const LoadOptions& options,
    const SignatureOptions& signatures, base::Diagnostics& diags) {
  std::string stored = bytes;
  base::Diagnostics found;
  found.cap_per_kind(kMaxFindingsPerKind);
  auto pkg = internal::load_checked(
      internal::open_zip_bytes(std::move(display_name), std::move(stored), options.limits, found),
      options, signatures, &bytes, found);
  diags.merge(found);
  return pkg;
}

}  // namespace tosca
