// WorkPool and run_spinning (work_pool.h).
#include "engine/internal/work_pool.h"

#include <boost/asio.hpp>

namespace engine::internal {

namespace {

using SteadyClock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

WorkPool::WorkPool(size_t threads, std::chrono::microseconds spin) : spin_(spin) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { work(); });
}

WorkPool::~WorkPool() {
  join();
}

void WorkPool::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(fn));
    queued_.fetch_add(1);
  }
  // A spinning worker sees queued_ and takes the job without being woken. The spinner
  // clears spinning_ before its last look at queued_, so between the two of us one sees
  // the other (both are sequentially consistent): either it takes the job or we wake
  // someone.
  if (!spinning_.load())
    cv_.notify_one();
}

bool WorkPool::take(std::function<void()>& fn) {
  if (q_.empty())
    return false;
  fn = std::move(q_.front());
  q_.pop_front();
  queued_.fetch_sub(1);
  return true;
}

void WorkPool::work() {
  std::function<void()> fn;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (!take(fn)) {
        if (stop_)
          return;
        l.unlock();
        // Spin for a while, one worker at a time, then sleep.
        if (spin_.count() > 0 && !spinning_.exchange(true)) {
          auto until = SteadyClock::now() + spin_;
          while (queued_.load() == 0 && SteadyClock::now() < until)
            cpu_relax();
          spinning_.store(false);
          if (queued_.load() > 0)
            continue;
        }
        l.lock();
        cv_.wait(l, [&] { return !q_.empty() || stop_; });
        if (!take(fn))
          return;  // stopped, nothing left
      }
    }
    fn();
    fn = nullptr;
  }
}

void WorkPool::join() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ && threads_.empty())
      return;
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  threads_.clear();
}

void run_spinning(boost::asio::io_context& io, std::chrono::microseconds spin) {
  if (spin.count() <= 0) {
    io.run();
    return;
  }
  while (!io.stopped()) {
    if (io.poll() > 0)
      continue;
    if (io.stopped())
      return;
    auto until = SteadyClock::now() + spin;
    bool got = false;
    while (!got && SteadyClock::now() < until) {
      got = io.poll_one() > 0;
      if (io.stopped())
        return;
    }
    if (!got && io.run_one() == 0)
      return;
  }
}

}  // namespace engine::internal
