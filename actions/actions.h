// actions: what workflow states do. Each action takes the JSON inputs its catalog entry
// (workflows/builtin/actions.yaml) declares and returns JSON outputs or a classified
// error. The executor (engine/) calls them on worker threads, never on its own thread:
// run() may block until its deadline.
//
// Idempotency: every call carries the key op + state + item + attempt. A call re-dispatched
// after a crash carries the SAME key, so an action that can check ("does a stack with
// this name exist?", "is this key in the file already?") reads back before acting again.
//
// Secrets: an action never puts an input whose name looks secret (password, token, key
// material) into a message; redact() is the shared rule.
//
// Adding an action: implement it (an Action, or an inline function of the instance record),
// register it once with its catalog signature (Registry::add / add_inline, in the file
// that implements it), and describe it in workflows/builtin/actions.yaml. The unit test
// tests/unit/actions/catalog_agreement_test.cpp fails while the two disagree.
//
// Not here: the workflow language (workflows/), persistence and scheduling (engine/).
// Threading: a Registry is immutable once built; actions are reentrant.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "base/base.h"

namespace actions {

namespace json = boost::json;

// How a failure is classified for the retry policy (base/base.h has the vocabulary).
using base::ErrorClass;

namespace http {
class Transport;  // actions/internal/http.h
}

struct Context {
  std::string op_id;
  std::string instance_id;
  std::string state;  // full state name
  int attempt = 1;
  std::string key;       // idempotency key: "<op>/<state>[<item>]/<attempt>"
  std::string work_dir;  // where local commands run (created by the engine)
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* cancelled = nullptr;  // set when the daemon stops hard
  // Resolves a registered VIM id to its record {id, type, access, extra} with secrets
  // decrypted (set by the engine; actions never put the result in outputs or messages).
  std::function<base::Result<json::object>(std::string_view vim_id)> vim;
  // Reads a file of the operation's VNF package (e.g. a script or an image to upload).
  std::function<base::Result<std::string>(std::string_view path)> package_file;
  // The SSH host keys pinned in the instance record: "host:port" -> "SHA256:..." (a
  // snapshot taken at dispatch).
  json::object host_keys;
  // local.exec: the user hooks run as (a root daemon's --hook-user; -1: the daemon's own),
  // and the files a hook must never read (the database, its WAL, its key), hidden from it
  // by a mount namespace where the kernel allows one.
  int run_uid = -1, run_gid = -1;
  std::vector<std::string> private_files;
  int hook_lock_fd = -1;  // claim_hook_lock()'s descriptor, held by each hook's supervisor
};

struct Outcome {
  bool ok = false;
  json::value outputs;                           // when ok: an object with the catalog's outputs
  ErrorClass error_class = ErrorClass::kFailed;  // when !ok
  std::string message;                           // when !ok: one line, names the call, no secrets
  // > 0: not finished yet (a stack still in progress). The executor calls the action
  // again with the same key after this many milliseconds, without a commit: polling is
  // read-only, so after a crash the re-dispatch simply polls again.
  int64_t poll_after_ms = 0;
  // On success: host keys seen on first use ("host:port" -> fingerprint), which the
  // executor pins in the instance record with the state's result.
  json::object pin_host_keys;
  static Outcome success(json::value outputs) {
    Outcome o;
    o.ok = true;
    o.outputs = std::move(outputs);
    return o;
  }
  static Outcome failure(ErrorClass cls, std::string msg) {
    Outcome o;
    o.error_class = cls;
    o.message = std::move(msg);
    return o;
  }
  static Outcome poll(int64_t after_ms, json::value progress = nullptr) {
    Outcome o;
    o.outputs = std::move(progress);
    o.poll_after_ms = after_ms;
    return o;
  }
};

class Action {
 public:
  virtual ~Action() = default;
  virtual Outcome run(const json::object& inputs, const Context& ctx) const = 0;
};

// One field of an action's catalog signature, spelled as in workflows/builtin/actions.yaml:
// "name: type" (required) or "name?: type" (optional); types as the catalog writes them
// (string, integer, list(vnfc), map(any), instance_patch ...).
struct Field {
  std::string name;
  std::string type;
  bool required = true;
};

// What an action takes and gives, as its catalog entry declares it.
struct Signature {
  std::vector<Field> inputs, outputs;
  // From catalog spellings: Signature::of({"vim_id: string", "files?: map(string)"}, {...}).
  // A spelling without ": type" is a bug in the registering code (BASE_CHECK).
  static Signature of(const std::vector<std::string_view>& inputs,
                      const std::vector<std::string_view>& outputs);
};

// An action that runs inline on the engine's thread against the instance record (pure
// functions of the record and, for the engine's own, of its Store): the executor commits
// the new record in the same transaction as the state's result, so it takes effect exactly
// once. On success `record` holds the new instance record.
using InlineFn = std::function<Outcome(const json::object& inputs, json::value& record)>;

// One registered action kind: name, signature, and how it runs. It is an Action: run() is
// the call on a worker thread (an inline kind answers "invalid" there: the engine runs it
// with run_inline()).
class Kind final : public Action {
 public:
  const std::string& name() const { return name_; }
  const Signature& signature() const { return signature_; }
  bool runs_inline() const { return static_cast<bool>(inline_); }
  Outcome run(const json::object& inputs, const Context& ctx) const override;
  Outcome run_inline(const json::object& inputs, json::value& record) const;

 private:
  friend class Registry;
  std::string name_;
  Signature signature_;
  std::shared_ptr<const Action> action_;  // worker-thread kinds
  InlineFn inline_;                       // inline kinds
};

// A network an HTTP call may connect to: an address and a prefix length ("10.0.0.0/8",
// "fd00::/8"; an address alone is the one host). A peer at an IPv4-mapped IPv6 address
// counts as the IPv4 one; an IPv6 network holds IPv6 peers only.
struct Network {
  std::array<unsigned char, 16> bytes{};  // IPv4 in the first 4
  int prefix = 0;
  bool v6 = false;
};
base::Result<Network> parse_network(std::string_view text);
// A comma-separated list of networks ("10.0.0.0/8,127.0.0.1"), at most 256.
base::Result<std::vector<Network>> parse_networks(std::string_view list);

// Where the network actions' I/O and time go. Null members: the real ones (HTTP(S) on
// Boost.Beast, base::Clock::real()). A test gives a scripted transport and a ManualClock.
// Both must outlive the Registry and its copies.
struct Services {
  http::Transport* transport = nullptr;
  base::Clock* clock = nullptr;
  // Where http.request may connect (the daemon's --http-allow): empty, anywhere; else a host
  // resolving outside these networks is not contacted (the call fails as "invalid").
  std::vector<Network> http_allow;
};

// Action kinds by catalog name. Copies share the kinds (and the OpenStack session cache).
class Registry {
 public:
  // Every action of this module: local.exec, the instance-record actions, heat.*, ssh.*,
  // http.request. The OpenStack sessions (Keystone tokens) are cached per registry.
  static Registry standard(Services services = {});
  // Registers a worker-thread action under `name`, replacing any kind of that name.
  void add(std::string name, Signature signature, std::shared_ptr<const Action> action);
  // Replaces the implementation of a registered kind, keeping its signature and making it a
  // worker-thread kind (tests: a fake local.exec over Registry::standard()); a new name
  // gets an empty signature.
  void add(std::string name, std::shared_ptr<const Action> action);
  // Registers an inline action (see InlineFn), e.g. the engine's vim.register over its Store.
  void add_inline(std::string name, Signature signature, InlineFn fn);
  // The kind of this name, or null: the engine asks it whether to run inline.
  const Kind* find(std::string_view name) const;
  // Every kind, by name.
  std::vector<const Kind*> kinds() const;

 private:
  std::map<std::string, std::shared_ptr<const Kind>, std::less<>> kinds_;
};

// Hooks of a dead daemon must not run beside the new daemon's re-dispatch of the same
// step. Takes <work_root>/.hooks.lock exclusively (waiting up to `wait` for the supervisors
// of a previous daemon's hooks, which hold it shared, to finish killing their trees), then
// holds it shared for this daemon's hooks. Returns the descriptor (the caller closes it
// when it stops; Context::hook_lock_fd passes it to local.exec).
base::Result<int> claim_hook_lock(const std::string& work_root, std::chrono::milliseconds wait);
// How local.exec isolates hooks from the daemon's files on this machine, for the log.
std::string hook_isolation(bool with_private_files);

// Tacker's additionalParams.is_reverse of a SCALE_IN: JSON true/false or the strings "True",
// "False", "true", "false". nullopt for anything else (the request is refused).
std::optional<bool> parse_is_reverse(const json::value& v);

// True for field names whose values are secrets (password, token, secret, private key,
// credential...). Such values never reach logs, histories or error text.
bool is_secret_name(std::string_view name);
// Checks an OpenStack VIM's access info (auth_url, user or application credential,
// project) without contacting it; the message says what is missing.
base::Status check_openstack_access(const json::object& access);
// The password of the first URL in `s` that carries credentials ("scheme://user:PASSWORD@
// host...", as proxy settings do), its offset in `s`, or npos when there is none. Such a
// string is a secret wherever it stands, whatever its field is called.
size_t url_password(std::string_view s, size_t* length);
// True when `s` carries a URL's password (url_password finds one).
bool has_url_password(std::string_view s);
// `s` with the password of every URL in it replaced by "***".
std::string redact_url_passwords(std::string s);
// `s` with every occurrence of each of `secrets` replaced by "***" (in the given order: put
// longer secrets first when one contains another).
std::string scrub(std::string s, const std::vector<std::string>& secrets);
// A copy of `v` with every secret-named field's value replaced by "***".
json::value redact(const json::value& v);

// One GET with the actions' HTTP(S) client (HTTPS verified against the system's CAs, the
// host name checked): the body of a 2xx answer, at most `max_body` bytes, within
// `timeout`; HTTP Basic credentials when `user` is not empty. Another status is
// kUnavailable naming it; messages never hold the credentials.
base::Result<std::string> http_get(const std::string& url, std::string_view user,
                                   std::string_view password, size_t max_body,
                                   std::chrono::milliseconds timeout);

// One exchange with the same client: any method, headers and body; the answer's status and
// body (at most `max_body` bytes) whatever the status. Transport failures as http_get's.
struct HttpCall {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string ca_file;  // an https server's CA ("" the system's)
  size_t max_body = 1 << 20;
  std::chrono::milliseconds timeout{10000};
  // Empty: any address. Else the host's resolved addresses outside these are not
  // connected to; none left is kPermissionDenied, and nothing is sent.
  std::vector<Network> allow;
  // HttpSession: a POST or PATCH may be sent again on a new connection after the kept one
  // was found closed (the receiver deduplicates).
  bool may_resend = false;
};
struct HttpReply {
  int status = 0;
  std::string body;
  std::string content_type;
};
base::Result<HttpReply> http_call(const HttpCall& call);

namespace http {
class Connection;
}
// http_call over a connection kept open between calls to the same origin (HTTP/1.1
// keep-alive; not reused after 4 s idle): a call on a kept connection the server has closed
// meanwhile is sent once more on a new one when idempotent or HttpCall::may_resend. One
// caller at a time.
class HttpSession {
 public:
  HttpSession();
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;
  base::Result<HttpReply> call(const HttpCall& call);
  void close();
  // When its last call ended (the epoch for none).
  std::chrono::steady_clock::time_point last_used() const;

 private:
  std::unique_ptr<http::Connection> conn_;
};
// The value of an HTTP Basic Authorization header ("Basic " + base64(user:password)).
std::string basic_authorization(std::string_view user, std::string_view password);

}  // namespace actions
