// api: the ETSI REST API (SOL003 VNF LCM /vnflcm/v1, SOL005 VNF package management
// /vnfpkgm/v1) over HTTP/1.1, a second face over the engine's commands (engine/engine.h):
// every rule is the engine's; this module parses requests, applies SOL013's filters,
// selectors and paging, and writes SOL bodies and ProblemDetails. docs/api.md lists what
// is served.
//
//   Server   Boost.Beast on an io_context of its own (threads of its own), beside the
//            daemon's Engine on the same Store. Handlers call engine commands, which are
//            quick: no request waits on an action.
//
// Threading: start() and stop() from one thread; the server's threads call the Store.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/base.h"

namespace engine {
class Store;
struct PackageCheckOptions;
struct NotifyOptions;
struct OpRecord;
using OpCreator = std::function<base::Status(const OpRecord&)>;  // as engine.h has it
}  // namespace engine

namespace api {

// Who may call: static credentials from a file (--auth-file), a Keystone token checked
// with Keystone's token API (--auth keystone), or nobody checked (only on a loopback
// address).
enum class AuthMode { kNone, kStatic, kKeystone };

// What the credentials file holds: static credentials, or the service's own Keystone
// user (to ask Keystone about the tokens callers bring).
struct Credentials {
  std::vector<std::string> tokens;                         // X-Auth-Token or Bearer
  std::vector<std::pair<std::string, std::string>> basic;  // user, password
  // Keystone: "user NAME", "password P", "project NAME", "domain D" (user's and project's
  // domain, default "Default").
  std::string user, password, project, domain = "Default";
};

// --auth keystone: a request's X-Auth-Token is valid when Keystone says so (GET
// /v3/auth/tokens with X-Subject-Token, asked with the service's own token); answers are
// cached until the token expires (at most `cache_entries` tokens).
struct KeystoneOptions {
  std::string url;      // http(s)://HOST:PORT[/v3]
  std::string role;     // a role the token must carry ("" any)
  std::string project;  // the project (name or id) the token must be scoped to ("" any)
  std::string ca_file;  // an https Keystone's CA ("" the system's)
  size_t cache_entries = 10000;
  std::chrono::seconds timeout{10};
};

// HTTPS when both are set: the certificate chain and the private key, PEM files.
struct TlsOptions {
  std::string cert_file;
  std::string key_file;
};

struct ServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 9890;
  AuthMode auth = AuthMode::kStatic;
  Credentials credentials;
  // Where `credentials` came from: Server::reload() reads it again ("" nothing to read).
  std::string auth_file;
  KeystoneOptions keystone;
  TlsOptions tls;
  size_t body_limit = 1 << 20;           // bytes; a larger request body gets 413
  size_t package_body_limit = 64 << 20;  // the same for PUT .../package_content
  size_t header_limit = 16 * 1024;       // request line and headers; larger gets 431
  // Reading one request (headers and body) must finish within this; a keep-alive
  // connection idle this long is closed.
  std::chrono::seconds request_timeout{30};
  size_t max_connections = 256;  // more are answered 503 and closed
  int threads = 2;               // I/O: reading, authenticating and writing requests
  // Requests that read or write the database run on threads of their own: requests waiting
  // on it (a commit holding its write lock, a slow disk) hold up no request that needs none
  // (the API's versions, answered on the I/O threads), and no I/O thread. Requests that use
  // the database still wait in turn for it. --api-threads; 0: every request on the I/O
  // threads (one hand-off less; a request stuck on the database then holds up its I/O
  // thread).
  int handler_threads = 8;
  size_t page_size = 100;  // list entries per page (SOL013 paging)
  // How uploaded packages are checked (SOL004 signatures required, the trust store);
  // null: as `vnflow package onboard` without options.
  std::shared_ptr<const engine::PackageCheckOptions> package_checks;
  // How new subscriptions' callbacks are tested (the daemon's notification options); null:
  // engine::NotifyOptions' defaults.
  std::shared_ptr<const engine::NotifyOptions> notify;
  // Called (on a server thread) after a request queued work for the engine (every 202):
  // the daemon reads its queue at once instead of at its next poll.
  std::function<void()> on_queued;
  // How a lifecycle request's operation is committed (empty: Store::create_op). A daemon
  // beside the API gives Daemon::start_op: the operation's first transition rides on the
  // same commit, so the 202 means it has started.
  engine::OpCreator create_op;
  // Where requests are counted (vnflow_api_requests_total by route pattern, method and
  // status) and timed; GET /metrics then serves every metric in Prometheus' text format,
  // with the API's own credentials. nullptr: neither. Not owned; outlives the server.
  base::Metrics* metrics = nullptr;
  // A listener for Prometheus alone (--metrics-listen): GET /metrics without credentials,
  // any other request 404. Its series carry counts, never ids or secrets, so it may listen
  // on any address. Needs `metrics`.
  bool metrics_only = false;
};

// "ADDR:PORT", "[v6]:PORT" or "PORT" (on 127.0.0.1) into `o.address` and `o.port`.
base::Status parse_listen(std::string_view text, ServerOptions& o);
// Whether `address` is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback(std::string_view address);
// The credentials file: one per line, "token TOKEN", "basic USER:PASSWORD", or the
// Keystone service user's "user NAME", "password P", "project NAME", "domain D"; "#"
// comments and blank lines skipped. Refused when readable or writable by others (it holds
// secrets), empty of credentials, or malformed (the line named).
base::Result<Credentials> load_auth_file(const std::string& path);
// A file that holds a secret (the credentials file, the TLS key): a regular file no other
// user may read or write. `what` names it in the error.
base::Status check_secret_file(const std::string& path, std::string_view what);
// The options a server may start with: --auth none only on a loopback address (a metrics
// listener: anywhere), static auth with at least one credential, Keystone auth with a URL
// and the service user, TLS with both files.
base::Status check_options(const ServerOptions& o);

class Server {
 public:
  Server(engine::Store& store, ServerOptions options);
  ~Server();  // stops
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Checks the options, binds and listens, starts the threads. The error names the address.
  base::Status start();
  uint16_t port() const;  // the bound port (port 0 in the options: the one chosen)
  // Closes the listener and every connection, joins the threads.
  void stop();
  // Reads the credentials file (ServerOptions::auth_file) and the TLS certificate and key
  // again, as checked at start (a SIGHUP to the daemon): requests and connections from then
  // on use them; those under way finish with the old. All or nothing: an error names the
  // file and changes nothing. Any thread.
  base::Status reload();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace api
