// The executor's state, shared by its files (internal): the Engine's Impl, owned by the
// engine thread, and the shell's part of a Run.
//   executor.cpp       construction, the group commit, Engine::start, the public methods
//   executor_runs.cpp  stepping, a Run's commits and calls, timers, loading, polling, the lease
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio.hpp>
#include <boost/json.hpp>

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
  bool work_dir_made = false;  // a call of this load returned: its work directory exists
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
  // committed here at once, as two hand-offs would cost it more than they save. The
  // committer thread holds one group at a time and, once it is committed, takes the next
  // from the queue itself; the engine thread gets the groups back in commit order.
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

  base::Result<std::string> read_package_file(const std::string& package_id, std::string_view path);

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

  Impl(Store& s, actions::Registry r, EngineOptions o);

  base::Status prepare();

  ~Impl();

  // -------------------------------------------------------------------------------------
  // Commits

  // The next group from the queue (at most max_group batches); the caller holds queue_mu.
  std::shared_ptr<Group> take_group_locked();

  size_t queue_size();

  bool queue_empty();

  void commit_now();

  // The committer thread: commits `group`, and then the queue as it stands, for as long as
  // it holds a large group: a group that waited for the engine thread to take it (behind the
  // results it was stepping) left the disk idle meanwhile. The engine thread gets each group
  // back in order (commit_done).
  void commit_on_committer(std::shared_ptr<Group> group);

  // The store's transaction for a group (the engine thread, or the committer thread while
  // the engine thread goes on): its status and duration go with the group.
  void apply_group(Group& group);

  // On the engine thread, once a group's transaction ended: the counts, the log, the Runs'
  // callbacks, and the calls the commit allowed.
  void commit_done(Group& group);

  // A group's transaction in the counts and the metrics (a group commit's, or the one
  // Engine::start made on its caller's thread); a success ends a streak of failures.
  void count_commit(const Group& group);

  void note_commit_failure(const std::string& id, const base::Status& st);

  void schedule_commit();

  void submit(Batch b, std::function<void(base::Status, bool)> done);

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

  bool is_starting(const std::string& id);
  bool any_starting();

  base::Status start_here(const OpRecord& op);

  // start_here's part on the caller's thread: the run, its first batch and the commit that
  // creates the operation. `run` stays null when nothing was committed.
  base::Status start_commit(const OpRecord& op, std::shared_ptr<LiveRun>& run,
                            std::vector<int>& starts, Group& g, bool& landed);

  // On the engine thread: what start_here committed (or failed to), as commit_done and
  // on_committed take a group's. The run is not taken when the engine stops or already
  // knows the operation: the stored operation is resumed as any other.
  void adopt(const std::string& id, std::shared_ptr<LiveRun> run, const Group& g,
             const std::vector<int>& starts, bool landed);

  void adopt_run(std::shared_ptr<LiveRun> run, const Group& g, const std::vector<int>& starts,
                 bool landed);

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

  void advance(LiveRun& r);

  void after_step(LiveRun& r);

  // -------------------------------------------------------------------------------------
  // Commit of one Run's pending writes, then the side effects it allows

  void flush(LiveRun& r);

  // The run's pending writes as one Batch (its OpWrite last), the calls it may start once
  // that is committed in `starts`; the run is `committing` until on_committed.
  Batch take_batch(LiveRun& r, std::vector<int>& starts);

  void on_committed(const std::string& id, uint64_t gen, const std::vector<int>& starts,
                    base::Status st, bool fenced);

  void drop_and_reload(const std::string& id);

  // A load the store could not serve now: tried again at a later poll (try_reloads).
  void reload_later(const std::string& id, const std::string& why);

  void try_reloads();

  // -------------------------------------------------------------------------------------
  // Actions

  void launch(LiveRun& r, int i);

  void take_results(std::vector<Dispatcher::Result>& got);

  void on_result(const std::string& id, uint64_t gen, int i, int cur, const actions::Outcome& out,
                 int64_t started_ms);

  // -------------------------------------------------------------------------------------
  // Timers, loading, polling

  void arm_timer(LiveRun& r, int64_t at_ms);

  // Which states lie on a cycle, once per machine.
  std::map<std::string, std::shared_ptr<const std::vector<char>>> cyclic_cache;
  std::shared_ptr<const std::vector<char>> cyclic(const std::string& digest, const Machine& m);

  // `busy`: set when the store could not answer now (kUnavailable), not that the machine is bad.
  std::shared_ptr<const Machine> machine(const std::string& digest, std::string* err,
                                         bool* busy = nullptr);

  // A run's fields from its stored (or requested) operation.
  static void init_run(LiveRun& r, const OpRecord& op);

  void load(const OpRecord& op);

  void poll(bool all);

  // -------------------------------------------------------------------------------------
  // The lease on a shared store

  bool shared() const { return lease.shared(); }

  base::Status register_daemon();

  void release() { lease.release(); }

  // Lost: every operation held here may be another daemon's by now. Their commits would be
  // fenced one by one; let them all go at once, register again, and claim anew.
  void lease_lost(const std::string& why);

  void schedule_poll();

  void maybe_idle();
};

}  // namespace engine
