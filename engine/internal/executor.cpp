// The durable executor. One Asio thread owns every Run; actions run on a thread pool; a
// handler on the same thread commits groups of batches. docs/architecture.md, "Executor", explains
// the rules; the short form:
//   - a step that starts a side effect is committed (event "dispatched", key) first;
//   - a result is committed (event "succeeded" / "failed" / "retry_scheduled") before the
//     run moves on, together with the next dispatch when there is one;
//   - a Run never has two commits in flight; results that arrive meanwhile wait for the
//     next one; concurrent Runs share commits;
//   - a failed commit throws the Run away; it is reloaded from the store (its last commit)
//     once its running actions have returned, and re-dispatches with the same keys.
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "engine/internal/vim_actions.h"
#include "tosca/tosca.h"

namespace engine {

namespace asio = boost::asio;
using workflows::Machine;
using workflows::State;
using workflows::StateKind;

namespace {

constexpr size_t kHistoryStringLimit = 4096;

// Collects the string leaves of `v` (or only those under secret-named fields) that are long
// enough to be worth scrubbing.
void collect_secrets(const json::value& v, bool all, std::vector<std::string>& out) {
  if (v.is_string()) {
    std::string_view sv = v.get_string();
    if (all && sv.size() >= 4)
      out.emplace_back(sv);
    // Output usually ends in a newline that a message quoting it drops.
    size_t b = sv.find_first_not_of(" \t\r\n"), e = sv.find_last_not_of(" \t\r\n");
    if (all && b != std::string_view::npos && e - b + 1 >= 4 && e - b + 1 < sv.size())
      out.emplace_back(sv.substr(b, e - b + 1));
  } else if (v.is_array()) {
    for (const auto& x : v.get_array())
      collect_secrets(x, all, out);
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object())
      collect_secrets(kv.value(), all || actions::is_secret_name(kv.key()), out);
  }
}

// True when `v` holds a value the store could not open ("vnflow-sealed:..."): it is never
// handed to an action.
bool holds_sealed(const json::value& v) {
  if (v.is_string())
    return v.get_string().starts_with("vnflow-sealed:");
  if (v.is_array()) {
    for (const auto& x : v.get_array()) {
      if (holds_sealed(x))
        return true;
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (holds_sealed(kv.value()))
        return true;
    }
  }
  return false;
}

bool bool_input(const json::value& inputs, std::string_view name) {
  const json::value* v = inputs.is_object() ? inputs.get_object().if_contains(name) : nullptr;
  return v != nullptr && v->is_bool() && v->get_bool();
}

json::value for_history(const json::value& v, const std::vector<std::string>& secrets = {}) {
  json::value r = actions::redact(v);
  std::function<void(json::value&)> cut = [&](json::value& x) {
    if (x.is_string() && !secrets.empty())
      x = json::string(actions::scrub(std::string(x.get_string()), secrets));
    if (x.is_string() && x.get_string().size() > kHistoryStringLimit) {
      size_t n = x.get_string().size();
      std::string s(x.get_string().subview(0, kHistoryStringLimit));
      x = json::string(s + "...(" + std::to_string(n) + " bytes)");
    } else if (x.is_object()) {
      for (auto& kv : x.get_object())
        cut(kv.value());
    } else if (x.is_array()) {
      for (auto& i : x.get_array())
        cut(i);
    }
  };
  cut(r);
  return r;
}

}  // namespace

struct Run {
  std::string id, instance_id, operation;
  uint64_t gen = 0;
  std::shared_ptr<const Machine> m;
  json::value request, instance, opv;
  OpState state = OpState::kProcessing;
  Cursor c;
  // Runtime only.
  bool committing = false;
  bool final_ = false;
  bool cancel = false;
  bool claimed = false;
  OpState final_state = OpState::kFailedTemp;  // once final_
  Batch pending;
  bool dirty = false;
  std::optional<OpState> new_state;
  bool set_error = false;
  std::string error_json;
  std::vector<int> to_start;  // item indexes; kRollbackItem for the compensation
  std::unique_ptr<asio::steady_timer> timer;
  int64_t timer_at = 0;
  // Values known to be secret (secret-named fields of the request and of inputs, secret
  // outputs): scrubbed from every history event and error text.
  std::vector<std::string> secrets;
  // States on a cycle of the machine (a loop can enter them again): only their visits are
  // counted, so the cursor of a long straight machine does not grow.
  std::shared_ptr<const std::vector<char>> cyclic;
  bool is_cyclic(int index) const {
    return cyclic && index >= 0 && static_cast<size_t>(index) < cyclic->size() &&
           (*cyclic)[static_cast<size_t>(index)] != 0;
  }
  // Which visit of the current state this is.
  int visit() const {
    auto it = c.visits.find(c.cur);
    return is_cyclic(c.cur) && it != c.visits.end() ? it->second : 1;
  }
  void learn_secrets(const json::value& v, bool all) {
    std::vector<std::string> found;
    collect_secrets(v, all, found);
    for (auto& f : found) {
      if (std::find(secrets.begin(), secrets.end(), f) == secrets.end())
        secrets.push_back(std::move(f));
    }
    // Longest first, so that a secret containing another is scrubbed whole.
    std::sort(secrets.begin(), secrets.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  }
  json::value hist(const json::value& v) const { return for_history(v, secrets); }
  std::string clean(const std::string& msg) const { return actions::scrub(msg, secrets); }
};

constexpr int kRollbackItem = -2;

struct Engine::Impl {
  Store& store;
  actions::Registry registry;
  EngineOptions opt;
  asio::io_context io{1};  // one thread runs it
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  asio::thread_pool pool;
  asio::steady_timer poll_timer{io};
  std::unordered_map<std::string, std::unique_ptr<Run>> runs;
  std::unordered_set<std::string> known;               // loaded, or being reloaded
  std::unordered_map<std::string, int> running_by_op;  // actions in flight, any generation
  std::set<std::string> reload_wanted;
  std::map<std::string, std::shared_ptr<const Machine>> machines;
  uint64_t next_gen = 1;
  bool until_idle = false;
  std::atomic<bool> stopping{false};
  std::atomic<bool> hard_stop{false};
  std::function<void(const std::string&, OpState)> settled;

  // Group commit. Batches queue up while the engine thread handles what is ready (action
  // results, timers, polls); one handler posted behind them commits the whole queue in one
  // transaction and then runs the callbacks. Committing on the engine thread saves two
  // thread hand-offs per transition; the batching comes from the event loop.
  struct Req {
    Batch batch;
    std::function<void(base::Status, bool fenced)> done;
  };
  // Failed commits (disk full, a read-only file): the operations are reloaded from their
  // last commit after a delay that doubles up to 5 s, and the failure is logged once per
  // 10 s with the number of failures since, so a full disk costs neither CPU nor log space.
  int commit_fail_streak = 0;
  int64_t reload_not_before_ms = 0;
  int64_t last_fail_log_ms = 0;
  uint64_t fails_since_log = 0;
  std::vector<Req> queue;
  bool commit_scheduled = false;
  mutable std::mutex stats_mu;
  EngineStats stats;

  // Files of onboarded packages for actions (ssh.put source:), each package loaded once.
  std::mutex packages_mu;
  std::map<std::string, std::shared_ptr<const tosca::Package>> packages;

  base::Result<std::string> read_package_file(const std::string& package_id,
                                              std::string_view path) {
    std::shared_ptr<const tosca::Package> pkg;
    {
      std::lock_guard<std::mutex> l(packages_mu);
      auto it = packages.find(package_id);
      if (it != packages.end())
        pkg = it->second;
    }
    if (pkg == nullptr) {
      auto bytes = store.package_bytes(package_id);
      if (!bytes.ok())
        return bytes.status();
      base::Diagnostics diags;
      pkg = tosca::load_package_from_zip_bytes("package " + package_id, std::move(bytes).value(),
                                               tosca::LoadOptions{}, diags);
      if (pkg == nullptr)
        return base::Status::FailedPrecondition("package " + package_id + " cannot be read");
      std::lock_guard<std::mutex> l(packages_mu);
      packages[package_id] = pkg;
    }
    auto f = pkg->read_file(path, 256u << 20);
    if (!f.ok())
      return base::Status::NotFound("the package has no file \"" + std::string(path) + "\" (" +
                                    f.status().message() + ")");
    return f;
  }

  // How actions reach a VIM's credentials: the store opens the sealed record on demand.
  // Built once; each dispatch copies it into the action's Context.
  std::function<base::Result<json::object>(std::string_view)> vim_lookup =
      [this](std::string_view vim_id) -> base::Result<json::object> {
    auto v = store.get_vim(vim_id, true);
    if (!v.ok())
      return v.status();
    const VimRecord& rec = v.value();
    return json::object{
        {"id", rec.id}, {"type", rec.type}, {"access", rec.access}, {"extra", rec.extra}};
  };

  // Instance-record and VIM-registry actions run on this thread, and the record they
  // change is committed with the state's result.
  static bool runs_inline(std::string_view action) {
    return actions::is_instance_action(action) || is_vim_action(action);
  }
  actions::Outcome run_inline(std::string_view action, const json::object& in,
                              json::value& record) {
    if (is_vim_action(action))
      return run_vim_action(&store, action, in, record);
    return actions::run_instance_action(action, in, record);
  }

  // Hooks: who they run as, what they must not read.
  int hook_uid = -1, hook_gid = -1;
  std::string hook_user_error;
  std::vector<std::string> private_files;
  bool prepared = false;
  int hook_lock_fd = -1;

  Impl(Store& s, actions::Registry r, EngineOptions o)
      : store(s),
        registry(std::move(r)),
        opt(std::move(o)),
        pool(static_cast<size_t>(std::max(1, opt.workers))) {
    private_files = store.private_files();
    if (!opt.hook_user.empty()) {
      struct passwd pw {};
      struct passwd* found = nullptr;
      std::vector<char> buf(16384);
      if (::getpwnam_r(opt.hook_user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 ||
          found == nullptr)
        hook_user_error = "no user \"" + opt.hook_user + "\" for hooks";
      else if (::geteuid() != 0)
        hook_user_error = "hooks can run as another user only when the daemon runs as root";
      else if (pw.pw_uid == 0)
        hook_user_error = "the hook user must not be root";
      else {
        hook_uid = static_cast<int>(pw.pw_uid);
        hook_gid = static_cast<int>(pw.pw_gid);
      }
    }
  }

  base::Status prepare() {
    if (prepared)
      return base::Status::Ok();
    if (!hook_user_error.empty())
      return base::Status::InvalidArgument(hook_user_error);
    std::error_code ec;
    bool created = std::filesystem::create_directories(opt.work_root, ec);
    if (ec)
      return base::Status::Unavailable("cannot create the work directory " + opt.work_root + ": " +
                                       ec.message());
    // Traversable by the hook user (its own instance directories are 0700 and its own);
    // otherwise the daemon's alone.
    if (created || hook_uid >= 0)
      ::chmod(opt.work_root.c_str(), hook_uid >= 0 ? 0711 : 0700);
    auto lock = actions::claim_hook_lock(opt.work_root, std::chrono::seconds(30));
    if (!lock.ok())
      return lock.status();
    hook_lock_fd = lock.value();
    spdlog::info("hooks run as {}, isolation: {}",
                 hook_uid >= 0 ? opt.hook_user : std::string("the daemon's user"),
                 actions::hook_isolation(!private_files.empty()));
    static std::atomic<bool> warned{false};
    if (hook_uid < 0 && ::geteuid() == 0 && !warned.exchange(true))
      spdlog::warn(
          "the daemon runs as root and so do its hooks: --hook-user USER runs them "
          "unprivileged");
    prepared = true;
    return base::Status::Ok();
  }

  ~Impl() {
    hard_stop = true;
    pool.join();
    if (hook_lock_fd >= 0)
      ::close(hook_lock_fd);
  }

  // -------------------------------------------------------------------------------------
  // Commits

  void commit_now() {
    commit_scheduled = false;
    if (queue.empty())
      return;
    std::vector<Req> group;
    if (queue.size() <= opt.max_group) {
      group.swap(queue);
    } else {
      group.assign(
          std::make_move_iterator(queue.begin()),
          std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(opt.max_group)));
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(opt.max_group));
      schedule_commit();
    }
    std::vector<const Batch*> ptrs;
    ptrs.reserve(group.size());
    for (const auto& r : group)
      ptrs.push_back(&r.batch);
    base::Status st = store.apply(ptrs);
    {
      std::lock_guard<std::mutex> l(stats_mu);
      stats.commits++;
      stats.batches += group.size();
      if (!st.ok())
        stats.commit_failures++;
    }
    if (st.ok() && commit_fail_streak > 0) {
      spdlog::info("commits succeed again after {} failed ones", commit_fail_streak);
      commit_fail_streak = 0;
      reload_not_before_ms = 0;
    }
    for (auto& r : group)
      r.done(st, r.batch.fenced);
  }

  void note_commit_failure(const std::string& id, const base::Status& st) {
    ++commit_fail_streak;
    ++fails_since_log;
    int64_t delay = std::min<int64_t>(5000, 100LL << std::min(commit_fail_streak - 1, 6));
    int64_t now = now_ms();
    reload_not_before_ms = now + delay;
    if (now - last_fail_log_ms >= 10000) {
      spdlog::warn(
          "operation {}: commit failed ({}); {} failed commit(s) since the last report; the "
          "operations are reloaded from their last commit in {} ms (nothing is lost)",
          id, st.message(), fails_since_log, delay);
      last_fail_log_ms = now;
      fails_since_log = 0;
    }
  }

  void schedule_commit() {
    if (!commit_scheduled) {
      commit_scheduled = true;
      asio::post(io, [this] { commit_now(); });
    }
  }

  void submit(Batch b, std::function<void(base::Status, bool)> done) {
    queue.push_back({std::move(b), std::move(done)});
    schedule_commit();
  }

  // -------------------------------------------------------------------------------------
  // Events and scope

  void event(Run& r, std::string kind, const std::string& state, int item, int attempt,
             std::string key, json::value data) {
    EventRecord e;
    e.op_id = r.id;
    e.seq = ++r.c.seq;
    e.at_ms = now_ms();
    e.kind = std::move(kind);
    e.state = state;
    e.item = item;
    e.attempt = attempt;
    e.key = std::move(key);
    e.data = r.secrets.empty() ? std::move(data) : for_history(data, r.secrets);
    r.pending.events.push_back(std::move(e));
    r.dirty = true;
  }

  workflows::Scope scope(Run& r, const State& s, int item) {
    workflows::Scope sc;
    sc.request = &r.request;
    sc.instance = &r.instance;
    sc.vnfd = &r.m->vnfd;
    sc.op = &r.opv;
    sc.outputs = &r.c.outputs;
    sc.segment = s.segment;
    if (!s.for_each.empty() && item >= 0 && static_cast<size_t>(item) < r.c.values.size()) {
      sc.item = &r.c.values[static_cast<size_t>(item)];
      sc.item_name = s.as;
    }
    return sc;
  }

  // The idempotency key of one call: "<op>/<state>[@<visit>][<item>][/rollback]/<attempt>".
  // A state entered again (a polling loop) is a new visit with keys of its own; a
  // re-dispatch of the same visit after a crash keeps its key.
  static std::string key_for(const Run& r, const State& s, int item, int attempt, bool rollback,
                             int visit) {
    std::string k = r.id + "/" + s.name;
    if (visit > 1)
      k += "@" + std::to_string(visit);
    if (item >= 0 && !s.for_each.empty())
      k += "[" + std::to_string(item) + "]";
    if (rollback)
      k += "/rollback";
    return k + "/" + std::to_string(attempt);
  }

  void fail_temp(Run& r, const std::string& state, const std::string& cls,
                 const std::string& raw_msg) {
    std::string msg = r.clean(raw_msg);
    json::object err{{"state", state}, {"class", cls}, {"message", msg}};
    r.new_state = OpState::kFailedTemp;
    r.set_error = true;
    r.error_json = json::serialize(err);
    event(r, "op_failed_temp", state, -1, 0, "", std::move(err));
    r.final_ = true;
    r.final_state = OpState::kFailedTemp;
  }

  void write_instance(Run& r) {
    Batch::InstanceWrite w;
    w.instance_id = r.instance_id;
    const json::value* st = r.instance.is_object()
                                ? r.instance.get_object().if_contains("instantiation_state")
                                : nullptr;
    w.instantiation_state =
        st != nullptr && st->is_string() ? std::string(st->get_string()) : "NOT_INSTANTIATED";
    w.record = json::serialize(r.instance);
    r.pending.instances.clear();
    r.pending.instances.push_back(std::move(w));
  }

  void goto_state(Run& r, int next) {
    if (r.is_cyclic(next))
      ++r.c.visits[next];
    r.c.cur = next;
    r.c.started = false;
    r.c.items.clear();
    r.c.values.clear();
    r.dirty = true;
  }

  // -------------------------------------------------------------------------------------
  // Stepping

  void advance(Run& r) {
    if (r.final_ || r.committing)
      return;
    if (r.cancel && (r.state == OpState::kProcessing || r.state == OpState::kStarting) &&
        running_items(r) == 0) {
      fail_temp(r, r.m->states[static_cast<size_t>(r.c.cur)].name, "cancelled",
                "cancelled by the operator");
    } else if (r.state == OpState::kRollingBack) {
      step_rollback(r);
    } else {
      step_forward(r);
    }
    flush(r);
  }

  static int running_items(const Run& r) {
    int n = 0;
    for (const auto& it : r.c.items)
      n += it.status == ItemStatus::kDispatched ? 1 : 0;
    if (r.c.rb_item.status == ItemStatus::kDispatched)
      ++n;
    return n;
  }

  void step_forward(Run& r) {
    const Machine& m = *r.m;
    for (int guard = 0; guard < 10000; ++guard) {
      if (r.c.cur < 0 || static_cast<size_t>(r.c.cur) >= m.states.size()) {
        fail_temp(r, "", "invalid", "the operation's position is not a state of its machine");
        return;
      }
      const State& s = m.states[static_cast<size_t>(r.c.cur)];
      switch (s.kind) {
        case StateKind::kChoice: {
          int next = s.next;
          for (const auto& c : s.choices) {
            auto v = workflows::evaluate(*c.expr, scope(r, s, -1));
            if (!v.ok() || !v.value().is_bool()) {
              fail_temp(r, s.name, "invalid",
                        "when ${" + c.condition +
                            "}: " + (v.ok() ? std::string("not a boolean") : v.status().message()));
              return;
            }
            if (v.value().get_bool()) {
              next = c.next;
              break;
            }
          }
          event(r, "choice", s.name, -1, 0, "",
                json::object{{"next", m.states[static_cast<size_t>(next)].name}});
          goto_state(r, next);
          continue;
        }
        case StateKind::kSucceed:
          if (s.next >= 0) {
            goto_state(r, s.next);
            continue;
          }
          r.new_state = OpState::kCompleted;
          r.set_error = true;
          r.error_json.clear();
          event(r, "op_completed", s.name, -1, 0, "", nullptr);
          r.final_ = true;
          r.final_state = OpState::kCompleted;
          return;
        case StateKind::kFail: {
          auto v = s.message.evaluate(scope(r, s, -1));
          std::string msg = v.ok() ? workflows_interpolate(v.value()) : v.status().message();
          fail_temp(r, s.name, "failed", msg);
          return;
        }
        case StateKind::kWait: {
          if (!r.c.started) {
            auto v = s.wait_seconds.evaluate(scope(r, s, -1));
            if (!v.ok() || !v.value().is_number()) {
              fail_temp(r, s.name, "invalid",
                        "wait: " + (v.ok() ? std::string("not a number") : v.status().message()));
              return;
            }
            double secs = v.value().to_number<double>();
            Item it;
            it.status = ItemStatus::kWaiting;
            it.wake_ms = now_ms() + static_cast<int64_t>(secs * 1000);
            r.c.items = {it};
            r.c.started = true;
            event(r, "waiting", s.name, -1, 0, "", json::object{{"seconds", secs}});
          }
          if (now_ms() >= r.c.items[0].wake_ms) {
            goto_state(r, s.next);
            continue;
          }
          arm_timer(r, r.c.items[0].wake_ms);
          return;
        }
        case StateKind::kAction:
          if (!step_action(r, s))
            return;
          continue;
      }
    }
    fail_temp(r, "", "invalid", "more than 10000 steps without a side effect: a loop of choices?");
  }

  // Returns true when the run moved to another state (keep stepping).
  bool step_action(Run& r, const State& s) {
    if (!r.c.started) {
      if (s.for_each_expr) {
        auto v = workflows::evaluate(*s.for_each_expr, scope(r, s, -1));
        if (!v.ok() || !v.value().is_array()) {
          fail_temp(r, s.name, "invalid",
                    "for_each ${" + s.for_each +
                        "}: " + (v.ok() ? std::string("not a list") : v.status().message()));
          return false;
        }
        r.c.values = v.value().get_array();
      } else {
        r.c.values = json::array{nullptr};
      }
      r.c.items.assign(r.c.values.size(), Item{});
      r.c.started = true;
      r.dirty = true;
    }
    int64_t now = now_ms();
    int64_t next_wake = 0;
    for (auto& it : r.c.items) {
      if (it.status == ItemStatus::kWaiting) {
        if (it.wake_ms <= now)
          it.status = ItemStatus::kPending;
        else if (next_wake == 0 || it.wake_ms < next_wake)
          next_wake = it.wake_ms;
      }
    }
    bool inline_action = runs_inline(s.action);
    int in_flight = running_items(r);
    int limit = s.parallelism > 0 ? s.parallelism : std::numeric_limits<int>::max();
    bool any_failed = false;
    for (size_t i = 0; i < r.c.items.size(); ++i) {
      Item& it = r.c.items[i];
      if (it.status == ItemStatus::kFailed)
        any_failed = true;
      if (it.status != ItemStatus::kPending || any_failed)
        continue;
      if (!inline_action && (in_flight >= limit || stopping))
        continue;
      r.opv.as_object()["attempt"] = it.attempt;
      auto in = s.with.evaluate(scope(r, s, static_cast<int>(i)));
      int item_no = s.for_each.empty() ? -1 : static_cast<int>(i);
      if (!in.ok() || !in.value().is_object()) {
        it.status = ItemStatus::kFailed;
        it.cls = "invalid";
        it.msg = "inputs: " + (in.ok() ? std::string("not a map") : in.status().message());
        event(r, "failed", s.name, item_no, it.attempt, "",
              json::object{{"class", it.cls}, {"message", it.msg}});
        any_failed = true;
        continue;
      }
      if (holds_sealed(in.value())) {
        it.status = ItemStatus::kFailed;
        it.cls = "invalid";
        it.msg =
            "inputs: a sealed value could not be opened (a wrong key, or a value moved from "
            "another record); sealed values are never handed to an action";
        event(r, "failed", s.name, item_no, it.attempt, "",
              json::object{{"class", it.cls}, {"message", it.msg}});
        any_failed = true;
        continue;
      }
      r.learn_secrets(in.value(), false);
      std::string key = key_for(r, s, static_cast<int>(i), it.attempt, false, r.visit());
      if (inline_action) {
        json::value before = r.instance;
        auto out = run_inline(s.action, in.value().get_object(), r.instance);
        event(r, "dispatched", s.name, item_no, it.attempt, key,
              json::object{{"action", s.action}, {"inputs", r.hist(in.value())}});
        finish_item(r, s, static_cast<int>(i), out);
        if (out.ok)
          write_instance(r);
        else
          r.instance = std::move(before);
        if (r.c.items[i].status == ItemStatus::kFailed)
          any_failed = true;
        continue;
      }
      it.status = ItemStatus::kDispatched;
      it.inputs = std::move(in).value();
      event(r, "dispatched", s.name, item_no, it.attempt, key,
            json::object{{"action", s.action}, {"inputs", r.hist(it.inputs)}});
      r.to_start.push_back(static_cast<int>(i));
      ++in_flight;
    }
    if (any_failed) {
      if (running_items(r) > 0)
        return false;  // let the others finish; their results are recorded
      const Item* bad = nullptr;
      for (const auto& it : r.c.items) {
        if (it.status == ItemStatus::kFailed) {
          bad = &it;
          break;
        }
      }
      if (s.on_failure >= 0) {
        event(r, "on_failure", s.name, -1, 0, "",
              json::object{{"next", r.m->states[static_cast<size_t>(s.on_failure)].name},
                           {"class", bad->cls},
                           {"message", bad->msg}});
        goto_state(r, s.on_failure);
        return true;
      }
      fail_temp(r, s.name, bad->cls, bad->msg);
      return false;
    }
    bool all_done = true;
    for (const auto& it : r.c.items)
      all_done = all_done && it.status == ItemStatus::kDone;
    if (all_done) {
      if (s.for_each.empty()) {
        r.c.outputs[s.name] = r.c.items.empty() ? json::value() : r.c.items[0].outputs;
      } else {
        json::array outs;
        for (const auto& it : r.c.items)
          outs.push_back(it.outputs);
        r.c.outputs[s.name] = std::move(outs);
      }
      bool secret = false;
      for (const auto& it : r.c.items)
        secret = secret || it.secret;
      std::string text = json::serialize(r.c.outputs[s.name]);
      // Outputs that repeat a known secret (a hook echoing what it was given) are sealed
      // whole too.
      for (size_t k = 0; !secret && k < r.secrets.size(); ++k)
        secret = text.find(r.secrets[k]) != std::string::npos;
      if (secret && std::find(r.c.secret_states.begin(), r.c.secret_states.end(), s.name) ==
                        r.c.secret_states.end())
        r.c.secret_states.push_back(s.name);
      if (secret)
        r.c.seal_body = true;
      r.pending.outputs.push_back({r.id, s.name, std::move(text), secret});
      goto_state(r, s.next);
      return true;
    }
    if (next_wake > 0)
      arm_timer(r, next_wake);
    return false;
  }

  static std::string workflows_interpolate(const json::value& v) {
    return v.is_string() ? std::string(v.get_string()) : json::serialize(v);
  }

  // Records an action's outcome in item `i` of the current state.
  void finish_item(Run& r, const State& s, int i, const actions::Outcome& out) {
    Item& it = r.c.items[static_cast<size_t>(i)];
    int item_no = s.for_each.empty() ? -1 : i;
    bool hidden = bool_input(it.inputs, "hide_output");
    bool secret = bool_input(it.inputs, "secret_output");
    it.inputs = nullptr;
    if (out.ok && !out.pin_host_keys.empty()) {
      // Host keys seen on first use are pinned with the result that saw them.
      if (!r.instance.is_object())
        r.instance = json::object();
      json::value& keys = r.instance.get_object()["host_keys"];
      if (!keys.is_object())
        keys = json::object();
      for (const auto& kv : out.pin_host_keys)
        keys.get_object()[kv.key()] = kv.value();
      write_instance(r);
    }
    if (out.ok) {
      it.status = ItemStatus::kDone;
      it.outputs = out.outputs;
      it.secret = secret;
      if (secret) {
        r.learn_secrets(out.outputs, true);
        r.c.seal_body = true;
      }
      if (s.compensate) {
        // Recorded per item, so that a rollback after a partly failed fan-out undoes the
        // items that did succeed.
        Done d;
        d.state = r.c.cur;
        d.item = i;
        d.outputs = out.outputs;
        d.secret = secret;
        d.visit = r.visit();
        d.value = static_cast<size_t>(i) < r.c.values.size() ? r.c.values[static_cast<size_t>(i)]
                                                             : json::value();
        r.c.done.push_back(std::move(d));
      }
      event(r, "succeeded", s.name, item_no, it.attempt, "",
            secret   ? json::value("*** (secret_output)")
            : hidden ? json::value("*** (hide_output)")
                     : r.hist(out.outputs));
      return;
    }
    bool retryable =
        std::find(s.retry.on.begin(), s.retry.on.end(), out.error_class) != s.retry.on.end() &&
        out.error_class != "invalid" && it.attempt < s.retry.attempts;
    if (retryable) {
      double delay = s.retry.delay_after(it.attempt);
      it.status = ItemStatus::kWaiting;
      it.wake_ms = now_ms() + static_cast<int64_t>(delay * 1000);
      event(r, "retry_scheduled", s.name, item_no, it.attempt, "",
            json::object{{"class", out.error_class}, {"message", out.message}, {"delay_s", delay}});
      it.attempt++;
      return;
    }
    it.status = ItemStatus::kFailed;
    it.cls = out.error_class;
    it.msg = r.clean(out.message);
    event(r, "failed", s.name, item_no, it.attempt, "",
          json::object{{"class", out.error_class}, {"message", it.msg}});
  }

  void step_rollback(Run& r) {
    const Machine& m = *r.m;
    if (!r.c.rb_started) {
      r.c.rb_started = true;
      r.c.rb = static_cast<int>(r.c.done.size()) - 1;
      r.c.rb_item = Item{};
      r.dirty = true;
    }
    while (r.c.rb >= 0) {
      const Done& d = r.c.done[static_cast<size_t>(r.c.rb)];
      const State& s = m.states[static_cast<size_t>(d.state)];
      Item& it = r.c.rb_item;
      if (it.status == ItemStatus::kDispatched)
        return;
      if (it.status == ItemStatus::kFailed) {
        fail_temp(r, s.name, it.cls, "compensation: " + it.msg);
        return;
      }
      if (it.status == ItemStatus::kDone) {
        r.c.rb--;
        it = Item{};
        r.dirty = true;
        continue;
      }
      if (stopping)
        return;
      workflows::Scope sc = scope(r, s, -1);
      sc.self = &d.outputs;
      if (!s.for_each.empty()) {
        sc.item = &d.value;
        sc.item_name = s.as;
      }
      auto in = s.compensate->with.evaluate(sc);
      std::string key = key_for(r, s, s.for_each.empty() ? -1 : d.item, it.attempt, true, d.visit);
      int item_no = s.for_each.empty() ? -1 : d.item;
      if (!in.ok() || !in.value().is_object()) {
        it.status = ItemStatus::kFailed;
        it.cls = "invalid";
        it.msg = "inputs: " + (in.ok() ? std::string("not a map") : in.status().message());
        continue;
      }
      event(r, "compensating", s.name, item_no, it.attempt, key, r.hist(in.value()));
      if (runs_inline(s.compensate->action)) {
        json::value before = r.instance;
        auto out = run_inline(s.compensate->action, in.value().get_object(), r.instance);
        if (out.ok) {
          write_instance(r);
          it.status = ItemStatus::kDone;
          event(r, "compensated", s.name, item_no, it.attempt, "", r.hist(out.outputs));
        } else {
          r.instance = std::move(before);
          it.status = ItemStatus::kFailed;
          it.cls = out.error_class;
          it.msg = r.clean(out.message);
        }
        continue;
      }
      it.status = ItemStatus::kDispatched;
      it.inputs = std::move(in).value();
      r.to_start.push_back(kRollbackItem);
      r.dirty = true;
      return;
    }
    r.new_state = OpState::kRolledBack;
    event(r, "op_rolled_back", "", -1, 0, "", nullptr);
    r.final_ = true;
    r.final_state = OpState::kRolledBack;
  }

  // -------------------------------------------------------------------------------------
  // Commit of one Run's pending writes, then the side effects it allows

  void flush(Run& r) {
    if (r.committing || (!r.dirty && r.pending.empty() && !r.new_state))
      return;
    Batch b = std::move(r.pending);
    r.pending = Batch{};
    Batch::OpWrite w;
    w.op_id = r.id;
    if (!r.claimed) {
      w.owner = opt.owner;
      r.claimed = true;
      if (!r.new_state && r.state == OpState::kStarting)
        r.new_state = OpState::kProcessing;
    }
    if (r.new_state) {
      w.state = r.new_state;
      if (!r.final_)
        r.state = *r.new_state;
    }
    w.cursor = json::serialize(r.c.to_json());
    w.set_error = r.set_error;
    w.error = r.error_json;
    w.wake_at_ms = r.timer_at;
    b.ops.push_back(std::move(w));
    r.new_state.reset();
    r.set_error = false;
    r.dirty = false;
    r.committing = true;
    std::vector<int> starts = std::move(r.to_start);
    r.to_start.clear();
    std::string id = r.id;
    uint64_t gen = r.gen;
    submit(std::move(b), [this, id, gen, starts = std::move(starts)](base::Status st, bool fenced) {
      on_committed(id, gen, starts, st, fenced);
    });
  }

  void on_committed(const std::string& id, uint64_t gen, const std::vector<int>& starts,
                    base::Status st, bool fenced) {
    auto itr = runs.find(id);
    if (itr == runs.end() || itr->second->gen != gen)
      return;
    Run& r = *itr->second;
    r.committing = false;
    if (!st.ok()) {
      note_commit_failure(id, st);
      drop_and_reload(id);
      maybe_idle();
      return;
    }
    if (fenced) {
      // An operator moved it out of the active states (op fail --force): let it go.
      spdlog::warn("operation {} is no longer active in the store; it is dropped here", id);
      runs.erase(itr);
      known.erase(id);
      {
        std::lock_guard<std::mutex> l(stats_mu);
        stats.running_ops = runs.size();
      }
      maybe_idle();
      return;
    }
    if (r.final_) {
      OpState final_state = r.final_state;
      runs.erase(itr);
      known.erase(id);
      {
        std::lock_guard<std::mutex> l(stats_mu);
        stats.running_ops = runs.size();
      }
      if (settled)
        settled(id, final_state);
      maybe_idle();
      return;
    }
    for (int i : starts)
      launch(r, i);
    advance(r);
    if (stopping)
      maybe_idle();
  }

  void drop_and_reload(const std::string& id) {
    runs.erase(id);
    reload_wanted.insert(id);
    try_reloads();
  }

  void try_reloads() {
    if (stopping || now_ms() < reload_not_before_ms)
      return;
    for (auto it = reload_wanted.begin(); it != reload_wanted.end();) {
      // find(), not operator[]: a zero entry would read as an action in flight and keep a
      // draining daemon from ever stopping.
      if (auto r = running_by_op.find(*it); r != running_by_op.end() && r->second > 0) {
        ++it;
        continue;
      }
      std::string id = *it;
      it = reload_wanted.erase(it);
      auto op = store.get_op(id);
      if (!op.ok()) {
        // The store is failing; try again at the next poll.
        reload_wanted.insert(id);
        return;
      }
      known.erase(id);
      if (is_active(op.value().state))
        load(op.value());
    }
  }

  // -------------------------------------------------------------------------------------
  // Actions

  void launch(Run& r, int i) {
    const State& s = r.m->states[static_cast<size_t>(r.c.cur)];
    bool rollback = i == kRollbackItem;
    const Done* d = rollback ? &r.c.done[static_cast<size_t>(r.c.rb)] : nullptr;
    const State& st = rollback ? r.m->states[static_cast<size_t>(d->state)] : s;
    const Item& it = rollback ? r.c.rb_item : r.c.items[static_cast<size_t>(i)];
    std::string action_name = rollback ? st.compensate->action : st.action;
    const actions::Action* action = registry.find(action_name);
    actions::Context ctx;
    ctx.op_id = r.id;
    ctx.instance_id = r.instance_id;
    ctx.state = st.name;
    ctx.attempt = it.attempt;
    int item_no = rollback ? (st.for_each.empty() ? -1 : d->item) : i;
    ctx.key = key_for(r, st, item_no, it.attempt, rollback, rollback ? d->visit : r.visit());
    ctx.work_dir = opt.work_root + "/" + r.instance_id;
    double timeout = rollback ? st.compensate->timeout_s : st.timeout_s;
    ctx.deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>((timeout > 0 ? timeout : 3600) * 1000));
    ctx.cancelled = &hard_stop;
    ctx.run_uid = hook_uid;
    ctx.run_gid = hook_gid;
    ctx.private_files = private_files;
    ctx.hook_lock_fd = hook_lock_fd;
    json::value inputs = it.inputs;
    std::string id = r.id;
    uint64_t gen = r.gen;
    int cur = rollback ? d->state : r.c.cur;
    running_by_op[id]++;
    {
      std::lock_guard<std::mutex> l(stats_mu);
      stats.actions++;
    }
    ctx.vim = vim_lookup;
    if (r.instance.is_object()) {
      const json::object& rec = r.instance.get_object();
      if (auto* hk = rec.if_contains("host_keys"); hk != nullptr && hk->is_object())
        ctx.host_keys = hk->get_object();
      if (auto* pid = rec.if_contains("package_id"); pid != nullptr && pid->is_string()) {
        std::string package_id(pid->get_string());
        ctx.package_file = [this, package_id](std::string_view path) {
          return read_package_file(package_id, path);
        };
      }
    }
    auto job = std::make_shared<Job>();
    job->action = action;
    job->action_name = std::move(action_name);
    job->ctx = std::move(ctx);
    job->inputs = std::move(inputs);
    job->id = id;
    job->gen = gen;
    job->item = i;
    job->cur = cur;
    asio::post(pool, [this, job] { run_job(job); });
  }

  // One dispatched action call. A call that answers "poll again" (Outcome::poll) is
  // called again on the pool after its delay, with the same key and deadline, without a
  // commit; the engine sees one running item until the call settles.
  struct Job {
    const actions::Action* action = nullptr;
    std::string action_name;
    actions::Context ctx;
    json::value inputs;
    std::string id;
    uint64_t gen = 0;
    int item = 0;
    int cur = 0;
    std::unique_ptr<asio::steady_timer> timer;
    int polls = 0;
  };

  void run_job(const std::shared_ptr<Job>& job) {
    actions::Outcome out;
    const actions::Context& ctx = job->ctx;
    if (job->action == nullptr) {
      out = actions::Outcome::failure(
          "invalid", "no implementation of action \"" + job->action_name + "\" in this daemon");
    } else if (!job->inputs.is_object()) {
      out = actions::Outcome::failure("invalid", "inputs are not a map");
    } else {
      if (job->polls == 0 && ::mkdir(ctx.work_dir.c_str(), 0700) == 0 && hook_uid >= 0) {
        if (::chown(ctx.work_dir.c_str(), static_cast<uid_t>(hook_uid),
                    static_cast<gid_t>(hook_gid)) != 0)
          spdlog::warn("cannot give {} to the hook user", ctx.work_dir);
      }
      try {
        out = job->action->run(job->inputs.get_object(), ctx);
      } catch (const std::exception& e) {
        out = actions::Outcome::failure("failed", job->action_name + ": " + e.what());
      }
    }
    if (out.poll_after_ms > 0 && !stopping && !hard_stop) {
      auto wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(out.poll_after_ms);
      if (wake < ctx.deadline) {
        job->polls++;
        job->timer = std::make_unique<asio::steady_timer>(io, wake);
        job->timer->async_wait([this, job](const boost::system::error_code&) {
          asio::post(pool, [this, job] { run_job(job); });
        });
        return;
      }
      out = actions::Outcome::failure("timeout", job->action_name +
                                                     ": not finished within the state's timeout (" +
                                                     std::to_string(job->polls + 1) + " polls)");
    }
    asio::post(io, [this, job, out = std::move(out)] {
      on_result(job->id, job->gen, job->item, job->cur, out);
    });
  }

  void on_result(const std::string& id, uint64_t gen, int i, int cur, const actions::Outcome& out) {
    if (--running_by_op[id] <= 0)
      running_by_op.erase(id);
    auto itr = runs.find(id);
    if (itr == runs.end() || itr->second->gen != gen) {
      try_reloads();
      maybe_idle();
      return;
    }
    Run& r = *itr->second;
    if (hard_stop || out.poll_after_ms > 0) {
      // Stopped by the daemon, not failed: leave the item dispatched; the next start
      // re-dispatches it with the same key and no attempt is spent.
      maybe_idle();
      return;
    }
    if (i == kRollbackItem) {
      const Done& d = r.c.done[static_cast<size_t>(r.c.rb)];
      const State& s = r.m->states[static_cast<size_t>(d.state)];
      Item& it = r.c.rb_item;
      it.inputs = nullptr;
      int item_no = s.for_each.empty() ? -1 : d.item;
      if (out.ok) {
        it.status = ItemStatus::kDone;
        event(r, "compensated", s.name, item_no, it.attempt, "", r.hist(out.outputs));
      } else {
        it.status = ItemStatus::kFailed;
        it.cls = out.error_class;
        it.msg = r.clean(out.message);
        event(r, "failed", s.name, item_no, it.attempt, "",
              json::object{{"class", out.error_class}, {"message", it.msg}});
      }
    } else {
      if (cur != r.c.cur)
        return;  // cannot happen: a state is left only when every item settled
      finish_item(r, r.m->states[static_cast<size_t>(cur)], i, out);
    }
    advance(r);
    maybe_idle();
  }

  // -------------------------------------------------------------------------------------
  // Timers, loading, polling

  void arm_timer(Run& r, int64_t at_ms) {
    if (r.timer_at == at_ms && r.timer)
      return;
    r.timer_at = at_ms;
    if (!r.timer)
      r.timer = std::make_unique<asio::steady_timer>(io);
    int64_t delta = at_ms - now_ms();
    r.timer->expires_after(std::chrono::milliseconds(delta > 0 ? delta : 0));
    std::string id = r.id;
    uint64_t gen = r.gen;
    r.timer->async_wait([this, id, gen](const boost::system::error_code& ec) {
      if (ec)
        return;
      auto itr = runs.find(id);
      if (itr == runs.end() || itr->second->gen != gen)
        return;
      itr->second->timer_at = 0;
      advance(*itr->second);
    });
  }

  // Which states lie on a cycle (strongly connected components, Tarjan, iterative), once per
  // machine.
  std::map<std::string, std::shared_ptr<const std::vector<char>>> cyclic_cache;
  std::shared_ptr<const std::vector<char>> cyclic_states(const std::string& digest,
                                                         const Machine& m) {
    auto it = cyclic_cache.find(digest);
    if (it != cyclic_cache.end())
      return it->second;
    size_t n = m.states.size();
    std::vector<std::vector<int>> out(n);
    for (size_t v = 0; v < n; ++v) {
      const State& s = m.states[v];
      for (int w : {s.next, s.on_failure})
        if (w >= 0 && static_cast<size_t>(w) < n)
          out[v].push_back(w);
      for (const auto& c : s.choices)
        if (c.next >= 0 && static_cast<size_t>(c.next) < n)
          out[v].push_back(c.next);
    }
    auto res = std::make_shared<std::vector<char>>(n, 0);
    std::vector<int> index(n, -1), low(n, 0), stack;
    std::vector<char> on_stack(n, 0);
    int counter = 0;
    for (size_t root = 0; root < n; ++root) {
      if (index[root] >= 0)
        continue;
      std::vector<std::pair<int, size_t>> frames{{static_cast<int>(root), 0}};
      while (!frames.empty()) {
        auto& [v, i] = frames.back();
        auto uv = static_cast<size_t>(v);
        if (i == 0 && index[uv] < 0) {
          index[uv] = low[uv] = counter++;
          stack.push_back(v);
          on_stack[uv] = 1;
        }
        if (i < out[uv].size()) {
          int w = out[uv][i++];
          auto uw = static_cast<size_t>(w);
          if (index[uw] < 0)
            frames.emplace_back(w, 0);
          else if (on_stack[uw])
            low[uv] = std::min(low[uv], index[uw]);
          continue;
        }
        if (low[uv] == index[uv]) {
          std::vector<int> comp;
          int w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[static_cast<size_t>(w)] = 0;
            comp.push_back(w);
          } while (w != v);
          bool self_loop = std::find(out[uv].begin(), out[uv].end(), v) != out[uv].end();
          if (comp.size() > 1 || self_loop)
            for (int c : comp)
              (*res)[static_cast<size_t>(c)] = 1;
        }
        int done_v = v;
        frames.pop_back();
        if (!frames.empty()) {
          auto up = static_cast<size_t>(frames.back().first);
          low[up] = std::min(low[up], low[static_cast<size_t>(done_v)]);
        }
      }
    }
    cyclic_cache[digest] = res;
    return res;
  }

  std::shared_ptr<const Machine> machine(const std::string& digest, std::string* err) {
    auto it = machines.find(digest);
    if (it != machines.end())
      return it->second;
    auto body = store.get_machine(digest);
    if (!body.ok()) {
      *err = body.status().message();
      return nullptr;
    }
    boost::system::error_code ec;
    json::value v = json::parse(body.value(), ec);
    if (ec) {
      *err = "stored machine is not JSON";
      return nullptr;
    }
    auto m = Machine::from_json(v);
    if (!m.ok()) {
      *err = m.status().message();
      return nullptr;
    }
    machines[digest] = m.value();
    return m.value();
  }

  void load(const OpRecord& op) {
    if (known.count(op.id))
      return;
    known.insert(op.id);
    auto r = std::make_unique<Run>();
    r->id = op.id;
    r->instance_id = op.instance_id;
    r->operation = op.operation;
    r->gen = next_gen++;
    r->state = op.state;
    r->request = op.request;
    r->cancel = op.cancel_requested;
    r->opv = json::object{{"id", op.id},
                          {"operation", op.operation},
                          {"instance_id", op.instance_id},
                          {"attempt", 1}};
    std::string err;
    r->m = machine(op.machine_digest, &err);
    auto inst = store.get_instance(op.instance_id);
    if (inst.ok())
      r->instance = inst.value().record;
    if (r->m == nullptr || !inst.ok()) {
      // Nothing can run; say why and leave it to the operator.
      r->c.cur = 0;
      fail_temp(*r, "", "invalid",
                r->m == nullptr ? "cannot load the operation's machine: " + err
                                : inst.status().message());
      r->state = op.state;
      Run& ref = *r;
      runs[op.id] = std::move(r);
      flush(ref);
      return;
    }
    if (op.cursor.is_object()) {
      auto c = Cursor::from_json(op.cursor);
      if (!c.ok()) {
        r->c.cur = r->m->start;
        Run& ref = *r;
        runs[op.id] = std::move(r);
        fail_temp(ref, "", "invalid", c.status().message());
        flush(ref);
        return;
      }
      r->c = std::move(c).value();
      auto outs = store.outputs(op.id);
      if (outs.ok()) {
        for (auto& kv : outs.value())
          r->c.outputs[kv.key()] = std::move(kv.value());
      }
    } else {
      r->c.cur = r->m->start;
    }
    Run& ref = *r;
    runs[op.id] = std::move(r);
    {
      std::lock_guard<std::mutex> l(stats_mu);
      stats.running_ops = runs.size();
    }
    if (op.state == OpState::kStarting)
      event(ref, "op_processing", "", -1, 0, "",
            json::object{{"instance", ref.hist(ref.instance)}});
    else
      event(ref, op.state == OpState::kRollingBack ? "rollback_resumed" : "resumed", "", -1, 0, "",
            json::object{{"state", std::string(to_string(op.state))}});
    // An operator's retry: failed items try again; a rollback's failed compensation too.
    if (ref.state == OpState::kProcessing) {
      for (auto& it : ref.c.items) {
        if (it.status == ItemStatus::kFailed) {
          it.status = ItemStatus::kPending;
          it.attempt++;
          it.redispatches = 0;
          it.cls.clear();
          it.msg.clear();
        }
      }
    }
    if (ref.c.rb_item.status == ItemStatus::kFailed && ref.state == OpState::kRollingBack) {
      ref.c.rb_item.status = ItemStatus::kPending;
      ref.c.rb_item.attempt++;
      ref.c.rb_item.redispatches = 0;
    }
    ref.cyclic = cyclic_states(op.machine_digest, *ref.m);
    if (ref.is_cyclic(ref.c.cur) && !ref.c.visits.count(ref.c.cur))
      ref.c.visits[ref.c.cur] = 1;  // a new operation, or one replayed from here
    // The secrets of the request and of earlier secret outputs, for scrubbing.
    ref.learn_secrets(ref.request, false);
    for (const auto& name : ref.c.secret_states) {
      if (const json::value* o = ref.c.outputs.if_contains(name))
        ref.learn_secrets(*o, true);
    }
    // Dispatched but not finished (a crash or a failed commit): the same key again, unless
    // that happened too often already (a poison step that kills the daemon each time).
    if (ref.state == OpState::kRollingBack) {
      if (ref.c.rb_item.status == ItemStatus::kDispatched) {
        const Done& d = ref.c.done[static_cast<size_t>(ref.c.rb)];
        const std::string& name = ref.m->states[static_cast<size_t>(d.state)].name;
        if (poisoned(ref, ref.c.rb_item, name, -1)) {
          advance(ref);
          return;
        }
        ref.to_start.push_back(kRollbackItem);
        event(ref, "redispatched", name, -1, ref.c.rb_item.attempt, "", nullptr);
      }
    } else if (ref.c.cur >= 0 && static_cast<size_t>(ref.c.cur) < ref.m->states.size()) {
      const State& s = ref.m->states[static_cast<size_t>(ref.c.cur)];
      for (size_t i = 0; i < ref.c.items.size(); ++i) {
        if (ref.c.items[i].status == ItemStatus::kDispatched) {
          if (poisoned(ref, ref.c.items[i], s.name,
                       s.for_each.empty() ? -1 : static_cast<int>(i))) {
            ref.to_start.clear();
            fail_temp(ref, s.name, "failed", ref.c.items[i].msg);
            flush(ref);
            return;
          }
          ref.to_start.push_back(static_cast<int>(i));
          event(ref, "redispatched", s.name, s.for_each.empty() ? -1 : static_cast<int>(i),
                ref.c.items[i].attempt,
                key_for(ref, s, static_cast<int>(i), ref.c.items[i].attempt, false, ref.visit()),
                nullptr);
        }
      }
    }
    advance(ref);
  }

  // Counts a re-dispatch of `it`; past the limit the item fails instead (the reason in its
  // message) and true is returned. An operator's retry resets the count.
  bool poisoned(Run& r, Item& it, const std::string& state, int item_no) {
    it.redispatches++;
    r.dirty = true;
    if (it.redispatches <= opt.max_redispatch)
      return false;
    it.status = ItemStatus::kFailed;
    it.cls = "failed";
    it.msg = "re-dispatched " + std::to_string(it.redispatches - 1) +
             " times after the daemon stopped while this step ran (it may be what stops the "
             "daemon); not dispatched again: `vnflow op retry` runs it again, `op fail` gives up";
    event(r, "failed", state, item_no, it.attempt, "",
          json::object{{"class", it.cls}, {"message", it.msg}});
    spdlog::error("operation {}: step {} {}", r.id, state, it.msg);
    return true;
  }

  void poll(bool all) {
    auto ops = store.runnable(all);
    if (!ops.ok())
      spdlog::warn("reading queued operations: {}", ops.status().message());
    if (ops.ok()) {
      for (const auto& op : ops.value()) {
        if (!known.count(op.id) && !reload_wanted.count(op.id))
          load(op);
      }
    }
    auto cancels = store.cancel_requests();
    if (cancels.ok()) {
      for (const auto& id : cancels.value()) {
        auto it = runs.find(id);
        if (it != runs.end() && !it->second->cancel) {
          it->second->cancel = true;
          event(*it->second, "cancel_requested", "", -1, 0, "", nullptr);
          advance(*it->second);
        }
      }
    }
    try_reloads();
    maybe_idle();
  }

  void schedule_poll() {
    poll_timer.expires_after(opt.poll);
    poll_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec)
        return;
      if (!stopping)
        poll(false);
      if (stopping)
        maybe_idle();
      schedule_poll();
    });
  }

  void maybe_idle() {
    bool busy_actions = !running_by_op.empty();
    if (stopping) {
      bool committing = false;
      for (const auto& [id, r] : runs)
        committing = committing || r->committing;
      if (!busy_actions && !committing)
        io.stop();
      return;
    }
    if (until_idle && runs.empty() && reload_wanted.empty() && !busy_actions) {
      auto ops = store.runnable(false);
      if (ops.ok() && ops.value().empty())
        io.stop();
    }
  }
};

Engine::Engine(Store& store, actions::Registry registry, EngineOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(registry), std::move(options))) {}

Engine::~Engine() = default;

base::Status Engine::prepare() {
  return impl_->prepare();
}

void Engine::run() {
  if (base::Status st = impl_->prepare(); !st.ok()) {
    spdlog::error("not running operations: {}", st.message());
    return;
  }
  impl_->until_idle = false;
  asio::post(impl_->io, [this] {
    impl_->poll(true);
    impl_->schedule_poll();
  });
  impl_->io.run();
  impl_->io.restart();
}

void Engine::run_until_idle() {
  if (base::Status st = impl_->prepare(); !st.ok()) {
    spdlog::error("not running operations: {}", st.message());
    return;
  }
  impl_->until_idle = true;
  asio::post(impl_->io, [this] {
    impl_->poll(true);
    impl_->schedule_poll();
  });
  impl_->io.run();
  impl_->io.restart();
  impl_->poll_timer.cancel();
}

void Engine::stop(bool drain) {
  if (!drain)
    impl_->hard_stop = true;
  asio::post(impl_->io, [this] {
    impl_->stopping = true;
    impl_->maybe_idle();
  });
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  EngineStats s = impl_->stats;

  return s;
}

void Engine::on_settled(std::function<void(const std::string&, OpState)> cb) {
  impl_->settled = std::move(cb);
}

}  // namespace engine
