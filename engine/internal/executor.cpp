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
#include "engine/internal/shell.h"
#include "engine/internal/stepper.h"
#include "engine/internal/vim_actions.h"
#include "tosca/tosca.h"

namespace engine {

namespace asio = boost::asio;
using workflows::Machine;
using workflows::State;
using workflows::StateKind;

// The shell's part of a Run: its timer.
struct LiveRun : Run {
  std::unique_ptr<asio::steady_timer> timer;
  int64_t armed_at = 0;
  bool work_dir_made = false;  // the instance's work directory exists (made once per load)
  int64_t epoch = 0;           // the claim this daemon holds it under (Store::claim)
  int64_t created_ms = 0;      // when it was requested (its duration's start, for metrics)
};

struct Engine::Impl {
  Store& store;
  actions::Registry registry;
  EngineOptions opt;
  asio::io_context io{1};  // one thread runs it
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  asio::steady_timer poll_timer{io};
  std::unordered_map<std::string, std::unique_ptr<LiveRun>> runs;
  std::unordered_set<std::string> known;               // loaded, or being reloaded
  std::unordered_map<std::string, int> running_by_op;  // actions in flight, any generation
  std::set<std::string> reload_wanted;
  std::mutex caches_mu;  // machines and cyclic_cache (the engine thread and Engine::start's)
  std::map<std::string, std::shared_ptr<const Machine>> machines;
  uint64_t next_gen = 1;
  bool until_idle = false;
  std::atomic<bool> stopping{false};
  std::atomic<bool> wake_posted{false};  // a wake() read of the queue is on its way
  std::atomic<bool> hard_stop{false};
  Dispatcher dispatcher;  // runs the actions
  // The daemon's lease on a shared store, renewed by a thread of its own from registration
  // on (whatever the engine thread is doing, and before run()).
  LeaseKeeper lease;
  std::function<void(const std::string&, OpState)> settled;
  Stepper stepper{registry, opt.max_redispatch};
  int64_t now() const { return opt.clock->wall_ms(); }

  // Group commit. Batches queue up while the engine thread handles what is ready (action
  // results, timers, polls); one handler posted behind them commits the whole queue in one
  // transaction and then runs the callbacks. Committing on the engine thread saves two
  // thread hand-offs per transition; the batching comes from the event loop.
  //
  // A group of kCommitterGroup batches or more goes to a thread of its own, so that the
  // engine thread steps what comes meanwhile instead of waiting for the disk (with 200
  // operations running, the fsync overlaps the next group's stepping); a smaller one is
  // committed here at once, as two hand-offs would cost it more than they save. One group
  // is in flight at a time.
  static constexpr size_t kCommitterGroup = 8;
  static constexpr size_t kEarlyCommit = 64;
  struct Req {
    Batch batch;
    std::function<void(base::Status, bool fenced)> done;
  };
  // One transaction's batches, and how it ended.
  struct Group {
    std::vector<Req> reqs;
    base::Status status;
    double took_s = 0;
  };
  // Failed commits (disk full, a read-only file): the operations are reloaded from their
  // last commit after a delay that doubles up to 5 s, and the failure is logged once per
  // 10 s with the number of failures since, so a full disk costs neither CPU nor log space.
  int commit_fail_streak = 0;
  int64_t reload_not_before_ms = 0;
  int64_t last_fail_log_ms = 0;
  uint64_t fails_since_log = 0;
  // The batches waiting for a commit, and whether the committer thread holds a group:
  // filled on the engine thread, taken there or by the committer itself (queue_mu).
  std::mutex queue_mu;
  std::vector<Req> queue;
  std::atomic<bool> commit_in_flight{false};
  bool commit_scheduled = false;
  base::WorkQueue committer{1};
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

  ~Impl() {
    lease.stop();
    hard_stop = true;
    dispatcher.join();
    committer.join();
    if (hook_lock_fd >= 0)
      ::close(hook_lock_fd);
  }

  // -------------------------------------------------------------------------------------
  // Commits

  // The next group from the queue (at most max_group batches); the caller holds queue_mu.
  std::shared_ptr<Group> take_group_locked() {
    auto group = std::make_shared<Group>();
    size_t take = std::min(queue.size(), std::max<size_t>(1, opt.max_group));
    if (take == queue.size()) {
      group->reqs.swap(queue);
    } else {
      group->reqs.assign(
          std::make_move_iterator(queue.begin()),
          std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(take)));
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(take));
    }
    return group;
  }

  size_t queue_size() {
    std::lock_guard<std::mutex> l(queue_mu);
    return queue.size();
  }

  bool queue_empty() {
    std::lock_guard<std::mutex> l(queue_mu);
    return queue.empty();
  }

  void commit_now() {
    commit_scheduled = false;
    std::shared_ptr<Group> group;
    {
      std::lock_guard<std::mutex> l(queue_mu);
      if (queue.empty() || commit_in_flight)
        return;  // the committer takes the queue when its group is done
      group = take_group_locked();
      if (group->reqs.size() >= kCommitterGroup)
        commit_in_flight = true;
    }
    if (!commit_in_flight) {
      apply_group(*group);
      commit_done(*group);
      return;
    }
    // A large group: committed on the committer thread while this one steps the results
    // that come meanwhile (they form the next group).
    committer.push([this, group] { commit_on_committer(group); });
  }

  // The committer thread: commits `group`, and then the queue as it stands, for as long as
  // it holds a large group: a group that waited for the engine thread to take it (behind the
  // results it was stepping) left the disk idle meanwhile. The engine thread gets each group
  // back in order (commit_done).
  void commit_on_committer(std::shared_ptr<Group> group) {
    for (;;) {
      apply_group(*group);
      std::shared_ptr<Group> next;
      {
        std::lock_guard<std::mutex> l(queue_mu);
        if (queue.size() >= kCommitterGroup && !hard_stop)
          next = take_group_locked();
        else
          commit_in_flight = false;
      }
      asio::post(io, [this, group] { commit_done(*group); });
      if (next == nullptr)
        return;
      group = std::move(next);
    }
  }

  // The store's transaction for a group (the engine thread, or the committer thread while
  // the engine thread goes on): its status and duration go with the group.
  void apply_group(Group& group) {
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

  // On the engine thread, once a group's transaction ended: the counts, the log, the Runs'
  // callbacks, and the calls the commit allowed.
  void commit_done(Group& group) {
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

  // A group's transaction in the counts and the metrics (a group commit's, or the one
  // Engine::start made on its caller's thread); a success ends a streak of failures.
  void count_commit(const Group& group) {
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

  void note_commit_failure(const std::string& id, const base::Status& st) {
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

  void schedule_commit() {
    if (!commit_scheduled) {
      commit_scheduled = true;
      asio::post(io, [this] { commit_now(); });
    }
  }

  void submit(Batch b, std::function<void(base::Status, bool)> done) {
    {
      std::lock_guard<std::mutex> l(queue_mu);
      queue.push_back({std::move(b), std::move(done)});
    }
    schedule_commit();
  }

  // -------------------------------------------------------------------------------------
  // Engine::start: a new operation created in the commit of its first transition, on the
  // caller's thread. The caller builds the run and steps it as the engine thread would (the
  // stepper is pure; the machine caches are locked), commits that first batch with the
  // operation's row (Store::apply takes the writers in turn), and hands the run to the
  // engine thread, which launches the calls the commit allowed. Two thread hand-offs fewer
  // on the request's path than taking it through the engine thread: under 200 running
  // operations each hand-off waited 0.2-0.4 ms for a CPU (bench/api.sh).

  std::atomic<bool> accepting{false};  // run() is on, the store not shared, not stopping
  // Operations start_here is creating, until adopt took (or declined) them on the engine
  // thread: load() leaves them to adopt, and the engine does not go idle meanwhile (the
  // row is committed before the engine thread holds its run).
  std::mutex starting_mu;
  std::unordered_set<std::string> starting;

  bool is_starting(const std::string& id) {
    std::lock_guard<std::mutex> l(starting_mu);
    return starting.count(id) > 0;
  }
  bool any_starting() {
    std::lock_guard<std::mutex> l(starting_mu);
    return !starting.empty();
  }

  base::Status start_here(const OpRecord& op) {
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

  // start_here's part on the caller's thread: the run, its first batch and the commit that
  // creates the operation. `run` stays null when nothing was committed.
  base::Status start_commit(const OpRecord& op, std::shared_ptr<LiveRun>& run,
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

  // On the engine thread: what start_here committed (or failed to), as commit_done and
  // on_committed take a group's. The run is not taken when the engine stops or already
  // knows the operation: the stored operation is resumed as any other.
  void adopt(const std::string& id, std::shared_ptr<LiveRun> run, const Group& g,
             const std::vector<int>& starts, bool landed) {
    if (run != nullptr)
      adopt_run(std::move(run), g, starts, landed);
    {
      std::lock_guard<std::mutex> l(starting_mu);
      starting.erase(id);
    }
    maybe_idle();
  }

  void adopt_run(std::shared_ptr<LiveRun> run, const Group& g, const std::vector<int>& starts,
                 bool landed) {
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

  // While run() runs the engine thread, start() takes operations.
  struct Accepting {
    Impl& i;
    explicit Accepting(Impl& impl) : i(impl) { i.accepting = !i.shared() && !i.stopping; }
    ~Accepting() { i.accepting = false; }
    Accepting(const Accepting&) = delete;
    Accepting& operator=(const Accepting&) = delete;
  };

  // -------------------------------------------------------------------------------------
  // Stepping: the stepper decides; the shell arms the timer it asks for and commits.

  void advance(LiveRun& r) {
    stepper.advance(r, now(), stopping);
    after_step(r);
  }

  void after_step(LiveRun& r) {
    if (r.timer_at != 0 && (r.timer_at != r.armed_at || !r.timer))
      arm_timer(r, r.timer_at);
    flush(r);
  }

  // -------------------------------------------------------------------------------------
  // Commit of one Run's pending writes, then the side effects it allows

  void flush(LiveRun& r) {
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

  // The run's pending writes as one Batch (its OpWrite last), the calls it may start once
  // that is committed in `starts`; the run is `committing` until on_committed.
  Batch take_batch(LiveRun& r, std::vector<int>& starts) {
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

  void on_committed(const std::string& id, uint64_t gen, const std::vector<int>& starts,
                    base::Status st, bool fenced) {
    auto itr = runs.find(id);
    if (itr == runs.end() || itr->second->gen != gen)
      return;
    LiveRun& r = *itr->second;
    r.committing = false;
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

  void drop_and_reload(const std::string& id) {
    runs.erase(id);
    reload_wanted.insert(id);
    try_reloads();
  }

  // A load the store could not serve now: tried again at a later poll (try_reloads).
  void reload_later(const std::string& id, const std::string& why) {
    spdlog::warn("loading operation {}: {}; tried again at the next poll", id, why);
    known.erase(id);
    reload_wanted.insert(id);
  }

  void try_reloads() {
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

  // -------------------------------------------------------------------------------------
  // Actions

  void launch(LiveRun& r, int i) {
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
    ctx.key =
        Stepper::key_for(r, st, item_no, it.attempt, rollback, rollback ? d->visit : r.visit());
    ctx.work_dir = opt.work_root + "/" + r.instance_id;
    if (!r.work_dir_made) {
      // Once per load, here on the engine thread, before any call of the load can run.
      if (::mkdir(ctx.work_dir.c_str(), 0700) == 0 && hook_uid >= 0 &&
          ::chown(ctx.work_dir.c_str(), static_cast<uid_t>(hook_uid),
                  static_cast<gid_t>(hook_gid)) != 0)
        spdlog::warn("cannot give {} to the hook user", ctx.work_dir);
      r.work_dir_made = true;
    }
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
    dispatcher.add(std::move(c));
  }

  void take_results(std::vector<Dispatcher::Result>& got) {
    for (const Dispatcher::Result& f : got) {
      on_result(f.call->id, f.call->gen, f.call->item, f.call->cur, f.out, f.started_ms);
      // A commit starts once enough is stepped, not behind the whole burst: the disk
      // writes one part while this thread steps the rest (with 200 operations running
      // they no longer move in one lockstep group).
      if (!commit_in_flight && queue_size() >= kEarlyCommit)
        commit_now();
    }
  }

  void on_result(const std::string& id, uint64_t gen, int i, int cur, const actions::Outcome& out,
                 int64_t started_ms) {
    if (--running_by_op[id] <= 0)
      running_by_op.erase(id);
    auto itr = runs.find(id);
    if (itr == runs.end() || itr->second->gen != gen) {
      try_reloads();
      maybe_idle();
      return;
    }
    LiveRun& r = *itr->second;
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

  // -------------------------------------------------------------------------------------
  // Timers, loading, polling

  void arm_timer(LiveRun& r, int64_t at_ms) {
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

  // Which states lie on a cycle, once per machine.
  std::map<std::string, std::shared_ptr<const std::vector<char>>> cyclic_cache;
  std::shared_ptr<const std::vector<char>> cyclic(const std::string& digest, const Machine& m) {
    std::lock_guard<std::mutex> l(caches_mu);  // Engine::start's thread too
    auto& c = cyclic_cache[digest];
    if (c == nullptr)
      c = cyclic_states(m);
    return c;
  }

  // `busy`: set when the store could not answer now (kUnavailable), not that the machine is bad.
  std::shared_ptr<const Machine> machine(const std::string& digest, std::string* err,
                                         bool* busy = nullptr) {
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

  // A run's fields from its stored (or requested) operation.
  static void init_run(LiveRun& r, const OpRecord& op) {
    r.id = op.id;
    r.instance_id = op.instance_id;
    r.operation = op.operation;
    r.epoch = op.epoch;
    r.created_ms = op.created_ms;
    r.state = op.state;
    r.request = op.request;
    r.cancel = op.cancel_requested;
    r.opv = json::object{{"id", op.id},
                         {"operation", op.operation},
                         {"instance_id", op.instance_id},
                         {"attempt", 1}};
  }

  void load(const OpRecord& op) {
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

  void poll(bool all) {
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

  // -------------------------------------------------------------------------------------
  // The lease on a shared store

  bool shared() const { return lease.shared(); }

  base::Status register_daemon() {
    return lease.acquire(hard_stop, [this](const std::string& why) {
      asio::post(io, [this, why] { lease_lost(why); });
    });
  }

  void release() { lease.release(); }

  // Lost: every operation held here may be another daemon's by now. Their commits would be
  // fenced one by one; let them all go at once, register again, and claim anew.
  void lease_lost(const std::string& why) {
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

  void schedule_poll() {
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

  void maybe_idle() {
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
