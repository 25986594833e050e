// The stepper: the pure core of the executor (Temporal's shape). Given an operation's
// compiled machine, its cursor and one input — go on at time `now`, an action's result, a
// resume from the store, an operator's cancel — it decides: the events to append, the
// calls to dispatch, the next wake-up, the record and state changes. It does no I/O and
// reads no clock; the time is an argument. The executor (executor.cpp) is the Asio shell
// around it (group commit, worker pool, timers, reload); replay (replay.cpp) drives the
// same stepper with recorded results, so a replay tests the executor itself.
//
// Inputs and their decisions, all left in the Run for the shell to act on:
//   pending      events, outputs and instance writes for the next commit
//   new_state    an operation state to write (set_error/error_json with it)
//   to_start     item indexes to dispatch once the commit is done (kRollbackItem: the
//                compensation in progress)
//   timer_at     when to call advance() again (0: no wake-up wanted)
//   final_       the operation ended (final_state) once the commit is done
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "workflows/workflows.h"

namespace engine {

constexpr int kRollbackItem = -2;
// A call's for_each runs at most this many items (each returns outputs the cursor keeps).
constexpr size_t kMaxCallItems = 1000;

// History values: secret-named fields redacted, known secrets scrubbed, long strings cut.
// Idempotent: a value already cut is not cut again.
json::value for_history(const json::value& v, const std::vector<std::string>& secrets = {});

// One operation in memory.
struct Run {
  std::string id, instance_id, operation;
  uint64_t gen = 0;  // the shell's load generation
  std::shared_ptr<const workflows::Machine> m;
  json::value request, instance, opv;
  OpState state = OpState::kProcessing;
  Cursor c;
  bool committing = false;  // a commit is in flight: no step until it is done
  bool cancel = false;
  bool claimed = false;
  // Decisions (see the file comment).
  bool final_ = false;
  OpState final_state = OpState::kFailedTemp;
  Batch pending;
  bool dirty = false;
  std::optional<OpState> new_state;
  bool set_error = false;
  std::string error_json;
  std::vector<int> to_start;
  int64_t timer_at = 0;
  // Values known to be secret (secret-named fields of the request and of inputs, secret
  // outputs): scrubbed from every history event and error text.
  std::vector<std::string> secrets;
  // States on a cycle of the machine (a loop can enter them again): only their visits are
  // counted, so the cursor of a long straight machine does not grow.
  std::shared_ptr<const std::vector<char>> cyclic;

  bool is_cyclic(int index) const;
  int visit() const;  // which visit of the current state this is
  void learn_secrets(const json::value& v, bool all);
  // The values at `paths` (secret_fields) of an action's outputs, or of each item's when
  // `outputs` is a fan-out's list.
  void learn_paths(const json::value& outputs, const std::vector<std::string>& paths);
  json::value hist(const json::value& v) const { return for_history(v, secrets); }
  std::string clean(const std::string& msg) const {
    return actions::redact_url_passwords(actions::scrub(msg, secrets));
  }
};

// The VNFCs of an instance record as resource changes compare them (SOL003's id, vduId and
// computeResource).
json::array vnfc_list(const json::value& instance);

// Which states of `m` lie on a cycle (strongly connected components, Tarjan, iterative).
std::shared_ptr<const std::vector<char>> cyclic_states(const workflows::Machine& m);

class Stepper {
 public:
  // `registry` says which actions run inline (instance record, VIM registry) and runs
  // them against the record: the executor's, or replay's whose VIM kinds have no store.
  // Not owned; outlives the Stepper.
  Stepper(const actions::Registry& registry, int max_redispatch)
      : registry_(registry), max_redispatch_(max_redispatch) {}

  // Go as far as the operation can at `now` without waiting for a result. `stopping`: a
  // draining daemon starts no new call.
  void advance(Run& r, int64_t now, bool stopping);
  // The outcome of dispatched item `i` of state `cur` (kRollbackItem: the compensation).
  // Does not advance.
  void result(Run& r, int cur, int i, const actions::Outcome& out, int64_t now);
  // The operation was read from the store in `stored` state (the cursor, outputs and
  // instance record already in `r`): resumed events, an operator's retry, re-dispatch of
  // calls that were in flight (or the poison guard). Then advances. Returns the state
  // names whose step the poison guard stopped (for the shell's log).
  std::vector<std::string> resume(Run& r, OpState stored, int64_t now, bool stopping);
  // An operator's cancel arrived. Then advances.
  void cancel(Run& r, int64_t now, bool stopping);
  // Ends the operation in FAILED_TEMP with the reason.
  void fail_temp(Run& r, const std::string& state, base::ErrorClass cls, const std::string& raw_msg,
                 int64_t now);

  // The idempotency key of one call: "<op>/<state>[@<visit>][<item>][/rollback]/<attempt>".
  static std::string key_for(const Run& r, const workflows::State& s, int item, int attempt,
                             bool rollback, int visit);

 private:
  void event(Run& r, std::string kind, const std::string& state, int item, int attempt,
             std::string key, json::value data);
  workflows::Scope scope(Run& r, const workflows::State& s, int item);
  // The operation settles: its resource changes since it began (Cursor::changes).
  void note_changes(Run& r);
  void write_instance(Run& r);
  void goto_state(Run& r, int next);
  void step_forward(Run& r);
  bool step_action(Run& r, const workflows::State& s);
  bool step_call(Run& r, const workflows::State& s);
  void keep_outputs(Run& r, const std::string& state, json::value out, bool secret);
  bool return_from(Run& r, const workflows::State& s);
  // The frame of call state `call` in progress; nullptr when none (or call < 0).
  static const Frame* frame_of(const Run& r, int call);
  void finish_item(Run& r, const workflows::State& s, int i, const actions::Outcome& out);
  struct Shown {
    json::value view;                // what the history shows
    bool secret = false;             // secret_output: the outputs are secret whole
    std::vector<std::string> paths;  // secret_fields
    std::string refused;             // why secret_fields cannot be honoured
  };
  Shown shown_outputs(Run& r, const json::value& inputs, const json::value& outputs);
  void step_rollback(Run& r);
  bool poisoned(Run& r, Item& it, const std::string& state, int item_no);

  const actions::Kind* inline_kind(std::string_view action) const;

  const actions::Registry& registry_;
  int max_redispatch_;
  // The input being handled.
  int64_t now_ = 0;
  bool stopping_ = false;
};

}  // namespace engine
