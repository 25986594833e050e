// The engine's metrics: the families it declares (one list, so docs/operations.md and the
// code name the same series) and the collector that reads the store's counts at a scrape.
#include "engine/engine.h"

namespace engine {

namespace {
using Type = base::Metrics::Type;
}  // namespace

void declare_engine_metrics(base::Metrics& m) {
  // 1 ms .. 70 min: a Heat stack may take minutes.
  std::vector<double> seconds = base::Metrics::exponential_buckets(0.001, 4, 12);
  m.declare("vnflow_operations", Type::kGauge,
            "Operations in the database by LCM operation and SOL003 state (read at the scrape).",
            {"operation", "state"});
  m.declare("vnflow_queue_depth", Type::kGauge,
            "Operations requested and not yet started by a daemon (STARTING).", {});
  m.declare("vnflow_running_operations", Type::kGauge,
            "Operations this daemon has loaded and is running.", {});
  m.declare("vnflow_operations_settled_total", Type::kCounter,
            "Operations this daemon brought to COMPLETED, FAILED_TEMP or ROLLED_BACK (each time: "
            "a retried operation counts at FAILED_TEMP and again when it settles).",
            {"operation", "state"});
  m.declare("vnflow_operation_duration_seconds", Type::kHistogram,
            "From the request to the settled state (wall clock; an operator's wait in "
            "FAILED_TEMP included), by LCM operation and state reached.",
            {"operation", "state"}, seconds);
  m.declare("vnflow_commits_total", Type::kCounter,
            "Group commits the executor asked the store for (refused ones included).", {});
  m.declare("vnflow_commit_failures_total", Type::kCounter,
            "Group commits the store refused (the operations are reloaded).", {});
  m.declare("vnflow_transitions_committed_total", Type::kCounter,
            "Operation transitions committed (one per operation per group commit).", {});
  m.declare("vnflow_commit_batch_size", Type::kHistogram,
            "Operations whose transitions one group commit carried.", {},
            base::Metrics::exponential_buckets(1, 2, 11));  // 1 .. 1024
  m.declare("vnflow_commit_duration_seconds", Type::kHistogram,
            "How long one group commit took (the store's transaction, fsync included).", {},
            base::Metrics::exponential_buckets(0.0001, 2, 16));  // 0.1 ms .. 3.3 s
  m.declare("vnflow_actions_total", Type::kCounter,
            "Action calls that ended, by action and result (ok, or the error class).",
            {"action", "result"});
  m.declare("vnflow_action_duration_seconds", Type::kHistogram,
            "How long a state's action ran, from its dispatch to its result.", {"action"}, seconds);
}

void collect_store_metrics(base::Metrics& m, Store& store) {
  auto counts = store.count_ops();
  if (!counts.ok())
    return;  // the last values stay; the scrape still answers
  m.clear("vnflow_operations");
  int64_t queued = 0;
  for (const OpCount& c : counts.value()) {
    m.set("vnflow_operations", {c.operation, to_string(c.state)}, static_cast<double>(c.n));
    if (c.state == OpState::kStarting)
      queued += c.n;
  }
  m.set("vnflow_queue_depth", {}, static_cast<double>(queued));
}

}  // namespace engine
