// Parts of the executor's shell (executor.cpp) that hold none of its Runs: the dispatcher
// of action calls, the daemon's lease on a shared store, and the log's account of what a
// commit wrote.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/json.hpp>

#include "actions/actions.h"
#include "base/base.h"
#include "engine/engine.h"

namespace engine {

// Action calls run on worker threads, handed over in bursts (base::WorkQueue); their results
// come back to the engine's io_context in bursts too: the first result of a burst posts one
// handler, which takes every result that came meanwhile (a post per result would wake the
// engine thread for each). A call that answers "poll again" (Outcome::poll) is called again
// on the workers after its delay, with the same key and deadline, without a commit.
class Dispatcher {
 public:
  struct Call {
    const actions::Action* action = nullptr;  // null: no implementation in this daemon
    std::string action_name;
    actions::Context ctx;
    json::value inputs;
    std::string id;  // the operation's
    uint64_t gen = 0;
    int item = 0;
    int cur = 0;
    // The worker makes ctx.work_dir (0700, the hook user's) before the action runs, until a
    // call of the run returned: the engine thread did, for every operation loaded, and 200
    // operations resumed at once waited 20 ms behind their directories (0.1 ms a mkdir).
    bool make_work_dir = false;
  };
  struct Result {
    std::shared_ptr<const Call> call;
    actions::Outcome out;
    int64_t started_ms = 0;  // when the first call started (the clock's wall time)
  };
  // `on_results` runs on the io_context's thread with each burst of results. `stopping`
  // (draining) and `hard_stop` end polling: the call is left dispatched, and a result
  // with poll_after_ms > 0 says so. Not owned: they outlive the Dispatcher.
  Dispatcher(boost::asio::io_context& io, size_t workers, base::Metrics* metrics,
             base::Clock* clock, const std::atomic<bool>& stopping,
             const std::atomic<bool>& hard_stop,
             std::function<void(std::vector<Result>&)> on_results);

  // On the engine thread: queues a call until flush().
  void add(Call c);
  // On the engine thread: the queued calls to the workers, in one burst.
  void flush();
  // Runs what is queued, then ends the workers.
  void join() { pool_.join(); }

 private:
  struct Job;
  void run(const std::shared_ptr<Job>& job);
  void deliver(Result r);
  static void make_work_dir(const actions::Context& ctx);

  boost::asio::io_context& io_;
  base::Metrics* metrics_;
  base::Clock* clock_;
  const std::atomic<bool>& stopping_;
  const std::atomic<bool>& hard_stop_;
  std::function<void(std::vector<Result>&)> on_results_;
  std::vector<std::function<void()>> queued_;
  std::mutex mu_;
  std::vector<Result> finished_;
  base::WorkQueue pool_;  // last: its threads end before the rest goes
};

// A daemon's lease on a shared store (Store::register_daemon): taken on start, renewed by a
// thread of its own every third of its TTL whatever the engine thread is doing, and given
// back on a clean stop. A private store's lease has no TTL: nothing to renew.
class LeaseKeeper {
 public:
  // `beat_every`: how often a healthy engine thread calls beat() (its poll interval).
  LeaseKeeper(Store& store, std::string owner, std::chrono::milliseconds ttl,
              std::chrono::milliseconds beat_every = std::chrono::milliseconds(50))
      : store_(store), owner_(std::move(owner)), ttl_(ttl), beat_every_(beat_every) {}
  ~LeaseKeeper() { stop_renewer(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Registers; a restart of the same name waits (up to the TTL and a second, or until
  // `give_up`) for the lease of its previous start to run out. `lost` is called on the
  // renewing thread when the store says the lease is gone (another daemon may hold its
  // operations by now). No-op when held.
  base::Status acquire(const std::atomic<bool>& give_up, std::function<void(std::string)> lost);
  // After a clean stop: the lease ends, and what is active here goes back to the pool.
  void release();
  // Stops renewing (the lease runs out by itself).
  void stop() { stop_renewer(); }
  // The lease was lost: acquire() registers anew.
  void forget() { held_ = false; }
  bool held() const { return held_; }
  // The engine thread's sign of progress (each run of its poll timer). The renewal runs on
  // a thread and a connection of its own, so a live lease would otherwise prove only that
  // the renewer runs: while no beat came for half the TTL (and three beats' time), the lease
  // is not renewed, and a daemon whose engine thread is wedged lets its operations go to
  // another daemon when the lease runs out (docs/persistence.md). Before the first beat
  // (started, not yet running) the lease is renewed.
  void beat();
  bool shared() const { return lease_.ttl_ms > 0; }
  const Store::Lease& lease() const { return lease_; }

 private:
  void start_renewer(std::function<void(std::string)> lost);
  void stop_renewer();

  Store& store_;
  std::string owner_;
  std::chrono::milliseconds ttl_;
  std::chrono::milliseconds beat_every_;
  std::atomic<int64_t> beat_ns_{0};  // steady clock, at the last beat()
  Store::Lease lease_;
  bool held_ = false;
  std::thread renewer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// The log's account of an operation, from a committed batch: its start, its settled state
// and every failed attempt (the log never tells what the history lacks). Each line carries
// the operation's fields (base::LogFields) for a JSON log. `who` gives an operation's
// instance and operation name (empty when unknown).
void log_committed(
    const Batch& b,
    const std::function<std::pair<std::string, std::string>(const std::string&)>& who);

}  // namespace engine
