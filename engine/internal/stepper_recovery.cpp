// The stepper (stepper.h), going back and going on: rollback (compensations, newest
// first), the poison guard, an operator's cancel and the resume of a stored operation.
#include <algorithm>

#include "engine/internal/sealing.h"
#include "engine/internal/stepper.h"
#include "engine/internal/vim_actions.h"

namespace engine {

using workflows::Machine;
using workflows::State;
using workflows::StateKind;

void Stepper::step_rollback(Run& r) {
  const Machine& m = *r.m;
  if (!r.c.rb_started) {
    r.c.rb_started = true;
    r.c.rb = static_cast<int>(r.c.done.size()) - 1;
    r.c.rb_item = Item{};
    r.dirty = true;
  }
  while (r.c.rb >= 0) {
    const Done& d = r.c.done[static_cast<size_t>(r.c.rb)];
    const State& s = m.states[static_cast<size_t>(d.state)];
    Item& it = r.c.rb_item;
    if (it.status == ItemStatus::kDispatched)
      return;
    if (it.status == ItemStatus::kFailed) {
      fail_temp(r, s.name, *it.cls, "compensation: " + it.msg, now_);
      return;
    }
    if (it.status == ItemStatus::kDone) {
      r.c.rb--;
      it = Item{};
      r.dirty = true;
      continue;
    }
    if (stopping_)
      return;
    workflows::Scope sc = scope(r, s, -1);
    sc.self = &d.outputs;
    sc.inputs = d.inputs.is_null() ? nullptr : &d.inputs;
    if (!s.for_each.empty()) {
      sc.item = &d.value;
      sc.item_name = s.as;
      sc.item_index = d.item;
    }
    auto in = s.compensate->with.evaluate(sc);
    std::string key = key_for(r, s, s.for_each.empty() ? -1 : d.item, it.attempt, true, d.visit);
    int item_no = s.for_each.empty() ? -1 : d.item;
    if (!in.ok() || !in.value().is_object()) {
      it.status = ItemStatus::kFailed;
      it.cls = base::ErrorClass::kInvalid;
      it.msg = "inputs: " + (in.ok() ? std::string("not a map") : in.status().message());
      continue;
    }
    event(r, "compensating", s.name, item_no, it.attempt, key, r.hist(in.value()));
    if (const actions::Kind* k = inline_kind(s.compensate->action); k != nullptr) {
      json::value before = r.instance;
      auto out = k->run_inline(in.value().get_object(), r.instance);
      Shown shown;
      if (out.ok) {
        shown = shown_outputs(r, in.value(), out.outputs);
        if (!shown.refused.empty())
          out = actions::Outcome::failure(base::ErrorClass::kInvalid, shown.refused);
      }
      if (out.ok) {
        write_instance(r);
        it.status = ItemStatus::kDone;
        event(r, "compensated", s.name, item_no, it.attempt, "", std::move(shown.view));
      } else {
        r.instance = std::move(before);
        it.status = ItemStatus::kFailed;
        it.cls = out.error_class;
        it.msg = r.clean(out.message);
      }
      continue;
    }
    it.status = ItemStatus::kDispatched;
    it.inputs = std::move(in).value();
    r.to_start.push_back(kRollbackItem);
    r.dirty = true;
    return;
  }
  r.new_state = OpState::kRolledBack;
  event(r, "op_rolled_back", "", -1, 0, "", nullptr);
  r.final_ = true;
  r.final_state = OpState::kRolledBack;
  note_changes(r);
}

// Counts a re-dispatch of `it`; past the limit the item fails instead (the reason in its
// message) and true is returned. An operator's retry resets the count.
bool Stepper::poisoned(Run& r, Item& it, const std::string& state, int item_no) {
  it.redispatches++;
  r.dirty = true;
  if (it.redispatches <= max_redispatch_)
    return false;
  it.status = ItemStatus::kFailed;
  it.cls = base::ErrorClass::kFailed;
  it.msg = "re-dispatched " + std::to_string(it.redispatches - 1) +
           " times after the daemon stopped while this step ran (it may be what stops the "
           "daemon); not dispatched again: `vnflow op retry` runs it again, `op fail` gives up";
  event(r, "failed", state, item_no, it.attempt, "",
        json::object{{"class", base::to_string(*it.cls)}, {"message", it.msg}});
  return true;
}

void Stepper::cancel(Run& r, int64_t now, bool stopping) {
  if (r.cancel)
    return;
  now_ = now;
  r.cancel = true;
  event(r, "cancel_requested", "", -1, 0, "", nullptr);
  advance(r, now, stopping);
}

std::vector<std::string> Stepper::resume(Run& r, OpState stored, int64_t now, bool stopping) {
  now_ = now;
  stopping_ = stopping;
  std::vector<std::string> poisoned_states;
  if (stored == OpState::kStarting) {
    r.c.has_vnfcs0 = true;
    r.c.vnfcs0 = vnfc_list(r.instance);
    json::object data{{"instance", r.hist(r.instance)}};
    // An occurrence started by replay --from begins elsewhere than the machine's start.
    if (r.c.cur != r.m->start && r.c.cur >= 0 && static_cast<size_t>(r.c.cur) < r.m->states.size())
      data["from"] = r.m->states[static_cast<size_t>(r.c.cur)].name;
    event(r, "op_processing", "", -1, 0, "", std::move(data));
  } else {
    event(r, stored == OpState::kRollingBack ? "rollback_resumed" : "resumed", "", -1, 0, "",
          json::object{{"state", std::string(to_string(stored))}});
  }
  // A cancel that arrived while no daemon held the operation.
  if (r.cancel)
    event(r, "cancel_requested", "", -1, 0, "", nullptr);
  // An operator's retry: failed items try again; a rollback's failed compensation too.
  if (r.state == OpState::kProcessing) {
    for (auto& it : r.c.items) {
      if (it.status == ItemStatus::kFailed) {
        it.status = ItemStatus::kPending;
        it.attempt++;
        it.redispatches = 0;
        it.cls.reset();
        it.msg.clear();
      }
    }
  }
  if (r.c.rb_item.status == ItemStatus::kFailed && r.state == OpState::kRollingBack) {
    r.c.rb_item.status = ItemStatus::kPending;
    r.c.rb_item.attempt++;
    r.c.rb_item.redispatches = 0;
  }
  if (r.is_cyclic(r.c.cur) && !r.c.visits.count(r.c.cur))
    r.c.visits[r.c.cur] = 1;  // a new operation, or one replayed from here
  // The secrets of the request and of earlier secret outputs, for scrubbing; and those a
  // call's inputs named (an input called password), for its states and compensations.
  r.learn_secrets(r.request, false);
  for (const auto& f : r.c.frames) {
    r.learn_secrets(f.inputs, false);
    r.learn_secrets(json::value(f.results), false);
  }
  for (const auto& d : r.c.done)
    if (!d.inputs.is_null())
      r.learn_secrets(d.inputs, false);
  for (const auto& name : r.c.secret_states) {
    const json::value* o = r.c.outputs.if_contains(name);
    auto sp = r.c.secret_paths.find(name);
    if (o != nullptr && sp == r.c.secret_paths.end())
      r.learn_secrets(*o, true);
    else if (o != nullptr)  // secret_fields: only the values there
      r.learn_paths(*o, sp->second);
  }
  // The items of the current state that finished before the stop: their secret_fields.
  if (r.c.cur >= 0 && static_cast<size_t>(r.c.cur) < r.m->states.size()) {
    auto sp = r.c.secret_paths.find(r.m->states[static_cast<size_t>(r.c.cur)].name);
    if (sp != r.c.secret_paths.end()) {
      for (const auto& it : r.c.items)
        if (it.status == ItemStatus::kDone)
          r.learn_paths(it.outputs, sp->second);
    }
  }
  // Dispatched but not finished (a crash or a failed commit): the same key again, unless
  // that happened too often already (a poison step that kills the daemon each time).
  if (r.state == OpState::kRollingBack) {
    if (r.c.rb_item.status == ItemStatus::kDispatched) {
      const Done& d = r.c.done[static_cast<size_t>(r.c.rb)];
      const std::string& name = r.m->states[static_cast<size_t>(d.state)].name;
      if (poisoned(r, r.c.rb_item, name, -1)) {
        poisoned_states.push_back(name);
        advance(r, now, stopping);
        return poisoned_states;
      }
      r.to_start.push_back(kRollbackItem);
      event(r, "redispatched", name, -1, r.c.rb_item.attempt, "", nullptr);
    }
  } else if (r.c.cur >= 0 && static_cast<size_t>(r.c.cur) < r.m->states.size()) {
    const State& s = r.m->states[static_cast<size_t>(r.c.cur)];
    for (size_t i = 0; i < r.c.items.size(); ++i) {
      if (r.c.items[i].status == ItemStatus::kDispatched) {
        int item_no = s.for_each.empty() ? -1 : static_cast<int>(i);
        if (poisoned(r, r.c.items[i], s.name, item_no)) {
          poisoned_states.push_back(s.name);
          r.to_start.clear();
          fail_temp(r, s.name, base::ErrorClass::kFailed, r.c.items[i].msg, now);
          return poisoned_states;
        }
        r.to_start.push_back(static_cast<int>(i));
        event(r, "redispatched", s.name, item_no, r.c.items[i].attempt,
              key_for(r, s, static_cast<int>(i), r.c.items[i].attempt, false, r.visit()), nullptr);
      }
    }
  }
  advance(r, now, stopping);
  return poisoned_states;
}

}  // namespace engine
