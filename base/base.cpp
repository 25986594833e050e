#include "base/base.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <tuple>

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

namespace base {

std::string_view to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kPermissionDenied:
      return "permission_denied";
    case StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) {
    return "ok";
  }
  return std::string(base::to_string(code_)) + ": " + message_;
}

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kNote:
      return "note";
  }
  return "error";
}

std::string to_string(const Diagnostic& d) {
  std::string out = d.where.file.empty() ? std::string("<input>") : printable(d.where.file);
  if (d.where.line > 0) {
    // Appended piece by piece: `":" + std::to_string(n)` trips g++ 12's false
    // -Wrestrict at -O3 (GCC bug 105329).
    out += ':';
    out += std::to_string(d.where.line);
    if (d.where.column > 0) {
      out += ':';
      out += std::to_string(d.where.column);
    }
  }
  out += ": ";
  out += to_string(d.severity);
  out += ": ";
  out += printable(d.message);
  if (!d.code.empty()) {
    out += " [" + printable(d.code) + "]";
  }
  for (const auto& n : d.notes) {
    out += "\n  note: " + printable(n);
  }
  return out;
}

void Diagnostics::add(Diagnostic d) {
  if (cap_ > 0) {
    Kind& k = kinds_[{d.code, d.severity}];
    if (++k.seen > cap_) {
      std::string summary = "\u2026 and " + std::to_string(k.seen - cap_) +
                            " more like this (the first " + std::to_string(cap_) + " are shown)";
      if (k.seen > cap_ + 1) {
        items_[k.summary].message = std::move(summary);
        return;
      }
      k.summary = items_.size();
      d.message = std::move(summary);
      d.notes.clear();
    }
  }
  if (d.severity == Severity::kError) {
    ++errors_;
  }
  items_.push_back(std::move(d));
}

void Diagnostics::error(std::string code, SourceLocation where, std::string message) {
  add(Diagnostic{Severity::kError, std::move(code), std::move(where), std::move(message), {}});
}

void Diagnostics::warning(std::string code, SourceLocation where, std::string message) {
  add(Diagnostic{Severity::kWarning, std::move(code), std::move(where), std::move(message), {}});
}

void Diagnostics::merge(const Diagnostics& other) {
  for (const auto& d : other.items_) {
    add(d);
  }
}

std::vector<Diagnostic> Diagnostics::sorted() const {
  std::vector<Diagnostic> out = items_;
  auto key = [](const Diagnostic& d) {
    return std::tie(d.where.file, d.where.line, d.where.column, d.code, d.message);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const Diagnostic& a, const Diagnostic& b) { return key(a) < key(b); });
  out.erase(std::unique(out.begin(), out.end(),
                        [&](const Diagnostic& a, const Diagnostic& b) {
                          return key(a) == key(b) && a.severity == b.severity;
                        }),
            out.end());
  return out;
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    prev[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // Hints only for typos: an edit distance of at most a fifth of the word (1 to 3), or a
  // word that extends a candidate by a short tail ("heal_ending" for "heal_end").
  size_t limit = std::min<size_t>(3, std::max<size_t>(1, word.size() / 5));
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    if (c.size() > word.size() + limit || word.size() > c.size() + limit) {
      if (!(c.size() >= 4 && word.size() > c.size() && word.size() <= c.size() + 4 &&
            word.substr(0, c.size()) == c)) {
        continue;
      }
    }
    size_t d = edit_distance(word, c);
    if (d > limit && c.size() >= 4 && word.size() > c.size() && word.size() <= c.size() + 4 &&
        word.substr(0, c.size()) == c) {
      d = limit;  // a prefix: a good hint even when the tail is long
    }
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------

std::optional<DigestAlgorithm> parse_digest_algorithm(std::string_view name) {
  std::string n;
  for (char c : name) {
    if (c != '-' && c != '_') {
      n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (n == "sha224")
    return DigestAlgorithm::kSha224;
  if (n == "sha256")
    return DigestAlgorithm::kSha256;
  if (n == "sha384")
    return DigestAlgorithm::kSha384;
  if (n == "sha512")
    return DigestAlgorithm::kSha512;
  return std::nullopt;
}

std::string_view to_string(DigestAlgorithm a) {
  switch (a) {
    case DigestAlgorithm::kSha224:
      return "SHA-224";
    case DigestAlgorithm::kSha256:
      return "SHA-256";
    case DigestAlgorithm::kSha384:
      return "SHA-384";
    case DigestAlgorithm::kSha512:
      return "SHA-512";
  }
  return "SHA-256";
}

size_t digest_hex_length(DigestAlgorithm a) {
  switch (a) {
    case DigestAlgorithm::kSha224:
      return 56;
    case DigestAlgorithm::kSha256:
      return 64;
    case DigestAlgorithm::kSha384:
      return 96;
    case DigestAlgorithm::kSha512:
      return 128;
  }
  return 64;
}

namespace {
const EVP_MD* evp_for(DigestAlgorithm a) {
  switch (a) {
    case DigestAlgorithm::kSha224:
      return EVP_sha224();
    case DigestAlgorithm::kSha256:
      return EVP_sha256();
    case DigestAlgorithm::kSha384:
      return EVP_sha384();
    case DigestAlgorithm::kSha512:
      return EVP_sha512();
  }
  return EVP_sha256();
}
}  // namespace

Hasher::Hasher(DigestAlgorithm a) : ctx_(EVP_MD_CTX_new()) {
  BASE_CHECK(ctx_ != nullptr);
  BASE_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), evp_for(a), nullptr) == 1);
}

Hasher::~Hasher() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Hasher::update(std::string_view data) {
  BASE_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size()) == 1);
}

std::string Hasher::hex_final() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  BASE_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len) == 1);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string digest_hex(DigestAlgorithm a, std::string_view data) {
  Hasher h(a);
  h.update(data);
  return h.hex_final();
}

// ---------------------------------------------------------------------------------------

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    // ASCII, the common case, eight bytes at a time: none has its top bit set.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) != 0)
        break;
      i += 8;
    }
    if (i >= n)
      break;
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) {
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string shell_quote(std::string_view s) {
  std::string o = "'";
  for (char c : s) {
    if (c == '\'')
      o += "'\\''";
    else
      o += c;
  }
  return o + "'";
}

namespace {

// The length of the UTF-8 sequence starting at s[i], 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF are not).
size_t utf8_length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  size_t n = c >= 0xc2 && c <= 0xdf   ? 2
             : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4
                                      : 0;
  if (n == 0 || i + n > s.size())
    return 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c == 0xe0)
    lo = 0xa0;
  else if (c == 0xed)
    hi = 0x9f;
  else if (c == 0xf0)
    lo = 0x90;
  else if (c == 0xf4)
    hi = 0x8f;
  if (at(i + 1) < lo || at(i + 1) > hi)
    return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf)
      return 0;
  }
  return n;
}

// The code point of a valid sequence of `n` bytes at s[i].
uint32_t code_point(std::string_view s, size_t i, size_t n) {
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
  uint32_t cp = at(i) & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
  for (size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (at(i + k) & 0x3f);
  return cp;
}

// C1 controls and the bidirectional embeddings, overrides and isolates (which reorder what
// follows them on the screen).
bool hidden_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  for (int d = digits - 1; d >= 0; --d)
    out += kHex[(v >> (4 * d)) & 0xf];
}

}  // namespace

std::string printable(std::string_view s, PrintMode mode) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (mode == PrintMode::kJson && c < 0x7f) {
      out += static_cast<char>(c);  // JSON's own escapes stand; not ours to judge
      ++i;
      continue;
    }
    if (mode == PrintMode::kJson && (c == 0x7f || utf8_length(s, i) == 0)) {
      // DEL; or a byte that is not UTF-8 (a folder package's file name), which would make
      // the document invalid JSON: read as the Latin-1 character of that byte.
      append_hex(out, "\\u", c, 4);
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      if (mode == PrintMode::kLines && (c == '\n' || c == '\t'))
        out += static_cast<char>(c);
      else if (c == '\n')
        out += "\\n";
      else if (c == '\r')
        out += "\\r";
      else if (c == '\t')
        out += "\\t";
      else
        append_hex(out, "\\x", c, 2);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t n = utf8_length(s, i);
    if (n == 0) {
      append_hex(out, "\\x", c, 2);  // not UTF-8: a lone 0x9b is CSI to some terminals
      ++i;
      continue;
    }
    uint32_t cp = code_point(s, i, n);
    if (hidden_control(cp))
      append_hex(out, "\\u", cp, 4);
    else
      out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

}  // namespace base

// ---------------------------------------------------------------------------------------
// Secrets at rest

namespace base {

namespace {

std::string to_hex(std::string_view b) {
  static const char* h = "0123456789abcdef";
  std::string o;
  o.reserve(b.size() * 2);
  for (unsigned char c : b) {
    o += h[c >> 4];
    o += h[c & 15];
  }
  return o;
}

bool from_hex(std::string_view s, std::string& out) {
  if (s.size() % 2 != 0)
    return false;
  out.clear();
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); i += 2) {
    int a = val(s[i]), b = val(s[i + 1]);
    if (a < 0 || b < 0)
      return false;
    out += static_cast<char>(a * 16 + b);
  }
  return true;
}

}  // namespace

Result<std::string> load_or_create_key(const std::string& path) {
  for (int round = 0; round < 2; ++round) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
        ::close(fd);
        return Status::PermissionDenied("key file \"" + path +
                                        "\" is readable by others; chmod 600 it");
      }
      char buf[64];
      ssize_t n = ::read(fd, buf, sizeof buf);
      ::close(fd);
      if (n != 32)
        return Status::FailedPrecondition("key file \"" + path + "\" does not hold a 32-byte key");
      return std::string(buf, 32);
    }
    if (errno != ENOENT)
      return Status::Unavailable("key file \"" + path + "\": " + std::strerror(errno));
    unsigned char key[32];
    if (RAND_bytes(key, sizeof key) != 1)
      return Status::Internal("no random bytes for a new key");
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST)
        continue;  // another process made it first: read theirs
      return Status::Unavailable("key file \"" + path + "\": " + std::strerror(errno));
    }
    bool ok = ::write(fd, key, sizeof key) == static_cast<ssize_t>(sizeof key) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok)
      return Status::Unavailable("key file \"" + path + "\": cannot write");
    return std::string(reinterpret_cast<char*>(key), sizeof key);
  }
  return Status::Unavailable("key file \"" + path + "\": cannot create");
}

Result<std::string> seal(std::string_view key, std::string_view plain, std::string_view aad) {
  if (key.size() != 32)
    return Status::InvalidArgument("a sealing key has 32 bytes");
  unsigned char nonce[12];
  if (RAND_bytes(nonce, sizeof nonce) != 1)
    return Status::Internal("no random bytes for a nonce");
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  std::string out(reinterpret_cast<char*>(nonce), sizeof nonce);
  std::string ct(plain.size() + 16, '\0');
  int len = 0, fin = 0;
  bool ok = c != nullptr &&
            EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, sizeof nonce, nullptr) == 1 &&
            EVP_EncryptInit_ex(c, nullptr, nullptr,
                               reinterpret_cast<const unsigned char*>(key.data()), nonce) == 1 &&
            EVP_EncryptUpdate(c, nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                              static_cast<int>(aad.size())) == 1 &&
            EVP_EncryptUpdate(c, reinterpret_cast<unsigned char*>(ct.data()), &len,
                              reinterpret_cast<const unsigned char*>(plain.data()),
                              static_cast<int>(plain.size())) == 1 &&
            EVP_EncryptFinal_ex(c, reinterpret_cast<unsigned char*>(ct.data()) + len, &fin) == 1;
  unsigned char tag[16];
  ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, sizeof tag, tag) == 1;
  EVP_CIPHER_CTX_free(c);
  if (!ok)
    return Status::Internal("sealing failed");
  ct.resize(static_cast<size_t>(len + fin));
  out += ct;
  out.append(reinterpret_cast<char*>(tag), sizeof tag);
  return "v1:" + to_hex(out);
}

Result<std::string> unseal(std::string_view key, std::string_view sealed, std::string_view aad) {
  std::string raw;
  if (key.size() != 32 || sealed.substr(0, 3) != "v1:" || !from_hex(sealed.substr(3), raw) ||
      raw.size() < 28)
    return Status::PermissionDenied("a sealed secret is malformed");
  const auto* nonce = reinterpret_cast<const unsigned char*>(raw.data());
  std::string_view ct(raw.data() + 12, raw.size() - 28);
  std::string tag = raw.substr(raw.size() - 16);
  std::string plain(ct.size() + 16, '\0');
  int len = 0, fin = 0;
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  bool ok = c != nullptr &&
            EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) == 1 &&
            EVP_DecryptInit_ex(c, nullptr, nullptr,
                               reinterpret_cast<const unsigned char*>(key.data()), nonce) == 1 &&
            EVP_DecryptUpdate(c, nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                              static_cast<int>(aad.size())) == 1 &&
            EVP_DecryptUpdate(c, reinterpret_cast<unsigned char*>(plain.data()), &len,
                              reinterpret_cast<const unsigned char*>(ct.data()),
                              static_cast<int>(ct.size())) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag.data()) == 1 &&
            EVP_DecryptFinal_ex(c, reinterpret_cast<unsigned char*>(plain.data()) + len, &fin) == 1;
  EVP_CIPHER_CTX_free(c);
  if (!ok)
    return Status::PermissionDenied(
        "a sealed secret does not open with this key (wrong key or altered)");
  plain.resize(static_cast<size_t>(len + fin));
  return plain;
}

// ---------------------------------------------------------------------------------------
// Time

namespace {
class RealClock final : public Clock {
 public:
  int64_t wall_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::chrono::steady_clock::time_point steady() const override {
    return std::chrono::steady_clock::now();
  }
  void sleep_for(std::chrono::milliseconds d) override { std::this_thread::sleep_for(d); }
};
}  // namespace

Clock& Clock::real() {
  static RealClock clock;
  return clock;
}

// ---------------------------------------------------------------------------------------
// Log fields: a thread's stack of them.

namespace {
thread_local std::vector<LogFields::Field> t_log_fields;
}  // namespace

LogFields::LogFields(std::initializer_list<Field> fields) : n_(fields.size()) {
  t_log_fields.insert(t_log_fields.end(), fields.begin(), fields.end());
}

LogFields::~LogFields() {
  t_log_fields.resize(t_log_fields.size() - n_);
}

const std::vector<LogFields::Field>& LogFields::current() {
  return t_log_fields;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost")
    return true;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned char a[16] = {};
  if (::inet_pton(AF_INET, std::string(host).c_str(), a) == 1)
    return a[0] == 127;
  std::string v6(host.substr(0, host.find('%')));  // an IPv6 zone names no other host
  return ::inet_pton(AF_INET6, v6.c_str(), a) == 1 &&
         std::memcmp(a, &in6addr_loopback, sizeof a) == 0;
}

// ---------------------------------------------------------------------------------------
// WorkQueue

WorkQueue::WorkQueue(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { work(); });
}

WorkQueue::~WorkQueue() {
  join();
}

void WorkQueue::push(std::function<void()> job) {
  std::vector<std::function<void()>> one;
  one.push_back(std::move(job));
  push_all(one);
}

void WorkQueue::push_all(std::vector<std::function<void()>>& jobs) {
  size_t wake = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (joining_) {
      jobs.clear();
      return;
    }
    for (auto& j : jobs)
      q_.push_back(std::move(j));
    // One signal per sleeping worker at most, however many jobs come: a signalled worker
    // that has not woken yet will find these jobs too.
    wake = std::min(jobs.size(), sleeping_ - std::min(sleeping_, signalled_));
    signalled_ += wake;
    wakes_ += wake;
  }
  jobs.clear();
  for (size_t i = 0; i < wake; ++i)
    cv_.notify_one();
}

void WorkQueue::work() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    while (q_.empty() && !joining_) {
      ++sleeping_;
      cv_.wait(l);
      --sleeping_;
      if (signalled_ > 0)
        --signalled_;
    }
    if (q_.empty())
      return;  // joining, and nothing left
    std::function<void()> job = std::move(q_.front());
    q_.pop_front();
    l.unlock();
    job();
    job = nullptr;  // its captures are released outside the lock
    l.lock();
  }
}

void WorkQueue::join() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    joining_ = true;
    threads.swap(threads_);  // one caller joins them; a second finds none
  }
  cv_.notify_all();
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach();  // a job joining its own queue: this thread ends when the job returns
    else if (t.joinable())
      t.join();
  }
}

uint64_t WorkQueue::wakes() const {
  std::lock_guard<std::mutex> l(mu_);
  return wakes_;
}

}  // namespace base
