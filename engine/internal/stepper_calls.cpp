// The stepper (stepper.h), calls: a call state runs a called workflow once per item, in
// turn; the called file's succeed state returns to it.
#include <algorithm>

#include "engine/internal/sealing.h"
#include "engine/internal/stepper.h"

namespace engine {

using workflows::State;

namespace {

// True when a string of `v` contains one of `secrets`, or a number of `v` is one (in the
// strings themselves, not in serialized text, where a multi-line secret's line breaks are
// escaped).
bool holds_secret(const json::value& v, const std::vector<std::string>& secrets) {
  if (v.is_number())
    return std::find(secrets.begin(), secrets.end(), json::serialize(v)) != secrets.end();
  if (v.is_string())
    return std::any_of(secrets.begin(), secrets.end(), [&](const std::string& sec) {
      return v.get_string().find(sec) != json::string::npos;
    });
  if (v.is_array())
    return std::any_of(v.get_array().begin(), v.get_array().end(),
                       [&](const json::value& x) { return holds_secret(x, secrets); });
  if (v.is_object())
    return std::any_of(v.get_object().begin(), v.get_object().end(),
                       [&](const auto& kv) { return holds_secret(kv.value(), secrets); });
  return false;
}

}  // namespace

const Frame* Stepper::frame_of(const Run& r, int call) {
  if (call < 0)
    return nullptr;
  for (auto it = r.c.frames.rbegin(); it != r.c.frames.rend(); ++it)
    if (it->call == call)
      return &*it;
  return nullptr;
}

// A finished state's outputs (an action's, a call's): kept for the states after it and
// written with the next commit. Sealed whole at rest when `secret`, or when they repeat a
// known secret (a hook echoing what it was given, a field of secret_fields): looked for in
// the strings themselves, not in the serialized text, where a multi-line secret's line
// breaks are escaped.
void Stepper::keep_outputs(Run& r, const std::string& state, json::value out, bool secret) {
  secret = secret || (!r.secrets.empty() && holds_secret(out, r.secrets));
  if (secret) {
    if (std::find(r.c.secret_states.begin(), r.c.secret_states.end(), state) ==
        r.c.secret_states.end())
      r.c.secret_states.push_back(state);
    r.c.seal_body = true;
  }
  r.pending.outputs.push_back({r.id, state, json::serialize(out), secret});
  r.c.outputs[state] = std::move(out);
}

// A call state: starts its list (once), then runs the called workflow for each item in
// turn, and when every item returned, keeps what they returned as its outputs. Returns true
// when the run moved to another state.
bool Stepper::step_call(Run& r, const State& s) {
  const int self = r.c.cur;
  if (r.c.frames.empty() || r.c.frames.back().call != self) {
    Frame f;
    f.call = self;
    if (s.for_each_expr) {
      auto v = workflows::evaluate(*s.for_each_expr, scope(r, s, -1));
      if (!v.ok() || !v.value().is_array() || v.value().get_array().size() > kMaxCallItems) {
        fail_temp(r, s.name, base::ErrorClass::kInvalid,
                  "for_each ${" + s.for_each + "}: " +
                      (!v.ok() ? v.status().message()
                       : !v.value().is_array()
                           ? std::string("not a list")
                           : std::to_string(v.value().get_array().size()) +
                                 " items; a call runs at most " + std::to_string(kMaxCallItems)),
                  now_);
        return false;
      }
      f.values = v.value().get_array();
    } else {
      f.values = json::array{nullptr};
    }
    r.c.frames.push_back(std::move(f));
    r.dirty = true;
  }
  // Here with the item at `index` to start: the first, the one after an item returned
  // (return_from moved on), or the same again after its inputs failed.
  Frame& f = r.c.frames.back();
  const int item_no = s.for_each.empty() ? -1 : static_cast<int>(f.index);
  if (static_cast<size_t>(f.index) < f.values.size()) {
    workflows::Scope sc = scope(r, s, -1);
    if (!s.for_each.empty()) {
      sc.item = &f.values[static_cast<size_t>(f.index)];
      sc.item_name = s.as;
      sc.item_index = f.index;
    }
    auto in = s.with.evaluate(sc);
    if (!in.ok() || !(in.value().is_object() || in.value().is_null()) ||
        internal::has_sealed(in.value())) {
      std::string msg = "inputs: " + (!in.ok() ? in.status().message()
                                      : !in.value().is_object() && !in.value().is_null()
                                          ? std::string("not a map")
                                          : std::string("a sealed value could not be opened"));
      event(r, "failed", s.name, item_no, 1, "",
            json::object{{"class", "invalid"}, {"message", r.clean(msg)}});
      if (s.on_failure >= 0) {
        event(r, "on_failure", s.name, -1, 0, "",
              json::object{{"next", r.m->states[static_cast<size_t>(s.on_failure)].name},
                           {"class", "invalid"},
                           {"message", r.clean(msg)}});
        goto_state(r, s.on_failure);
        return true;
      }
      fail_temp(r, s.name, base::ErrorClass::kInvalid, msg, now_);
      return false;
    }
    f.inputs = in.value().is_null() ? json::value(json::object()) : std::move(in).value();
    f.running = true;
    r.learn_secrets(f.inputs, false);
    // Inputs that carry a secret (a request secret passed under another name): the cursor,
    // which keeps them for the item and its compensations, is sealed whole at rest.
    if (!r.secrets.empty() && holds_secret(f.inputs, r.secrets))
      r.c.seal_body = true;
    event(r, "called", s.name, item_no, 0, "",
          json::object{{"workflow", s.call}, {"inputs", r.hist(f.inputs)}});
    goto_state(r, s.body);
    return true;
  }
  json::value out = s.for_each.empty()
                        ? (f.results.empty() ? json::value(json::object()) : f.results[0])
                        : json::value(f.results);
  keep_outputs(r, s.name, std::move(out), false);
  r.c.frames.pop_back();  // done: a `next` back to this call starts it anew
  goto_state(r, s.next);
  return true;
}

// A called workflow's succeed state: its declared outputs, evaluated here, are what the
// call's item returns; back to the call.
bool Stepper::return_from(Run& r, const State& s) {
  Frame* f = r.c.frames.empty() ? nullptr : &r.c.frames.back();
  if (f == nullptr || f->call != s.owner || !f->running) {
    fail_temp(r, s.name, base::ErrorClass::kInvalid,
              "the operation's calls in progress do not match its machine", now_);
    return false;
  }
  const State& call = r.m->states[static_cast<size_t>(s.owner)];
  json::value out = json::object();
  if (!call.returns.empty()) {
    auto v = call.returns.evaluate(scope(r, s, -1));
    if (!v.ok()) {
      fail_temp(r, s.name, base::ErrorClass::kInvalid, "outputs: " + v.status().message(), now_);
      return false;
    }
    out = std::move(v).value();
  }
  event(r, "returned", call.name, call.for_each.empty() ? -1 : static_cast<int>(f->index), 0, "",
        r.hist(out));
  if (!r.secrets.empty() && holds_secret(out, r.secrets))
    r.c.seal_body = true;
  f->results.push_back(std::move(out));
  f->running = false;
  f->index++;
  goto_state(r, s.owner);
  return true;
}

}  // namespace engine
