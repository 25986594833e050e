// http.request: one call to a REST API from a workflow, on the engine's HTTP stack (Beast +
// OpenSSL, through Services::transport). What it promises:
//   - JSON in, JSON out: `json` is sent as the body; a JSON answer is parsed into the output
//     `json` (bounded in size and depth), anything else is the output `body`.
//   - Errors are classified for the state's retry policy: a connection that failed, 5xx, 408
//     and 429 are "transient"; no answer before the state's deadline is "timeout"; another
//     status outside `expect` (default: any 2xx) is "invalid" for 4xx and "failed" otherwise;
//     a certificate the CA does not vouch for is "invalid" (verification is never skipped).
//   - Credentials come from `auth` (basic or bearer, secret-named so the engine scrubs them)
//     or from a registered VIM (`vim_id`), whose token goes only to the VIM's own server.
//   - Re-dispatch: unsafe methods carry the call's idempotency key in a header
//     (`Idempotency-Key`, or `idempotency_header`), so an API that deduplicates applies the
//     call once; with `probe`, a read comes first and an answer in `probe.found` is the
//     result without the call (get-or-create).
// The engine, not this file, keeps `secret_fields`, `secret_output` and `hide_output`
// (engine/internal/stepper.cpp): they name what of the outputs is a secret.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "actions/internal/http.h"
#include "actions/internal/inputs.h"
#include "actions/internal/kinds.h"

namespace actions {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int64_t kDefaultMaxResponse = 1 << 20;
constexpr int64_t kMaxResponseLimit = 64 << 20;
constexpr size_t kSnippet = 200;  // bytes of an error answer quoted in the message

// An RFC 9110 token (a method, a header's name).
bool is_token(std::string_view s) {
  static constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~";
  return !s.empty() && s.size() <= 256 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || kExtra.find(static_cast<char>(c)) != std::string::npos;
  });
}

// Headers http.request sets itself (Authorization from auth or vim_id, Content-Type for json).
bool reserved_header(const std::string& lower_name) {
  return lower_name == "host" || lower_name == "content-length" ||
         lower_name == "transfer-encoding" || lower_name == "connection" ||
         lower_name == "authorization" || lower_name == "content-type" || lower_name == "accept";
}

// The call's idempotency key without its attempt ("<op>/<state>[<item>]/<attempt>"): every
// attempt of one call (a retry after a lost answer, a re-dispatch) sends the same key, so an
// API that deduplicates applies the call once whichever attempt reached it.
std::string call_key(const std::string& key) {
  size_t slash = key.rfind('/');
  if (slash == std::string::npos || slash + 1 == key.size() ||
      !std::all_of(key.begin() + static_cast<std::ptrdiff_t>(slash) + 1, key.end(),
                   [](unsigned char ch) { return std::isdigit(ch) != 0; }))
    return key;
  return key.substr(0, slash);
}

// A URL for messages: scheme, host, port and path; the query (which may carry an API key)
// left out, the text made safe for a terminal.
std::string shown_url(std::string_view url) {
  return base::printable(url.substr(0, std::min(url.find('?'), size_t{300})));
}

const json::value* member(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

struct Prepared {
  http::Options opt;
  std::vector<std::pair<std::string, std::string>> auth_headers;
  // The credentials in every form a server could echo them (the token, the password, a
  // header's whole value, base64 with "/" escaped as JSON may): never quoted in a message,
  // and a VIM's (which the engine does not know) replaced by *** in the answer too.
  std::vector<std::string> secrets;
  bool vim_credentials = false;
  std::string vim_server;  // with vim_id: relative URLs go here, absolute ones must match it
};

class HttpRequest final : public Action {
 public:
  HttpRequest(http::Transport& transport, std::vector<Network> allow)
      : transport_(transport), allow_(std::move(allow)) {}

  Outcome run(const json::object& in, const Context& ctx) const override {
    auto start = steady_clock::now();
    if (member(in, "url") == nullptr || !in.at("url").is_string())
      return invalid("\"url\" is the URL to call (a string)");
    Prepared p;
    if (Outcome bad = prepare(in, ctx, p); !bad.message.empty())
      return bad;

    // The probe: a read whose answer in `found` is the result (the resource is there).
    std::optional<http::Request> probe_call;
    std::vector<int64_t> found = {200}, absent = {404}, conflict = {409};
    if (const json::value* probe = member(in, "probe")) {
      if (!probe->is_object())
        return invalid("\"probe\" must be a map");
      const json::object& pr = probe->get_object();
      for (const auto& kv : pr) {
        static const std::vector<std::string_view> kProbe = {
            "url", "method", "query", "headers", "found", "absent", "conflict"};
        if (std::find(kProbe.begin(), kProbe.end(), kv.key()) == kProbe.end())
          return invalid(
              "\"probe\" takes url, method, query, headers, found, absent and conflict, not \"" +
              base::printable(kv.key()) + "\"");
      }
      json::object merged;
      merged["url"] = member(pr, "url") != nullptr ? pr.at("url") : *member(in, "url");
      merged["method"] = member(pr, "method") != nullptr ? pr.at("method") : json::value("GET");
      if (const json::value* q = member(pr, "query"))
        merged["query"] = *q;
      if (const json::value* h = member(pr, "headers"))
        merged["headers"] = *h;
      std::string m = base::ascii_lower(str_in(merged, "method"));
      if (m != "get" && m != "head")
        return invalid("a probe reads: its method is GET or HEAD");
      auto call = build(merged, p, ctx, false);
      if (!call.ok())
        return invalid(call.status().message());
      if (Outcome bad = statuses(pr, "found", found); !bad.message.empty())
        return bad;
      if (Outcome bad = statuses(pr, "absent", absent); !bad.message.empty())
        return bad;
      if (Outcome bad = statuses(pr, "conflict", conflict); !bad.message.empty())
        return bad;
      probe_call = call.value();
      auto answer = transport_.send(call.value(), p.opt);
      if (!answer.ok())
        return transport_failure(call.value(), answer.status(), "probe");
      int st = answer.value().status;
      if (std::find(found.begin(), found.end(), st) != found.end())
        return result(call.value(), std::move(answer.value()), true, start, p);
      if (std::find(absent.begin(), absent.end(), st) == absent.end())
        return status_failure(call.value(), answer.value(), "probe", p);
    }

    auto call = build(in, p, ctx, true);
    if (!call.ok())
      return invalid(call.status().message());
    std::vector<int64_t> expect;
    if (Outcome bad = statuses(in, "expect", expect); !bad.message.empty())
      return bad;
    auto answer = transport_.send(call.value(), p.opt);
    if (!answer.ok())
      return transport_failure(call.value(), answer.status(), "");
    int st = answer.value().status;
    bool ok = expect.empty() ? st >= 200 && st <= 299
                             : std::find(expect.begin(), expect.end(), st) != expect.end();
    if (!ok && probe_call && std::find(conflict.begin(), conflict.end(), st) != conflict.end()) {
      // Absent at the probe, there at the call: another client created it in between (the
      // 404-then-create race). Read it again: found, it is the result, as the probe's is
      // (probed: a rollback leaves it to whoever made it).
      auto again = transport_.send(*probe_call, p.opt);
      if (again.ok() && std::find(found.begin(), found.end(), again.value().status) != found.end())
        return result(*probe_call, std::move(again.value()), true, start, p);
    }
    if (!ok)
      return status_failure(call.value(), answer.value(), "", p);
    return result(call.value(), std::move(answer.value()), false, start, p);
  }

 private:
  static Outcome invalid(const std::string& msg) {
    return Outcome::failure(ErrorClass::kInvalid, "http.request: " + msg);
  }

  // Limits, TLS trust and credentials, the same for the probe and the call.
  Outcome prepare(const json::object& in, const Context& ctx, Prepared& p) const {
    p.opt.allow = allow_;
    p.opt.deadline = ctx.deadline;
    if (ctx.deadline == steady_clock::time_point{})
      p.opt.deadline = steady_clock::now() + std::chrono::seconds(60);
    int64_t max = kDefaultMaxResponse;
    if (const json::value* m = member(in, "max_response")) {
      if (!m->is_int64() || m->get_int64() < 1 || m->get_int64() > kMaxResponseLimit)
        return invalid("\"max_response\" is a number of bytes from 1 to " +
                       std::to_string(kMaxResponseLimit));
      max = m->get_int64();
    }
    p.opt.max_body = static_cast<size_t>(max);
    if (const json::value* ca = member(in, "ca_cert")) {
      if (!ca->is_string() ||
          ca->get_string().find("-----BEGIN CERTIFICATE-----") == json::string::npos)
        return invalid("\"ca_cert\" is the PEM text of the CA certificates to trust");
      p.opt.ca_pem = std::string(ca->get_string());
    }
    const json::value* auth = member(in, "auth");
    const json::value* vim = member(in, "vim_id");
    if (auth != nullptr && vim != nullptr)
      return invalid("give \"auth\" or \"vim_id\", not both");
    if (auth != nullptr) {
      if (!auth->is_object())
        return invalid(
            "\"auth\" is a map: {type: basic, username, password} or {type: bearer, "
            "token}");
      const json::object& a = auth->get_object();
      std::string type = base::ascii_lower(str_in(a, "type"));
      for (const auto& kv : a) {
        static const std::vector<std::string_view> kAuth = {"type", "username", "password",
                                                            "token"};
        if (std::find(kAuth.begin(), kAuth.end(), kv.key()) == kAuth.end())
          return invalid("\"auth\" takes type, username, password and token, not \"" +
                         base::printable(kv.key()) + "\"");
      }
      if (type == "basic") {
        if (str_in(a, "username").empty() || member(a, "password") == nullptr ||
            !a.at("password").is_string())
          return invalid("basic auth needs \"username\" and \"password\"");
        p.auth_headers.emplace_back(
            "Authorization", basic_authorization(str_in(a, "username"), str_in(a, "password")));
        p.secrets.push_back(str_in(a, "password"));
      } else if (type == "bearer") {
        if (str_in(a, "token").empty())
          return invalid("bearer auth needs \"token\"");
        p.auth_headers.emplace_back("Authorization", "Bearer " + str_in(a, "token"));
        p.secrets.push_back(str_in(a, "token"));
      } else {
        return invalid("auth \"type\" is basic or bearer");
      }
    }
    if (vim != nullptr) {
      if (!vim->is_string() || vim->get_string().empty())
        return invalid("\"vim_id\" names a registered VIM");
      if (!ctx.vim)
        return invalid("no VIM registry in this context");
      auto rec = ctx.vim(vim->get_string());
      if (!rec.ok())
        return Outcome::failure(ErrorClass::kInvalid,
                                "http.request: VIM \"" +
                                    base::printable(std::string(vim->get_string())) +
                                    "\": " + rec.status().message());
      const json::object& r = rec.value();
      std::string type = str_in(r, "type");
      const json::value* access = member(r, "access");
      if (type != "kubernetes" || access == nullptr || !access->is_object())
        return invalid("VIM \"" + base::printable(std::string(vim->get_string())) +
                       "\" is not a Kubernetes VIM: only a Kubernetes VIM's credentials (a "
                       "bearer token or a user and password) are sent by http.request");
      const json::object& acc = access->get_object();
      p.vim_server = str_in(acc, "server");
      while (!p.vim_server.empty() && p.vim_server.back() == '/')
        p.vim_server.pop_back();
      if (!p.opt.ca_pem.empty())
        return invalid(
            "give \"ca_cert\" or \"vim_id\", not both: a VIM's credentials go to "
            "the server its own CA vouches for");
      if (!str_in(acc, "bearer_token").empty()) {
        p.auth_headers.emplace_back("Authorization", "Bearer " + str_in(acc, "bearer_token"));
        p.secrets.push_back(str_in(acc, "bearer_token"));
      } else {
        p.auth_headers.emplace_back(
            "Authorization", basic_authorization(str_in(acc, "username"), str_in(acc, "password")));
        p.secrets.push_back(str_in(acc, "password"));
      }
      p.vim_credentials = true;
      p.opt.ca_pem = str_in(acc, "ssl_ca_cert");
    }
    for (const auto& [name, value] : p.auth_headers) {
      p.secrets.push_back(value);
      std::string b64 = value.substr(value.find(' ') + 1);
      p.secrets.push_back(b64);
      std::string escaped;
      for (char c : b64)
        escaped += c == '/' ? std::string("\\/") : std::string(1, c);
      p.secrets.push_back(escaped);
    }
    // Longest first, so that a secret containing another is scrubbed whole; none empty.
    std::erase_if(p.secrets, [](const std::string& x) { return x.empty(); });
    std::sort(p.secrets.begin(), p.secrets.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    return {};
  }

  // `expect` / `found` / `absent`: a list of statuses (100..599).
  static Outcome statuses(const json::object& o, std::string_view name, std::vector<int64_t>& out) {
    const json::value* v = member(o, name);
    if (v == nullptr)
      return {};
    if (!v->is_array() || v->get_array().empty() || v->get_array().size() > 64)
      return invalid("\"" + std::string(name) + "\" is a list of HTTP statuses");
    out.clear();
    for (const auto& s : v->get_array()) {
      if (!s.is_int64() || s.get_int64() < 100 || s.get_int64() > 599)
        return invalid("\"" + std::string(name) + "\" is a list of HTTP statuses (100 to 599)");
      out.push_back(s.get_int64());
    }
    return {};
  }

  // The request of `in` (the call's inputs, or the probe's): method, URL with query, headers,
  // body. `main`: the call itself (it carries the body and the idempotency key).
  base::Result<http::Request> build(const json::object& in, const Prepared& p, const Context& ctx,
                                    bool main) const {
    http::Request req;
    std::string method = str_in(in, "method");
    if (method.empty())
      method = "GET";
    std::transform(method.begin(), method.end(), method.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    static const std::vector<std::string_view> kMethods = {"GET",   "HEAD",   "POST",   "PUT",
                                                           "PATCH", "DELETE", "OPTIONS"};
    if (std::find(kMethods.begin(), kMethods.end(), method) == kMethods.end())
      return base::Status::InvalidArgument("method \"" + base::printable(method) +
                                           "\" is not one of GET, HEAD, POST, PUT, PATCH, "
                                           "DELETE, OPTIONS");
    req.method = method;
    std::string url = str_in(in, "url");
    if (!p.vim_server.empty()) {
      if (!url.empty() && url[0] == '/') {
        url = p.vim_server + url;
      } else {
        // The VIM's token goes to the VIM's server only.
        auto a = http::parse_url(url), b = http::parse_url(p.vim_server);
        if (!a.ok() || !b.ok() || a.value().scheme != b.value().scheme ||
            base::ascii_lower(a.value().host) != base::ascii_lower(b.value().host) ||
            a.value().port != b.value().port)
          return base::Status::InvalidArgument(
              "with \"vim_id\", \"url\" is a path on the VIM's server or a URL of that server "
              "(the VIM's credentials go nowhere else), not " +
              shown_url(url));
      }
    }
    auto parsed = http::parse_url(url);
    if (!parsed.ok())
      return base::Status::InvalidArgument(
          "\"" + shown_url(url) +
          "\" is not a URL http.request calls: http:// or https://, a host, a port of digits, "
          "no user:password@");
    if (url.find_first_of(" \t\r\n") != std::string::npos)
      return base::Status::InvalidArgument("the URL holds white space or a line break");
    if (const json::value* q = member(in, "query")) {
      if (!q->is_object())
        return base::Status::InvalidArgument("\"query\" is a map of names to values");
      std::string qs;
      auto add = [&](std::string_view k, const json::value& v) -> base::Status {
        std::string text;
        if (v.is_string())
          text = std::string(v.get_string());
        else if (v.is_int64() || v.is_uint64() || v.is_double() || v.is_bool())
          text = json::serialize(v);
        else
          return base::Status::InvalidArgument("query \"" + base::printable(k) +
                                               "\": a string, number, boolean or a list of them");
        qs += (qs.empty() ? "" : "&") + http::percent_encode(k) + "=" + http::percent_encode(text);
        return base::Status::Ok();
      };
      for (const auto& kv : q->get_object()) {
        if (kv.value().is_null())
          continue;
        if (kv.value().is_array()) {
          for (const auto& item : kv.value().get_array())
            if (auto st = add(kv.key(), item); !st.ok())
              return st;
        } else if (auto st = add(kv.key(), kv.value()); !st.ok()) {
          return st;
        }
      }
      if (!qs.empty())
        url += (url.find('?') == std::string::npos ? "?" : "&") + qs;
    }
    req.url = url;
    req.headers = p.auth_headers;
    if (const json::value* h = member(in, "headers")) {
      if (!h->is_object())
        return base::Status::InvalidArgument("\"headers\" is a map of names to strings");
      for (const auto& kv : h->get_object()) {
        std::string name = base::ascii_lower(kv.key());
        if (!is_token(kv.key()))
          return base::Status::InvalidArgument("header name \"" + base::printable(kv.key()) +
                                               "\" is not a token");
        if ((reserved_header(name) && name != "authorization" && name != "content-type" &&
             name != "accept") ||
            (name == "authorization" && !p.auth_headers.empty()))
          return base::Status::InvalidArgument("header \"" + std::string(kv.key()) +
                                               "\" is set by http.request itself");
        if (!kv.value().is_string())
          return base::Status::InvalidArgument("header \"" + std::string(kv.key()) +
                                               "\" must be a string");
        std::string_view v = kv.value().get_string();
        if (v.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos ||
            v.size() > 8192)
          return base::Status::InvalidArgument(
              "header \"" + std::string(kv.key()) +
              "\" holds a line break or a NUL, or is longer than 8 KiB");
        req.headers.emplace_back(std::string(kv.key()), std::string(v));
      }
    }
    bool has_content_type = std::any_of(req.headers.begin(), req.headers.end(), [](const auto& h) {
      return base::ascii_lower(h.first) == "content-type";
    });
    if (main) {
      const json::value* j = in.if_contains("json");
      const json::value* b = member(in, "body");
      if (j != nullptr && b != nullptr)
        return base::Status::InvalidArgument("give \"json\" or \"body\", not both");
      if (j != nullptr) {
        req.body = json::serialize(*j);
        if (!has_content_type)
          req.headers.emplace_back("Content-Type", "application/json");
      } else if (b != nullptr) {
        if (!b->is_string())
          return base::Status::InvalidArgument("\"body\" is a string (use \"json\" for JSON)");
        req.body = std::string(b->get_string());
      }
      if ((j != nullptr || b != nullptr) && (method == "GET" || method == "HEAD"))
        return base::Status::InvalidArgument("a " + method + " request carries no body");
      std::string header = "Idempotency-Key";
      if (const json::value* ih = in.if_contains("idempotency_header")) {
        if (!ih->is_string() || (!ih->get_string().empty() && !is_token(ih->get_string())) ||
            reserved_header(base::ascii_lower(ih->get_string())))
          return base::Status::InvalidArgument(
              "\"idempotency_header\" is a header name of the API's (\"\": none is sent)");
        header = std::string(ih->get_string());
      }
      bool safe = method == "GET" || method == "HEAD" || method == "OPTIONS";
      if (!header.empty() && !safe && !ctx.key.empty())
        req.headers.emplace_back(header, call_key(ctx.key));
    }
    if (!std::any_of(req.headers.begin(), req.headers.end(),
                     [](const auto& h) { return base::ascii_lower(h.first) == "accept"; }))
      req.headers.emplace_back("Accept", "application/json, */*;q=0.5");
    return req;
  }

  static std::string what(const http::Request& req, std::string_view phase) {
    return "http.request " + std::string(phase) + (phase.empty() ? "" : " ") + req.method + " " +
           shown_url(req.url);
  }

  static Outcome transport_failure(const http::Request& req, const base::Status& st,
                                   std::string_view phase) {
    // The transport's message names the method and URL (with its query): say it again
    // without the query.
    std::string why = st.message();
    if (size_t at = why.find(req.url); at != std::string::npos)
      why = why.substr(at + req.url.size());
    while (!why.empty() && (why[0] == ':' || why[0] == ' '))
      why.erase(0, 1);
    std::string msg = what(req, phase) + ": " + base::printable(why);
    switch (st.code()) {
      case base::StatusCode::kDeadlineExceeded:
        return Outcome::failure(ErrorClass::kTimeout, msg);
      case base::StatusCode::kInvalidArgument:
      case base::StatusCode::kPermissionDenied:
        return Outcome::failure(ErrorClass::kInvalid, msg);
      case base::StatusCode::kFailedPrecondition:
        return Outcome::failure(ErrorClass::kFailed, msg);
      default:
        return Outcome::failure(ErrorClass::kTransient, msg);
    }
  }

  static Outcome status_failure(const http::Request& req, const http::Response& r,
                                std::string_view phase, const Prepared& p) {
    std::string msg = what(req, phase) + ": HTTP " + std::to_string(r.status);
    // The credentials scrubbed before the cut, so that no part of one is left at its end.
    std::string body = scrub(r.body.substr(0, kSnippet * 4), p.secrets);
    std::string snippet = body.substr(0, kSnippet);
    size_t b = snippet.find_first_not_of(" \t\r\n");
    if (b != std::string::npos) {
      snippet = snippet.substr(b);
      msg += ": " + base::printable(redact_url_passwords(snippet)) +
             (body.size() > kSnippet + b || r.body.size() > kSnippet * 4 ? "..." : "");
    }
    int s = r.status;
    ErrorClass cls = s >= 500 || s == 429 || s == 408 ? ErrorClass::kTransient
                     : s >= 400                       ? ErrorClass::kInvalid
                                                      : ErrorClass::kFailed;
    return Outcome::failure(cls, msg);
  }

  static Outcome result(const http::Request& req, http::Response r, bool probed,
                        steady_clock::time_point start, const Prepared& p) {
    // A VIM's credentials, which the engine never learns, do not reach the outputs.
    if (p.vim_credentials)
      r.body = scrub(std::move(r.body), p.secrets);
    json::object out;
    out["status"] = r.status;
    json::object headers;
    for (auto& [k, v] : r.headers) {
      std::string name = base::ascii_lower(k);
      std::string value = base::is_valid_utf8(v) ? v : base::printable(v);
      if (auto* old = headers.if_contains(name); old != nullptr)
        *old = std::string(old->get_string()) + ", " + value;
      else
        headers[name] = value;
    }
    std::string type = base::ascii_lower(r.header("content-type"));
    bool is_json =
        type.find("/json") != std::string::npos || type.find("+json") != std::string::npos;
    json::value parsed;
    if (is_json && !r.body.empty()) {
      boost::system::error_code ec;
      json::parse_options po;
      po.max_depth = 64;
      parsed = json::parse(r.body, ec, {}, po);
      if (ec)
        return Outcome::failure(ErrorClass::kFailed, what(req, probed ? "probe" : "") + ": HTTP " +
                                                         std::to_string(r.status) +
                                                         ": the answer is not JSON (" +
                                                         ec.message() + ")");
      out["body"] = "";
    } else {
      out["body"] = base::is_valid_utf8(r.body) ? std::move(r.body)
                                                : base::printable(r.body, base::PrintMode::kLines);
    }
    out["json"] = std::move(parsed);
    out["headers"] = std::move(headers);
    out["probed"] = probed;
    out["duration_ms"] = static_cast<int64_t>(
        std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count());
    return Outcome::success(std::move(out));
  }

  http::Transport& transport_;
  std::vector<Network> allow_;
};

}  // namespace

void add_http_actions(Registry& r, const Services& services) {
  r.add("http.request",
        Signature::of(
            {"url: string", "method?: string", "query?: map(any)", "headers?: map(string)",
             "json?: any", "body?: string", "auth?: map(string)", "vim_id?: string",
             "ca_cert?: string", "expect?: list(integer)", "probe?: map(any)",
             "idempotency_header?: string", "max_response?: integer",
             "secret_fields?: list(string)", "hide_output?: boolean", "secret_output?: boolean"},
            {"status: integer", "headers: map(string)", "json: any", "body: string",
             "probed: boolean", "duration_ms: integer"}),
        std::make_shared<HttpRequest>(
            services.transport != nullptr ? *services.transport : http::Transport::real(),
            services.http_allow));
}

}  // namespace actions
