// The threads that run actions, and the executor's event loop, with a bounded spin.
//
// Waking a sleeping thread costs tens of microseconds on a virtual machine (a futex wake,
// an inter-processor interrupt, often an exit to the hypervisor), and a transition of an
// operation crosses threads twice: the engine thread hands the action to a worker, the
// worker hands the result back. So a thread that has just finished work keeps looking for
// more for a short while (`spin`, default 50 us) before it sleeps: when the answer comes
// within that window no one has to be woken. At most one idle worker spins at a time, and
// nothing spins once the engine has been idle for `spin`, so an idle daemon still uses no
// CPU. docs/architecture.md, "Executor".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace engine::internal {

class WorkPool {
 public:
  WorkPool(size_t threads, std::chrono::microseconds spin);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  void post(std::function<void()> fn);
  // Runs what is queued, then ends the threads. Idempotent.
  void join();

 private:
  void work();
  bool take(std::function<void()>& fn);

  std::chrono::microseconds spin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::atomic<size_t> queued_{0};
  std::atomic<bool> spinning_{false};
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// io.run(), except that after each handler the thread polls for `spin` before it blocks.
// Returns when the io_context is stopped or runs out of work, like run().
void run_spinning(boost::asio::io_context& io, std::chrono::microseconds spin);

}  // namespace engine::internal
