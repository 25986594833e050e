// A blocking HTTP/1.1 client: each step is an async Beast operation run to completion on a
// private io_context, so the stream's expiry enforces the caller's deadline everywhere
// (resolve, connect, TLS handshake, write, read).
#include "actions/internal/http.h"

#include <algorithm>
#include <cctype>
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
  u.scheme = std::string(s.substr(0, sep));
  std::transform(u.scheme.begin(), u.scheme.end(), u.scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
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
  // A certificate the CA file (or the system store) does not vouch for, or one for another
  // host name, stays so on a retry: not transient. Never "insecure"; name the CA option.
  if (ec.category() == asio::error::get_ssl_category())
    return base::Status::InvalidArgument(what + ec.message() +
                                         " (is the server's CA in the VIM's cacert / ca file?)");
  return base::Status::Unavailable(what + ec.message());
}

template <typename Stream>
base::Result<Response> exchange(asio::io_context& io, Stream& stream, beast::tcp_stream& lowest,
                                const Url& u, const Request& req, const Options& opt) {
  bhttp::request<bhttp::string_body> msg;
  msg.method_string(req.method);
  msg.target(u.target);
  msg.version(11);
  bool default_port =
      (u.scheme == "http" && u.port == "80") || (u.scheme == "https" && u.port == "443");
  msg.set(bhttp::field::host, default_port ? u.host : u.host + ":" + u.port);
  msg.set(bhttp::field::user_agent, "vnflow");
  msg.set(bhttp::field::connection, "close");
  for (const auto& [k, v] : req.headers)
    msg.set(k, v);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
    msg.body() = req.body;
  msg.prepare_payload();

  lowest.expires_at(opt.deadline);
  if (auto ec = run(io, [&](auto h) { bhttp::async_write(stream, msg, h); }))
    return transport_error(req, "write", ec);

  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(opt.max_body);
  parser.header_limit(64 * 1024);
  if (auto ec = run(io, [&](auto h) { bhttp::async_read(stream, buf, parser, h); }))
    return transport_error(req, "read", ec);
  auto& res = parser.get();
  Response out;
  out.status = static_cast<int>(res.result_int());
  for (const auto& f : res) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  out.body = std::move(res.body());
  return out;
}

}  // namespace

base::Result<Response> send(const Request& req, const Options& opt) {
  auto url = parse_url(req.url);
  if (!url.ok())
    return url.status();
  const Url& u = url.value();
  if (std::chrono::steady_clock::now() >= opt.deadline)
    return base::Status(base::StatusCode::kDeadlineExceeded,
                        req.method + " " + req.url + ": no time left");
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    tcp::resolver::results_type endpoints;
    beast::error_code rec = asio::error::would_block;
    resolver.async_resolve(u.host, u.port,
                           [&](beast::error_code ec, tcp::resolver::results_type r) {
                             rec = ec;
                             endpoints = std::move(r);
                           });
    io.run_until(opt.deadline);
    if (rec == asio::error::would_block) {
      resolver.cancel();
      return base::Status(base::StatusCode::kDeadlineExceeded,
                          req.method + " " + req.url + ": resolve: timed out");
    }
    if (rec)
      return transport_error(req, "resolve", rec);

    if (u.scheme == "http") {
      beast::tcp_stream stream(io);
      stream.expires_at(opt.deadline);
      if (auto ec = run(io, [&](auto h) { stream.async_connect(endpoints, h); }))
        return transport_error(req, "connect", ec);
      auto r = exchange(io, stream, stream, u, req, opt);
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return r;
    }

    asio::ssl::context tls(asio::ssl::context::tls_client);
    tls.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                    asio::ssl::context::no_tlsv1_1);
    beast::error_code ec;
    if (opt.ca_file.empty())
      tls.set_default_verify_paths(ec);
    else
      tls.load_verify_file(opt.ca_file, ec);
    if (ec)
      return base::Status::InvalidArgument("CA file \"" + opt.ca_file + "\": " + ec.message());
    tls.set_verify_mode(asio::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(io, tls);
    stream.set_verify_callback(asio::ssl::host_name_verification(u.host));
    if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str()))
      return base::Status::Unavailable(req.method + " " + req.url + ": cannot set SNI");
    auto& lowest = beast::get_lowest_layer(stream);
    lowest.expires_at(opt.deadline);
    if (auto e = run(io, [&](auto h) { lowest.async_connect(endpoints, h); }))
      return transport_error(req, "connect", e);
    if (auto e =
            run(io, [&](auto h) { stream.async_handshake(asio::ssl::stream_base::client, h); }))
      return transport_error(req, "TLS handshake", e);
    auto r = exchange(io, stream, lowest, u, req, opt);
    beast::error_code ignored;
    lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return r;
  } catch (const std::exception& e) {
    return base::Status::Unavailable(req.method + " " + req.url + ": " + e.what());
  }
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

base::Result<HttpReply> http_call(const HttpCall& call) {
  http::Request req;
  req.method = call.method;
  req.url = call.url;
  req.headers = call.headers;
  req.body = call.body;
  http::Options opt;
  opt.ca_file = call.ca_file;
  opt.max_body = call.max_body;
  opt.deadline = std::chrono::steady_clock::now() + call.timeout;
  auto r = http::send(req, opt);
  if (!r.ok())
    return r.status();
  HttpReply out;
  out.status = r.value().status;
  out.content_type = r.value().header("content-type");
  out.body = std::move(r.value().body);
  return out;
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
