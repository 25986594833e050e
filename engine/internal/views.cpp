// The records as users see them: JSON with SOL003 names where they exist, every secret
// as "***" (actions::redact, the one secret rule). The CLI prints them; the REST API will
// send them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <tuple>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/commands.h"

namespace engine {

std::string iso_time(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

json::object package_view(const PackageRecord& p) {
  json::object o{{"id", p.id},           {"digest", p.digest},   {"name", p.name},
                 {"product", p.product}, {"version", p.version}, {"vnfdId", p.vnfd_id}};
  if (p.onboarding_state != "ONBOARDED" || p.operational_state != "ENABLED") {
    o["onboardingState"] = p.onboarding_state;
    o["operationalState"] = p.operational_state;
  }
  return o;
}

json::value instance_view(const InstanceRecord& i) {
  return actions::redact(i.record);
}

json::object vim_view(const VimRecord& v) {
  json::object o{{"id", v.id},
                 {"name", v.name},
                 {"type", v.type},
                 {"is_default", v.is_default},
                 {"auth_cred", actions::redact(v.summary)}};
  if (const json::value* f = v.extra.if_contains("heat_files"); f != nullptr && f->is_object())
    o["heat_files"] = static_cast<int64_t>(f->get_object().size());
  return o;
}

json::object op_problem(const json::value& error) {
  const json::object empty;
  const json::object& e = error.is_object() ? error.get_object() : empty;
  return json::object{{"status", 500},
                      {"title", e.contains("class") ? e.at("class") : json::value("error")},
                      {"detail", e.contains("message") ? e.at("message") : json::value("")},
                      {"state", e.contains("state") ? e.at("state") : json::value("")}};
}

json::object op_results(const OpRecord& op) {
  json::object out;
  const json::object* c = op.cursor.if_object();
  if (const json::value* rc = c != nullptr ? c->if_contains("rc") : nullptr;
      rc != nullptr && rc->is_object() && !rc->get_object().empty())
    out["resourceChanges"] = *rc;
  if (op.operation == "modify_info" && op.state == OpState::kCompleted && op.request.is_object()) {
    json::value red = actions::redact(op.request);
    json::object changed;
    // What the built-in modify_info applies (workflows/builtin/modify_info.yaml); a
    // vnfPkgId or vnfConfigurableProperties of the request is not, so it is not reported.
    for (const char* k : {"vnfInstanceName", "vnfInstanceDescription", "metadata", "extensions",
                          "vimConnectionInfo"}) {
      if (const json::value* v = red.get_object().if_contains(k))
        changed[k] = *v;
    }
    if (!changed.empty())
      out["changedInfo"] = std::move(changed);
  }
  return out;
}

json::object op_view(const OpRecord& op) {
  json::object o{{"id", op.id},
                 {"operationState", std::string(to_string(op.state))},
                 {"stateEnteredTime", iso_time(op.updated_ms)},
                 {"startTime", iso_time(op.created_ms)},
                 {"vnfInstanceId", op.instance_id},
                 {"operation", sol_operation(op.operation)},
                 {"isAutomaticInvocation", false},
                 // SOL003 requires an object; a request-less operation has an empty one.
                 {"operationParams", op.request.is_object() ? actions::redact(op.request)
                                                            : json::value(json::object())},
                 {"isCancelPending", op.cancel_requested}};
  if (op.error.is_object())
    o["error"] = op_problem(op.error);
  o["packageDigest"] = op.package_digest;
  o["machineDigest"] = op.machine_digest;
  if (op.cursor.is_object()) {
    if (const json::value* c = op.cursor.get_object().if_contains("cur"))
      o["position"] = *c;
  }
  for (auto& [k, v] : op_results(op))
    o[k] = std::move(v);
  return o;
}

json::object vnf_instance_view(const InstanceRecord& i, const PackageRecord& pkg) {
  // Secrets redacted in what is shown, not in a copy of the whole record (its host keys,
  // stack outputs... which the view leaves out): the keys read here are not secret names, so
  // redacting each value shown (secret-named keys inside it, URL passwords in its strings)
  // is redacting the record.
  const json::object empty;
  const json::object& r = i.record.is_object() ? i.record.get_object() : empty;
  auto text = [&](const char* key) -> json::value {  // null when absent or not a string
    const json::value* v = r.if_contains(key);
    return v != nullptr && v->is_string() ? actions::redact(*v) : json::value();
  };
  json::value name = text("name");
  json::object o{{"id", i.id},
                 // The record's: modify_info renames the instance there.
                 {"vnfInstanceName", name.is_null() ? json::value(i.name) : std::move(name)},
                 {"vnfdId", pkg.vnfd_id},
                 {"vnfProvider", pkg.provider},
                 {"vnfProductName", pkg.product},
                 {"vnfSoftwareVersion", pkg.version},
                 {"vnfdVersion", pkg.vnfd_version},
                 {"vnfPkgId", pkg.id},
                 {"instantiationState", i.instantiation_state}};
  if (json::value d = text("description"); !d.is_null())
    o["vnfInstanceDescription"] = std::move(d);
  if (const json::value* v = r.if_contains("vim_connection_info"); v != nullptr && v->is_array())
    o["vimConnectionInfo"] = actions::redact(*v);
  for (const char* k : {"metadata", "extensions"}) {
    if (const json::value* v = r.if_contains(k); v != nullptr && v->is_object())
      o[k] = actions::redact(*v);
  }
  if (i.instantiation_state == "INSTANTIATED") {
    json::value flavour = text("flavour_id");
    json::object info{{"flavourId", flavour.is_null() ? json::value("") : std::move(flavour)},
                      {"vnfState", "STARTED"}};
    if (const json::value* s = r.if_contains("scale_status"); s != nullptr && s->is_object()) {
      json::array levels;
      json::value shown = actions::redact(*s);
      for (const auto& [aspect, level] : shown.get_object()) {
        if (level.is_int64())
          levels.push_back(json::object{{"aspectId", aspect}, {"scaleLevel", level}});
      }
      info["scaleStatus"] = std::move(levels);
    }
    if (const json::value* vs = r.if_contains("vnfcs"); vs != nullptr && vs->is_array()) {
      json::array vnfcs;
      json::value shown = actions::redact(*vs);
      for (const auto& v : shown.get_array()) {
        const json::object* c = v.if_object();
        if (c == nullptr || !c->contains("id") || !c->contains("vdu"))
          continue;
        json::object handle;
        if (const json::value* rid = c->if_contains("resource_id"))
          handle["resourceId"] = *rid;
        else
          handle["resourceId"] = c->at("id");
        vnfcs.push_back(json::object{
            {"id", c->at("id")}, {"vduId", c->at("vdu")}, {"computeResource", handle}});
      }
      info["vnfcResourceInfo"] = std::move(vnfcs);
    }
    o["instantiatedVnfInfo"] = std::move(info);
  }
  return o;
}

json::object vnf_package_view(const PackageRecord& p, bool in_use) {
  json::object o{{"id", p.id}};
  if (p.onboarding_state == "ONBOARDED") {
    o["vnfdId"] = p.vnfd_id;
    o["vnfdVersion"] = p.vnfd_version;
    o["vnfProvider"] = p.provider;
    o["vnfProductName"] = p.product;
    o["vnfSoftwareVersion"] = p.version;
    o["checksum"] = json::object{{"algorithm", "SHA-256"}, {"hash", p.digest}};
  }
  o["onboardingState"] = p.onboarding_state;
  o["operationalState"] = p.operational_state;
  o["usageState"] = in_use ? "IN_USE" : "NOT_IN_USE";
  boost::system::error_code ec;
  json::value data = json::parse(p.user_data, ec);
  if (ec || !data.is_object())
    data = json::object{};
  o["userDefinedData"] = std::move(data);
  if (!p.failure.empty()) {
    o["onboardingFailureDetails"] = json::object{{"type", "about:blank"},
                                                 {"title", "Onboarding failed"},
                                                 {"status", 422},
                                                 {"detail", p.failure}};
  }
  return o;
}

json::object event_view(const EventRecord& e) {
  json::object o{{"seq", e.seq}, {"time", iso_time(e.at_ms)}, {"kind", e.kind}};
  if (!e.state.empty())
    o["state"] = e.state;
  if (e.item >= 0)
    o["item"] = e.item;
  if (e.attempt > 0)
    o["attempt"] = e.attempt;
  if (!e.key.empty())
    o["key"] = e.key;
  if (!e.data.is_null())
    o["data"] = e.data;
  if (e.started_ms > 0)
    o["started"] = iso_time(e.started_ms);
  return o;
}

OpTiming op_timing(const OpRecord& op, const std::vector<EventRecord>& history, int64_t now_ms) {
  OpTiming t;
  int64_t begin = op.created_ms;
  int64_t end = now_ms;
  if (is_final(op.state) || op.state == OpState::kFailedTemp)
    end = std::max(history.empty() ? 0 : history.back().at_ms, op.updated_ms);
  end = std::max(end, begin);
  t.wall_ms = end - begin;
  // Labelled intervals, then one sweep: each instant goes to the first label that covers it
  // in this order, so overlaps (a fan-out's items, a backoff beside another item's call, a
  // cancelled wait) count once and the parts add up to the wall time.
  enum Label { kQueue, kPaused, kActions, kTimers, kLabels };
  std::vector<std::tuple<int64_t, int64_t, Label>> spans;
  auto add = [&spans, begin, end](int64_t from, int64_t to, Label l) {
    from = std::clamp(from, begin, end);
    to = std::clamp(to, begin, end);
    if (to > from)
      spans.emplace_back(from, to, l);
  };
  std::map<std::string, size_t> index;
  std::vector<std::pair<int64_t, int64_t>> state_spans;  // first dispatch .. last result
  bool processing = false, rollback = false;
  int64_t paused_since = -1;
  // A timer (retry backoff, wait state) runs until the next event of the operation at the
  // latest: a cancel or a stop ends it early.
  for (size_t k = 0; k < history.size(); ++k) {
    const EventRecord& e = history[k];
    int64_t next_at = k + 1 < history.size() ? history[k + 1].at_ms : end;
    if (e.kind == "op_processing" && !processing) {
      add(begin, e.at_ms, kQueue);
      processing = true;
    }
    if (e.kind == "rollback_resumed" || e.kind == "compensating")
      rollback = true;
    if (e.kind == "op_failed_temp") {
      if (paused_since < 0)
        paused_since = e.at_ms;
    } else if (paused_since >= 0 &&
               (e.kind == "op_processing" || e.kind == "resumed" || e.kind == "rollback_resumed")) {
      add(paused_since, e.at_ms, kPaused);
      paused_since = -1;
    }
    auto seconds = [&e](const char* key) {
      const json::value* d = e.data.is_object() ? e.data.get_object().if_contains(key) : nullptr;
      return d != nullptr && d->is_number()
                 ? static_cast<int64_t>(std::llround(d->to_number<double>() * 1000))
                 : int64_t{0};
    };
    if (e.kind == "retry_scheduled") {
      // Until the item's next dispatch (or the timer's end, or the next event of a stopped run).
      int64_t to = e.at_ms + seconds("delay_s");
      for (size_t j = k + 1; j < history.size(); ++j) {
        if (history[j].kind == "dispatched" && history[j].state == e.state &&
            history[j].item == e.item) {
          to = std::min(to, history[j].at_ms);
          break;
        }
        if (history[j].kind == "op_failed_temp" || history[j].kind == "cancel_requested") {
          to = std::min(to, history[j].at_ms);
          break;
        }
      }
      add(e.at_ms, to, kTimers);
    }
    if (e.kind == "waiting")
      add(e.at_ms, std::min(e.at_ms + seconds("seconds"), next_at), kTimers);
    bool result = e.kind == "succeeded" || e.kind == "failed" || e.kind == "retry_scheduled" ||
                  e.kind == "compensated";
    if (e.state.empty() || (e.kind != "dispatched" && e.kind != "compensating" && !result))
      continue;
    std::string name = rollback ? e.state + " (rollback)" : e.state;
    auto [it, fresh] = index.try_emplace(name, t.states.size());
    if (fresh) {
      t.states.push_back({name, 0, 0, 0});
      state_spans.emplace_back(result && e.started_ms > 0 ? e.started_ms : e.at_ms, e.at_ms);
    }
    state_spans[it->second].second = e.at_ms;
    if (!result)
      continue;
    OpTiming::StateTime& st = t.states[it->second];
    st.calls++;
    if (e.started_ms > 0) {  // results before schema 5 have no start: their time is unknown
      st.action_ms += std::max<int64_t>(0, e.at_ms - e.started_ms);
      add(e.started_ms, e.at_ms, kActions);
    }
  }
  if (!processing)
    add(begin, history.empty() ? end : history.front().at_ms, kQueue);
  if (paused_since >= 0)
    add(paused_since, end, kPaused);  // still waiting for the operator (or FAILED since)
  for (size_t i = 0; i < t.states.size(); ++i)
    t.states[i].span_ms = std::max<int64_t>(0, state_spans[i].second - state_spans[i].first);
  // The sweep: at each boundary, the count of open intervals per label.
  std::vector<std::tuple<int64_t, int, Label>> edges;
  for (const auto& [from, to, l] : spans) {
    edges.emplace_back(from, +1, l);
    edges.emplace_back(to, -1, l);
  }
  std::sort(edges.begin(), edges.end());
  int open[kLabels] = {0, 0, 0, 0};
  int64_t* part[kLabels] = {&t.queue_ms, &t.paused_ms, &t.actions_ms, &t.timers_ms};
  int64_t at = begin;
  for (const auto& [x, delta, l] : edges) {
    for (int k = 0; k < kLabels; ++k) {
      if (open[k] > 0) {
        *part[k] += x - at;
        break;
      }
    }
    at = x;
    open[l] += delta;
  }
  t.own_ms = t.wall_ms - t.queue_ms - t.paused_ms - t.actions_ms - t.timers_ms;
  return t;
}

json::object timing_view(const OpTiming& t) {
  json::array states;
  for (const auto& s : t.states)
    states.push_back(json::object{{"state", s.state},
                                  {"calls", s.calls},
                                  {"action_ms", s.action_ms},
                                  {"span_ms", s.span_ms}});
  return json::object{{"wall_ms", t.wall_ms},       {"queue_ms", t.queue_ms},
                      {"paused_ms", t.paused_ms},   {"timers_ms", t.timers_ms},
                      {"actions_ms", t.actions_ms}, {"own_ms", t.own_ms},
                      {"states", std::move(states)}};
}

std::string op_position(Store& store, const OpRecord& op) {
  if (!op.cursor.is_object())
    return "";
  const json::value* c = op.cursor.get_object().if_contains("cur");
  if (c == nullptr || !c->is_int64())
    return "";
  auto m = operation_machine(store, op);
  if (!m.ok())
    return "";
  auto i = c->get_int64();
  return i >= 0 && static_cast<size_t>(i) < m.value()->states.size()
             ? m.value()->states[static_cast<size_t>(i)].name
             : "";
}

}  // namespace engine
