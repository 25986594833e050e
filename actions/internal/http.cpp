// A blocking HTTP/1.1 client: each step is an async Beast operation run to completion on a
// private io_context, so the stream's expiry enforces the caller's deadline everywhere
// (resolve, connect, TLS handshake, write, read).
#include "actions/internal/http.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <openssl/evp.h>

#include "actions/actions.h"

namespace actions::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::string Response::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return std::tolower(a) == std::tolower(b);
        }))
      return v;
  }
  return {};
}

base::Result<Url> parse_url(std::string_view s) {
  Url u;
  auto sep = s.find("://");
  if (sep == std::string_view::npos)
    return base::Status::InvalidArgument("URL \"" + std::string(s) + "\" has no scheme");
  u.scheme = base::ascii_lower(s.substr(0, sep));
  if (u.scheme != "http" && u.scheme != "https")
    return base::Status::InvalidArgument("URL \"" + std::string(s) +
                                         "\": only http and https are supported");
  std::string_view rest = s.substr(sep + 3);
  auto slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (!u.target.empty() && u.target[0] == '?')
    u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos)
    return base::Status::InvalidArgument("URLs with user information are not accepted");
  if (!authority.empty() && authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return base::Status::InvalidArgument("URL \"" + std::string(s) + "\": unclosed [");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':')
        return base::Status::InvalidArgument("URL \"" + std::string(s) + "\": bad port");
      u.port = std::string(after.substr(1));
    }
  } else {
    auto colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
      u.host = std::string(authority);
    } else {
      u.host = std::string(authority.substr(0, colon));
      u.port = std::string(authority.substr(colon + 1));
    }
  }
  if (u.host.empty())
    return base::Status::InvalidArgument("URL \"" + std::string(s) + "\" has no host");
  if (u.port.empty())
    u.port = u.scheme == "https" ? "443" : "80";
  if (u.port.size() > 5 || !std::all_of(u.port.begin(), u.port.end(),
                                        [](unsigned char c) { return std::isdigit(c) != 0; }))
    return base::Status::InvalidArgument("URL \"" + std::string(s) + "\": bad port");
  return u;
}

std::string percent_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

namespace {

// Runs the io_context until the pending operation completes; returns its error.
template <typename Start>
beast::error_code run(asio::io_context& io, Start&& start) {
  beast::error_code result = asio::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

base::Status transport_error(const Request& req, const char* step, const beast::error_code& ec) {
  std::string what = req.method + " " + req.url + ": " + step + ": ";
  if (ec == beast::error::timeout || ec == asio::error::timed_out)
    return {base::StatusCode::kDeadlineExceeded, what + "timed out"};
  // Asking again gets the same answer: not transient.
  if (ec == bhttp::error::body_limit)
    return base::Status::FailedPrecondition(what + "the answer's body is larger than allowed");
  // A certificate the CA file (or the system store) does not vouch for, or one for another
  // host name, stays so on a retry: not transient. Never "insecure"; name the CA option.
  if (ec.category() == asio::error::get_ssl_category())
    return base::Status::InvalidArgument(what + ec.message() +
                                         " (is the server's CA in the VIM's cacert / ca file?)");
  return base::Status::Unavailable(what + ec.message());
}

// What an exchange came to: its answer, or a transport error and whether any byte of an
// answer had arrived (none on a kept connection the server had closed).
struct Exchanged {
  base::Result<Response> response = base::Status::Unavailable("not sent");
  bool answered = false;
  bool keep_alive = false;
};

template <typename Stream>
Exchanged exchange(asio::io_context& io, Stream& stream, beast::tcp_stream& lowest,
                   beast::flat_buffer& buf, const Url& u, const Request& req, const Options& opt,
                   bool keep) {
  Exchanged out;
  bhttp::request<bhttp::string_body> msg;
  msg.method_string(req.method);
  msg.target(u.target);
  msg.version(11);
  bool default_port =
      (u.scheme == "http" && u.port == "80") || (u.scheme == "https" && u.port == "443");
  msg.set(bhttp::field::host, default_port ? u.host : u.host + ":" + u.port);
  msg.set(bhttp::field::user_agent, "vnflow");
  if (!keep)
    msg.set(bhttp::field::connection, "close");
  for (const auto& [k, v] : req.headers)
    msg.set(k, v);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
    msg.body() = req.body;
  msg.prepare_payload();

  lowest.expires_at(opt.deadline);
  if (auto ec = run(io, [&](auto h) { bhttp::async_write(stream, msg, h); })) {
    out.response = transport_error(req, "write", ec);
    return out;
  }

  // Interim answers (1xx but 101: 100 Continue unasked, 103 Early Hints) come before the
  // answer: skipped, a few at most, so that a kept connection's next read is its own answer.
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->body_limit(opt.max_body);
    parser->header_limit(64 * 1024);
    auto ec = run(io, [&](auto h) { bhttp::async_read(stream, buf, *parser, h); });
    out.answered = out.answered || parser->got_some();
    if (ec) {
      out.response = transport_error(req, "read", ec);
      return out;
    }
    int code = static_cast<int>(parser->get().result_int());
    if (code < 100 || code > 199 || code == 101)
      break;
    if (interim == 8) {
      out.response = base::Status::Unavailable(req.method + " " + req.url +
                                               ": read: more than 8 interim (1xx) answers");
      return out;
    }
  }
  auto& res = parser->get();
  // An answer whose end is the connection's end leaves nothing to keep.
  out.keep_alive = keep && res.keep_alive() && !parser->need_eof();
  Response r;
  r.status = static_cast<int>(res.result_int());
  for (const auto& f : res) {
    r.headers.emplace_back(base::ascii_lower(f.name_string()), std::string(f.value()));
  }
  r.body = std::move(res.body());
  out.response = std::move(r);
  return out;
}

// `a` as a Network of one host (IPv4 in the first 4 bytes, prefix 32 or 128).
Network host_network(const asio::ip::address& a) {
  Network n;
  n.v6 = a.is_v6();
  if (n.v6) {
    n.bytes = a.to_v6().to_bytes();
  } else {
    auto b = a.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), n.bytes.begin());
  }
  n.prefix = n.v6 ? 128 : 32;
  return n;
}

// Whether `a` is in one of `allow` (empty: any).
bool allowed(const std::vector<Network>& allow, asio::ip::address a) {
  if (allow.empty())
    return true;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  const std::array<unsigned char, 16> bytes = host_network(a).bytes;
  for (const Network& n : allow) {
    if (n.v6 != a.is_v6())
      continue;
    int full = n.prefix / 8, rest = n.prefix % 8;
    if (!std::equal(bytes.begin(), bytes.begin() + full, n.bytes.begin()))
      continue;
    auto mask = static_cast<unsigned char>(0xff << (8 - rest));
    if (rest == 0 ||
        (bytes[static_cast<size_t>(full)] & mask) == (n.bytes[static_cast<size_t>(full)] & mask))
      return true;
  }
  return false;
}

}  // namespace

// How long a kept connection is reused after its last answer (servers commonly close idle
// ones after 5 s or more).
constexpr std::chrono::seconds kReuseWithin{4};

struct Connection::Impl {
  asio::io_context io;
  std::string origin;  // of the open connection; "" when none is open
  std::unique_ptr<asio::ssl::context> tls;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buf;
  std::chrono::steady_clock::time_point last_used{};

  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*secure); }

  void drop() {
    if (plain || secure) {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
      lowest().socket().close(ignored);
    }
    secure.reset();
    plain.reset();
    tls.reset();
    origin.clear();
    buf.clear();
  }

  // Resolves and connects (and shakes hands, for https) within the deadline.
  base::Status connect(const Url& u, const Request& req, const Options& opt) {
    // The answer is kept by the handler: after a timeout it may still come (the lookup
    // cannot be interrupted), during a later call's run of the same io_context.
    struct Lookup {
      beast::error_code ec = asio::error::would_block;
      tcp::resolver::results_type endpoints;
    };
    auto lookup = std::make_shared<Lookup>();
    tcp::resolver resolver(io);
    resolver.async_resolve(u.host, u.port,
                           [lookup](beast::error_code ec, tcp::resolver::results_type r) {
                             lookup->ec = ec;
                             lookup->endpoints = std::move(r);
                           });
    io.restart();
    io.run_until(opt.deadline);
    if (lookup->ec == asio::error::would_block) {
      resolver.cancel();
      return base::Status(base::StatusCode::kDeadlineExceeded,
                          req.method + " " + req.url + ": resolve: timed out");
    }
    if (lookup->ec)
      return transport_error(req, "resolve", lookup->ec);
    std::vector<tcp::endpoint> endpoints;
    for (const auto& e : lookup->endpoints) {
      if (allowed(opt.allow, e.endpoint().address()))
        endpoints.push_back(e.endpoint());
    }
    if (endpoints.empty())
      return base::Status(base::StatusCode::kPermissionDenied,
                          req.method + " " + req.url + ": the address of " + u.host +
                              " is outside the networks allowed");

    if (u.scheme == "http") {
      plain = std::make_unique<beast::tcp_stream>(io);
      plain->expires_at(opt.deadline);
      if (auto ec = run(io, [&](auto h) { plain->async_connect(endpoints, h); }))
        return transport_error(req, "connect", ec);
      return base::Status::Ok();
    }
    tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1);
    beast::error_code ec;
    if (!opt.ca_pem.empty())
      tls->add_certificate_authority(asio::buffer(opt.ca_pem), ec);
    else if (opt.ca_file.empty())
      tls->set_default_verify_paths(ec);
    else
      tls->load_verify_file(opt.ca_file, ec);
    if (ec && !opt.ca_pem.empty())
      return base::Status::InvalidArgument("the CA certificate given is not PEM: " + ec.message());
    if (ec)
      return base::Status::InvalidArgument("CA file \"" + opt.ca_file + "\": " + ec.message());
    tls->set_verify_mode(asio::ssl::verify_peer);
    secure = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(io, *tls);
    secure->set_verify_callback(asio::ssl::host_name_verification(u.host));
    if (!SSL_set_tlsext_host_name(secure->native_handle(), u.host.c_str()))
      return base::Status::Unavailable(req.method + " " + req.url + ": cannot set SNI");
    auto& low = beast::get_lowest_layer(*secure);
    low.expires_at(opt.deadline);
    if (auto e = run(io, [&](auto h) { low.async_connect(endpoints, h); }))
      return transport_error(req, "connect", e);
    if (auto e =
            run(io, [&](auto h) { secure->async_handshake(asio::ssl::stream_base::client, h); }))
      return transport_error(req, "TLS handshake", e);
    return base::Status::Ok();
  }

  base::Result<Response> send(const Request& req, const Options& opt, bool keep) {
    auto url = parse_url(req.url);
    if (!url.ok())
      return url.status();
    const Url& u = url.value();
    std::string want =
        u.scheme + "://" + u.host + ":" + u.port + " " + opt.ca_file + " " + opt.ca_pem;
    if (origin != want)
      drop();
    // A kept connection serves only a caller that may reach its peer.
    if (!origin.empty() && !opt.allow.empty()) {
      beast::error_code ec;
      auto peer = lowest().socket().remote_endpoint(ec);
      if (ec || !allowed(opt.allow, peer.address()))
        drop();
    }
    try {
      for (int round = 0; round < 2; ++round) {
        if (std::chrono::steady_clock::now() >= opt.deadline) {
          drop();
          return base::Status(base::StatusCode::kDeadlineExceeded,
                              req.method + " " + req.url + ": no time left");
        }
        // A connection unused for a while is likely closed by the server (or dropped by a
        // middlebox, which a read would only find at its timeout): a new one.
        if (!origin.empty() && std::chrono::steady_clock::now() - last_used > kReuseWithin)
          drop();
        bool reused = !origin.empty();
        last_used = std::chrono::steady_clock::now();
        if (!reused) {
          base::Status st = connect(u, req, opt);
          if (!st.ok()) {
            drop();
            return st;
          }
          origin = want;
        }
        Exchanged x = plain ? exchange(io, *plain, *plain, buf, u, req, opt, keep)
                            : exchange(io, *secure, lowest(), buf, u, req, opt, keep);
        last_used = std::chrono::steady_clock::now();
        if (!x.response.ok() || !x.keep_alive)
          drop();
        else if (buf.capacity() > 16 * 1024)
          buf.shrink_to_fit();
        // A kept connection the server closed meanwhile: once more on a new one, when sending
        // the request twice does no harm (the server may have read it before closing).
        if (!x.response.ok() && reused && !x.answered &&
            x.response.status().code() == base::StatusCode::kUnavailable &&
            (opt.may_resend || req.method == "GET" || req.method == "HEAD" || req.method == "PUT" ||
             req.method == "DELETE"))
          continue;
        return std::move(x.response);
      }
    } catch (const std::exception& e) {
      drop();
      return base::Status::Unavailable(req.method + " " + req.url + ": " + e.what());
    }
    return base::Status::Unavailable(req.method + " " + req.url + ": connection lost");
  }
};

Connection::Connection() : impl_(std::make_unique<Impl>()) {}
Connection::~Connection() {
  impl_->drop();
}
base::Result<Response> Connection::send(const Request& req, const Options& opt) {
  return impl_->send(req, opt, true);
}
void Connection::close() {
  impl_->drop();
}
bool Connection::open() const {
  return !impl_->origin.empty();
}
std::chrono::steady_clock::time_point Connection::last_used() const {
  return impl_->last_used;
}

base::Result<Response> send(const Request& req, const Options& opt) {
  Connection::Impl one;
  auto r = one.send(req, opt, false);
  one.drop();
  return r;
}

Transport& Transport::real() {
  class Real final : public Transport {
   public:
    base::Result<Response> send(const Request& req, const Options& opt) override {
      return http::send(req, opt);
    }
  };
  static Real kReal;
  return kReal;
}

}  // namespace actions::http

namespace actions {

std::string basic_authorization(std::string_view user, std::string_view password) {
  std::string cred = std::string(user) + ":" + std::string(password);
  std::string b64(4 * ((cred.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                          reinterpret_cast<const unsigned char*>(cred.data()),
                          static_cast<int>(cred.size()));
  b64.resize(static_cast<size_t>(n));
  return "Basic " + b64;
}

namespace {

http::Request request_of(const HttpCall& call) {
  http::Request req;
  req.method = call.method;
  req.url = call.url;
  req.headers = call.headers;
  req.body = call.body;
  return req;
}

http::Options options_of(const HttpCall& call) {
  http::Options opt;
  opt.ca_file = call.ca_file;
  opt.max_body = call.max_body;
  opt.deadline = std::chrono::steady_clock::now() + call.timeout;
  opt.allow = call.allow;
  opt.may_resend = call.may_resend;
  return opt;
}

base::Result<HttpReply> reply_of(base::Result<http::Response> r) {
  if (!r.ok())
    return r.status();
  HttpReply out;
  out.status = r.value().status;
  out.content_type = r.value().header("content-type");
  out.body = std::move(r.value().body);
  return out;
}

}  // namespace

base::Result<Network> parse_network(std::string_view text) {
  auto bad = [&] {
    return base::Status::InvalidArgument("\"" + base::printable(std::string(text.substr(0, 80))) +
                                         "\" is not a network (ADDRESS or ADDRESS/PREFIX)");
  };
  std::string_view addr = text, len;
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    len = text.substr(slash + 1);
  }
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(std::string(addr), ec);
  if (ec)
    return bad();
  Network n = http::host_network(a);
  int max = n.prefix;
  if (!len.empty() || addr.size() != text.size()) {
    if (len.empty() || len.size() > 3 ||
        !std::all_of(len.begin(), len.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad();
    n.prefix = std::stoi(std::string(len));
    if (n.prefix > max)
      return bad();
  }
  return n;
}

base::Result<std::vector<Network>> parse_networks(std::string_view list) {
  std::vector<Network> out;
  for (size_t at = 0; at <= list.size();) {
    if (out.size() == 256)
      return base::Status::InvalidArgument("more than 256 networks");
    size_t comma = std::min(list.find(',', at), list.size());
    auto n = parse_network(list.substr(at, comma - at));
    if (!n.ok())
      return n.status();
    out.push_back(n.value());
    at = comma + 1;
  }
  return out;
}

base::Result<HttpReply> http_call(const HttpCall& call) {
  return reply_of(http::send(request_of(call), options_of(call)));
}

HttpSession::HttpSession() : conn_(std::make_unique<http::Connection>()) {}
HttpSession::~HttpSession() = default;

base::Result<HttpReply> HttpSession::call(const HttpCall& call) {
  return reply_of(conn_->send(request_of(call), options_of(call)));
}

void HttpSession::close() {
  conn_->close();
}

std::chrono::steady_clock::time_point HttpSession::last_used() const {
  return conn_->last_used();
}

base::Result<std::string> http_get(const std::string& url, std::string_view user,
                                   std::string_view password, size_t max_body,
                                   std::chrono::milliseconds timeout) {
  HttpCall call;
  call.url = url;
  if (!user.empty())
    call.headers.emplace_back("Authorization", basic_authorization(user, password));
  call.max_body = max_body;
  call.timeout = timeout;
  auto r = http_call(call);
  if (!r.ok())
    return r.status();
  if (r.value().status < 200 || r.value().status > 299)
    return base::Status::Unavailable("GET " + url + ": HTTP " + std::to_string(r.value().status));
  return std::move(r.value().body);
}

}  // namespace actions
