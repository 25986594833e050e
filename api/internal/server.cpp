// The HTTP/1.1 server (Boost.Beast): a listener and one session per connection on the
// server's own io_context, over TLS (1.2 and later) when a certificate is configured. A
// session reads the header first (bounded), checks the credentials (a Keystone token not
// in the cache is asked about on a thread of its own, so no server thread waits on
// Keystone), picks the body limit from the target (package content may be larger), reads
// the body within the request timeout, asks the Router and writes the answer. Every error
// the server itself answers is a ProblemDetails.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "api/api.h"
#include "api/internal/auth.h"
#include "api/internal/router.h"

namespace api {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// ---------------------------------------------------------------------------------------
// Options

bool is_loopback(std::string_view address) {
  return base::is_loopback_host(address);
}

base::Status parse_listen(std::string_view text, ServerOptions& o) {
  std::string_view host = "127.0.0.1", port = text;
  if (size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
  }
  unsigned long n = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) {
    digits = digits && c >= '0' && c <= '9';
    if (digits)
      n = n * 10 + static_cast<unsigned long>(c - '0');
  }
  if (!digits || n == 0 || n > 65535)
    return base::Status::InvalidArgument(
        "--listen needs ADDR:PORT with a port from 1 to 65535, "
        "not \"" +
        std::string(text.substr(0, 80)) + "\"");
  boost::system::error_code ec;
  std::string h = host == "localhost" ? "127.0.0.1" : std::string(host);
  net::ip::make_address(h, ec);
  if (ec || host.empty())
    return base::Status::InvalidArgument("--listen: \"" + std::string(host.substr(0, 80)) +
                                         "\" is not an IP address");
  o.address = h;
  o.port = static_cast<uint16_t>(n);
  return base::Status::Ok();
}

base::Status check_secret_file(const std::string& path, std::string_view what) {
  struct stat st {};
  std::string name = std::string(what) + " " + path;
  if (::stat(path.c_str(), &st) != 0)
    return base::Status::InvalidArgument("cannot read " + name + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return base::Status::InvalidArgument(name + " is not a regular file");
  if ((st.st_mode & 077) != 0)
    return base::Status::PermissionDenied(name +
                                          " holds secrets and is open to other users "
                                          "(chmod 600 it)");
  if (st.st_size > 1 << 20)
    return base::Status::InvalidArgument(name + " is larger than 1 MiB");
  return base::Status::Ok();
}

base::Result<Credentials> load_auth_file(const std::string& path) {
  if (base::Status s = check_secret_file(path, "the auth file"); !s.ok())
    return s;
  std::ifstream in(path);
  if (!in)
    return base::Status::InvalidArgument("cannot read the auth file " + path);
  Credentials c;
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#')
      continue;
    line = line.substr(b);
    auto where = path + ":" + std::to_string(no) + ": ";
    if (line.rfind("token ", 0) == 0 && line.size() > 6) {
      c.tokens.push_back(line.substr(6));
    } else if (line.rfind("basic ", 0) == 0) {
      std::string up = line.substr(6);
      size_t colon = up.find(':');
      if (colon == std::string::npos || colon == 0)
        return base::Status::InvalidArgument(where + "basic needs USER:PASSWORD");
      c.basic.emplace_back(up.substr(0, colon), up.substr(colon + 1));
    } else if (size_t sp = line.find(' ');
               sp != std::string::npos &&
               (line.compare(0, sp, "user") == 0 || line.compare(0, sp, "password") == 0 ||
                line.compare(0, sp, "project") == 0 || line.compare(0, sp, "domain") == 0)) {
      std::string key = line.substr(0, sp), value = line.substr(sp + 1);
      (key == "user"       ? c.user
       : key == "password" ? c.password
       : key == "project"  ? c.project
                           : c.domain) = value;
    } else {
      return base::Status::InvalidArgument(where +
                                           "expected \"token TOKEN\", \"basic USER:PASSWORD\" "
                                           "or Keystone's \"user\", \"password\", \"project\", "
                                           "\"domain\"");
    }
  }
  if (c.tokens.empty() && c.basic.empty() && c.user.empty())
    return base::Status::InvalidArgument("the auth file " + path + " holds no credentials");
  return c;
}

base::Status check_options(const ServerOptions& o) {
  if (o.metrics_only) {
    if (o.metrics == nullptr)
      return base::Status::InvalidArgument("a metrics listener needs the daemon's metrics");
    if (o.auth != AuthMode::kNone)
      return base::Status::InvalidArgument("a metrics listener takes no credentials");
  } else if (o.auth == AuthMode::kNone && !is_loopback(o.address))
    return base::Status::InvalidArgument("--auth none is only allowed on a loopback address, not " +
                                         o.address);
  if (o.auth == AuthMode::kStatic && o.credentials.tokens.empty() && o.credentials.basic.empty())
    return base::Status::InvalidArgument(
        "the API needs credentials: --auth-file FILE (or --auth none on a loopback address)");
  if (o.auth == AuthMode::kKeystone) {
    if (o.keystone.url.empty())
      return base::Status::InvalidArgument("--auth keystone needs --keystone-url URL");
    if (base::Status s = internal::check_keystone_url(o.keystone.url); !s.ok())
      return s;
    if (o.credentials.user.empty() || o.credentials.password.empty() ||
        o.credentials.project.empty())
      return base::Status::InvalidArgument(
          "--auth keystone needs the service user in --auth-file: \"user NAME\", "
          "\"password P\" and \"project NAME\" lines");
    if (o.keystone.cache_entries < 1)
      return base::Status::InvalidArgument("the Keystone cache needs room for a token");
  }
  if (o.tls.cert_file.empty() != o.tls.key_file.empty())
    return base::Status::InvalidArgument("HTTPS needs both --tls-cert and --tls-key");
  if (!o.tls.key_file.empty()) {
    if (base::Status s = check_secret_file(o.tls.key_file, "the TLS key"); !s.ok())
      return s;
  }
  if (o.threads < 1 || o.handler_threads < 0 || o.handler_threads > 256 || o.page_size < 1 ||
      o.max_connections < 1)
    return base::Status::InvalidArgument(
        "threads, page size and connection cap must be >= 1; API threads 0 to 256");
  return base::Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Server

struct Server::Impl {
  engine::Store& store;
  ServerOptions opt;
  internal::Authenticator auth;
  internal::Router router;
  // Before the io_context: sessions still queued in it count down when it is destroyed.
  std::atomic<size_t> connections{0};
  uint16_t bound_port = 0;
  std::string scheme = "http";
  std::string base_url;
  // HTTPS when set. Swapped by reload() (under tls_mu); a connection's TLS state holds its
  // own reference to the context it began with.
  std::mutex tls_mu;
  std::shared_ptr<net::ssl::context> tls;
  // Keystone questions run here, not on the server's threads.
  std::optional<net::thread_pool> auth_pool;
  // Requests that need the store (ServerOptions::handler_threads).
  std::optional<net::thread_pool> handler_pool;
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;

  Impl(engine::Store& s, ServerOptions o)
      : store(s),
        opt(std::move(o)),
        auth(opt),
        router(s, opt.page_size, opt.on_queued, opt.package_checks, opt.notify, opt.create_op),
        ioc(opt.threads) {
    if (opt.metrics != nullptr) {
      opt.metrics->declare("vnflow_api_requests_total", base::Metrics::Type::kCounter,
                           "REST API requests answered, by route pattern, method and status.",
                           {"route", "method", "status"});
      opt.metrics->declare("vnflow_api_request_duration_seconds", base::Metrics::Type::kHistogram,
                           "From a request's header read to its answer, by route pattern.",
                           {"route"}, base::Metrics::exponential_buckets(0.0005, 4, 9));
    }
  }

  base::Status load_tls();
  void accept();
};

namespace {

using Request = http::request_parser<http::string_body>;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(Server::Impl& srv, Args&&... args) : stream_(std::forward<Args>(args)...), srv_(srv) {
    ++srv_.connections;
  }
  ~Session() { --srv_.connections; }

  void start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (std::is_same_v<Stream, TlsStream>) {
        beast::get_lowest_layer(self->stream_).expires_after(self->srv_.opt.request_timeout);
        self->stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec)
            return self->close();  // not TLS, or refused
          self->read_header();
        });
      } else {
        self->read_header();
      }
    });
  }

  // Over the connection cap: one 503, then close.
  void refuse() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      auto answer = [self] {
        self->send(internal::problem_response(503, "Service Unavailable",
                                              "too many connections; try again"),
                   false);
      };
      if constexpr (std::is_same_v<Stream, TlsStream>) {
        beast::get_lowest_layer(self->stream_).expires_after(std::chrono::seconds(5));
        self->stream_.async_handshake(net::ssl::stream_base::server,
                                      [self, answer](beast::error_code ec) {
                                        if (ec)
                                          return self->close();
                                        answer();
                                      });
      } else {
        answer();
      }
    });
  }

 private:
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  void close() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().socket().close(ignored);
  }

  void read_header() {
    // Until this request's header is read, an answer (431, 413, 400) is about nothing
    // known yet: not the previous request of a kept-alive connection.
    started_ = std::chrono::steady_clock::now();
    path_ = "-";
    route_ = "other";
    method_ = "other";
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_.opt.header_limit));
    // The larger limit until the target is known (the header's Content-Length is checked
    // against the limit while it is read); on_header sets the target's own.
    parser_->body_limit(std::max(srv_.opt.body_limit, srv_.opt.package_body_limit));
    tcp().expires_after(srv_.opt.request_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec == http::error::header_limit)
      return send(internal::problem_response(431, "Request Header Fields Too Large",
                                             "the request line and headers exceed " +
                                                 std::to_string(srv_.opt.header_limit) + " bytes"),
                  false);
    if (ec == http::error::body_limit)  // a Content-Length over even the package limit
      return too_large(std::max(srv_.opt.body_limit, srv_.opt.package_body_limit));
    if (ec)
      return fail(ec);
    auto& req = parser_->get();
    started_ = std::chrono::steady_clock::now();
    path_ = std::string(req.target().substr(0, req.target().find('?')));
    route_ = internal::route_pattern(path_);
    method_ = "other";
    for (std::string_view m : {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"}) {
      if (req.method_string() == m)
        method_ = m;
    }
    if (srv_.opt.metrics_only)  // no credentials; the body is read and ignored
      return authorized(internal::Verdict::kAllowed);
    // Credentials before the body: nobody unauthenticated makes the server read (and hold)
    // up to the package limit. The body is not read, so the connection closes.
    std::string_view token = header(req, "X-Auth-Token"), authz = header(req, "Authorization");
    if (auto v = srv_.auth.quick(token, authz))
      return authorized(*v);
    // Keystone must be asked: on the auth pool; the session waits (its timer stopped, the
    // Keystone timeout bounds the question).
    tcp().expires_never();
    net::post(*srv_.auth_pool,
              [self = this->shared_from_this(), t = std::string(token), a = std::string(authz)] {
                internal::Verdict v = self->srv_.auth.check(t, a);
                net::dispatch(self->stream_.get_executor(), [self, v] { self->authorized(v); });
              });
  }

  void authorized(internal::Verdict v) {
    switch (v) {
      case internal::Verdict::kAllowed:
        break;
      case internal::Verdict::kUnauthenticated:
        return send(internal::problem_response(
                        401, "Unauthorized",
                        srv_.opt.auth == AuthMode::kKeystone
                            ? "missing, unknown or expired X-Auth-Token"
                            : "missing or wrong credentials (X-Auth-Token, Bearer or Basic)"),
                    false);
      case internal::Verdict::kForbidden:
        return send(internal::problem_response(
                        403, "Forbidden", "the token lacks the role or project this API requires"),
                    false);
      case internal::Verdict::kUnavailable:
        return send(internal::problem_response(503, "Service Unavailable",
                                               "cannot check the token with Keystone now; "
                                               "try again"),
                    false);
    }
    auto& req = parser_->get();
    std::string_view target = req.target();
    bool package = req.method() == http::verb::put && target.size() > 16 &&
                   target.substr(target.size() - 16) == "/package_content";
    size_t limit = package ? srv_.opt.package_body_limit : srv_.opt.body_limit;
    parser_->body_limit(limit);
    if (auto len = parser_->content_length(); len && *len > limit)
      return too_large(limit);
    tcp().expires_after(srv_.opt.request_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this(), limit](beast::error_code e, size_t) {
                       if (e == http::error::body_limit)
                         return self->too_large(limit);
                       if (e)
                         return self->fail(e);
                       self->handle();
                     });
  }

  void too_large(size_t limit) {
    send(internal::problem_response(413, "Payload Too Large",
                                    "the request body exceeds " + std::to_string(limit) + " bytes"),
         false);
  }

  void fail(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec.category() == net::error::get_ssl_category() || ec == net::ssl::error::stream_truncated)
      return close();
    // A request that does not parse as HTTP.
    send(internal::problem_response(400, "Bad Request", "malformed HTTP request: " + ec.message()),
         false);
  }

  static std::string_view header(const http::request<http::string_body>& req,
                                 std::string_view name) {
    auto it = req.find(name);
    return it == req.end() ? std::string_view() : std::string_view(it->value());
  }

  void handle() {
    auto& req = parser_->get();
    bool keep = req.keep_alive();
    internal::HttpRequest in;
    in.method = std::string(req.method_string());
    in.target = std::string(req.target());
    in.content_type = std::string(header(req, "Content-Type"));
    in.accept = std::string(header(req, "Accept"));
    in.version = std::string(header(req, "Version"));
    in.body = std::move(req.body());
    in.base_url = srv_.base_url;
    std::string_view host = header(req, "Host");
    bool host_ok = !host.empty() && host.size() <= 255;
    for (char c : host) {
      host_ok = host_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == ':' ||
                            c == '-' || c == '[' || c == ']');
    }
    if (host_ok)
      in.base_url = srv_.scheme + "://" + std::string(host);
    // The API's versions need no store: answered here. So is a GET of one instance,
    // operation or subscription when the store can read it without waiting (NoWaitReads,
    // engine.h): a hand-off to a handler thread and back costs more than such a read; a read
    // that would wait (every read connection busy) is declined and the request handed off.
    // The rest on the handler threads (/metrics too: the daemon's collector counts
    // operations in the store; lists, which can be long; GET /vnf_packages/{id}, which asks
    // whether any instance uses the package), the session waiting with its timer stopped:
    // the store's own timeouts bound the wait. By the route pattern, not the path:
    // .../vnf_instances/api_versions is an instance's id.
    if (route_.ends_with("/api_versions") || !srv_.handler_pool)
      return send(answer(in), keep);
    if ((method_ == "GET" || method_ == "HEAD") && internal::is_point_read(route_) &&
        srv_.store.reads_never_wait()) {
      engine::NoWaitReads scope;
      internal::HttpResponse r = answer(in, &scope);
      if (!scope.declined())
        return send(std::move(r), keep);
    }
    tcp().expires_never();
    net::post(*srv_.handler_pool, [self = this->shared_from_this(), in = std::move(in), keep] {
      internal::HttpResponse r = self->answer(in);
      net::dispatch(self->stream_.get_executor(),
                    [self, r = std::move(r), keep]() mutable { self->send(std::move(r), keep); });
    });
  }

  // `no_wait`: the scope the request is answered in when it must not wait; a read it
  // declined makes the answer void (not logged: the request is asked again).
  internal::HttpResponse answer(const internal::HttpRequest& in,
                                const engine::NoWaitReads* no_wait = nullptr) {
    internal::HttpResponse r;
    try {
      if (route_ == "/metrics" && srv_.opt.metrics != nullptr)
        r = metrics_response(in.method);
      else if (srv_.opt.metrics_only)
        r = internal::problem_response(404, "Not Found", "this listener serves GET /metrics only");
      else
        r = srv_.router.handle(in);
    } catch (const std::exception& e) {
      // WouldWait, or a decline that travelled up as another exception: void, asked again
      // on a handler thread. (WouldWait is thrown only by a scope it marks.)
      if (no_wait != nullptr && no_wait->declined())
        return r;
      spdlog::error("api: request failed method={} error=\"{}\"", in.method, e.what());
      r = internal::problem_response(500, "Internal Server Error", "the request failed");
    }
    if (r.status >= 500 && (no_wait == nullptr || !no_wait->declined()))
      spdlog::warn("api: {} status={} method={}", "server error", r.status, in.method);
    return r;
  }

  internal::HttpResponse metrics_response(const std::string& method) {
    if (method != "GET")
      return internal::method_not_allowed(method, "GET");
    internal::HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = srv_.opt.metrics->text();
    return r;
  }

  // Every answer: counted, timed and logged (one access-log line; a scrape that succeeded
  // is not logged, Prometheus asks every few seconds).
  void account(int status) {
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - started_;
    if (base::Metrics* m = srv_.opt.metrics) {
      std::string code = std::to_string(status);
      m->add("vnflow_api_requests_total", {route_, method_, code});
      m->observe("vnflow_api_request_duration_seconds", {route_}, took.count());
    }
    if (route_ == "/metrics" && status == 200)
      return;
    spdlog::info("api: {} {} {} {:.1f} ms", method_, path_.substr(0, 200), status,
                 took.count() * 1000);
  }

  void send(internal::HttpResponse r, bool keep) {
    account(r.status);
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(r.status));
    res->set(http::field::server, "vnflow");
    if (!r.content_type.empty())
      res->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers)
      res->set(k, v);
    res->body() = std::move(r.body);
    res->keep_alive(keep);
    res->prepare_payload();
    if (method_ == "HEAD") {
      // The header fields of the answer, never its content (RFC 9110 9.3.2): a body here
      // would be read as the start of the next answer on the connection.
      res->body().clear();
    }
    tcp().expires_after(srv_.opt.request_timeout);
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res, keep](beast::error_code ec, size_t) {
                        if (ec || !keep)
                          return self->shut();
                        self->read_header();
                      });
  }

  // The end of a connection: TLS's close_notify (bounded) before the socket closes.
  void shut() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      tcp().expires_after(std::chrono::seconds(2));
      stream_.async_shutdown(
          [self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      beast::error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<Request> parser_;
  Server::Impl& srv_;
  // The request being answered (before its header is read: "other", at the connection's
  // start), for the metrics and the access log.
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string path_ = "-";
  std::string route_ = "other";
  std::string_view method_ = "other";
};

template <class Stream, class... Args>
void open_session(Server::Impl& srv, Args&&... args) {
  auto session = std::make_shared<Session<Stream>>(srv, std::forward<Args>(args)...);
  if (srv.connections.load() > srv.opt.max_connections)
    session->refuse();
  else
    session->start();
}

}  // namespace

namespace {

// The server's TLS context from the certificate chain and key files.
base::Result<std::shared_ptr<net::ssl::context>> make_tls(const TlsOptions& o) {
  auto tls = std::make_shared<net::ssl::context>(net::ssl::context::tls_server);
  tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                   net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                   net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
  boost::system::error_code ec;
  tls->use_certificate_chain_file(o.cert_file, ec);
  if (ec)
    return base::Status::InvalidArgument("--tls-cert " + o.cert_file +
                                         ": not a PEM certificate chain (" + ec.message() + ")");
  tls->use_private_key_file(o.key_file, net::ssl::context::pem, ec);
  if (ec)
    return base::Status::InvalidArgument("--tls-key " + o.key_file +
                                         ": not a PEM private key for the certificate (" +
                                         ec.message() + ")");
  if (SSL_CTX_check_private_key(tls->native_handle()) != 1)
    return base::Status::InvalidArgument("--tls-key " + o.key_file +
                                         " does not match the certificate " + o.cert_file);
  return tls;
}

}  // namespace

base::Status Server::Impl::load_tls() {
  if (opt.tls.cert_file.empty())
    return base::Status::Ok();
  auto t = make_tls(opt.tls);
  if (!t.ok())
    return t.status();
  std::lock_guard<std::mutex> l(tls_mu);
  tls = std::move(t).value();
  scheme = "https";
  return base::Status::Ok();
}

void Server::Impl::accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted || !acceptor->is_open())
      return;
    if (!ec) {
      std::shared_ptr<net::ssl::context> t;
      {
        std::lock_guard<std::mutex> l(tls_mu);
        t = tls;
      }
      if (t)
        open_session<TlsStream>(*this, std::move(s), *t);
      else
        open_session<beast::tcp_stream>(*this, std::move(s));
    }
    accept();
  });
}

Server::Server(engine::Store& store, ServerOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {}

Server::~Server() {
  stop();
}

base::Status Server::start() {
  Impl& i = *impl_;
  if (base::Status s = check_options(i.opt); !s.ok())
    return s;
  if (base::Status s = i.load_tls(); !s.ok())
    return s;
  if (i.opt.auth == AuthMode::kKeystone)
    i.auth_pool.emplace(4);
  if (i.opt.handler_threads > 0)
    i.handler_pool.emplace(static_cast<size_t>(
        i.opt.metrics_only ? std::min(i.opt.handler_threads, 2) : i.opt.handler_threads));
  boost::system::error_code ec;
  auto addr = net::ip::make_address(i.opt.address, ec);
  if (ec)
    return base::Status::InvalidArgument("not an IP address: " + i.opt.address);
  tcp::endpoint ep(addr, i.opt.port);
  std::string where = i.opt.address + ":" + std::to_string(i.opt.port);
  i.acceptor.emplace(i.ioc);
  i.acceptor->open(ep.protocol(), ec);
  if (!ec)
    i.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    i.acceptor->bind(ep, ec);
  if (!ec)
    i.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return base::Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  i.bound_port = i.acceptor->local_endpoint().port();
  std::string host = addr.is_v6() ? "[" + i.opt.address + "]" : i.opt.address;
  i.base_url = i.scheme + "://" + host + ":" + std::to_string(i.bound_port);
  i.accept();
  for (int n = 0; n < i.opt.threads; ++n)
    i.threads.emplace_back([&i] { i.ioc.run(); });
  if (i.opt.metrics_only)
    spdlog::info("metrics: listening on {}/metrics (Prometheus' text format, no credentials)",
                 i.base_url);
  else
    spdlog::info("api: listening on {} (auth {})", i.base_url, i.auth.describe());
  return base::Status::Ok();
}

base::Status Server::reload() {
  Impl& i = *impl_;
  if (i.opt.metrics_only)
    return base::Status::Ok();
  std::optional<Credentials> cred;
  if (!i.opt.auth_file.empty() && i.opt.auth != AuthMode::kNone) {
    auto c = load_auth_file(i.opt.auth_file);
    if (!c.ok())
      return c.status();
    cred = std::move(c).value();
  }
  std::shared_ptr<net::ssl::context> tls;
  if (!i.opt.tls.cert_file.empty()) {
    if (base::Status s = check_secret_file(i.opt.tls.key_file, "the TLS key"); !s.ok())
      return s;
    auto t = make_tls(i.opt.tls);
    if (!t.ok())
      return t.status();
    tls = std::move(t).value();
  }
  if (cred) {
    if (base::Status s = i.auth.set_credentials(*cred); !s.ok())
      return base::Status::InvalidArgument(i.opt.auth_file + ": " + s.message());
  }
  if (tls) {
    std::lock_guard<std::mutex> l(i.tls_mu);
    i.tls = std::move(tls);
  }
  spdlog::info("api: reloaded{}{}", cred ? " the credentials file" : "",
               i.opt.tls.cert_file.empty()
                   ? ""
                   : (cred ? " and the TLS certificate and key" : " the TLS certificate and key"));
  return base::Status::Ok();
}

uint16_t Server::port() const {
  return impl_->bound_port;
}

void Server::stop() {
  Impl& i = *impl_;
  if (i.threads.empty())
    return;
  net::post(i.ioc, [&i] {
    boost::system::error_code ec;
    if (i.acceptor)
      i.acceptor->close(ec);
  });
  i.ioc.stop();
  for (auto& t : i.threads)
    t.join();
  i.threads.clear();
  if (i.auth_pool)
    i.auth_pool->join();
  // Requests running in the store finish (their answers go to the stopped I/O context);
  // those still queued are dropped, as the I/O context's are. Reset here, while the I/O
  // context still exists: a dropped task holds its session, whose socket belongs to it.
  if (i.handler_pool) {
    i.handler_pool->stop();
    i.handler_pool->join();
    i.handler_pool.reset();
  }
}

}  // namespace api
