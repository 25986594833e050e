// Keystone's token document judged against the required role and project, its expiry
// parsed, and the options --auth keystone and HTTPS need. The real Keystone is in
// tests/api/api_keystone_test.sh.
#include "api/internal/auth.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"

namespace {

using api::internal::judge_token;
using api::internal::parse_expiry;
using api::internal::Verdict;
using Clock = std::chrono::system_clock;

std::string token_doc(const std::string& expires, const std::string& roles,
                      const std::string& project) {
  return R"({"token": {"expires_at": ")" + expires + R"(", "roles": [)" + roles +
         R"(], "project": )" + project + "}}";
}

TEST_CASE("Keystone's expires_at is read to the second, in UTC") {
  auto t = parse_expiry("2030-01-02T03:04:05.000000Z");
  REQUIRE(t);
  CHECK(Clock::to_time_t(*t) == 1893553445);
  CHECK(parse_expiry("2030-01-02T03:04:05Z"));
  CHECK_FALSE(parse_expiry("2030-13-02T03:04:05Z"));
  CHECK_FALSE(parse_expiry("tomorrow"));
  CHECK_FALSE(parse_expiry(""));
}

TEST_CASE("An expires_at beyond the clock's years is its nearest end, not an overflow") {
  // The clock counts nanoseconds: 1678 to 2262. Found by the keystone_token fuzz target
  // (UBSan: signed overflow in from_time_t for 9999-12-31).
  CHECK(parse_expiry("9999-12-31T23:59:59.000000Z") == Clock::time_point::max());
  CHECK(parse_expiry("2263-01-01T00:00:00Z") == Clock::time_point::max());
  CHECK(parse_expiry("0000-01-01T00:00:00Z") == Clock::time_point::min());
  CHECK(parse_expiry("2262-01-01T00:00:00Z") < Clock::time_point::max());
  api::KeystoneOptions o;
  o.role = "admin";
  auto v = judge_token(token_doc("9999-12-31T23:59:59Z", R"({"name": "admin"})", "{}"), o);
  REQUIRE(v.ok());
  CHECK(v.value().verdict == Verdict::kAllowed);
  v = judge_token(token_doc("0001-01-01T00:00:00Z", R"({"name": "admin"})", "{}"), o);
  REQUIRE(v.ok());
  CHECK(v.value().verdict == Verdict::kUnauthenticated);
}

TEST_CASE("A valid token passes only with the required role and project") {
  api::KeystoneOptions o;
  o.role = "admin";
  o.project = "ops";
  std::string later = "2099-01-01T00:00:00.000000Z";
  auto v = judge_token(
      token_doc(later, R"({"id": "r1", "name": "admin"})", R"({"id": "p1", "name": "ops"})"), o);
  REQUIRE(v.ok());
  CHECK(v.value().verdict == Verdict::kAllowed);
  v = judge_token(
      token_doc(later, R"({"id": "r2", "name": "member"})", R"({"id": "p1", "name": "ops"})"), o);
  CHECK(v.value().verdict == Verdict::kForbidden);
  v = judge_token(
      token_doc(later, R"({"id": "r1", "name": "admin"})", R"({"id": "p2", "name": "other"})"), o);
  CHECK(v.value().verdict == Verdict::kForbidden);
  o.project = "p1";  // by id too
  v = judge_token(token_doc(later, R"({"name": "admin"})", R"({"id": "p1", "name": "ops"})"), o);
  CHECK(v.value().verdict == Verdict::kAllowed);
  // An expired one is no token at all.
  v = judge_token(token_doc("2001-01-01T00:00:00Z", R"({"name": "admin"})", R"({"id": "p1"})"), o);
  CHECK(v.value().verdict == Verdict::kUnauthenticated);
}

TEST_CASE("A body that is not a token document is Keystone's failure, not the caller's") {
  api::KeystoneOptions o;
  CHECK_FALSE(judge_token("not json", o).ok());
  CHECK_FALSE(judge_token(R"({"token": {"roles": []}})", o).ok());  // no expiry
  CHECK_FALSE(judge_token(R"({"error": {"code": 404}})", o).ok());
}

TEST_CASE("The credentials file holds Keystone's service user") {
  char tmpl[] = "/tmp/vnflow-api-auth-XXXXXX";
  int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(tmpl, std::ios::trunc) << "# svc\nuser svc\npassword p w\nproject service\n";
  ::chmod(tmpl, 0600);
  auto ks = api::load_auth_file(tmpl);
  ::unlink(tmpl);
  REQUIRE(ks.ok());
  CHECK(ks.value().user + "|" + ks.value().password + "|" + ks.value().project + "|" +
            ks.value().domain ==
        "svc|p w|service|Default");
}

TEST_CASE("--auth keystone needs a usable URL and the service user; HTTPS both files") {
  api::ServerOptions o;
  o.auth = api::AuthMode::kKeystone;
  CHECK_FALSE(api::check_options(o).ok());
  o.keystone.url = "ftp://k/v3";
  o.credentials.user = "svc";
  o.credentials.password = "pw";
  o.credentials.project = "service";
  CHECK(api::check_options(o).message().find("http") != std::string::npos);
  o.keystone.url = "http://127.0.0.1:5000";
  CHECK(api::check_options(o).ok());
  o.credentials.password.clear();
  CHECK(api::check_options(o).message().find("password") != std::string::npos);
  o.credentials.password = "pw";
  o.tls.cert_file = "/nonexistent/cert.pem";
  CHECK(api::check_options(o).message().find("--tls-key") != std::string::npos);
  o.tls.key_file = "/nonexistent/key.pem";
  CHECK(api::check_options(o).message().find("cannot read the TLS key") != std::string::npos);
}

TEST_CASE("Static credentials and a missing Keystone token need no question") {
  api::ServerOptions o;
  o.credentials.tokens = {"secret-token"};
  api::internal::Authenticator a(o);
  CHECK(a.quick("secret-token", "") == Verdict::kAllowed);
  CHECK(a.quick("", "Bearer secret-token") == Verdict::kAllowed);
  CHECK(a.quick("secret-tokem", "") == Verdict::kUnauthenticated);
  o.auth = api::AuthMode::kKeystone;
  o.keystone.url = "http://127.0.0.1:1/v3";
  api::internal::Authenticator k(o);
  CHECK(k.quick("", "") == Verdict::kUnauthenticated);
  CHECK(k.quick("bad token\n", "") == Verdict::kUnauthenticated);
  CHECK_FALSE(k.quick("gAAAA-unknown", ""));  // Keystone must be asked
  CHECK(k.describe().find("secret") == std::string::npos);
}

}  // namespace
