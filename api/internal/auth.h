// Who may call: the credentials a request carries, checked against the static ones of the
// credentials file or with Keystone's token API. No secret is logged or put in an error.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api/api.h"

namespace api::internal {

enum class Verdict {
  kAllowed,
  kUnauthenticated,  // no credentials, wrong ones, an unknown or expired token: 401
  kForbidden,        // a valid token without the required role or project: 403
  kUnavailable,      // Keystone could not be asked: 503
};

// Keystone's answer about one token, as the cache keeps it.
struct TokenInfo {
  Verdict verdict = Verdict::kUnauthenticated;
  std::chrono::system_clock::time_point expires;
};

// The roles, project and expiry Keystone's GET /v3/auth/tokens body gives, judged against
// the required role and project. Pure, for tests.
base::Result<TokenInfo> judge_token(std::string_view body, const KeystoneOptions& o);
// "2026-11-24T05:00:00.000000Z" (Keystone's expires_at); nullopt when it is not that.
std::optional<std::chrono::system_clock::time_point> parse_expiry(std::string_view text);
// Whether --keystone-url is one Authenticator can use (http or https, a host).
base::Status check_keystone_url(std::string_view url);

class Authenticator {
 public:
  explicit Authenticator(const ServerOptions& o);
  ~Authenticator();

  // The verdict from the cache or the static credentials, without asking anyone;
  // nullopt when Keystone must be asked (check()).
  std::optional<Verdict> quick(std::string_view x_auth_token, std::string_view authorization);
  // The verdict, asking Keystone when needed: blocks up to the Keystone timeout (twice
  // when the service's own token must be renewed). Thread-safe.
  Verdict check(std::string_view x_auth_token, std::string_view authorization);
  std::string describe() const;  // for the log: the mode and Keystone's URL
  // New credentials (a reload of the credentials file): the static ones, or Keystone's
  // service user (its token fetched again). Refused, changing nothing, when the mode
  // needs what `c` lacks. Thread-safe.
  base::Status set_credentials(const Credentials& c);

  struct Keystone;

 private:
  AuthMode mode_;
  mutable std::mutex static_mu_;  // guards tokens_ and basic_
  std::vector<std::string> tokens_;
  std::vector<std::string> basic_;  // base64 of user:password
  std::unique_ptr<Keystone> keystone_;
};

}  // namespace api::internal
