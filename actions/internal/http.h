// http: a small blocking HTTP/1.1 client on Boost.Beast for the OpenStack actions and the
// notification sender. send() is one call on one connection (the APIs it talks to answer in
// milliseconds to seconds; the executor runs it on a worker thread); a Connection keeps one
// open between calls to the same origin (HTTP/1.1 keep-alive). HTTPS verifies the peer against a CA
// file or the system store and checks the host name; there is no "insecure" switch.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actions/actions.h"
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
// `s` percent-encoded for a path segment or a query's name or value: every byte but
// RFC 3986's unreserved characters (letters, digits, - . _ ~) as %XX.
std::string percent_encode(std::string_view s);

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
  std::string ca_pem;   // PEM text of the CAs to trust (instead of ca_file and the system's)
  std::chrono::steady_clock::time_point deadline;
  size_t max_body = 64u << 20;  // a larger answer is an error, not an allocation
  // Empty: any address; else only those in these networks are connected to (none left:
  // kPermissionDenied before any connection).
  std::vector<Network> allow;
  // A Connection may send a request again after its kept connection was found closed; the
  // server may have read it the first time, so only idempotent methods are, unless this
  // says the receiver copes (it deduplicates).
  bool may_resend = false;
};

// Transport failures come back as kUnavailable (refused, reset, TLS, DNS) or
// kDeadlineExceeded (kInvalidArgument: a bad URL or CA file); their messages name the
// method and URL, never headers or bodies.
base::Result<Response> send(const Request& req, const Options& opt);

// One connection kept open between requests to the same origin (scheme, host, port and CA
// file); a request to another origin closes it and opens one there. A request sent on a kept
// connection that the server had closed meanwhile (the write fails, or the read ends before
// the first byte of an answer) is sent once more on a new connection, if idempotent or
// Options::may_resend, so a caller sees the failures send() would. A connection unused for
// 4 s is not reused. The connection closes when the server asks (Connection: close,
// HTTP/1.0), on any error, on close(), and on destruction. One caller at a time.
class Connection {
 public:
  Connection();
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  base::Result<Response> send(const Request& req, const Options& opt);
  void close();
  bool open() const;
  // When the last request on it ended (the epoch for none).
  std::chrono::steady_clock::time_point last_used() const;

 private:
  friend base::Result<Response> send(const Request& req, const Options& opt);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

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
