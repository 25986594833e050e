// Static credentials compared in constant time; Keystone tokens validated with GET
// /v3/auth/tokens (X-Subject-Token), asked with the service's own token (password auth,
// renewed when it expires or Keystone refuses it), answers cached until the token expires
// (at most 5 minutes, so a revoked token stops working soon; a refused one for 10 s).
#include "api/internal/auth.h"

#include <ctime>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

namespace api::internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::system_clock;

namespace {

constexpr auto kMaxCacheTime = std::chrono::minutes(5);
constexpr auto kRefusedCacheTime = std::chrono::seconds(10);
constexpr size_t kMaxKeystoneBody = 1 << 20;

std::string base64(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t n = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                 static_cast<uint8_t>(in[i + 2]);
    for (int s : {18, 12, 6, 0})
      out += kAlphabet[(n >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t n = static_cast<uint8_t>(in[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t n = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

// Compares in time that depends on the lengths only.
bool same(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

struct Url {
  bool tls = false;
  std::string host, port, path;  // path without a trailing slash, "/v3" added when missing
};

base::Result<Url> parse_url(std::string_view s) {
  Url u;
  std::string_view rest;
  if (s.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = s.substr(8);
  } else if (s.rfind("http://", 0) == 0) {
    rest = s.substr(7);
  } else {
    return base::Status::InvalidArgument("--keystone-url must be http:// or https://");
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  while (!path.empty() && path.back() == '/')
    path.pop_back();
  if (path.size() < 3 || path.substr(path.size() - 3) != "/v3")
    path += "/v3";
  u.path = path;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return base::Status::InvalidArgument("--keystone-url: unbalanced [ in the host");
    u.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      u.port = std::string(authority.substr(close + 2));
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    u.host = std::string(authority.substr(0, colon));
    u.port = std::string(authority.substr(colon + 1));
  } else {
    u.host = std::string(authority);
  }
  if (u.port.empty())
    u.port = u.tls ? "443" : "80";
  if (u.host.empty() || u.host.find('@') != std::string::npos)
    return base::Status::InvalidArgument("--keystone-url needs a host (and no user info)");
  return u;
}

struct Reply {
  unsigned status = 0;
  std::string subject_token;  // X-Subject-Token
  std::string body;
};

// One request to Keystone on a connection of its own, every step within `timeout`.
// Errors name Keystone and the step, never a header (tokens) or the body (passwords).
template <class Stream>
base::Result<Reply> exchange(Stream& stream, http::request<http::string_body>& req,
                             std::chrono::seconds timeout) {
  beast::error_code ec;
  beast::get_lowest_layer(stream).expires_after(timeout);
  http::write(stream, req, ec);
  if (ec)
    return base::Status::Unavailable("Keystone: sending the request: " + ec.message());
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxKeystoneBody);
  http::read(stream, buf, parser, ec);
  if (ec)
    return base::Status::Unavailable("Keystone: reading the answer: " + ec.message());
  Reply r;
  r.status = parser.get().result_int();
  if (auto it = parser.get().find("X-Subject-Token"); it != parser.get().end())
    r.subject_token = std::string(it->value());
  r.body = std::move(parser.get().body());
  return r;
}

base::Result<Reply> call(const Url& u, const KeystoneOptions& o, http::verb verb,
                         const std::string& target,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         std::string body) {
  net::io_context io;
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto eps = resolver.resolve(u.host, u.port, ec);
  if (ec)
    return base::Status::Unavailable("Keystone: cannot resolve " + u.host + ": " + ec.message());
  http::request<http::string_body> req(verb, target, 11);
  req.set(http::field::host, u.host + ":" + u.port);
  req.set(http::field::user_agent, "vnflow");
  req.set(http::field::accept, "application/json");
  for (const auto& [k, v] : headers)
    req.set(k, v);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  std::string where = " " + u.host + ":" + u.port;
  if (!u.tls) {
    beast::tcp_stream stream(io);
    stream.expires_after(o.timeout);
    stream.connect(eps, ec);
    if (ec)
      return base::Status::Unavailable("Keystone: cannot connect to" + where + ": " + ec.message());
    return exchange(stream, req, o.timeout);
  }
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                  net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                  net::ssl::context::no_tlsv1_1);
  if (o.ca_file.empty())
    ctx.set_default_verify_paths(ec);
  else
    ctx.load_verify_file(o.ca_file, ec);
  if (ec)
    return base::Status::Unavailable("Keystone: the CA file: " + ec.message());
  ctx.set_verify_mode(net::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  stream.set_verify_callback(net::ssl::host_name_verification(u.host));
  if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str()))
    return base::Status::Unavailable("Keystone: cannot set the TLS server name");
  beast::get_lowest_layer(stream).expires_after(o.timeout);
  beast::get_lowest_layer(stream).connect(eps, ec);
  if (!ec)
    stream.handshake(net::ssl::stream_base::client, ec);
  if (ec)
    return base::Status::Unavailable("Keystone: cannot connect to" + where +
                                     " (TLS): " + ec.message());
  return exchange(stream, req, o.timeout);
}

}  // namespace

std::optional<Clock::time_point> parse_expiry(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS, then fractions and Z (or +00:00), which are ignored (rounded down).
  if (text.size() < 19)
    return std::nullopt;
  auto num = [&](size_t at, size_t n) -> std::optional<int> {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9')
        return std::nullopt;
      v = v * 10 + (text[i] - '0');
    }
    return v;
  };
  auto y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
       s = num(17, 2);
  if (!y || !mo || !d || !h || !mi || !s || text[4] != '-' || text[7] != '-' ||
      (text[10] != 'T' && text[10] != ' ') || text[13] != ':' || text[16] != ':' || *mo < 1 ||
      *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *s > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = *y - 1900;
  tm.tm_mon = *mo - 1;
  tm.tm_mday = *d;
  tm.tm_hour = *h;
  tm.tm_min = *mi;
  tm.tm_sec = *s;
  // The clock counts nanoseconds (the years 1678 to 2262): a date beyond is the nearest end
  // (9999-12-31 is "never expires", not an overflow).
  std::time_t t = timegm(&tm);
  constexpr auto kLimit =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::duration::max()).count();
  if (t >= kLimit)
    return Clock::time_point::max();
  if (t <= -kLimit)
    return Clock::time_point::min();
  return Clock::from_time_t(t);
}

base::Result<TokenInfo> judge_token(std::string_view body, const KeystoneOptions& o) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::object* token = nullptr;
  if (!ec && v.is_object()) {
    if (const json::value* t = v.get_object().if_contains("token"); t != nullptr && t->is_object())
      token = &t->get_object();
  }
  if (token == nullptr)
    return base::Status::Unavailable("Keystone's token answer is not a token document");
  const json::value* exp = token->if_contains("expires_at");
  std::optional<Clock::time_point> expires;
  if (exp != nullptr && exp->is_string())
    expires = parse_expiry(exp->get_string());
  if (!expires)
    return base::Status::Unavailable("Keystone's token answer has no readable expires_at");
  TokenInfo info;
  info.expires = *expires;
  if (*expires <= Clock::now()) {
    info.verdict = Verdict::kUnauthenticated;
    return info;
  }
  bool role_ok = o.role.empty(), project_ok = o.project.empty();
  if (const json::value* roles = token->if_contains("roles"); roles && roles->is_array()) {
    for (const auto& r : roles->get_array()) {
      const json::value* name = r.is_object() ? r.get_object().if_contains("name") : nullptr;
      role_ok |= name != nullptr && name->is_string() && name->get_string() == o.role;
    }
  }
  if (const json::value* p = token->if_contains("project"); p && p->is_object()) {
    for (const char* key : {"name", "id"}) {
      const json::value* x = p->get_object().if_contains(key);
      project_ok |= x != nullptr && x->is_string() && x->get_string() == o.project;
    }
  }
  info.verdict = role_ok && project_ok ? Verdict::kAllowed : Verdict::kForbidden;
  return info;
}

// ---------------------------------------------------------------------------------------
// Keystone

struct Authenticator::Keystone {
  KeystoneOptions opt;
  Url url;

  std::mutex mu;            // guards the fields below
  Credentials cred;         // the service user
  uint64_t generation = 0;  // of `cred`: bumped by each replacement
  std::string service_token;
  Clock::time_point service_expires;
  std::unordered_map<std::string, TokenInfo> cache;

  std::optional<Verdict> cached(const std::string& token) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(token);
    if (it == cache.end())
      return std::nullopt;
    if (it->second.expires <= Clock::now()) {
      cache.erase(it);
      return std::nullopt;
    }
    return it->second.verdict;
  }

  void remember(const std::string& token, TokenInfo info) {
    auto now = Clock::now();
    info.expires = std::min(info.expires, now + (info.verdict == Verdict::kUnauthenticated
                                                     ? Clock::duration(kRefusedCacheTime)
                                                     : Clock::duration(kMaxCacheTime)));
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() >= opt.cache_entries) {
      for (auto it = cache.begin(); it != cache.end();)
        it = it->second.expires <= now ? cache.erase(it) : std::next(it);
      if (cache.size() >= opt.cache_entries)
        cache.clear();  // bounded; the next requests ask Keystone again
    }
    cache[token] = info;
  }

  // A token for the service user `own` (password auth), and until when it holds.
  base::Result<std::pair<std::string, Clock::time_point>> fetch(const Credentials& own) {
    json::object domain{{"name", own.domain}};
    json::object auth{
        {"identity",
         json::object{
             {"methods", json::array{"password"}},
             {"password", json::object{{"user", json::object{{"name", own.user},
                                                             {"domain", domain},
                                                             {"password", own.password}}}}}}},
        {"scope",
         json::object{{"project", json::object{{"name", own.project}, {"domain", domain}}}}}};
    auto r = call(url, opt, http::verb::post, url.path + "/auth/tokens", {},
                  json::serialize(json::object{{"auth", std::move(auth)}}));
    if (!r.ok())
      return r.status();
    if (r.value().status != 201 || r.value().subject_token.empty())
      return base::Status::Unavailable("Keystone refused the service user \"" + own.user +
                                       "\" (HTTP " + std::to_string(r.value().status) + ")");
    auto info = judge_token(r.value().body, KeystoneOptions{});
    return std::make_pair(r.value().subject_token, info.ok()
                                                       ? info.value().expires
                                                       : Clock::now() + std::chrono::minutes(5));
  }

  // The service's own token: the cached one, or a new one from password auth. A token
  // fetched for credentials replaced meanwhile (a reload) is used once, not kept.
  base::Result<std::string> own_token(bool renew) {
    Credentials own;
    uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!renew && !service_token.empty() &&
          service_expires > Clock::now() + std::chrono::seconds(30))
        return service_token;
      own = cred;
      gen = generation;
    }
    auto t = fetch(own);
    if (!t.ok())
      return t.status();
    std::lock_guard<std::mutex> lock(mu);
    if (gen == generation) {
      service_token = t.value().first;
      service_expires = t.value().second;
    }
    return t.value().first;
  }

  // New service-user credentials, taken only once Keystone gave them a token.
  base::Status replace(const Credentials& c) {
    auto t = fetch(c);
    if (!t.ok())
      return base::Status::InvalidArgument("the new Keystone service user cannot log in: " +
                                           t.status().message());
    std::lock_guard<std::mutex> lock(mu);
    cred = c;
    ++generation;
    service_token = t.value().first;
    service_expires = t.value().second;
    return base::Status::Ok();
  }

  Verdict ask(const std::string& token) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto own = own_token(attempt > 0);
      if (!own.ok()) {
        spdlog::warn("api: keystone: {}", own.status().message());
        return Verdict::kUnavailable;
      }
      auto r = call(url, opt, http::verb::get, url.path + "/auth/tokens",
                    {{"X-Auth-Token", own.value()}, {"X-Subject-Token", token}}, "");
      if (!r.ok()) {
        spdlog::warn("api: keystone: {}", r.status().message());
        return Verdict::kUnavailable;
      }
      unsigned st = r.value().status;
      if (st == 401 && attempt == 0)
        continue;  // our own token expired or was revoked: renew it once
      if (st == 404 || st == 401) {
        remember(token, {Verdict::kUnauthenticated, Clock::now()});
        return Verdict::kUnauthenticated;
      }
      if (st != 200) {
        spdlog::warn("api: keystone: validating a token answered HTTP {}", st);
        return Verdict::kUnavailable;
      }
      auto info = judge_token(r.value().body, opt);
      if (!info.ok()) {
        spdlog::warn("api: keystone: {}", info.status().message());
        return Verdict::kUnavailable;
      }
      remember(token, info.value());
      return info.value().verdict;
    }
    return Verdict::kUnavailable;
  }
};

// ---------------------------------------------------------------------------------------
// Authenticator

Authenticator::Authenticator(const ServerOptions& o) : mode_(o.auth) {
  for (const auto& t : o.credentials.tokens)
    tokens_.push_back(t);
  for (const auto& [u, p] : o.credentials.basic)
    basic_.push_back(base64(u + ":" + p));
  if (mode_ == AuthMode::kKeystone) {
    keystone_ = std::make_unique<Keystone>();
    keystone_->opt = o.keystone;
    keystone_->cred = o.credentials;
    auto u = parse_url(o.keystone.url);
    if (u.ok())
      keystone_->url = u.value();  // check_options refused a bad one before
  }
}

Authenticator::~Authenticator() = default;

std::optional<Verdict> Authenticator::quick(std::string_view x_auth_token,
                                            std::string_view authorization) {
  if (mode_ == AuthMode::kNone)
    return Verdict::kAllowed;
  if (mode_ == AuthMode::kStatic) {
    bool ok = false;
    std::lock_guard<std::mutex> lock(static_mu_);
    for (const auto& t : tokens_) {
      ok |= !x_auth_token.empty() && same(x_auth_token, t);
      ok |= authorization.size() > 7 && authorization.substr(0, 7) == "Bearer " &&
            same(authorization.substr(7), t);
    }
    for (const auto& b : basic_) {
      ok |= authorization.size() > 6 && authorization.substr(0, 6) == "Basic " &&
            same(authorization.substr(6), b);
    }
    return ok ? Verdict::kAllowed : Verdict::kUnauthenticated;
  }
  // Keystone: a token of sane size and characters, else 401 without asking.
  if (x_auth_token.empty() || x_auth_token.size() > 8192)
    return Verdict::kUnauthenticated;
  for (char c : x_auth_token) {
    if (c <= ' ' || c > '~')
      return Verdict::kUnauthenticated;
  }
  return keystone_->cached(std::string(x_auth_token));
}

Verdict Authenticator::check(std::string_view x_auth_token, std::string_view authorization) {
  if (auto v = quick(x_auth_token, authorization))
    return *v;
  return keystone_->ask(std::string(x_auth_token));
}

base::Status Authenticator::set_credentials(const Credentials& c) {
  if (mode_ == AuthMode::kStatic) {
    if (c.tokens.empty() && c.basic.empty())
      return base::Status::InvalidArgument("the credentials file holds no token or basic line");
    std::vector<std::string> tokens(c.tokens), basic;
    for (const auto& [u, p] : c.basic)
      basic.push_back(base64(u + ":" + p));
    std::lock_guard<std::mutex> lock(static_mu_);
    tokens_ = std::move(tokens);
    basic_ = std::move(basic);
  } else if (mode_ == AuthMode::kKeystone) {
    if (c.user.empty() || c.password.empty() || c.project.empty())
      return base::Status::InvalidArgument(
          "the credentials file lacks the Keystone service user (user, password, project)");
    return keystone_->replace(c);
  }
  return base::Status::Ok();
}

std::string Authenticator::describe() const {
  switch (mode_) {
    case AuthMode::kNone:
      return "none";
    case AuthMode::kStatic:
      return "static credentials";
    case AuthMode::kKeystone:
      return "keystone " + keystone_->opt.url;
  }
  return "?";
}

base::Status check_keystone_url(std::string_view url) {
  auto u = parse_url(url);
  return u.ok() ? base::Status::Ok() : u.status();
}

}  // namespace api::internal
