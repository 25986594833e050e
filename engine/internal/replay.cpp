// replay --dry-run: drives the executor's own stepper (stepper.h) with an operation's
// recorded inputs — action results, resumes after a restart or an operator's retry or
// rollback, cancels, timers — and compares every event it decides with the recorded one.
// Nothing runs: inline record actions run on the replay's copy of the record, the VIM ones
// without a store.
#include <algorithm>
#include <cstdlib>
#include <limits>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "engine/internal/stepper.h"
#include "engine/internal/vim_actions.h"

namespace engine {

namespace json = boost::json;
using workflows::Machine;
using workflows::State;

namespace {

std::string where(const EventRecord& e) {
  std::string w = e.kind;
  if (!e.state.empty())
    w.append(" ").append(e.state);
  if (e.item >= 0)
    w.append("[").append(std::to_string(e.item)).append("]");
  if (e.attempt > 0)
    w.append(" attempt ").append(std::to_string(e.attempt));
  return w;
}

// "" when the decided event is the recorded one (the time aside), else what differs.
std::string differs(const EventRecord& got, const EventRecord& want) {
  if (got.kind != want.kind || got.state != want.state || got.item != want.item ||
      got.attempt != want.attempt)
    return "the machine decides \"" + where(got) + "\"; the recording has \"" + where(want) + "\"";
  if (got.key != want.key)
    return where(got) + ": key " + got.key + "; the recording has " + want.key;
  // A recording made before URL passwords were redacted holds them in clear.
  if (got.data != want.data && got.data != actions::redact(want.data))
    return where(got) + ": the machine's data " + json::serialize(got.data) + "; the recording's " +
           json::serialize(want.data);
  return "";
}

std::string text_of(const json::value& data, std::string_view field) {
  const json::value* v = data.is_object() ? data.get_object().if_contains(field) : nullptr;
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

class Replayer {
 public:
  Replayer(const OpRecord& op, std::shared_ptr<const Machine> m, const json::object& stored_outputs,
           int max_redispatch, std::vector<EventRecord> recording)
      : registry_(inline_kinds()),
        stepper_(registry_, max_redispatch),
        stored_outputs_(stored_outputs),
        rec_(std::move(recording)),
        op_final_(!is_active(op.state)) {
    r_.id = op.id;
    r_.instance_id = op.instance_id;
    r_.operation = op.operation;
    r_.m = std::move(m);
    r_.request = op.request;
    r_.state = OpState::kStarting;
    r_.opv = json::object{{"id", op.id},
                          {"operation", op.operation},
                          {"instance_id", op.instance_id},
                          {"attempt", 1}};
    r_.c.cur = r_.m->start;
    r_.cyclic = cyclic_states(*r_.m);
  }

  ReplayReport run() {
    for (int guard = 0; guard < 1000000 && p_ < rec_.size() && !rep_.diverged; ++guard) {
      const EventRecord& e = rec_[p_];
      int64_t now = e.at_ms;
      if (e.kind == "op_processing" || e.kind == "resumed" || e.kind == "rollback_resumed") {
        OpState stored = OpState::kStarting;
        if (e.kind == "op_processing") {
          if (const json::value* i =
                  e.data.is_object() ? e.data.get_object().if_contains("instance") : nullptr)
            r_.instance = *i;
          // replay --from: the occurrence began at that state, with the original's outputs.
          if (std::string from = text_of(e.data, "from"); !from.empty()) {
            int at = r_.m->find(from);
            if (at < 0) {
              diverge("the recording began at \"" + from + "\", a state the machine does not have");
              break;
            }
            r_.c.cur = at;
            r_.c.outputs = stored_outputs_;
          }
        } else {
          auto st = parse_op_state(text_of(e.data, "state"));
          if (!st) {
            diverge(where(e) + ": the recording names no operation state");
            break;
          }
          stored = *st;
        }
        r_.state = stored;
        r_.final_ = false;
        // A cancel that arrived while no daemon held it is recorded right after the resume.
        r_.cancel = r_.cancel || (p_ + 1 < rec_.size() && rec_[p_ + 1].kind == "cancel_requested");
        r_.timer_at = 0;
        stepper_.resume(r_, stored, now, true);
        if (!take())
          break;
        go_on(now);
        continue;
      }
      if (e.kind == "cancel_requested") {
        stepper_.cancel(r_, now, true);
        if (!take())
          break;
        go_on(now);
        continue;
      }
      int idx = -2;
      actions::Outcome out;
      if (is_result(e, idx, out)) {
        stepper_.result(r_, r_.c.cur, idx, out, now);
        if (!take())
          break;
        go_on(now);
        continue;
      }
      // Nothing but time (a durable wait, a retry's delay) or a commit moved it on.
      size_t before = p_;
      stepper_.advance(r_, now, false);
      if (!take())
        break;
      if (p_ == before) {
        diverge("the recording has \"" + where(e) + "\" here; the machine decides nothing");
        break;
      }
    }
    if (!rep_.diverged && r_.final_)
      rep_.steps.push_back(state_name(r_.c.cur) + " -> " + std::string(to_string(r_.final_state)));
    else if (!rep_.diverged)
      rep_.steps.push_back(state_name(r_.c.cur) + " -> (the recording ends here)");
    return rep_;
  }

 private:
  // A draining daemon starts nothing new, and the recording then goes on with a resume:
  // the stepper is asked twice, first as if stopping, then (unless a resume follows) not.
  void go_on(int64_t now) {
    if (rep_.diverged || r_.final_)
      return;
    if (p_ < rec_.size() && (rec_[p_].kind == "resumed" || rec_[p_].kind == "rollback_resumed"))
      return;
    stepper_.advance(r_, now, false);
    take();
  }

  // Is `e` the result of a call in flight? Then `idx` and `out` describe it.
  bool is_result(const EventRecord& e, int& idx, actions::Outcome& out) {
    if (e.kind != "succeeded" && e.kind != "failed" && e.kind != "retry_scheduled" &&
        e.kind != "compensated")
      return false;
    if (r_.state == OpState::kRollingBack) {
      if (r_.c.rb_item.status != ItemStatus::kDispatched || e.kind == "succeeded" ||
          e.kind == "retry_scheduled")
        return false;
      idx = kRollbackItem;
    } else {
      if (e.kind == "compensated" || r_.c.cur < 0 ||
          static_cast<size_t>(r_.c.cur) >= r_.m->states.size())
        return false;
      const State& s = r_.m->states[static_cast<size_t>(r_.c.cur)];
      if (s.name != e.state)
        return false;
      idx = s.for_each.empty() ? 0 : e.item;
      if (idx < 0 || static_cast<size_t>(idx) >= r_.c.items.size() ||
          r_.c.items[static_cast<size_t>(idx)].status != ItemStatus::kDispatched)
        return false;
    }
    if (e.kind == "succeeded" || e.kind == "compensated") {
      out = actions::Outcome::success(outputs_of(e));
      if (idx >= 0)
        out.pin_host_keys = pinned_by(r_.c.items[static_cast<size_t>(idx)].inputs, out.outputs);
    } else {
      // A class this build does not know replays as "failed", as the live run took it.
      out = actions::Outcome::failure(
          base::parse_error_class(text_of(e.data, "class")).value_or(base::ErrorClass::kFailed),
          text_of(e.data, "message"));
    }
    return true;
  }

  // What a live SSH call pinned in the instance record, which the history does not record:
  // trusting on first use (neither known_hosts nor host_key given), it pinned the key it
  // saw (its output host_key) for host:port unless that key was pinned already; pinning it
  // again here changes nothing then.
  static json::object pinned_by(const json::value& inputs, const json::value& outputs) {
    json::object pins;
    const json::object* in = inputs.if_object();
    const json::object* o = outputs.if_object();
    if (in == nullptr || o == nullptr)
      return pins;
    const json::value* key = o->if_contains("host_key");
    const json::value* host = in->if_contains("host");
    // Only a whole fingerprint: one the history shows scrubbed in part ("SHA256:ab***cd",
    // a learned secret inside it) is not the key the live call pinned.
    auto fingerprint = [](std::string_view f) {
      return f.starts_with("SHA256:") && f.size() > 7 &&
             f.find_first_not_of(
                 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", 7) ==
                 std::string_view::npos;
    };
    if (key == nullptr || !key->is_string() || !fingerprint(key->get_string()) || host == nullptr ||
        !host->is_string())
      return pins;
    for (const char* given : {"known_hosts", "host_key"}) {
      const json::value* g = in->if_contains(given);
      if (g != nullptr && g->is_string() && !g->get_string().empty())
        return pins;
    }
    const json::value* port = in->if_contains("port");
    int64_t p = port != nullptr && port->is_int64() ? port->get_int64() : 22;
    pins[std::string(host->get_string()) + ":" + std::to_string(p)] = *key;
    return pins;
  }

  // The outputs a recorded success carried: as recorded, or, where the history shows only
  // "*** (secret_output)" / "*** (hide_output)", the stored outputs of the state.
  json::value outputs_of(const EventRecord& e) {
    if (e.data.is_string() && e.data.get_string().starts_with("*** (")) {
      const json::value* v = stored_outputs_.if_contains(e.state);
      if (v == nullptr)
        return nullptr;
      if (e.item >= 0 && v->is_array() && static_cast<size_t>(e.item) < v->get_array().size())
        return v->get_array()[static_cast<size_t>(e.item)];
      return *v;
    }
    return e.data;
  }

  // Compares what the stepper decided with the recording; applies the decisions a commit
  // would (the state written, the claim). False on a divergence.
  bool take() {
    int cur_before = last_cur_;
    for (const auto& got : r_.pending.events) {
      if (p_ >= rec_.size()) {
        if (op_final_)
          diverge("the machine goes on (\"" + where(got) + "\"); the recording ends before");
        break;
      }
      std::string why = differs(got, rec_[p_]);
      if (!why.empty()) {
        diverge("event " + std::to_string(p_ + 1) + ": " + why);
        break;
      }
      ++p_;
    }
    r_.pending = Batch{};
    if (r_.new_state && !r_.final_)
      r_.state = *r_.new_state;
    else if (!r_.new_state && r_.state == OpState::kStarting)
      r_.state = OpState::kProcessing;
    r_.new_state.reset();
    r_.set_error = false;
    r_.dirty = false;
    r_.to_start.clear();
    if (r_.c.cur != cur_before && cur_before >= 0)
      rep_.steps.push_back(state_name(cur_before) + " -> " + state_name(r_.c.cur));
    last_cur_ = r_.c.cur;
    return !rep_.diverged;
  }

  std::string state_name(int i) const {
    return i >= 0 && static_cast<size_t>(i) < r_.m->states.size()
               ? r_.m->states[static_cast<size_t>(i)].name
               : std::string("(no state)");
  }

  void diverge(std::string why) {
    rep_.diverged = true;
    rep_.divergence = std::move(why);
  }

  // The inline kinds, the VIM ones without a store: nothing but the record changes.
  static actions::Registry inline_kinds() {
    actions::Registry r = actions::Registry::standard();
    add_vim_actions(r, nullptr);
    return r;
  }

  actions::Registry registry_;
  Stepper stepper_;
  Run r_;
  const json::object& stored_outputs_;
  std::vector<EventRecord> rec_;
  bool op_final_;
  size_t p_ = 0;
  int last_cur_ = -1;
  ReplayReport rep_;
};

}  // namespace

base::Result<ReplayReport> replay_dry_run(Store& store, const OpRecord& op, const Machine& m,
                                          int max_redispatch) {
  auto hist = store.history(op.id);
  if (!hist.ok())
    return hist.status();
  if (max_redispatch < 0) {
    // The daemon's limit is not recorded; a step its poison guard stopped says it.
    max_redispatch = std::numeric_limits<int>::max();
    constexpr std::string_view kPoison = "re-dispatched ";
    for (const auto& e : hist.value()) {
      std::string msg = e.kind == "failed" ? text_of(e.data, "message") : std::string();
      if (msg.starts_with(kPoison) &&
          msg.find(" times after the daemon stopped") != std::string::npos)
        max_redispatch = std::atoi(msg.c_str() + kPoison.size());
    }
  }
  auto outs = store.outputs(op.id);
  json::object stored = outs.ok() ? std::move(outs).value() : json::object();
  // Not owned: `m` outlives the replay.
  std::shared_ptr<const Machine> machine(std::shared_ptr<const Machine>(), &m);
  Replayer rp(op, machine, stored, max_redispatch, std::move(hist).value());
  return rp.run();
}

}  // namespace engine
