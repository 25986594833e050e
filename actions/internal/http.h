// http: a small blocking HTTP/1.1 client on Boost.Beast for the OpenStack actions. One
// call = one connection (the APIs it talks to answer in milliseconds to seconds; the
// executor runs it on a worker thread). HTTPS verifies the peer against a CA file or the
// system store and checks the host name; there is no "insecure" switch.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/base.h"

namespace actions::http {

struct Url {
  std::string scheme;  // http | https
  std::string host;
  std::string port;
  std::string target;  // path + query, "/" at least
};

// Accepts http://host[:port][/path] and https://...; IPv6 literals in [].
base::Result<Url> parse_url(std::string_view url);

struct Request {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct Response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string header(std::string_view name) const;  // "" when absent
};

struct Options {
  std::string ca_file;  // PEM bundle; empty = the system's default paths
  std::chrono::steady_clock::time_point deadline;
  size_t max_body = 64u << 20;  // a larger answer is an error, not an allocation
};

// Transport failures come back as kUnavailable (refused, reset, TLS, DNS) or
// kDeadlineExceeded (kInvalidArgument: a bad URL or CA file); their messages name the
// method and URL, never headers or bodies.
base::Result<Response> send(const Request& req, const Options& opt);

// Where the OpenStack client's requests go: one request, its response or a transport
// error (as send() above). Implementations are thread-safe. Tests give a scripted one
// (tests/unit/actions/scripted_transport.h) through actions::Services.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual base::Result<Response> send(const Request& req, const Options& opt) = 0;
  // The network: http::send().
  static Transport& real();
};

}  // namespace actions::http
