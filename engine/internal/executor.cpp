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
//
// This file: construction, the group commit, Engine::start and the public methods;
// executor_runs.cpp has the rest (executor.h lists it).
#include "engine/internal/executor.h"

#include <filesystem>

#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

namespace engine {

base::Result<std::string> Engine::Impl::read_package_file(const std::string& package_id,
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

Engine::Impl::Impl(Store& s, actions::Registry r, EngineOptions o)
    : store(s),
      registry(std::move(r)),
      opt(std::move(o)),
      dispatcher(io, static_cast<size_t>(std::max(1, opt.workers)), opt.metrics, opt.clock,
                 stopping, hard_stop,
                 [this](std::vector<Dispatcher::Result>& got) { take_results(got); }),
      lease(store, opt.owner, opt.lease_ttl, opt.poll) {
  private_files = store.private_files();
  add_vim_actions(registry, &store);
  if (opt.metrics != nullptr)
    declare_engine_metrics(*opt.metrics);
  if (!opt.hook_user.empty()) {
    // The rule is check_hook_user's (daemon.cpp); here only the ids are read.
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (base::Status st = check_hook_user(opt.hook_user); !st.ok()) {
      hook_user_error = st.message();
    } else if (::getpwnam_r(opt.hook_user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 &&
               found != nullptr) {
      hook_uid = static_cast<int>(pw.pw_uid);
      hook_gid = static_cast<int>(pw.pw_gid);
    } else {
      hook_user_error = "the hook user: no user \"" + opt.hook_user + "\"";
    }
  }
}

base::Status Engine::Impl::prepare() {
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
  // The name first: a second daemon of the same name is refused before it waits for
  // the hooks of the first.
  if (base::Status st = register_daemon(); !st.ok())
    return st;
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

Engine::Impl::~Impl() {
  lease.stop();
  hard_stop = true;
  dispatcher.join();
  committer.join();
  if (hook_lock_fd >= 0)
    ::close(hook_lock_fd);
}

auto Engine::Impl::take_group_locked() -> std::shared_ptr<Group> {
  auto group = std::make_shared<Group>();
  size_t take = std::min(queue.size(), std::max<size_t>(1, opt.max_group));
  if (take == queue.size()) {
    group->reqs.swap(queue);
  } else {
    group->reqs.assign(std::make_move_iterator(queue.begin()),
                       std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(take)));
    queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return group;
}

size_t Engine::Impl::queue_size() {
  std::lock_guard<std::mutex> l(queue_mu);
  return queue.size();
}

bool Engine::Impl::queue_empty() {
  std::lock_guard<std::mutex> l(queue_mu);
  return queue.empty();
}

void Engine::Impl::commit_now() {
  commit_scheduled = false;
  std::shared_ptr<Group> group;
  bool large = false;
  {
    std::lock_guard<std::mutex> l(queue_mu);
    if (queue.empty() || commit_in_flight)
      return;  // the committer takes the queue, or its last commit_done schedules this
    group = take_group_locked();
    large = group->reqs.size() >= kCommitterGroup;
    if (large)
      commit_in_flight = true;
  }
  if (!large) {
    apply_group(*group);
    commit_done(*group);
    return;
  }
  // A large group: committed on the committer thread while this one steps the results
  // that come meanwhile (they form the next group).
  committer.push([this, group] { commit_on_committer(group); });
}

void Engine::Impl::commit_on_committer(std::shared_ptr<Group> group) {
  for (;;) {
    apply_group(*group);
    std::shared_ptr<Group> next;
    {
      std::lock_guard<std::mutex> l(queue_mu);
      if (queue.size() >= kCommitterGroup && !hard_stop)
        next = take_group_locked();
    }
    // The flag is cleared on the engine thread, with the last group's commit_done: no
    // commit starts there before the committer's groups came back, so they come back in
    // commit order, and the engine does not go idle with one of them still on its way.
    bool last = next == nullptr;
    asio::post(io, [this, group, last] {
      if (last)
        commit_in_flight = false;
      commit_done(*group);
    });
    if (last)
      return;
    group = std::move(next);
  }
}

void Engine::Impl::apply_group(Group& group) {
  std::vector<const Batch*> ptrs;
  ptrs.reserve(group.reqs.size());
  for (const auto& r : group.reqs)
    ptrs.push_back(&r.batch);
  auto started = std::chrono::steady_clock::now();
  base::Status st;
  try {
    st = store.apply(ptrs);
  } catch (const std::exception& e) {  // a Store must not throw; if one does, the group
    st = base::Status::Internal(std::string("commit: ") + e.what());  // failed, and the
  } catch (...) {                                                     // engine goes on
    st = base::Status::Internal("commit: an unknown exception");
  }
  if (st.ok() && opt.on_commit)
    opt.on_commit();
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  group.status = st;
  group.took_s = took.count();
}

void Engine::Impl::commit_done(Group& group) {
  const base::Status st = group.status;
  count_commit(group);
  if (st.ok()) {
    for (const auto& r : group.reqs) {
      if (!r.batch.fenced)
        log_committed(r.batch, [this](const std::string& id) {
          auto it = runs.find(id);
          return it != runs.end() ? std::pair{it->second->instance_id, it->second->operation}
                                  : std::pair<std::string, std::string>{};
        });
    }
  }
  for (auto& r : group.reqs)
    r.done(st, r.batch.fenced);
  // The calls those commits allowed, to the workers in one burst.
  dispatcher.flush();
  if (!queue_empty())
    schedule_commit();
  else if (stopping || until_idle)
    maybe_idle();  // a group of dropped Runs only: nothing else would look
}

void Engine::Impl::count_commit(const Group& group) {
  const base::Status& st = group.status;
  {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.commits++;
    stats.batches += group.reqs.size();
    if (!st.ok())
      stats.commit_failures++;
  }
  if (base::Metrics* m = opt.metrics) {
    m->add("vnflow_commits_total", {});
    m->observe("vnflow_commit_duration_seconds", {}, group.took_s);
    m->observe("vnflow_commit_batch_size", {}, static_cast<double>(group.reqs.size()));
    if (st.ok()) {
      size_t written = 0;
      for (const auto& r : group.reqs)
        written += r.batch.fenced ? 0 : 1;
      m->add("vnflow_transitions_committed_total", {}, static_cast<double>(written));
    } else {
      m->add("vnflow_commit_failures_total", {});
    }
  }
  if (st.ok() && commit_fail_streak > 0) {
    spdlog::info("commits succeed again after {} failed ones", commit_fail_streak);
    commit_fail_streak = 0;
    reload_not_before_ms = 0;
  }
}

void Engine::Impl::note_commit_failure(const std::string& id, const base::Status& st) {
  ++commit_fail_streak;
  ++fails_since_log;
  int64_t delay = std::min<int64_t>(5000, 100LL << std::min(commit_fail_streak - 1, 6));
  int64_t t = now();
  reload_not_before_ms = t + delay;
  if (t - last_fail_log_ms >= 10000) {
    spdlog::warn(
        "operation {}: commit failed ({}); {} failed commit(s) since the last report; the "
        "operations are reloaded from their last commit in {} ms (nothing is lost)",
        id, st.message(), fails_since_log, delay);
    last_fail_log_ms = t;
    fails_since_log = 0;
  }
}

void Engine::Impl::schedule_commit() {
  if (!commit_scheduled) {
    commit_scheduled = true;
    asio::post(io, [this] { commit_now(); });
  }
}

void Engine::Impl::submit(Batch b, std::function<void(base::Status, bool)> done) {
  {
    std::lock_guard<std::mutex> l(queue_mu);
    queue.push_back({std::move(b), std::move(done)});
  }
  schedule_commit();
}

bool Engine::Impl::is_starting(const std::string& id) {
  std::lock_guard<std::mutex> l(starting_mu);
  return starting.count(id) > 0;
}

bool Engine::Impl::any_starting() {
  std::lock_guard<std::mutex> l(starting_mu);
  return !starting.empty();
}

base::Status Engine::Impl::start_here(const OpRecord& op) {
  {
    std::lock_guard<std::mutex> l(starting_mu);
    starting.insert(op.id);
  }
  auto g = std::make_shared<Group>();
  std::shared_ptr<LiveRun> run;
  std::vector<int> starts;
  bool landed = false;
  base::Status st = start_commit(op, run, starts, *g, landed);
  // Always handed over, so that the operation leaves `starting` on the engine thread.
  asio::post(io, [this, id = op.id, run = std::move(run), g, starts = std::move(starts),
                  landed]() mutable { adopt(id, std::move(run), *g, starts, landed); });
  return st;
}

base::Status Engine::Impl::start_commit(const OpRecord& op, std::shared_ptr<LiveRun>& run,
                                        std::vector<int>& starts, Group& g, bool& landed) {
  auto r = std::make_unique<LiveRun>();
  init_run(*r, op);
  std::string err;
  bool busy = false;
  r->m = machine(op.machine_digest, &err, &busy);
  if (r->m == nullptr)
    return busy ? base::Status::Unavailable(err)
                : base::Status::Internal("cannot load the operation's machine: " + err);
  auto inst = store.get_instance(op.instance_id);
  if (!inst.ok())
    return inst.status();
  r->instance = inst.value().record;
  r->c.cur = r->m->start;
  r->cyclic = cyclic(op.machine_digest, *r->m);
  Stepper own{registry, opt.max_redispatch};     // the engine thread's is its alone
  (void)own.resume(*r, op.state, now(), false);  // a new operation: nothing re-dispatched
  Batch b = take_batch(*r, starts);
  b.create = op;
  b.create->owner = opt.owner;  // claimed by this commit (its OpWrite) in any case
  g.reqs.push_back({std::move(b), nullptr});
  apply_group(g);
  run = std::move(r);
  const base::Status& st = g.status;
  if (st.ok() && !g.reqs[0].batch.refused.ok())
    return g.reqs[0].batch.refused;  // nothing of it written
  // A failure the store reports after the commit landed (an error at its very end) is
  // told apart by reading the row back: the operation exists and is reloaded from it.
  landed = st.ok() || store.get_op(op.id).ok();
  return landed ? base::Status::Ok() : st;
}

void Engine::Impl::adopt(const std::string& id, std::shared_ptr<LiveRun> run, const Group& g,
                         const std::vector<int>& starts, bool landed) {
  if (run != nullptr)
    adopt_run(std::move(run), g, starts, landed);
  {
    std::lock_guard<std::mutex> l(starting_mu);
    starting.erase(id);
  }
  maybe_idle();
}

void Engine::Impl::adopt_run(std::shared_ptr<LiveRun> run, const Group& g,
                             const std::vector<int>& starts, bool landed) {
  const base::Status& st = g.status;
  count_commit(g);
  const std::string id = run->id;
  if (!st.ok()) {
    note_commit_failure(id, st);
    if (landed && !stopping && !known.count(id)) {
      reload_wanted.insert(id);
      try_reloads();
    }
    return;
  }
  if (g.reqs[0].batch.fenced)
    return;  // refused: nothing written
  log_committed(g.reqs[0].batch, [&](const std::string&) {
    return std::pair{run->instance_id, run->operation};
  });
  if (stopping || known.count(id))
    return;
  known.insert(id);
  run->gen = next_gen++;
  auto owned = std::make_unique<LiveRun>(std::move(*run));
  LiveRun& r = *owned;
  runs[id] = std::move(owned);
  {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.running_ops = runs.size();
  }
  if (r.timer_at != 0)
    arm_timer(r, r.timer_at);
  on_committed(id, r.gen, starts, base::Status::Ok(), false);
  dispatcher.flush();
}

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
  if (base::Status st = impl_->register_daemon(); !st.ok()) {
    spdlog::error("not running operations: {}", st.message());
    return;
  }
  impl_->until_idle = false;
  asio::post(impl_->io, [this] {
    impl_->poll(true);
    impl_->schedule_poll();
  });
  {
    Impl::Accepting taking(*impl_);
    impl_->io.run();
  }
  impl_->io.restart();
  impl_->release();
}

void Engine::run_until_idle() {
  if (base::Status st = impl_->prepare(); !st.ok()) {
    spdlog::error("not running operations: {}", st.message());
    return;
  }
  if (base::Status st = impl_->register_daemon(); !st.ok()) {
    spdlog::error("not running operations: {}", st.message());
    return;
  }
  impl_->until_idle = true;
  asio::post(impl_->io, [this] {
    impl_->poll(true);
    impl_->schedule_poll();
  });
  {
    Impl::Accepting taking(*impl_);
    impl_->io.run();
  }
  impl_->io.restart();
  impl_->poll_timer.cancel();
  impl_->release();
}

void Engine::stop(bool drain) {
  impl_->accepting = false;
  if (!drain)
    impl_->hard_stop = true;
  asio::post(impl_->io, [this] {
    impl_->stopping = true;
    impl_->maybe_idle();
  });
}

void Engine::wake() {
  if (impl_->wake_posted.exchange(true))
    return;
  asio::post(impl_->io, [this] {
    impl_->wake_posted = false;
    if (!impl_->stopping)
      impl_->poll(false);
  });
}

base::Status Engine::start(const OpRecord& op) {
  Impl& e = *impl_;
  if (e.accepting && !e.stopping)
    return e.start_here(op);
  // Queued STARTING instead: the engine reads its queue now (when it runs) or at its start.
  base::Status st = e.store.create_op(op);
  if (st.ok())
    wake();
  return st;
}

bool Engine::takes_starts() const {
  return impl_->accepting;
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
