// Parts of the executor's shell (shell.h): the dispatcher, the lease keeper, the log.
#include "engine/internal/shell.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

namespace engine {

namespace asio = boost::asio;

// ---------------------------------------------------------------------------------------
// Dispatcher

struct Dispatcher::Job {
  Call call;
  std::unique_ptr<asio::steady_timer> timer;
  int polls = 0;
  std::chrono::steady_clock::time_point dispatched = std::chrono::steady_clock::now();
  bool started = false;
  int64_t started_ms = 0;
};

Dispatcher::Dispatcher(asio::io_context& io, size_t workers, base::Metrics* metrics,
                       base::Clock* clock, const std::atomic<bool>& stopping,
                       const std::atomic<bool>& hard_stop,
                       std::function<void(std::vector<Result>&)> on_results)
    : io_(io),
      metrics_(metrics),
      clock_(clock),
      stopping_(stopping),
      hard_stop_(hard_stop),
      on_results_(std::move(on_results)),
      pool_(std::max<size_t>(1, workers)) {}

void Dispatcher::add(Call c) {
  auto job = std::make_shared<Job>();
  job->call = std::move(c);
  queued_.push_back([this, job] { run(job); });
}

void Dispatcher::flush() {
  if (!queued_.empty())
    pool_.push_all(queued_);
}

// Idempotent: every call that may be its run's first makes it (calls of a fan-out run side
// by side), and each gives it to the hook user, so none runs before it is theirs.
void Dispatcher::make_work_dir(const actions::Context& ctx) {
  if (::mkdir(ctx.work_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    spdlog::warn("cannot make the work directory {}: {}", ctx.work_dir, std::strerror(errno));
    return;
  }
  if (ctx.run_uid >= 0 &&
      ::fchownat(AT_FDCWD, ctx.work_dir.c_str(), static_cast<uid_t>(ctx.run_uid),
                 static_cast<gid_t>(ctx.run_gid), AT_SYMLINK_NOFOLLOW) != 0)
    spdlog::warn("cannot give {} to the hook user", ctx.work_dir);
}

void Dispatcher::run(const std::shared_ptr<Job>& job) {
  if (!job->started) {
    // A daemon stopping at once starts no call that waited for a worker: it is left
    // dispatched (executor_runs.cpp, on_result), and the next start dispatches it again with
    // the same key.
    if (hard_stop_)
      return deliver({std::shared_ptr<const Call>(job, &job->call), actions::Outcome::poll(1), 0});
    job->started = true;
    if (job->call.make_work_dir)
      make_work_dir(job->call.ctx);
    auto began = std::chrono::steady_clock::now();
    job->started_ms = clock_->wall_ms();
    // A state's timeout counts from its call's start, not from its dispatch: calls queued
    // behind busy workers (a restart resuming hundreds of operations at once) timed out
    // before they ran, or ran with a fraction of their time.
    if (job->call.ctx.deadline != std::chrono::steady_clock::time_point{})
      job->call.ctx.deadline += began - job->dispatched;
  }
  const Call& c = job->call;
  actions::Outcome out;
  if (c.action == nullptr) {
    out = actions::Outcome::failure(
        base::ErrorClass::kInvalid,
        "no implementation of action \"" + c.action_name + "\" in this daemon");
  } else if (!c.inputs.is_object()) {
    out = actions::Outcome::failure(base::ErrorClass::kInvalid, "inputs are not a map");
  } else {
    try {
      out = c.action->run(c.inputs.get_object(), c.ctx);
    } catch (const std::exception& e) {
      out = actions::Outcome::failure(base::ErrorClass::kFailed, c.action_name + ": " + e.what());
    }
  }
  if (out.poll_after_ms > 0 && !stopping_ && !hard_stop_) {
    auto wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(out.poll_after_ms);
    if (wake < c.ctx.deadline) {
      job->polls++;
      job->timer = std::make_unique<asio::steady_timer>(io_, wake);
      job->timer->async_wait(
          [this, job](const boost::system::error_code&) { pool_.push([this, job] { run(job); }); });
      return;
    }
    out = actions::Outcome::failure(base::ErrorClass::kTimeout,
                                    c.action_name + ": not finished within the state's timeout (" +
                                        std::to_string(job->polls + 1) + " polls)");
  }
  if (metrics_ != nullptr && !hard_stop_ && out.poll_after_ms == 0) {
    std::string_view kind = c.action != nullptr ? std::string_view(c.action_name) : "unknown";
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - job->dispatched;
    metrics_->add("vnflow_actions_total", {kind, out.ok ? "ok" : base::to_string(out.error_class)});
    metrics_->observe("vnflow_action_duration_seconds", {kind}, took.count());
  }
  // The result shares the job's allocation (the call is a member of it).
  deliver({std::shared_ptr<const Call>(job, &job->call), std::move(out), job->started_ms});
}

void Dispatcher::deliver(Result r) {
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    first = finished_.empty();
    finished_.push_back(std::move(r));
  }
  if (first) {
    asio::post(io_, [this] {
      std::vector<Result> got;
      {
        std::lock_guard<std::mutex> l(mu_);
        got.swap(finished_);
      }
      on_results_(got);
    });
  }
}

// ---------------------------------------------------------------------------------------
// LeaseKeeper

base::Status LeaseKeeper::acquire(const std::atomic<bool>& give_up,
                                  std::function<void(std::string)> lost) {
  if (held_)
    return base::Status::Ok();
  auto deadline = std::chrono::steady_clock::now() + ttl_ + std::chrono::seconds(1);
  bool said = false;
  for (;;) {
    auto l = store_.register_daemon(owner_, ttl_.count());
    if (l.ok()) {
      lease_ = l.value();
      held_ = true;
      if (shared()) {
        spdlog::info("daemon \"{}\" registered (start {}), lease {} ms", lease_.name,
                     lease_.incarnation, lease_.ttl_ms);
        start_renewer(std::move(lost));
      }
      return base::Status::Ok();
    }
    if (l.status().code() != base::StatusCode::kFailedPrecondition ||
        std::chrono::steady_clock::now() >= deadline || give_up)
      return l.status();
    if (!said)
      spdlog::info("{}; waiting for that lease to run out", l.status().message());
    said = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void LeaseKeeper::release() {
  if (!held_ || !shared())
    return;
  stop_renewer();
  store_.release(lease_);
  held_ = false;
}

void LeaseKeeper::beat() {
  beat_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                 std::memory_order_relaxed);
}

void LeaseKeeper::start_renewer(std::function<void(std::string)> lost) {
  stop_renewer();
  stop_ = false;
  renewer_ = std::thread([this, l = lease_, lost = std::move(lost)] {
    // Every third of the TTL; after a failed renewal (a timeout, a lost connection) again
    // after a tenth, so that one slow renewal does not let a live daemon's lease run out.
    auto every = std::chrono::milliseconds(std::max<int64_t>(l.ttl_ms / 3, 100));
    auto soon = std::chrono::milliseconds(std::max<int64_t>(l.ttl_ms / 10, 50));
    // No progress for this long: not renewed. A stall shorter than about the TTL and a half
    // keeps the lease (the last renewal before the stall was seen still runs its course).
    auto stall = std::max(std::chrono::milliseconds(l.ttl_ms / 2), 3 * beat_every_);
    auto next = every;
    bool stalled = false;
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, next, [this] { return stop_; })) {
      // Until the engine's first beat (a started daemon whose engine does not run yet)
      // there is no progress to judge: the lease is renewed.
      int64_t beat = beat_ns_.load(std::memory_order_relaxed);
      auto since = std::chrono::steady_clock::now() -
                   std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(beat));
      if (beat != 0 && since > stall) {
        if (!stalled)
          spdlog::error(
              "the engine has made no progress for {} ms: the lease is not renewed, so that "
              "another daemon may take over its operations when it runs out",
              std::chrono::duration_cast<std::chrono::milliseconds>(since).count());
        stalled = true;
        next = soon;
        continue;
      }
      if (stalled)
        spdlog::warn("the engine makes progress again; renewing the lease");
      stalled = false;
      lk.unlock();
      base::Status st = store_.renew(l);
      lk.lock();
      if (st.code() == base::StatusCode::kAborted) {
        lost(st.message());
        return;
      }
      next = st.ok() ? every : soon;
      if (!st.ok())
        spdlog::warn("renewing the lease: {}", st.message());
    }
  });
}

void LeaseKeeper::stop_renewer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id())
    renewer_.join();
}

// ---------------------------------------------------------------------------------------
// The log

void log_committed(
    const Batch& b,
    const std::function<std::pair<std::string, std::string>(const std::string&)>& who) {
  for (const EventRecord& e : b.events) {
    const json::object* data = e.data.is_object() ? &e.data.get_object() : nullptr;
    auto text = [data](const char* key) {
      const json::value* v = data != nullptr ? data->if_contains(key) : nullptr;
      return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
    };
    // What the line says after the operation's name, and how loud; other events are not
    // logged.
    spdlog::level::level_enum level = spdlog::level::info;
    std::string says;
    if (e.kind == "op_processing") {
      says = "PROCESSING";
    } else if (e.kind == "op_completed") {
      says = "COMPLETED";
    } else if (e.kind == "op_rolled_back") {
      says = "ROLLED_BACK";
    } else if (e.kind == "compensating") {
      says = "rolling back: compensating " + e.state;
    } else if (e.kind == "op_failed_temp") {
      level = spdlog::level::warn;
      says = "FAILED_TEMP at " + e.state + ": " + text("message");
    } else if (e.kind == "failed" || e.kind == "retry_scheduled") {
      level = spdlog::level::warn;
      says = fmt::format("{}{} attempt {} failed ({}): {}", e.state,
                         e.item >= 0 ? " item " + std::to_string(e.item) : "", e.attempt,
                         text("class"), text("message"));
      if (e.kind == "retry_scheduled") {
        const json::value* d = data != nullptr ? data->if_contains("delay_s") : nullptr;
        says += fmt::format("; retried in {:.3g} s", d != nullptr ? d->to_number<double>() : 0.0);
      }
    } else {
      continue;
    }
    auto [instance, operation] = who(e.op_id);
    base::LogFields f{{"op_id", e.op_id},
                      {"instance_id", instance},
                      {"operation", operation},
                      {"state", e.state},
                      {"attempt", e.attempt > 0 ? std::to_string(e.attempt) : ""},
                      {"item", e.item >= 0 ? std::to_string(e.item) : ""},
                      {"event", e.kind}};
    spdlog::log(level, "operation {} ({} of instance {}): {}", e.op_id, operation, instance, says);
  }
}

}  // namespace engine
