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
#include <spdlog/spdlog.h>

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

json::value for_history(const json::value& v) {
  json::value r = actions::redact(v);
  std::function<void(json::value&)> cut = [&](json::value& x) {
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
    std::function<void(base::Status)> done;
  };
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

  Impl(Store& s, actions::Registry r, EngineOptions o)
      : store(s),
        registry(std::move(r)),
        opt(std::move(o)),
        pool(static_cast<size_t>(std::max(1, opt.workers))) {}

  ~Impl() {
    hard_stop = true;
    pool.join();
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
    for (auto& r : group)
      r.done(st);
  }

  void schedule_commit() {
    if (!commit_scheduled) {
      commit_scheduled = true;
      asio::post(io, [this] { commit_now(); });
    }
  }

  void submit(Batch b, std::function<void(base::Status)> done) {
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
    e.data = std::move(data);
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

  static std::string key_for(const Run& r, const State& s, int item, int attempt, bool rollback) {
    std::string k = r.id + "/" + s.name;
    if (item >= 0 && !s.for_each.empty())
      k += "[" + std::to_string(item) + "]";
    if (rollback)
      k += "/rollback";
    return k + "/" + std::to_string(attempt);
  }

  void fail_temp(Run& r, const std::string& state, const std::string& cls, const std::string& msg) {
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
      std::string key = key_for(r, s, static_cast<int>(i), it.attempt, false);
      if (inline_action) {
        json::value before = r.instance;
        auto out = run_inline(s.action, in.value().get_object(), r.instance);
        event(r, "dispatched", s.name, item_no, it.attempt, key,
              json::object{{"action", s.action}, {"inputs", for_history(in.value())}});
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
            json::object{{"action", s.action}, {"inputs", for_history(it.inputs)}});
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
      r.pending.outputs.push_back({r.id, s.name, json::serialize(r.c.outputs[s.name])});
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
    const json::value* hide =
        it.inputs.is_object() ? it.inputs.get_object().if_contains("hide_output") : nullptr;
    bool hidden = hide != nullptr && hide->is_bool() && hide->get_bool();
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
      if (s.compensate) {
        // Recorded per item, so that a rollback after a partly failed fan-out undoes the
        // items that did succeed.
        Done d;
        d.state = r.c.cur;
        d.item = i;
        d.outputs = out.outputs;
        d.value = static_cast<size_t>(i) < r.c.values.size() ? r.c.values[static_cast<size_t>(i)]
                                                             : json::value();
        r.c.done.push_back(std::move(d));
      }
      event(r, "succeeded", s.name, item_no, it.attempt, "",
            hidden ? json::value("*** (hide_output)") : for_history(out.outputs));
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
    it.msg = out.message;
    event(r, "failed", s.name, item_no, it.attempt, "",
          json::object{{"class", out.error_class}, {"message", out.message}});
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
      std::string key = key_for(r, s, s.for_each.empty() ? -1 : d.item, it.attempt, true);
      int item_no = s.for_each.empty() ? -1 : d.item;
      if (!in.ok() || !in.value().is_object()) {
        it.status = ItemStatus::kFailed;
        it.cls = "invalid";
        it.msg = "inputs: " + (in.ok() ? std::string("not a map") : in.status().message());
        continue;
      }
      event(r, "compensating", s.name, item_no, it.attempt, key, for_history(in.value()));
      if (runs_inline(s.compensate->action)) {
        json::value before = r.instance;
        auto out = run_inline(s.compensate->action, in.value().get_object(), r.instance);
        if (out.ok) {
          write_instance(r);
          it.status = ItemStatus::kDone;
          event(r, "compensated", s.name, item_no, it.attempt, "", for_history(out.outputs));
        } else {
          r.instance = std::move(before);
          it.status = ItemStatus::kFailed;
          it.cls = out.error_class;
          it.msg = out.message;
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
    submit(std::move(b), [this, id, gen, starts = std::move(starts)](base::Status st) {
      on_committed(id, gen, starts, st);
    });
  }

  void on_committed(const std::string& id, uint64_t gen, const std::vector<int>& starts,
                    base::Status st) {
    auto itr = runs.find(id);
    if (itr == runs.end() || itr->second->gen != gen)
      return;
    Run& r = *itr->second;
    r.committing = false;
    if (!st.ok()) {
      spdlog::warn("operation {}: commit failed ({}); reloading it from its last commit", id,
                   st.message());
      drop_and_reload(id);
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
    for (auto it = reload_wanted.begin(); it != reload_wanted.end();) {
      if (running_by_op[*it] > 0) {
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
    ctx.key = key_for(r, st, item_no, it.attempt, rollback);
    ctx.work_dir = opt.work_root + "/" + r.instance_id;
    double timeout = rollback ? st.compensate->timeout_s : st.timeout_s;
    ctx.deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>((timeout > 0 ? timeout : 3600) * 1000));
    ctx.cancelled = &hard_stop;
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
      std::error_code ec;
      if (job->polls == 0)
        std::filesystem::create_directories(ctx.work_dir, ec);
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
        event(r, "compensated", s.name, item_no, it.attempt, "", for_history(out.outputs));
      } else {
        it.status = ItemStatus::kFailed;
        it.cls = out.error_class;
        it.msg = out.message;
        event(r, "failed", s.name, item_no, it.attempt, "",
              json::object{{"class", out.error_class}, {"message", out.message}});
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
            json::object{{"instance", for_history(ref.instance)}});
    else
      event(ref, op.state == OpState::kRollingBack ? "rollback_resumed" : "resumed", "", -1, 0, "",
            json::object{{"state", std::string(to_string(op.state))}});
    // An operator's retry: failed items try again; a rollback's failed compensation too.
    if (ref.state == OpState::kProcessing) {
      for (auto& it : ref.c.items) {
        if (it.status == ItemStatus::kFailed) {
          it.status = ItemStatus::kPending;
          it.attempt++;
          it.cls.clear();
          it.msg.clear();
        }
      }
    }
    if (ref.c.rb_item.status == ItemStatus::kFailed && ref.state == OpState::kRollingBack) {
      ref.c.rb_item.status = ItemStatus::kPending;
      ref.c.rb_item.attempt++;
    }
    // Dispatched but not finished (a crash or a failed commit): the same key again.
    if (ref.state == OpState::kRollingBack) {
      if (ref.c.rb_item.status == ItemStatus::kDispatched) {
        ref.to_start.push_back(kRollbackItem);
        const Done& d = ref.c.done[static_cast<size_t>(ref.c.rb)];
        event(ref, "redispatched", ref.m->states[static_cast<size_t>(d.state)].name, -1,
              ref.c.rb_item.attempt, "", nullptr);
      }
    } else if (ref.c.cur >= 0 && static_cast<size_t>(ref.c.cur) < ref.m->states.size()) {
      const State& s = ref.m->states[static_cast<size_t>(ref.c.cur)];
      for (size_t i = 0; i < ref.c.items.size(); ++i) {
        if (ref.c.items[i].status == ItemStatus::kDispatched) {
          ref.to_start.push_back(static_cast<int>(i));
          event(ref, "redispatched", s.name, s.for_each.empty() ? -1 : static_cast<int>(i),
                ref.c.items[i].attempt,
                key_for(ref, s, static_cast<int>(i), ref.c.items[i].attempt, false), nullptr);
        }
      }
    }
    advance(ref);
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

void Engine::run() {
  impl_->until_idle = false;
  asio::post(impl_->io, [this] {
    impl_->poll(true);
    impl_->schedule_poll();
  });
  impl_->io.run();
  impl_->io.restart();
}

void Engine::run_until_idle() {
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
