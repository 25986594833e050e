// The stepper (stepper.h): the executor's decisions, without I/O or a clock.
#include "engine/internal/stepper.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "engine/internal/sealing.h"
#include "engine/internal/vim_actions.h"

namespace engine {

using workflows::Machine;
using workflows::State;
using workflows::StateKind;

namespace {

// The values at `path` in `v`: names separated by '.', each followed by any number of [N]
// (an item) or [*] (every item): "json.private_key", "json.items[*].token". A path that
// leads nowhere finds nothing. V is json::value or const json::value (to mask them).
template <typename V>
void values_at(V& v, std::string_view path, std::vector<V*>& out) {
  if (path.empty()) {
    out.push_back(&v);
    return;
  }
  if (path[0] == '[') {
    size_t close = path.find(']');
    if (close == std::string_view::npos || !v.is_array())
      return;
    std::string_view index = path.substr(1, close - 1);
    std::string_view rest = path.substr(close + 1);
    if (!rest.empty() && rest[0] == '.')
      rest.remove_prefix(1);
    auto& a = v.get_array();
    if (index == "*") {
      for (auto& x : a)
        values_at(x, rest, out);
      return;
    }
    if (index.empty() || index.size() > 9 ||
        !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return;
    size_t n = std::stoul(std::string(index));
    if (n < a.size())
      values_at(a[n], rest, out);
    return;
  }
  size_t end = path.find_first_of(".[");
  std::string_view name = path.substr(0, end);
  std::string_view rest = end == std::string_view::npos ? std::string_view() : path.substr(end);
  if (!rest.empty() && rest[0] == '.')
    rest.remove_prefix(1);
  if (!v.is_object())
    return;
  auto& o = v.get_object();
  auto it = o.find(name);
  if (it != o.end())
    values_at(it->value(), rest, out);
}

// secret_fields: at most this many values, of at most this many bytes in all (the answer of
// a server, which may hold anything, must not make every later event's scrub a long one).
constexpr size_t kMaxSecretValues = 64;
constexpr size_t kMaxSecretBytes = 64 * 1024;
constexpr size_t kMaxSecretPaths = 16;
// The secrets one operation learns (each later event is scrubbed against all of them).
constexpr size_t kMaxRunSecrets = 1024;

// The bytes of `v`'s strings and numbers, counted up to `limit` (then limit + 1): a large
// answer is not walked to its end.
size_t bounded_size(const json::value& v, size_t limit) {
  if (v.is_string())
    return std::min(v.get_string().size(), limit + 1);
  if (v.is_array() || v.is_object()) {
    size_t n = 2;
    auto add = [&](const json::value& x) { n += bounded_size(x, limit - std::min(n, limit)); };
    if (v.is_array()) {
      for (const auto& x : v.get_array()) {
        add(x);
        if (n > limit)
          return limit + 1;
      }
    } else {
      for (const auto& kv : v.get_object()) {
        n += kv.key().size();
        add(kv.value());
        if (n > limit)
          return limit + 1;
      }
    }
    return n;
  }
  return 8;
}

std::vector<std::string> string_list_input(const json::value& inputs, std::string_view name) {
  std::vector<std::string> out;
  const json::value* v = inputs.is_object() ? inputs.get_object().if_contains(name) : nullptr;
  if (v != nullptr && v->is_array()) {
    for (const auto& x : v->get_array())
      if (x.is_string())
        out.emplace_back(x.get_string());
  }
  return out;
}

bool bool_input(const json::value& inputs, std::string_view name) {
  const json::value* v = inputs.is_object() ? inputs.get_object().if_contains(name) : nullptr;
  return v != nullptr && v->is_bool() && v->get_bool();
}

int running_items(const Run& r) {
  int n = 0;
  for (const auto& it : r.c.items)
    n += it.status == ItemStatus::kDispatched ? 1 : 0;
  if (r.c.rb_item.status == ItemStatus::kDispatched)
    ++n;
  return n;
}

void wake_at(Run& r, int64_t at) {
  r.timer_at = at;
}

std::string workflows_interpolate(const json::value& v) {
  return v.is_string() ? std::string(v.get_string()) : json::serialize(v);
}

// SOL003 resourceChanges from `before` to `after` (vnfc_list's): a VNFC only in `after` was
// ADDED, one only in `before` REMOVED, one in both on another resource MODIFIED. Empty when
// nothing changed.
json::object resource_changes(const json::array& before, const json::array& after) {
  auto find = [](const json::array& list, const json::value& id) -> const json::object* {
    for (const auto& v : list) {
      if (v.get_object().at("id") == id)
        return &v.get_object();
    }
    return nullptr;
  };
  json::array affected;
  auto add = [&](const json::object& v, const char* type) {
    json::object a = v;
    a["changeType"] = type;
    affected.push_back(std::move(a));
  };
  for (const auto& v : after) {
    const json::object* was = find(before, v.get_object().at("id"));
    if (was == nullptr)
      add(v.get_object(), "ADDED");
    else if (was->at("computeResource") != v.get_object().at("computeResource"))
      add(v.get_object(), "MODIFIED");
  }
  for (const auto& v : before) {
    if (find(after, v.get_object().at("id")) == nullptr)
      add(v.get_object(), "REMOVED");
  }
  if (affected.empty())
    return {};
  return json::object{{"affectedVnfcs", std::move(affected)}};
}

}  // namespace

// The VNFCs of an instance record as resource changes compare them: SOL003's id, vduId and
// computeResource (the record's resource_id, or its id, as the VnfInstance view shows it).
json::array vnfc_list(const json::value& instance) {
  json::array out;
  const json::object* o = instance.if_object();
  const json::value* vs = o != nullptr ? o->if_contains("vnfcs") : nullptr;
  if (vs == nullptr || !vs->is_array())
    return out;
  for (const auto& v : vs->get_array()) {
    const json::object* c = v.if_object();
    const json::value* id = c != nullptr ? c->if_contains("id") : nullptr;
    const json::value* vdu = c != nullptr ? c->if_contains("vdu") : nullptr;
    if (id == nullptr || !id->is_string() || vdu == nullptr || !vdu->is_string())
      continue;
    const json::value* rid = c->if_contains("resource_id");
    out.push_back(json::object{
        {"id", *id},
        {"vduId", *vdu},
        {"computeResource",
         json::object{{"resourceId", rid != nullptr && rid->is_string() ? *rid : *id}}}});
  }
  return out;
}

void Run::learn_paths(const json::value& outputs, const std::vector<std::string>& paths) {
  if (outputs.is_array()) {  // a fan-out's outputs: each item's
    for (const auto& x : outputs.get_array())
      learn_paths(x, paths);
    return;
  }
  std::vector<const json::value*> found;
  for (const auto& p : paths)
    values_at(outputs, p, found);
  for (const json::value* v : found) {
    if (v->is_number())  // a PIN, a port: its text, where a message would quote it
      learn_secrets(json::value(json::serialize(*v)), true);
    else
      learn_secrets(*v, true);
  }
}

void Stepper::event(Run& r, std::string kind, const std::string& state, int item, int attempt,
                    std::string key, json::value data) {
  EventRecord e;
  e.op_id = r.id;
  e.seq = ++r.c.seq;
  e.at_ms = now_;
  e.kind = std::move(kind);
  e.state = state;
  e.item = item;
  e.attempt = attempt;
  e.key = std::move(key);
  // A URL's password the run never learned (built by a hook) is redacted all the same.
  e.data = r.secrets.empty() && !internal::any_string(data, actions::has_url_password)
               ? std::move(data)
               : for_history(data, r.secrets);
  r.pending.events.push_back(std::move(e));
  r.dirty = true;
}

workflows::Scope Stepper::scope(Run& r, const State& s, int item) {
  workflows::Scope sc;
  sc.request = &r.request;
  sc.instance = &r.instance;
  sc.vnfd = &r.m->vnfd;
  sc.op = &r.opv;
  sc.outputs = &r.c.outputs;
  sc.segment = s.segment;
  if (const Frame* f = frame_of(r, s.owner); f != nullptr)
    sc.inputs = &f->inputs;
  if (s.kind == StateKind::kAction && !s.for_each.empty() && item >= 0 &&
      static_cast<size_t>(item) < r.c.values.size()) {
    sc.item = &r.c.values[static_cast<size_t>(item)];
    sc.item_name = s.as;
    sc.item_index = item;
  }
  return sc;
}

// The idempotency key of one call: "<op>/<state>[@<visit>][<item>][/rollback]/<attempt>".
// A state entered again (a polling loop) is a new visit with keys of its own; a
// re-dispatch of the same visit after a crash keeps its key.
std::string Stepper::key_for(const Run& r, const State& s, int item, int attempt, bool rollback,
                             int visit) {
  std::string k = r.id + "/" + s.name;
  if (visit > 1)
    k += "@" + std::to_string(visit);
  if (item >= 0 && !s.for_each.empty())
    k += "[" + std::to_string(item) + "]";
  if (rollback)
    k += "/rollback";
  return k + "/" + std::to_string(attempt);
}

void Stepper::fail_temp(Run& r, const std::string& state, base::ErrorClass cls,
                        const std::string& raw_msg, int64_t now) {
  now_ = now;
  std::string msg = r.clean(raw_msg);
  json::object err{{"state", state}, {"class", base::to_string(cls)}, {"message", msg}};
  r.new_state = OpState::kFailedTemp;
  r.set_error = true;
  r.error_json = json::serialize(err);
  event(r, "op_failed_temp", state, -1, 0, "", std::move(err));
  r.final_ = true;
  r.final_state = OpState::kFailedTemp;
  note_changes(r);
}

void Stepper::note_changes(Run& r) {
  if (r.c.has_vnfcs0)
    r.c.changes = resource_changes(r.c.vnfcs0, vnfc_list(r.instance));
  r.dirty = true;
}

void Stepper::write_instance(Run& r) {
  Batch::InstanceWrite w;
  w.instance_id = r.instance_id;
  const json::value* st =
      r.instance.is_object() ? r.instance.get_object().if_contains("instantiation_state") : nullptr;
  w.instantiation_state =
      st != nullptr && st->is_string() ? std::string(st->get_string()) : "NOT_INSTANTIATED";
  w.record = json::serialize(r.instance);
  r.pending.instances.clear();
  r.pending.instances.push_back(std::move(w));
}

void Stepper::goto_state(Run& r, int next) {
  // Leaving a called workflow (its call is done, or a failure went outside it): its frame
  // goes. Going back to the call (an item returned) keeps it.
  auto inside = [&](int state, int call) {
    for (int x = state; x >= 0 && static_cast<size_t>(x) < r.m->states.size();
         x = r.m->states[static_cast<size_t>(x)].owner)
      if (x == call)
        return true;
    return false;
  };
  while (!r.c.frames.empty() && !inside(next, r.c.frames.back().call))
    r.c.frames.pop_back();
  if (r.is_cyclic(next))
    ++r.c.visits[next];
  r.c.cur = next;
  r.c.started = false;
  r.c.items.clear();
  r.c.values.clear();
  r.dirty = true;
}

void Stepper::advance(Run& r, int64_t now, bool stopping) {
  now_ = now;
  stopping_ = stopping;
  if (r.final_ || r.committing)
    return;
  if (r.cancel && (r.state == OpState::kProcessing || r.state == OpState::kStarting) &&
      running_items(r) == 0) {
    fail_temp(r, r.m->states[static_cast<size_t>(r.c.cur)].name, base::ErrorClass::kCancelled,
              "cancelled by the operator", now_);
  } else if (r.state == OpState::kRollingBack) {
    step_rollback(r);
  } else {
    step_forward(r);
  }
}

void Stepper::step_forward(Run& r) {
  const Machine& m = *r.m;
  for (int guard = 0; guard < 10000; ++guard) {
    if (r.c.cur < 0 || static_cast<size_t>(r.c.cur) >= m.states.size()) {
      fail_temp(r, "", base::ErrorClass::kInvalid,
                "the operation's position is not a state of its machine", now_);
      return;
    }
    const State& s = m.states[static_cast<size_t>(r.c.cur)];
    switch (s.kind) {
      case StateKind::kChoice: {
        int next = s.next;
        for (const auto& c : s.choices) {
          auto v = workflows::evaluate(*c.expr, scope(r, s, -1));
          if (!v.ok() || !v.value().is_bool()) {
            fail_temp(r, s.name, base::ErrorClass::kInvalid,
                      "when ${" + c.condition +
                          "}: " + (v.ok() ? std::string("not a boolean") : v.status().message()),
                      now_);
            return;
          }
          if (v.value().get_bool()) {
            next = c.next;
            break;
          }
        }
        event(r, "choice", s.name, -1, 0, "",
              json::object{{"next", m.states[static_cast<size_t>(next)].name}});
        goto_state(r, next);
        continue;
      }
      // A call and a return are bounded by the call's items: not counted as steps.
      case StateKind::kCall:
        if (!step_call(r, s))
          return;
        if (r.c.cur == s.body)
          --guard;  // an item started (a call that ends, or a loop through one, counts)
        continue;
      case StateKind::kSucceed:
        if (s.owner >= 0) {
          if (!return_from(r, s))
            return;
          --guard;
          continue;
        }
        if (s.next >= 0) {
          goto_state(r, s.next);
          continue;
        }
        r.new_state = OpState::kCompleted;
        r.set_error = true;
        r.error_json.clear();
        event(r, "op_completed", s.name, -1, 0, "", nullptr);
        r.final_ = true;
        r.final_state = OpState::kCompleted;
        note_changes(r);
        return;
      case StateKind::kFail: {
        auto v = s.message.evaluate(scope(r, s, -1));
        std::string msg = v.ok() ? workflows_interpolate(v.value()) : v.status().message();
        fail_temp(r, s.name, base::ErrorClass::kFailed, msg, now_);
        return;
      }
      case StateKind::kWait: {
        if (!r.c.started) {
          auto v = s.wait_seconds.evaluate(scope(r, s, -1));
          if (!v.ok() || !v.value().is_number()) {
            fail_temp(r, s.name, base::ErrorClass::kInvalid,
                      "wait: " + (v.ok() ? std::string("not a number") : v.status().message()),
                      now_);
            return;
          }
          double secs = v.value().to_number<double>();
          Item it;
          it.status = ItemStatus::kWaiting;
          it.wake_ms = now_ + static_cast<int64_t>(secs * 1000);
          r.c.items = {it};
          r.c.started = true;
          event(r, "waiting", s.name, -1, 0, "", json::object{{"seconds", secs}});
        }
        if (now_ >= r.c.items[0].wake_ms) {
          goto_state(r, s.next);
          continue;
        }
        wake_at(r, r.c.items[0].wake_ms);
        return;
      }
      case StateKind::kAction:
        if (!step_action(r, s))
          return;
        continue;
    }
  }
  fail_temp(r, "", base::ErrorClass::kInvalid,
            "more than 10000 steps without a side effect: a loop of choices?", now_);
}

// Returns true when the run moved to another state (keep stepping).
bool Stepper::step_action(Run& r, const State& s) {
  if (!r.c.started) {
    if (s.for_each_expr) {
      auto v = workflows::evaluate(*s.for_each_expr, scope(r, s, -1));
      if (!v.ok() || !v.value().is_array()) {
        fail_temp(r, s.name, base::ErrorClass::kInvalid,
                  "for_each ${" + s.for_each +
                      "}: " + (v.ok() ? std::string("not a list") : v.status().message()),
                  now_);
        return false;
      }
      r.c.values = v.value().get_array();
    } else {
      r.c.values = json::array{nullptr};
    }
    r.c.items.assign(r.c.values.size(), Item{});
    r.c.started = true;
    r.dirty = true;
  }
  int64_t now = now_;
  int64_t next_wake = 0;
  for (auto& it : r.c.items) {
    if (it.status == ItemStatus::kWaiting) {
      if (it.wake_ms <= now)
        it.status = ItemStatus::kPending;
      else if (next_wake == 0 || it.wake_ms < next_wake)
        next_wake = it.wake_ms;
    }
  }
  const actions::Kind* inline_action = inline_kind(s.action);
  int in_flight = running_items(r);
  int limit = s.parallelism > 0 ? s.parallelism : std::numeric_limits<int>::max();
  bool any_failed = false;
  for (size_t i = 0; i < r.c.items.size(); ++i) {
    Item& it = r.c.items[i];
    if (it.status == ItemStatus::kFailed)
      any_failed = true;
    if (it.status != ItemStatus::kPending || any_failed)
      continue;
    if (!inline_action && (in_flight >= limit || stopping_))
      continue;
    r.opv.as_object()["attempt"] = it.attempt;
    auto in = s.with.evaluate(scope(r, s, static_cast<int>(i)));
    int item_no = s.for_each.empty() ? -1 : static_cast<int>(i);
    if (!in.ok() || !in.value().is_object()) {
      it.status = ItemStatus::kFailed;
      it.cls = base::ErrorClass::kInvalid;
      it.msg = "inputs: " + (in.ok() ? std::string("not a map") : in.status().message());
      event(r, "failed", s.name, item_no, it.attempt, "",
            json::object{{"class", base::to_string(*it.cls)}, {"message", it.msg}});
      any_failed = true;
      continue;
    }
    if (internal::has_sealed(in.value())) {
      it.status = ItemStatus::kFailed;
      it.cls = base::ErrorClass::kInvalid;
      it.msg =
          "inputs: a sealed value could not be opened (a wrong key, or a value moved from "
          "another record); sealed values are never handed to an action";
      event(r, "failed", s.name, item_no, it.attempt, "",
            json::object{{"class", base::to_string(*it.cls)}, {"message", it.msg}});
      any_failed = true;
      continue;
    }
    r.learn_secrets(in.value(), false);
    std::string key = key_for(r, s, static_cast<int>(i), it.attempt, false, r.visit());
    if (inline_action) {
      json::value before = r.instance;
      auto out = inline_action->run_inline(in.value().get_object(), r.instance);
      event(r, "dispatched", s.name, item_no, it.attempt, key,
            json::object{{"action", s.action}, {"inputs", r.hist(in.value())}});
      finish_item(r, s, static_cast<int>(i), out);
      if (out.ok)
        write_instance(r);
      else
        r.instance = std::move(before);
      if (r.c.items[i].status == ItemStatus::kFailed)
        any_failed = true;
      continue;
    }
    it.status = ItemStatus::kDispatched;
    it.inputs = std::move(in).value();
    event(r, "dispatched", s.name, item_no, it.attempt, key,
          json::object{{"action", s.action}, {"inputs", r.hist(it.inputs)}});
    r.to_start.push_back(static_cast<int>(i));
    ++in_flight;
  }
  if (any_failed) {
    if (running_items(r) > 0)
      return false;  // let the others finish; their results are recorded
    const Item* bad = nullptr;
    for (const auto& it : r.c.items) {
      if (it.status == ItemStatus::kFailed) {
        bad = &it;
        break;
      }
    }
    if (s.on_failure >= 0) {
      event(r, "on_failure", s.name, -1, 0, "",
            json::object{{"next", r.m->states[static_cast<size_t>(s.on_failure)].name},
                         {"class", base::to_string(*bad->cls)},
                         {"message", bad->msg}});
      goto_state(r, s.on_failure);
      return true;
    }
    fail_temp(r, s.name, *bad->cls, bad->msg, now_);
    return false;
  }
  bool all_done = true;
  for (const auto& it : r.c.items)
    all_done = all_done && it.status == ItemStatus::kDone;
  if (all_done) {
    json::value out;
    if (s.for_each.empty()) {
      out = r.c.items.empty() ? json::value() : r.c.items[0].outputs;
    } else {
      json::array outs;
      for (const auto& it : r.c.items)
        outs.push_back(it.outputs);
      out = std::move(outs);
    }
    bool secret = r.c.secret_paths.count(s.name) > 0;  // secret_fields: sealed whole at rest
    for (const auto& it : r.c.items)
      secret = secret || it.secret;
    keep_outputs(r, s.name, std::move(out), secret);
    goto_state(r, s.next);
    return true;
  }
  if (next_wake > 0)
    wake_at(r, next_wake);
  return false;
}

// What the history shows of an action's outputs, by the call's own hide_output,
// secret_output and secret_fields inputs: the same for a state's items and for
// compensations. Learns the secrets it finds, so that later events and messages that repeat
// them show *** too. `refused` is set when secret_fields cannot be honoured (too many
// paths, values or secrets); then nothing is learned.
Stepper::Shown Stepper::shown_outputs(Run& r, const json::value& inputs,
                                      const json::value& outputs) {
  Shown sh;
  bool hidden = bool_input(inputs, "hide_output");
  sh.secret = bool_input(inputs, "secret_output");
  sh.paths = string_list_input(inputs, "secret_fields");
  json::value masked_view;
  if (!sh.paths.empty()) {
    if (sh.paths.size() > kMaxSecretPaths) {
      sh.refused = "secret_fields names " + std::to_string(sh.paths.size()) + " paths; at most " +
                   std::to_string(kMaxSecretPaths);
      return sh;
    }
    std::vector<const json::value*> found;
    for (const auto& p : sh.paths) {
      values_at(outputs, p, found);
      if (found.size() > kMaxSecretValues)
        break;
    }
    size_t bytes = 0;
    for (size_t k = 0; k < found.size() && bytes <= kMaxSecretBytes; ++k)
      bytes += bounded_size(*found[k], kMaxSecretBytes);
    if (found.size() > kMaxSecretValues || bytes > kMaxSecretBytes) {
      sh.refused = "secret_fields found more than " + std::to_string(kMaxSecretValues) +
                   " values or " + std::to_string(kMaxSecretBytes) +
                   " bytes in the answer (at most that is kept secret)";
      return sh;
    }
    if (r.secrets.size() + found.size() > kMaxRunSecrets) {
      sh.refused = "secret_fields: the operation holds " + std::to_string(r.secrets.size()) +
                   " secrets already; at most " + std::to_string(kMaxRunSecrets);
      return sh;
    }
    r.learn_paths(outputs, sh.paths);
    r.c.seal_body = true;
    // Path by path: a path may lead into what an earlier one masked ("json", then
    // "json.key"), so each is looked up in the tree as the earlier ones left it.
    masked_view = outputs;
    for (const auto& p : sh.paths) {
      std::vector<json::value*> masked;
      values_at(masked_view, p, masked);
      for (json::value* v : masked)
        *v = "***";
    }
  }
  if (sh.secret) {
    r.learn_secrets(outputs, true);
    r.c.seal_body = true;
  }
  sh.view = sh.secret ? json::value("*** (secret_output)")
            : hidden  ? json::value("*** (hide_output)")
                      : r.hist(masked_view.is_null() ? outputs : masked_view);
  return sh;
}

// Records an action's outcome in item `i` of the current state.
void Stepper::finish_item(Run& r, const State& s, int i, const actions::Outcome& out) {
  Item& it = r.c.items[static_cast<size_t>(i)];
  int item_no = s.for_each.empty() ? -1 : i;
  json::value inputs = std::move(it.inputs);
  it.inputs = nullptr;
  Shown shown;
  if (out.ok) {
    shown = shown_outputs(r, inputs, out.outputs);
    if (!shown.refused.empty())
      return finish_item(r, s, i,
                         actions::Outcome::failure(base::ErrorClass::kInvalid, shown.refused));
    // secret_fields: the state's outputs are sealed whole at rest (and their paths learned
    // again from them on a restart). Only states that name some: an entry makes the state
    // secret.
    if (!shown.paths.empty()) {
      auto& known = r.c.secret_paths[s.name];
      for (const auto& p : shown.paths)
        if (std::find(known.begin(), known.end(), p) == known.end())
          known.push_back(p);
    }
  }
  if (out.ok && !out.pin_host_keys.empty()) {
    // Host keys seen on first use are pinned with the result that saw them.
    if (!r.instance.is_object())
      r.instance = json::object();
    json::value& keys = r.instance.get_object()["host_keys"];
    if (!keys.is_object())
      keys = json::object();
    for (const auto& kv : out.pin_host_keys)
      keys.get_object()[kv.key()] = kv.value();
    write_instance(r);
  }
  if (out.ok) {
    it.status = ItemStatus::kDone;
    it.outputs = out.outputs;
    it.secret = shown.secret;
    if (s.compensate) {
      // Recorded per item, so that a rollback after a partly failed fan-out undoes the
      // items that did succeed.
      Done d;
      d.state = r.c.cur;
      d.item = i;
      d.outputs = out.outputs;
      d.secret = shown.secret;
      d.visit = r.visit();
      d.value = static_cast<size_t>(i) < r.c.values.size() ? r.c.values[static_cast<size_t>(i)]
                                                           : json::value();
      if (const Frame* f = frame_of(r, s.owner); f != nullptr)
        d.inputs = f->inputs;  // its compensation reads the inputs of the call it ran in
      r.c.done.push_back(std::move(d));
    }
    event(r, "succeeded", s.name, item_no, it.attempt, "", std::move(shown.view));
    return;
  }
  bool retryable = std::find(s.retry.on.begin(), s.retry.on.end(),
                             base::to_string(out.error_class)) != s.retry.on.end() &&
                   out.error_class != base::ErrorClass::kInvalid && it.attempt < s.retry.attempts;
  if (retryable) {
    double delay = s.retry.delay_after(it.attempt);
    it.status = ItemStatus::kWaiting;
    it.wake_ms = now_ + static_cast<int64_t>(delay * 1000);
    event(r, "retry_scheduled", s.name, item_no, it.attempt, "",
          json::object{{"class", base::to_string(out.error_class)},
                       {"message", out.message},
                       {"delay_s", delay}});
    it.attempt++;
    return;
  }
  it.status = ItemStatus::kFailed;
  it.cls = out.error_class;
  it.msg = r.clean(out.message);
  event(r, "failed", s.name, item_no, it.attempt, "",
        json::object{{"class", base::to_string(out.error_class)}, {"message", it.msg}});
}

const actions::Kind* Stepper::inline_kind(std::string_view action) const {
  const actions::Kind* k = registry_.find(action);
  return k != nullptr && k->runs_inline() ? k : nullptr;
}

void Stepper::result(Run& r, int cur, int i, const actions::Outcome& out, int64_t now) {
  now_ = now;
  if (i == kRollbackItem) {
    const Done& d = r.c.done[static_cast<size_t>(r.c.rb)];
    const State& s = r.m->states[static_cast<size_t>(d.state)];
    Item& it = r.c.rb_item;
    json::value inputs = std::move(it.inputs);
    it.inputs = nullptr;
    int item_no = s.for_each.empty() ? -1 : d.item;
    // As for an inline compensation: secret_fields that cannot be honoured fail it.
    Shown shown;
    actions::Outcome refused;
    const actions::Outcome* o = &out;
    if (out.ok) {
      shown = shown_outputs(r, inputs, out.outputs);
      if (!shown.refused.empty()) {
        refused = actions::Outcome::failure(base::ErrorClass::kInvalid, shown.refused);
        o = &refused;
      }
    }
    if (o->ok) {
      it.status = ItemStatus::kDone;
      event(r, "compensated", s.name, item_no, it.attempt, "", std::move(shown.view));
    } else {
      it.status = ItemStatus::kFailed;
      it.cls = o->error_class;
      it.msg = r.clean(o->message);
      event(r, "failed", s.name, item_no, it.attempt, "",
            json::object{{"class", base::to_string(o->error_class)}, {"message", it.msg}});
    }
    return;
  }
  if (cur != r.c.cur)
    return;  // cannot happen: a state is left only when every item settled
  finish_item(r, r.m->states[static_cast<size_t>(cur)], i, out);
}

}  // namespace engine
