// SSH and SFTP actions on libssh: ssh.exec, ssh.put, ssh.get.
//
//   Connection   retried while the VM boots (refused, unreachable, timed out) for
//                `connect_within` seconds, bounded by the state's deadline; then reused
//                from a process-wide pool keyed by host, port, user and credentials, so
//                the states of an operation share one session per host.
//   Host keys    a known_hosts file, a pinned fingerprint, or pinned on first use in the
//                instance record (Outcome::pin_host_keys). A changed key is an error unless
//                `allow_changed_host_key` (a heal that replaced the VM).
//   Idempotency  ssh.exec exports VNFLOW_IDEMPOTENCY_KEY for scripts that check before
//                acting; ssh.put compares the remote SHA-256 first and skips an identical
//                upload, writes to a temporary name and renames.
//   Secrets      passwords, keys and passphrases never reach a message; a sudo password
//                and every `env` value go through stdin, never the command line (which
//                every user of the VM sees in ps): see remote_command().
//   Paths        ssh.put / ssh.get take absolute paths, normalised lexically; "..", NUL,
//                newlines and other control characters are refused before connecting.
//
// libssh is blocking: these actions run on the executor's worker threads. A session is
// used by one thread at a time (taken from the pool, given back after).
#include "actions/internal/ssh.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <thread>

#include <boost/json.hpp>
#include <fcntl.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "actions/actions.h"
#include "actions/internal/inputs.h"
#include "actions/internal/kinds.h"

namespace actions {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kDefaultMaxOutput = 64 * 1024;
constexpr int64_t kDefaultMaxGet = 1 << 20;
constexpr size_t kMaxIdle = 64;
constexpr auto kIdleFor = std::chrono::seconds(30);

std::string quote(std::string_view s) {
  return base::shell_quote(s);
}

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of("\n\r \t");
  if (end == std::string::npos)
    return "";
  size_t b = s.find_last_of('\n', end);
  b = b == std::string::npos ? 0 : b + 1;
  std::string line = s.substr(b, end - b + 1);
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

struct Target {
  std::string host, user, password, private_key, passphrase, known_hosts, host_key;
  int port = 22;
  bool allow_changed = false;
  int64_t connect_within_ms = 60000;

  std::string where() const { return user + "@" + host + ":" + std::to_string(port); }
  std::string host_port() const { return host + ":" + std::to_string(port); }
  // Sessions are shared only between identical targets (the secrets enter as a digest).
  std::string pool_key() const {
    std::string secret = base::digest_hex(base::DigestAlgorithm::kSha256,
                                          password + '\0' + private_key + '\0' + passphrase);
    return host + '\0' + std::to_string(port) + '\0' + user + '\0' + secret + '\0' + known_hosts +
           '\0' + host_key;
  }
};

bool read_target(const json::object& in, const char* action, Target& t, Outcome& fail) {
  t.host = str_in(in, "host");
  t.user = str_in(in, "username");
  t.password = str_in(in, "password");
  t.private_key = str_in(in, "private_key");
  t.passphrase = str_in(in, "passphrase");
  t.known_hosts = str_in(in, "known_hosts");
  t.host_key = str_in(in, "host_key");
  t.port = static_cast<int>(int_in(in, "port", 22));
  t.allow_changed = bool_in(in, "allow_changed_host_key");
  t.connect_within_ms = int_in(in, "connect_within", 60) * 1000;
  std::string a(action);
  if (t.host.empty() || t.host.find_first_of(" \t\r\n/") != std::string::npos) {
    fail =
        Outcome::failure(ErrorClass::kInvalid, a + ": \"host\" must be an address or a host name");
    return false;
  }
  if (t.user.empty()) {
    fail = Outcome::failure(ErrorClass::kInvalid, a + " on " + t.host + ": \"username\" is empty");
    return false;
  }
  if (t.port < 1 || t.port > 65535) {
    fail = Outcome::failure(ErrorClass::kInvalid, a + " on " + t.host + ": bad port");
    return false;
  }
  if (t.password.empty() && t.private_key.empty()) {
    fail = Outcome::failure(ErrorClass::kInvalid,
                            a + " on " + t.where() + ": give \"password\" or \"private_key\"");
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Sessions and the pool

struct Conn {
  ssh_session s = nullptr;
  std::string fingerprint;
  Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    if (s != nullptr) {
      ssh_disconnect(s);
      ssh_free(s);
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    static Pool pool;
    return pool;
  }
  std::unique_ptr<Conn> take(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    prune();
    auto it = idle_.find(key);
    if (it == idle_.end())
      return nullptr;
    auto c = std::move(it->second.conn);
    idle_.erase(it);
    if (ssh_is_connected(c->s) == 0)
      return nullptr;
    return c;
  }
  void give(const std::string& key, std::unique_ptr<Conn> c) {
    std::lock_guard<std::mutex> l(mu_);
    prune();
    if (idle_.size() >= kMaxIdle)
      idle_.erase(idle_.begin());
    idle_.emplace(key, Idle{std::move(c), Clock::now()});
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu_);
    idle_.clear();
  }
  size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return idle_.size();
  }

 private:
  struct Idle {
    std::unique_ptr<Conn> conn;
    Clock::time_point since;
  };
  void prune() {
    auto now = Clock::now();
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (now - it->second.since > kIdleFor)
        it = idle_.erase(it);
      else
        ++it;
    }
  }
  std::mutex mu_;
  std::multimap<std::string, Idle> idle_;
};

struct LibsshInit {
  LibsshInit() { ssh_init(); }
};

// Errors worth another connection attempt while a VM boots.
bool retryable_connect(const std::string& e) {
  for (const char* w : {"refused", "timed out", "Timeout", "unreachable", "No route", "reset",
                        "closed", "Socket error", "Connection lost", "kex", "banner"}) {
    if (e.find(w) != std::string::npos)
      return true;
  }
  return false;
}

std::string server_fingerprint(ssh_session s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK)
    return {};
  unsigned char* hash = nullptr;
  size_t len = 0;
  std::string fp;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) == 0) {
    char* f = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    if (f != nullptr) {
      fp = f;
      ssh_string_free_char(f);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return fp;
}

bool same_fingerprint(std::string a, std::string b) {
  for (auto* s : {&a, &b}) {
    if (s->rfind("SHA256:", 0) == 0)
      s->erase(0, 7);
    while (!s->empty() && s->back() == '=')
      s->pop_back();
  }
  return !a.empty() && a == b;
}

bool verify_host(Conn& c, const Target& t, const Context& ctx, const std::string& what,
                 json::object& pins, Outcome& fail) {
  c.fingerprint = server_fingerprint(c.s);
  if (c.fingerprint.empty()) {
    fail = Outcome::failure(ErrorClass::kFailed, what + ": the server sent no host key");
    return false;
  }
  if (!t.known_hosts.empty()) {
    switch (ssh_session_is_known_server(c.s)) {
      case SSH_KNOWN_HOSTS_OK:
        return true;
      case SSH_KNOWN_HOSTS_CHANGED:
      case SSH_KNOWN_HOSTS_OTHER:
        fail = Outcome::failure(ErrorClass::kInvalid, what + ": the host key (" + c.fingerprint +
                                                          ") does not match known_hosts " +
                                                          t.known_hosts);
        return false;
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        fail =
            Outcome::failure(ErrorClass::kInvalid, what + ": not in known_hosts " + t.known_hosts +
                                                       " (its key is " + c.fingerprint + ")");
        return false;
      default:
        fail = Outcome::failure(ErrorClass::kFailed, what + ": cannot read known_hosts " +
                                                         t.known_hosts + ": " + ssh_get_error(c.s));
        return false;
    }
  }
  if (!t.host_key.empty()) {
    if (same_fingerprint(t.host_key, c.fingerprint))
      return true;
    fail = Outcome::failure(ErrorClass::kInvalid, what + ": the host key is " + c.fingerprint +
                                                      ", not the pinned " + t.host_key);
    return false;
  }
  // Trust on first use, pinned in the instance record.
  std::string pinned = str_in(ctx.host_keys, t.host_port().c_str());
  if (!pinned.empty() && !same_fingerprint(pinned, c.fingerprint) && !t.allow_changed) {
    fail =
        Outcome::failure(ErrorClass::kInvalid, what + ": the host key changed: pinned " + pinned +
                                                   ", now " + c.fingerprint +
                                                   " (a heal that replaced the VM accepts it with "
                                                   "allow_changed_host_key)");
    return false;
  }
  if (pinned.empty() || !same_fingerprint(pinned, c.fingerprint))
    pins[t.host_port()] = c.fingerprint;
  return true;
}

bool authenticate(Conn& c, const Target& t, const std::string& what, Outcome& fail) {
  std::string tried;
  if (!t.private_key.empty()) {
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_base64(t.private_key.c_str(),
                                      t.passphrase.empty() ? nullptr : t.passphrase.c_str(),
                                      nullptr, nullptr, &key) != SSH_OK) {
      fail = Outcome::failure(ErrorClass::kInvalid,
                              what +
                                  ": private_key is not a usable private key (wrong "
                                  "format or passphrase)");
      return false;
    }
    int rc = ssh_userauth_publickey(c.s, nullptr, key);
    ssh_key_free(key);
    if (rc == SSH_AUTH_SUCCESS)
      return true;
    if (rc == SSH_AUTH_ERROR) {
      fail = Outcome::failure(ErrorClass::kTransient,
                              what + ": authentication: " + ssh_get_error(c.s));
      return false;
    }
    tried = "publickey";
  }
  if (!t.password.empty()) {
    int rc = ssh_userauth_password(c.s, nullptr, t.password.c_str());
    if (rc == SSH_AUTH_SUCCESS)
      return true;
    if (rc == SSH_AUTH_ERROR) {
      fail = Outcome::failure(ErrorClass::kTransient,
                              what + ": authentication: " + ssh_get_error(c.s));
      return false;
    }
    tried += tried.empty() ? "password" : " and password";
  }
  fail = Outcome::failure(ErrorClass::kInvalid,
                          what + ": authentication as \"" + t.user + "\" refused (" + tried + ")");
  return false;
}

std::unique_ptr<Conn> connect(const Target& t, const Context& ctx, const std::string& what,
                              json::object& pins, Outcome& fail) {
  static LibsshInit init;
  auto start = Clock::now();
  auto until =
      std::min(ctx.deadline, start + milliseconds(std::max<int64_t>(t.connect_within_ms, 0)));
  auto backoff = milliseconds(100);
  int attempts = 0;
  for (;;) {
    ++attempts;
    auto c = std::make_unique<Conn>();
    c->s = ssh_new();
    if (c->s == nullptr) {
      fail = Outcome::failure(ErrorClass::kFailed, what + ": out of memory");
      return nullptr;
    }
    auto left = std::chrono::duration_cast<milliseconds>(ctx.deadline - Clock::now()).count();
    long timeout_s = std::clamp<long>(static_cast<long>(left / 1000), 1, 10);
    int port = t.port;
    int no = 0;
    ssh_options_set(c->s, SSH_OPTIONS_HOST, t.host.c_str());
    ssh_options_set(c->s, SSH_OPTIONS_PORT, &port);
    ssh_options_set(c->s, SSH_OPTIONS_USER, t.user.c_str());
    ssh_options_set(c->s, SSH_OPTIONS_TIMEOUT, &timeout_s);
    // TCP_NODELAY: a command is a few small packets each way (channel open, exec, stdin,
    // EOF); with Nagle each one after the first waits for the server's delayed ACK, 40 ms
    // on Linux once a connection has left its quick-ACK start (OpenSSH sets it too).
    int nodelay = 1;
    ssh_options_set(c->s, SSH_OPTIONS_NODELAY, &nodelay);
    ssh_options_set(c->s, SSH_OPTIONS_PROCESS_CONFIG, &no);
    ssh_options_set(c->s, SSH_OPTIONS_KNOWNHOSTS,
                    t.known_hosts.empty() ? "/dev/null" : t.known_hosts.c_str());
    ssh_options_set(c->s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
    if (ssh_connect(c->s) == SSH_OK) {
      if (!verify_host(*c, t, ctx, what, pins, fail) || !authenticate(*c, t, what, fail))
        return nullptr;
      return c;
    }
    std::string err = ssh_get_error(c->s);
    bool cancelled = ctx.cancelled != nullptr && ctx.cancelled->load();
    if (cancelled || !retryable_connect(err) || Clock::now() + backoff >= until) {
      bool out_of_time = Clock::now() + backoff >= ctx.deadline;
      fail = Outcome::failure(
          out_of_time              ? ErrorClass::kTimeout
          : retryable_connect(err) ? ErrorClass::kTransient
                                   : ErrorClass::kFailed,
          what + ": cannot connect: " + err + " (" + std::to_string(attempts) + " attempt" +
              (attempts == 1 ? "" : "s") + " in " +
              std::to_string(
                  std::chrono::duration_cast<milliseconds>(Clock::now() - start).count()) +
              " ms)");
      return nullptr;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

// A session for `t`: a pooled one, else a new connection. Given back by ~Lease when the
// call went well (ok()).
class Lease {
 public:
  Lease(const Target& t, const Context& ctx, std::string what)
      : t_(t), ctx_(ctx), what_(std::move(what)), key_(t.pool_key()) {}
  ~Lease() {
    if (conn_ && healthy_)
      Pool::get().give(key_, std::move(conn_));
  }
  bool open(Outcome& fail) {
    conn_ = Pool::get().take(key_);
    pooled_ = conn_ != nullptr;
    if (pooled_ && !t_.known_hosts.empty() &&
        ssh_session_is_known_server(conn_->s) != SSH_KNOWN_HOSTS_OK) {
      conn_.reset();  // the file changed since: verify on a fresh connection, which says why
      pooled_ = false;
    }
    if (pooled_) {
      // A pooled session was verified when it was made; it still pins for this instance.
      std::string pinned = str_in(ctx_.host_keys, t_.host_port().c_str());
      if (t_.known_hosts.empty() && t_.host_key.empty() &&
          (pinned.empty() || !same_fingerprint(pinned, conn_->fingerprint))) {
        if (!pinned.empty() && !t_.allow_changed) {
          conn_.reset();  // verify again on a fresh connection: it will say why
          pooled_ = false;
        } else {
          pins_[t_.host_port()] = conn_->fingerprint;
        }
      }
    }
    if (!conn_)
      conn_ = connect(t_, ctx_, what_, pins_, fail);
    return conn_ != nullptr;
  }
  // After a failure to open a channel on a pooled session (the server restarted): one
  // fresh connection.
  bool reopen(Outcome& fail) {
    if (!pooled_)
      return false;
    conn_.reset();
    pooled_ = false;
    healthy_ = true;
    channel_failed_ = false;
    conn_ = connect(t_, ctx_, what_, pins_, fail);
    return conn_ != nullptr;
  }
  bool pooled() const { return pooled_; }
  void broken() { healthy_ = false; }
  // No channel could be opened (nothing ran): a dead pooled session.
  void channel_failed() { channel_failed_ = true; }
  bool dead_pooled_session() const { return pooled_ && channel_failed_; }
  ssh_session session() const { return conn_->s; }
  const std::string& fingerprint() const { return conn_->fingerprint; }
  json::object& pins() { return pins_; }

 private:
  const Target& t_;
  const Context& ctx_;
  std::string what_;
  std::string key_;
  std::unique_ptr<Conn> conn_;
  bool pooled_ = false;
  bool healthy_ = true;
  bool channel_failed_ = false;
  json::object pins_;
};

// ---------------------------------------------------------------------------------------
// Running a command

struct ExecResult {
  bool ok = false;  // the command ran (whatever its exit status)
  ErrorClass error_class = ErrorClass::kFailed;
  std::string error;
  int exit_code = -1;
  std::string out, err;
  bool truncated = false;
  bool input_short = false;  // not all of the command's stdin could be sent
};

class Capture {
 public:
  Capture(std::string& data, bool& truncated, size_t limit)
      : data_(data), truncated_(truncated), limit_(limit) {}
  void add(const char* p, size_t n) {
    size_t room = data_.size() < limit_ ? limit_ - data_.size() : 0;
    data_.append(p, std::min(room, n));
    if (n > room)
      truncated_ = true;
  }

 private:
  std::string& data_;
  bool& truncated_;
  size_t limit_;
};

// Runs `command` on a new channel of the lease's session. `channel_failed` tells that
// the channel could not even be opened (a dead pooled session).
ExecResult run_command(Lease& lease, const std::string& command, const std::string& stdin_data,
                       const Context& ctx, size_t max_output, bool* channel_failed) {
  ExecResult r;
  ssh_session s = lease.session();
  ssh_channel ch = ssh_channel_new(s);
  if (ch == nullptr || ssh_channel_open_session(ch) != SSH_OK) {
    if (ch != nullptr)
      ssh_channel_free(ch);
    if (channel_failed != nullptr)
      *channel_failed = true;
    lease.channel_failed();
    lease.broken();
    r.error_class = ErrorClass::kTransient;
    r.error = std::string("cannot open a session channel: ") + ssh_get_error(s);
    return r;
  }
  auto cleanup = [&](bool kill) {
    if (kill)
      ssh_channel_request_send_signal(ch, "KILL");
    ssh_channel_close(ch);
    ssh_channel_free(ch);
  };
  if (ssh_channel_request_exec(ch, command.c_str()) != SSH_OK) {
    r.error_class = ErrorClass::kTransient;
    r.error = std::string("exec request refused: ") + ssh_get_error(s);
    lease.broken();
    cleanup(false);
    return r;
  }
  // Past the state's deadline (or cancelled): the command is killed, the session dropped.
  auto out_of_time = [&](const char* why) {
    if (Clock::now() < ctx.deadline && (ctx.cancelled == nullptr || !ctx.cancelled->load()))
      return false;
    r.error_class = ErrorClass::kTimeout;
    r.error = why;
    lease.broken();
    cleanup(true);
    return true;
  };
  size_t off = 0;
  while (off < stdin_data.size()) {
    if (out_of_time("the command's input was not sent within the state's timeout (killed)"))
      return r;
    int n =
        ssh_channel_write(ch, stdin_data.data() + off,
                          static_cast<uint32_t>(std::min<size_t>(stdin_data.size() - off, 32768)));
    if (n <= 0) {
      r.input_short = true;  // the command may not read its stdin; its exit status tells
      break;
    }
    off += static_cast<size_t>(n);
  }
  ssh_channel_send_eof(ch);
  Capture out(r.out, r.truncated, max_output), err(r.err, r.truncated, max_output);
  char buf[16384];
  for (;;) {
    if (out_of_time("the command did not finish within the state's timeout (killed)"))
      return r;
    int n = ssh_channel_read_timeout(ch, buf, sizeof buf, 0, 50);
    if (n > 0)
      out.add(buf, static_cast<size_t>(n));
    int m;
    while ((m = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1)) > 0)
      err.add(buf, static_cast<size_t>(m));
    if (n == SSH_ERROR || m == SSH_ERROR) {
      r.error_class = ErrorClass::kTransient;
      r.error = std::string("the connection broke while the command ran: ") + ssh_get_error(s);
      lease.broken();
      cleanup(false);
      return r;
    }
    if (n == 0 && ssh_channel_is_eof(ch) != 0)
      break;
  }
  int m;
  while ((m = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1)) > 0)
    err.add(buf, static_cast<size_t>(m));
  r.exit_code = ssh_channel_get_exit_status(ch);
  cleanup(false);
  if (r.exit_code < 0) {
    r.error_class = ErrorClass::kTransient;
    r.error = "the command ended without an exit status (the connection closed?)";
    lease.broken();
    return r;
  }
  r.ok = true;
  return r;
}

// The remote command line and what goes to its stdin. The command line carries no value
// of `env` (ps shows it to every user of the VM); the values come first on stdin:
//
//   [sudo password "\n"]       read by sudo -S (when sudo asks; else skipped by the script)
//   "vnflow-env N\n"            then N times: NAME "\n" VALUE "\n", each byte of VALUE
//                               outside [A-Za-z0-9] as \0ooo (printf %b), so that newlines
//                               and any other byte survive
//   the state's own stdin       left unread for the command, byte for byte
//
// The preamble (plain POSIX sh: read, printf and export are builtins, nothing is exec'd
// with a value in its argv) runs inside the sudo'd shell, so sudo's reset of the
// environment does not lose the variables. `read` takes one line at a time from a pipe,
// so the command's stdin starts exactly after the last variable.
constexpr std::string_view kEnvHeader = "vnflow-env ";

std::string env_preamble(bool skip_password_line) {
  std::string p = "IFS= read -r vnflow_l || exit 125; ";
  if (skip_password_line) {
    // sudo did not ask (NOPASSWD, cached): the password line is still there; drop it.
    p += "case $vnflow_l in 'vnflow-env '*) ;; *) IFS= read -r vnflow_l || exit 125;; esac; ";
  }
  p += "case $vnflow_l in 'vnflow-env '*) ;; *) echo 'vnflow: no environment on stdin' >&2; "
       "exit 125;; esac; "
       "vnflow_n=${vnflow_l#vnflow-env }; "
       "while [ \"$vnflow_n\" -gt 0 ]; do "
       "IFS= read -r vnflow_k && IFS= read -r vnflow_v || exit 125; "
       "vnflow_v=$(printf '%bx' \"$vnflow_v\"); export \"$vnflow_k=${vnflow_v%x}\"; "
       "vnflow_n=$((vnflow_n - 1)); done; "
       "unset vnflow_l vnflow_n vnflow_k vnflow_v; ";
  return p;
}

std::string encode_env_value(std::string_view v) {
  std::string o;
  o.reserve(v.size() * 2);
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      o += c;
    } else {
      o += "\\0";
      o += static_cast<char>('0' + ((u >> 6) & 7));
      o += static_cast<char>('0' + ((u >> 3) & 7));
      o += static_cast<char>('0' + (u & 7));
    }
  }
  return o;
}

struct RemoteCommand {
  std::string line;   // the command line (no secrets)
  std::string input;  // stdin: sudo password, environment, the command's own stdin
};

// `env` names are checked by the caller (valid_env_name) and values hold no NUL.
RemoteCommand remote_command(const std::string& cmd, const json::object& env, const Context& ctx,
                             bool sudo, const std::string& sudo_password,
                             const std::string& stdin_data) {
  bool with_password = sudo && !sudo_password.empty();
  std::string script = env_preamble(with_password);
  script += "VNFLOW_IDEMPOTENCY_KEY=" + quote(ctx.key) + "; export VNFLOW_IDEMPOTENCY_KEY; ";
  script += cmd;
  RemoteCommand r;
  if (!sudo)
    r.line = "sh -c " + quote(script);
  else
    r.line = std::string(with_password ? "sudo -S -p '' " : "sudo -n ") + "sh -c " + quote(script);
  if (with_password)
    r.input = sudo_password + "\n";
  r.input += std::string(kEnvHeader) + std::to_string(env.size()) + "\n";
  for (const auto& kv : env) {
    std::string v =
        kv.value().is_string() ? std::string(kv.value().get_string()) : json::serialize(kv.value());
    r.input += std::string(kv.key()) + "\n" + encode_env_value(v) + "\n";
  }
  r.input += stdin_data;
  return r;
}

bool valid_env_name(std::string_view k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0])))
    return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Runs a helper command (sha256sum, mkdir, install, cat) for put/get.
ExecResult helper(Lease& lease, const std::string& script, const Context& ctx, bool sudo,
                  const std::string& sudo_password, size_t max_output = 64 * 1024,
                  const std::string& stdin_data = "") {
  RemoteCommand rc = remote_command(script, json::object{}, ctx, sudo, sudo_password, stdin_data);
  return run_command(lease, rc.line, rc.input, ctx, max_output, nullptr);
}

// A remote file path for ssh.put / ssh.get: absolute, normalised lexically ("//" and "."
// components dropped); no ".." component, no control character (NUL, newline), not a
// directory. Returns the normal form, or "" with `why`.
std::string normal_remote_path(const std::string& path, std::string& why) {
  auto shown = [&] {
    std::string o = "\"";
    for (char c : path.substr(0, 120)) {
      auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f) {
        static const char kHex[] = "0123456789abcdef";
        o += "\\x";
        o += kHex[u >> 4];
        o += kHex[u & 15];
      } else {
        o += c;
      }
    }
    return o + (path.size() > 120 ? "\"..." : "\"");
  };
  if (path.empty()) {
    why = "\"path\" is empty";
    return "";
  }
  if (std::any_of(path.begin(), path.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
      })) {
    why = "\"path\" " + shown() + " contains NUL, a newline or another control character";
    return "";
  }
  if (path[0] != '/') {
    why = "\"path\" " + shown() + " must be absolute (start with \"/\")";
    return "";
  }
  if (path.back() == '/') {
    why = "\"path\" " + shown() + " names a directory, not a file";
    return "";
  }
  std::string out;
  size_t b = 0;
  while (b < path.size()) {
    size_t e = path.find('/', b);
    if (e == std::string::npos)
      e = path.size();
    std::string_view part(path.data() + b, e - b);
    if (part == "..") {
      why = "\"path\" " + shown() + " must not have \"..\" components";
      return "";
    }
    if (!part.empty() && part != ".")
      out += "/" + std::string(part);
    b = e + 1;
  }
  if (out.empty() || path.substr(path.size() - 2) == "/.") {
    why = "\"path\" " + shown() + " names a directory, not a file";
    return "";
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The actions

// An SFTP request that failed. The server's answer (no such file, permission denied) is
// "failed": asking again gets the same answer. No answer at all (status 0, the connection
// lost, the SFTP channel or the session closed: sshd killed or the VM rebooting mid-step) is
// "transient" and the session is not pooled again.
Outcome sftp_failure(Lease& lease, sftp_session sftp, const std::string& what) {
  int st = sftp_get_error(sftp);
  bool lost = st == SSH_FX_OK || st == SSH_FX_NO_CONNECTION || st == SSH_FX_CONNECTION_LOST ||
              ssh_is_connected(lease.session()) == 0 || ssh_channel_is_eof(sftp->channel) != 0 ||
              ssh_channel_is_open(sftp->channel) == 0;
  if (lost) {
    lease.broken();
    return Outcome::failure(ErrorClass::kTransient,
                            what + " failed: the connection was lost (" +
                                std::string(ssh_get_error(lease.session())) + ")");
  }
  static const char* const kNames[] = {"ok",
                                       "end of file",
                                       "no such file",
                                       "permission denied",
                                       "failure",
                                       "bad message",
                                       "no connection",
                                       "connection lost",
                                       "operation unsupported",
                                       "invalid handle",
                                       "no such path",
                                       "file already exists",
                                       "write protected",
                                       "no media"};
  std::string name = st >= 0 && st < static_cast<int>(std::size(kNames))
                         ? kNames[st]
                         : "SFTP status " + std::to_string(st);
  return Outcome::failure(ErrorClass::kFailed, what + " failed: " + name);
}

class SshAction : public Action {
 public:
  explicit SshAction(const char* name) : name_(name) {}
  Outcome run(const json::object& in, const Context& ctx) const final {
    Target t;
    Outcome fail;
    if (!read_target(in, name_, t, fail))
      return fail;
    std::string what = std::string(name_) + " on " + t.where();
    // Wrong inputs fail before a connection is made (a VM that is still booting would
    // otherwise delay an answer that cannot change).
    std::string wrong = precheck(in);
    if (!wrong.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": " + wrong);
    Lease lease(t, ctx, what);
    if (!lease.open(fail))
      return fail;
    Outcome out = call(in, ctx, t, lease, what);
    if (!out.ok && lease.dead_pooled_session()) {
      // The pooled session died (the VM rebooted or was replaced) before anything ran on
      // it: once more on a fresh connection.
      if (!lease.reopen(fail))
        return fail;
      out = call(in, ctx, t, lease, what);
    }
    if (out.ok) {
      out.outputs.as_object()["host_key"] = lease.fingerprint();
      out.pin_host_keys = lease.pins();
    }
    return out;
  }

 protected:
  virtual Outcome call(const json::object& in, const Context& ctx, const Target& t, Lease& lease,
                       const std::string& what) const = 0;
  // What is wrong with the inputs, found without the VM; "" when nothing.
  virtual std::string precheck(const json::object&) const { return ""; }
  static std::string path_problem(const json::object& in) {
    std::string why;
    return normal_remote_path(str_in(in, "path"), why).empty() ? why : "";
  }

 private:
  const char* name_;
};

class SshExec final : public SshAction {
 public:
  SshExec() : SshAction("ssh.exec") {}

 protected:
  Outcome call(const json::object& in, const Context& ctx, const Target&, Lease& lease,
               const std::string& what) const override {
    std::string cmd = str_in(in, "command");
    if (cmd.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": \"command\" is empty");
    json::object env;
    if (const json::value* e = in.if_contains("env"); e != nullptr && e->is_object())
      env = e->get_object();
    for (const auto& kv : env) {
      if (!valid_env_name(kv.key()))
        return Outcome::failure(
            ErrorClass::kInvalid,
            what + ": env name \"" + std::string(kv.key()) + "\" is not a shell variable name");
      if (kv.value().is_string() &&
          std::string_view(kv.value().get_string()).find('\0') != std::string_view::npos)
        return Outcome::failure(ErrorClass::kInvalid, what + ": env " + std::string(kv.key()) +
                                                          ": a variable cannot hold a NUL byte");
    }
    bool sudo = bool_in(in, "sudo");
    std::string sudo_password = str_in(in, "sudo_password");
    std::vector<std::pair<std::string, std::regex>> parsers;
    if (const json::value* p = in.if_contains("parse"); p != nullptr && p->is_object()) {
      for (const auto& kv : p->get_object()) {
        if (!kv.value().is_string())
          return Outcome::failure(ErrorClass::kInvalid, what + ": parse." + std::string(kv.key()) +
                                                            " must be a regular expression");
        try {
          parsers.emplace_back(
              std::string(kv.key()),
              std::regex(std::string(kv.value().get_string()), std::regex::ECMAScript));
        } catch (const std::regex_error& e) {
          return Outcome::failure(ErrorClass::kInvalid,
                                  what + ": parse." + std::string(kv.key()) + ": " + e.what());
        }
      }
    }
    size_t max_output =
        static_cast<size_t>(std::max<int64_t>(1, int_in(in, "max_output", kDefaultMaxOutput)));
    RemoteCommand rc = remote_command(cmd, env, ctx, sudo, sudo_password, str_in(in, "stdin"));
    auto started = Clock::now();
    ExecResult r = run_command(lease, rc.line, rc.input, ctx, max_output, nullptr);
    if (!r.ok)
      return Outcome::failure(r.error_class, what + ": " + r.error);
    int64_t ms = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
    std::vector<int64_t> codes{0};
    if (const json::value* c = in.if_contains("success_codes"); c != nullptr && c->is_array()) {
      codes.clear();
      for (const auto& x : c->get_array())
        if (x.is_int64())
          codes.push_back(x.get_int64());
    }
    if (std::find(codes.begin(), codes.end(), r.exit_code) == codes.end()) {
      std::string tail = last_line(r.err.empty() ? r.out : r.err);
      return Outcome::failure(ErrorClass::kFailed, what + ": exit status " +
                                                       std::to_string(r.exit_code) +
                                                       (tail.empty() ? "" : ": " + tail));
    }
    if (bool_in(in, "stderr_must_be_empty") &&
        r.err.find_first_not_of(" \t\r\n") != std::string::npos)
      return Outcome::failure(ErrorClass::kFailed,
                              what + ": stderr is not empty: " + last_line(r.err));
    json::object values;
    for (const auto& [name, re] : parsers) {
      std::smatch m;
      if (!std::regex_search(r.out, m, re))
        return Outcome::failure(ErrorClass::kFailed,
                                what + ": the output has no match for parse." + name);
      values[name] = m.size() > 1 ? m[1].str() : m[0].str();
    }
    return Outcome::success(json::object{{"exit_code", r.exit_code},
                                         {"stdout", r.out},
                                         {"stderr", r.err},
                                         {"truncated", r.truncated},
                                         {"duration_ms", ms},
                                         {"values", std::move(values)}});
  }
};

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0)
    return slash == 0 ? "/" : ".";
  return path.substr(0, slash);
}

// "abc...  path" -> "abc..."; "" when the file is missing.
std::string first_word(const std::string& s) {
  auto end = s.find_first_of(" \t\n");
  return s.substr(0, end);
}

class Sftp {
 public:
  explicit Sftp(ssh_session s) : sftp_(sftp_new(s)) {
    if (sftp_ != nullptr && sftp_init(sftp_) != SSH_OK) {
      sftp_free(sftp_);
      sftp_ = nullptr;
    }
  }
  ~Sftp() {
    if (sftp_ != nullptr)
      sftp_free(sftp_);
  }
  sftp_session get() const { return sftp_; }

 private:
  sftp_session sftp_;
};

class SshPut final : public SshAction {
 public:
  SshPut() : SshAction("ssh.put") {}

 protected:
  std::string precheck(const json::object& in) const override { return path_problem(in); }
  Outcome call(const json::object& in, const Context& ctx, const Target&, Lease& lease,
               const std::string& what) const override {
    std::string why;
    std::string path = normal_remote_path(str_in(in, "path"), why);
    if (path.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": " + why);
    std::string data;
    int given = 0;
    if (in.contains("content")) {
      data = str_in(in, "content");
      ++given;
    }
    if (in.contains("secret_content")) {
      data = str_in(in, "secret_content");
      ++given;
    }
    std::string source = str_in(in, "source");
    if (!source.empty()) {
      ++given;
      if (!ctx.package_file)
        return Outcome::failure(ErrorClass::kInvalid,
                                what + ": no package to read \"" + source + "\" from");
      auto f = ctx.package_file(source);
      if (!f.ok())
        return Outcome::failure(ErrorClass::kInvalid, what + ": " + f.status().message());
      data = std::move(f).value();
    }
    if (given != 1)
      return Outcome::failure(ErrorClass::kInvalid,
                              what + ": give one of \"content\", \"secret_content\", \"source\"");
    std::string mode_s = str_in(in, "mode", "0644");
    char* end = nullptr;
    long mode = std::strtol(mode_s.c_str(), &end, 8);
    if (end == mode_s.c_str() || *end != '\0' || mode < 0 || mode > 07777)
      return Outcome::failure(ErrorClass::kInvalid,
                              what + ": mode \"" + mode_s + "\" is not octal");
    {
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04lo", mode);
      mode_s = octal;  // what goes into the commands: digits only, whatever strtol skipped
    }
    bool sudo = bool_in(in, "sudo");
    std::string sudo_password = str_in(in, "sudo_password");
    std::string sha = base::digest_hex(base::DigestAlgorithm::kSha256, data);
    std::string what_path = what + ": " + path;

    // Two commands, each answering with the file's SHA-256: the first reads it back (an
    // identical file is not sent again: a re-dispatch, a re-run), the second uploads, moves
    // the upload into place and reads it back again.
    bool verify = bool_in(in, "verify", true);
    const std::string dir = quote(parent_dir(path));
    const std::string sum = "sha256sum -- " + quote(path) + " 2>/dev/null || true";
    auto run_sha = [&](const std::string& script, const char* step, std::string& out) -> Outcome {
      ExecResult r = helper(lease, script, ctx, sudo, sudo_password);
      if (!r.ok)
        return Outcome::failure(r.error_class, what_path + ": " + r.error);
      if (r.exit_code != 0)
        return Outcome::failure(ErrorClass::kFailed,
                                what_path + ": " + step + ": " + last_line(r.err));
      out = first_word(r.out);
      return Outcome::success(nullptr);
    };
    std::string before;
    Outcome f =
        run_sha("mkdir -p -- " + dir + " || exit 1; " + sum, "cannot create its directory", before);
    if (!f.ok)
      return f;
    bool changed = before != sha;
    if (changed) {
      // One command streams the content (its stdin) into a new temporary file beside the
      // target (mktemp: created exclusively, never a link or a file someone planted), checks
      // that all of it arrived, moves it into place (a reader never sees half a file) and
      // reads it back: one channel, no SFTP subsystem, no round trip per 32 KiB written. A
      // connection lost mid-way ends `cat` early: the size differs and nothing is moved.
      const std::string tmp_pattern = quote(parent_dir(path) + "/.vnflow-XXXXXXXXXX");
      std::string script =
          "t=$(mktemp " + tmp_pattern + ") || exit 1; if cat > \"$t\" && [ $(wc -c < \"$t\") -eq " +
          std::to_string(data.size()) + " ] && chmod " + mode_s + " -- \"$t\" && mv -f -- \"$t\" " +
          quote(path) + "; then :; else rm -f -- \"$t\"; exit 1; fi; " + (verify ? sum : "true");
      ExecResult r = helper(lease, script, ctx, sudo, sudo_password, 64 * 1024, data);
      if (!r.ok)
        return Outcome::failure(r.error_class, what_path + ": " + r.error);
      if (r.exit_code != 0) {
        if (r.input_short)  // the channel took only part of the content: the link, not the VM
          return Outcome::failure(ErrorClass::kTransient,
                                  what_path +
                                      ": the upload was cut short (nothing was moved "
                                      "into place): " +
                                      last_line(r.err));
        return Outcome::failure(
            ErrorClass::kFailed,
            what_path + ": cannot write the upload into place: " + last_line(r.err));
      }
      std::string after = first_word(r.out);
      if (verify && after != sha)
        return Outcome::failure(ErrorClass::kFailed, what_path +
                                                         ": verification failed: the remote file's "
                                                         "SHA-256 is " +
                                                         (after.empty() ? "missing" : after) +
                                                         ", not " + sha);
    } else {
      std::string ignored;
      f = run_sha("chmod " + mode_s + " -- " + quote(path), "chmod", ignored);
      if (!f.ok)
        return f;
    }
    return Outcome::success(json::object{{"path", path},
                                         {"size", static_cast<int64_t>(data.size())},
                                         {"sha256", sha},
                                         {"changed", changed}});
  }
};

class SshGet final : public SshAction {
 public:
  SshGet() : SshAction("ssh.get") {}

 protected:
  std::string precheck(const json::object& in) const override { return path_problem(in); }
  Outcome call(const json::object& in, const Context& ctx, const Target&, Lease& lease,
               const std::string& what) const override {
    std::string why;
    std::string path = normal_remote_path(str_in(in, "path"), why);
    if (path.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": " + why);
    size_t max = static_cast<size_t>(std::max<int64_t>(1, int_in(in, "max_bytes", kDefaultMaxGet)));
    std::string what_path = what + ": " + path;
    std::string data;
    if (bool_in(in, "sudo")) {
      ExecResult r =
          helper(lease, "cat -- " + quote(path), ctx, true, str_in(in, "sudo_password"), max + 1);
      if (!r.ok)
        return Outcome::failure(r.error_class, what_path + ": " + r.error);
      if (r.exit_code != 0)
        return Outcome::failure(ErrorClass::kFailed, what_path + ": " + last_line(r.err));
      data = std::move(r.out);
    } else {
      Sftp sftp(lease.session());
      if (sftp.get() == nullptr) {
        lease.channel_failed();
        lease.broken();
        return Outcome::failure(ErrorClass::kTransient,
                                what + ": cannot start SFTP: " + ssh_get_error(lease.session()));
      }
      sftp_file f = sftp_open(sftp.get(), path.c_str(), O_RDONLY, 0);
      if (f == nullptr)
        return sftp_failure(lease, sftp.get(), what_path + ": SFTP open");
      char buf[32768];
      for (;;) {
        if (Clock::now() >= ctx.deadline) {
          sftp_close(f);
          return Outcome::failure(ErrorClass::kTimeout,
                                  what_path + ": the download did not finish in time");
        }
        ssize_t n = sftp_read(f, buf, sizeof buf);
        if (n < 0) {
          sftp_close(f);
          return Outcome::failure(ErrorClass::kTransient, what_path + ": SFTP read failed");
        }
        if (n == 0)
          break;
        data.append(buf, static_cast<size_t>(n));
        if (data.size() > max)
          break;
      }
      sftp_close(f);
    }
    if (data.size() > max)
      return Outcome::failure(ErrorClass::kInvalid,
                              what_path + ": larger than max_bytes (" + std::to_string(max) + ")");
    return Outcome::success(
        json::object{{"content", data},
                     {"size", static_cast<int64_t>(data.size())},
                     {"sha256", base::digest_hex(base::DigestAlgorithm::kSha256, data)}});
  }
};

}  // namespace

void add_ssh_actions(Registry& r) {
  // Every call names its target and how to trust it.
  auto target = [](std::vector<std::string_view> more) {
    std::vector<std::string_view> in = {"host: string",
                                        "port?: integer",
                                        "username: string",
                                        "password?: string",
                                        "private_key?: string",
                                        "passphrase?: string",
                                        "known_hosts?: string",
                                        "host_key?: string",
                                        "allow_changed_host_key?: boolean",
                                        "connect_within?: integer"};
    in.insert(in.end(), more.begin(), more.end());
    return in;
  };
  r.add("ssh.exec",
        Signature::of(
            target({"command: string", "sudo?: boolean", "sudo_password?: string",
                    "env?: map(string)", "stdin?: string", "success_codes?: list(integer)",
                    "stderr_must_be_empty?: boolean", "max_output?: integer", "parse?: map(string)",
                    "hide_output?: boolean", "secret_output?: boolean"}),
            {"exit_code: integer", "stdout: string", "stderr: string", "truncated: boolean",
             "duration_ms: integer", "values: map(string)", "host_key: string"}),
        std::make_shared<SshExec>());
  r.add("ssh.put",
        Signature::of(target({"path: string", "content?: string", "secret_content?: string",
                              "source?: string", "mode?: string", "sudo?: boolean",
                              "sudo_password?: string", "verify?: boolean"}),
                      {"path: string", "size: integer", "sha256: string", "changed: boolean",
                       "host_key: string"}),
        std::make_shared<SshPut>());
  r.add("ssh.get",
        Signature::of(
            target({"path: string", "sudo?: boolean", "sudo_password?: string",
                    "max_bytes?: integer", "hide_output?: boolean", "secret_output?: boolean"}),
            {"content: string", "size: integer", "sha256: string", "host_key: string"}),
        std::make_shared<SshGet>());
}

size_t ssh_pooled_sessions() {
  return Pool::get().size();
}
void ssh_drop_pooled_sessions() {
  Pool::get().clear();
}

}  // namespace actions
