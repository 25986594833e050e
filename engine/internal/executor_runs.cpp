// The executor (executor.h): stepping, a Run's commits and the calls they allow, results,
// timers, loading and polling, the lease on a shared store, and going idle.
#include <spdlog/spdlog.h>

#include "engine/internal/executor.h"

namespace engine {

void Engine::Impl::advance(LiveRun& r) {
  stepper.advance(r, now(), stopping);
  after_step(r);
}

void Engine::Impl::after_step(LiveRun& r) {
  if (r.timer_at != 0 && (r.timer_at != r.armed_at || !r.timer))
    arm_timer(r, r.timer_at);
  flush(r);
}

void Engine::Impl::flush(LiveRun& r) {
  if (r.committing || (!r.dirty && r.pending.empty() && !r.new_state))
    return;
  std::vector<int> starts;
  Batch b = take_batch(r, starts);
  std::string id = r.id;
  uint64_t gen = r.gen;
  submit(std::move(b), [this, id, gen, starts = std::move(starts)](base::Status st, bool fenced) {
    on_committed(id, gen, starts, st, fenced);
  });
}

Batch Engine::Impl::take_batch(LiveRun& r, std::vector<int>& starts) {
  Batch b = std::move(r.pending);
  r.pending = Batch{};
  Batch::OpWrite w;
  w.op_id = r.id;
  w.epoch = r.epoch;
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
  starts = std::move(r.to_start);
  r.to_start.clear();
  return b;
}

void Engine::Impl::on_committed(const std::string& id, uint64_t gen, const std::vector<int>& starts,
                                base::Status st, bool fenced) {
  auto itr = runs.find(id);
  if (itr == runs.end() || itr->second->gen != gen)
    return;
  LiveRun& r = *itr->second;
  r.committing = false;
  base::LogFields f{{"op_id", r.id}, {"instance_id", r.instance_id}, {"operation", r.operation}};
  if (!st.ok()) {
    note_commit_failure(id, st);
    drop_and_reload(id);
    maybe_idle();
    return;
  }
  if (fenced) {
    // An operator moved it out of the active states (op fail --force), or another daemon
    // holds it now (this daemon's lease ran out): let it go. try_reloads takes it up again
    // only when it is still active and this daemon's (claimed again under a new epoch).
    spdlog::warn(
        "operation {} is no longer active here (forced out, or another daemon's); "
        "it is dropped",
        id);
    drop_and_reload(id);
    {
      std::lock_guard<std::mutex> l(stats_mu);
      stats.running_ops = runs.size();
    }
    maybe_idle();
    return;
  }
  if (r.final_) {
    OpState final_state = r.final_state;
    if (base::Metrics* m = opt.metrics) {
      std::string_view state = to_string(final_state);
      m->add("vnflow_operations_settled_total", {r.operation, state});
      if (r.created_ms > 0)
        m->observe("vnflow_operation_duration_seconds", {r.operation, state},
                   static_cast<double>(std::max<int64_t>(0, now() - r.created_ms)) / 1000);
    }
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

void Engine::Impl::drop_and_reload(const std::string& id) {
  runs.erase(id);
  reload_wanted.insert(id);
  try_reloads();
}

void Engine::Impl::reload_later(const std::string& id, const std::string& why) {
  spdlog::warn("loading operation {}: {}; tried again at the next poll", id, why);
  known.erase(id);
  reload_wanted.insert(id);
}

void Engine::Impl::try_reloads() {
  if (stopping || now() < reload_not_before_ms)
    return;
  // Over a copy: a load that fails again puts its id back for a later poll, not this loop.
  std::set<std::string> todo;
  todo.swap(reload_wanted);
  for (auto it = todo.begin(); it != todo.end(); ++it) {
    const std::string& id = *it;
    // find(), not operator[]: a zero entry would read as an action in flight and keep a
    // draining daemon from ever stopping.
    if (auto r = running_by_op.find(id); r != running_by_op.end() && r->second > 0) {
      reload_wanted.insert(id);
      continue;
    }
    auto op = store.get_op(id);
    if (!op.ok()) {
      // The store is failing; this one and the rest again at the next poll.
      reload_wanted.insert(it, todo.end());
      return;
    }
    known.erase(id);
    if (is_active(op.value().state) && (!shared() || op.value().owner == lease.lease().name))
      load(op.value());
  }
}

void Engine::Impl::launch(LiveRun& r, int i) {
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
  ctx.key = Stepper::key_for(r, st, item_no, it.attempt, rollback, rollback ? d->visit : r.visit());
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
  Dispatcher::Call c;
  c.action = action;
  c.action_name = std::move(action_name);
  c.ctx = std::move(ctx);
  c.inputs = std::move(inputs);
  c.id = id;
  c.gen = gen;
  c.item = i;
  c.cur = cur;
  c.make_work_dir = !r.work_dir_made;
  dispatcher.add(std::move(c));
}

void Engine::Impl::take_results(std::vector<Dispatcher::Result>& got) {
  for (const Dispatcher::Result& f : got) {
    on_result(f.call->id, f.call->gen, f.call->item, f.call->cur, f.out, f.started_ms);
    // A commit starts once enough is stepped, not behind the whole burst: the disk
    // writes one part while this thread steps the rest (with 200 operations running
    // they no longer move in one lockstep group).
    if (!commit_in_flight && queue_size() >= kEarlyCommit)
      commit_now();
  }
}

void Engine::Impl::on_result(const std::string& id, uint64_t gen, int i, int cur,
                             const actions::Outcome& out, int64_t started_ms) {
  if (--running_by_op[id] <= 0)
    running_by_op.erase(id);
  auto itr = runs.find(id);
  if (itr == runs.end() || itr->second->gen != gen) {
    try_reloads();
    maybe_idle();
    return;
  }
  LiveRun& r = *itr->second;
  r.work_dir_made = true;  // by the worker of a call that has returned (Dispatcher::Call)
  if (hard_stop || out.poll_after_ms > 0) {
    // Stopped by the daemon, not failed: leave the item dispatched; the next start
    // re-dispatches it with the same key and no attempt is spent.
    maybe_idle();
    return;
  }
  // The result's event (the first the stepper writes for it) records when the call
  // started: op show --timing splits the operation's time with it.
  size_t before = r.pending.events.size();
  stepper.result(r, cur, i, out, now());
  if (r.pending.events.size() > before)
    r.pending.events[before].started_ms = started_ms;
  advance(r);
  maybe_idle();
}

void Engine::Impl::arm_timer(LiveRun& r, int64_t at_ms) {
  r.armed_at = at_ms;
  if (!r.timer)
    r.timer = std::make_unique<asio::steady_timer>(io);
  int64_t delta = at_ms - now();
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
    itr->second->armed_at = 0;
    advance(*itr->second);
  });
}

std::shared_ptr<const std::vector<char>> Engine::Impl::cyclic(const std::string& digest,
                                                              const Machine& m) {
  std::lock_guard<std::mutex> l(caches_mu);  // Engine::start's thread too
  auto& c = cyclic_cache[digest];
  if (c == nullptr)
    c = cyclic_states(m);
  return c;
}

std::shared_ptr<const Machine> Engine::Impl::machine(const std::string& digest, std::string* err,
                                                     bool* busy) {
  {
    std::lock_guard<std::mutex> l(caches_mu);  // Engine::start's thread too
    auto it = machines.find(digest);
    if (it != machines.end())
      return it->second;
  }
  auto body = store.get_machine(digest);
  if (!body.ok()) {
    *err = body.status().message();
    if (busy != nullptr)
      *busy = body.status().code() == base::StatusCode::kUnavailable;
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
  std::lock_guard<std::mutex> l(caches_mu);
  return machines.emplace(digest, m.value()).first->second;
}

void Engine::Impl::init_run(LiveRun& r, const OpRecord& op) {
  r.id = op.id;
  r.instance_id = op.instance_id;
  r.operation = op.operation;
  r.epoch = op.epoch;
  r.created_ms = op.created_ms;
  r.state = op.state;
  r.request = op.request;
  r.cancel = op.cancel_requested;
  r.opv = json::object{
      {"id", op.id}, {"operation", op.operation}, {"instance_id", op.instance_id}, {"attempt", 1}};
}

void Engine::Impl::load(const OpRecord& op) {
  if (known.count(op.id) || is_starting(op.id))
    return;  // loaded, or start_here's: adopt takes it
  known.insert(op.id);
  auto r = std::make_unique<LiveRun>();
  init_run(*r, op);
  r->gen = next_gen++;
  std::string err;
  bool busy = false;
  r->m = machine(op.machine_digest, &err, &busy);
  auto inst = store.get_instance(op.instance_id);
  if (inst.ok())
    r->instance = inst.value().record;
  if (busy || (!inst.ok() && inst.status().code() == base::StatusCode::kUnavailable)) {
    // The store cannot answer now (a lock held elsewhere, a lost connection): loaded again
    // at a later poll, never failed for it.
    reload_later(op.id, busy ? err : inst.status().message());
    return;
  }
  if (r->m == nullptr || !inst.ok()) {
    // Nothing can run; say why and leave it to the operator.
    r->c.cur = 0;
    stepper.fail_temp(
        *r, "", base::ErrorClass::kInvalid,
        r->m == nullptr ? "cannot load the operation's machine: " + err : inst.status().message(),
        now());
    r->state = op.state;
    LiveRun& ref = *r;
    runs[op.id] = std::move(r);
    flush(ref);
    return;
  }
  // A stored operation that cannot be resumed: FAILED_TEMP, saying why.
  auto cannot_resume = [&](const std::string& why) {
    LiveRun& ref = *r;
    runs[op.id] = std::move(r);
    stepper.fail_temp(ref, "", base::ErrorClass::kInvalid, why, now());
    flush(ref);
  };
  if (op.cursor.is_object()) {
    auto c = Cursor::from_json(op.cursor);
    if (!c.ok()) {
      r->c.cur = r->m->start;
      return cannot_resume(c.status().message());
    }
    r->c = std::move(c).value();
    auto outs = store.outputs(op.id);
    if (!outs.ok()) {
      // Resumed without its states' outputs, the operation would read them as missing.
      if (outs.status().code() == base::StatusCode::kUnavailable) {
        reload_later(op.id, outs.status().message());
        return;
      }
      return cannot_resume("cannot read the operation's outputs: " + outs.status().message());
    }
    for (auto& kv : outs.value())
      r->c.outputs[kv.key()] = std::move(kv.value());
  } else {
    r->c.cur = r->m->start;
  }
  LiveRun& ref = *r;
  runs[op.id] = std::move(r);
  {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.running_ops = runs.size();
  }
  ref.cyclic = cyclic(op.machine_digest, *ref.m);
  for (const auto& state : stepper.resume(ref, op.state, now(), stopping)) {
    base::LogFields f{
        {"op_id", ref.id}, {"instance_id", ref.instance_id}, {"operation", ref.operation}};
    spdlog::error("operation {}: step {} re-dispatched more than {} times; not again", ref.id,
                  state, opt.max_redispatch);
  }
  after_step(ref);
}

void Engine::Impl::poll(bool all) {
  // A daemon whose lease was lost and could not register again tries at every poll.
  if (!lease.held() && (stopping || !register_daemon().ok()))
    return;
  auto ops = store.claim(lease.lease(), all, opt.claim_batch);
  if (!ops.ok())
    spdlog::warn("reading queued operations: {}", ops.status().message());
  if (ops.ok()) {
    for (const auto& op : ops.value()) {
      if (auto rb = running_by_op.find(op.id); rb != running_by_op.end() && rb->second > 0) {
        // Claimed again while a call of its earlier load still runs here (the lease was
        // lost meanwhile): loaded once that call is over, not beside it.
        runs.erase(op.id);
        reload_wanted.insert(op.id);
      } else if (!known.count(op.id) && !reload_wanted.count(op.id)) {
        load(op);
      } else if (shared() && runs.count(op.id) && runs[op.id]->epoch != op.epoch) {
        drop_and_reload(op.id);  // claimed again (this daemon's lease had run out)
      }
    }
  }
  auto cancels = store.cancel_requests();
  if (cancels.ok()) {
    for (const auto& id : cancels.value()) {
      auto it = runs.find(id);
      if (it != runs.end() && !it->second->cancel) {
        stepper.cancel(*it->second, now(), stopping);
        after_step(*it->second);
      }
    }
  }
  try_reloads();
  maybe_idle();
}

base::Status Engine::Impl::register_daemon() {
  return lease.acquire(hard_stop, [this](const std::string& why) {
    asio::post(io, [this, why] { lease_lost(why); });
  });
}

void Engine::Impl::lease_lost(const std::string& why) {
  if (!lease.held())
    return;
  spdlog::error("{}; {} operation(s) let go", why, runs.size());
  for (auto& [id, r] : runs)
    known.erase(id);
  runs.clear();
  reload_wanted.clear();
  {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.running_ops = 0;
  }
  lease.forget();
  if (stopping)
    return;
  if (base::Status rs = register_daemon(); !rs.ok()) {
    spdlog::error("registering again: {}", rs.message());
    return;
  }
  poll(true);
}

void Engine::Impl::schedule_poll() {
  poll_timer.expires_after(opt.poll);
  poll_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec)
      return;
    lease.beat();  // the engine thread runs (LeaseKeeper::beat)
    if (!stopping)
      poll(false);
    if (stopping)
      maybe_idle();
    schedule_poll();
  });
}

void Engine::Impl::maybe_idle() {
  // An operation start_here committed (or is committing) is on its way to adopt.
  bool busy_actions = !running_by_op.empty() || any_starting();
  if (stopping) {
    bool committing = commit_in_flight;
    for (const auto& [id, r] : runs)
      committing = committing || r->committing;
    if (!busy_actions && !committing)
      io.stop();
    return;
  }
  if (until_idle && runs.empty() && reload_wanted.empty() && !busy_actions && !commit_in_flight) {
    auto ops = store.runnable(false);
    if (ops.ok() && ops.value().empty())
      io.stop();
  }
}

}  // namespace engine
