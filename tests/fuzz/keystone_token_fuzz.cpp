// libFuzzer target: the REST API's reading of Keystone (api/internal/auth.h): the JSON body
// of GET /v3/auth/tokens from a server we do not control (judge_token, under a few role and
// project requirements), the expires_at dates in it (parse_expiry) and --keystone-url
// (check_keystone_url). Never a crash, a sanitizer report or a hang; a refusal has a
// message, and no message repeats the input: the seeds carry "S3CRET" where secrets go (a
// password in a URL's user info, a token's id and audit ids), which no message may show.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/internal/auth.h"

namespace {

using api::internal::Verdict;

void fail(const char* what, const std::string& message) {
  std::fprintf(stderr, "%s: \"%s\"\n", what, message.c_str());
  std::abort();
}

void check_message(const char* what, const std::string& message) {
  if (message.empty() || message.find("S3CRET") != std::string::npos)
    fail(what, message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  static const api::KeystoneOptions kOptions[] = {
      {}, {"", "admin", "", "", 1, {}}, {"", "admin", "ops", "", 1, {}}, {"", "", "p1", "", 1, {}}};
  for (const auto& o : kOptions) {
    auto v = api::internal::judge_token(text, o);
    if (!v.ok()) {
      check_message("judge_token", v.status().message());
      continue;
    }
    // Nothing required: a readable, unexpired token is allowed, never forbidden.
    if (o.role.empty() && o.project.empty() && v.value().verdict == Verdict::kForbidden)
      fail("judge_token", "a token forbidden when no role or project is required");
    if (v.value().verdict != Verdict::kAllowed && v.value().verdict != Verdict::kForbidden &&
        v.value().verdict != Verdict::kUnauthenticated)
      fail("judge_token", "a verdict judge_token never gives (unavailable)");
  }

  // The input as a date on its own, and its first line as a URL.
  (void)api::internal::parse_expiry(text);
  std::string_view url = text.substr(0, text.find('\n'));
  base::Status s = api::internal::check_keystone_url(url);
  if (!s.ok())
    check_message("check_keystone_url", s.message());
  return 0;
}
