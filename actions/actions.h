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
// Not here: the workflow language (workflows/), persistence and scheduling (engine/).
// Threading: a Registry is immutable once built; actions are reentrant.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "base/base.h"

namespace actions {

namespace json = boost::json;

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
  json::value outputs;      // when ok: an object with the catalog's outputs
  std::string error_class;  // when !ok: transient, timeout, failed, invalid
  std::string message;      // when !ok: one line, names the call, no secrets
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
  static Outcome failure(std::string cls, std::string msg) {
    Outcome o;
    o.error_class = std::move(cls);
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

// Actions by catalog name.
class Registry {
 public:
  // local.exec and everything else vnflow ships that runs off the executor thread.
  static Registry standard();
  void add(std::string name, std::shared_ptr<const Action> action);
  const Action* find(std::string_view name) const;

 private:
  std::map<std::string, std::shared_ptr<const Action>, std::less<>> actions_;
};

// The instance-record actions (instance.update, instance.scale, instance.check) are pure
// functions of the record: the executor runs them inline and commits the new record in
// the same transaction as the state's result, so they take effect exactly once.
// Returns the outcome; on success `record` holds the new instance record.
Outcome run_instance_action(std::string_view name, const json::object& inputs, json::value& record);
bool is_instance_action(std::string_view name);

// Hooks of a dead daemon must not run beside the new daemon's re-dispatch of the same
// step. Takes <work_root>/.hooks.lock exclusively (waiting up to `wait` for the supervisors
// of a previous daemon's hooks, which hold it shared, to finish killing their trees), then
// holds it shared for this daemon's hooks. Returns the descriptor (the caller closes it
// when it stops; Context::hook_lock_fd passes it to local.exec).
base::Result<int> claim_hook_lock(const std::string& work_root, std::chrono::milliseconds wait);
// How local.exec isolates hooks from the daemon's files on this machine, for the log.
std::string hook_isolation(bool with_private_files);

// True for field names whose values are secrets (password, token, secret, private key,
// credential...). Such values never reach logs, histories or error text.
bool is_secret_name(std::string_view name);
// Checks an OpenStack VIM's access info (auth_url, user or application credential,
// project) without contacting it; the message says what is missing.
base::Status check_openstack_access(const json::object& access);
// `s` with every occurrence of each of `secrets` replaced by "***" (in the given order: put
// longer secrets first when one contains another).
std::string scrub(std::string s, const std::vector<std::string>& secrets);
// A copy of `v` with every secret-named field's value replaced by "***".
json::value redact(const json::value& v);

}  // namespace actions
