// The records as users see them: JSON with SOL003 names where they exist, every secret
// as "***" (actions::redact, the one secret rule). The CLI prints them; the REST API will
// send them.
#include <cstdio>
#include <ctime>
#include <map>

#include <boost/json.hpp>

#include "engine/engine.h"

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
  return json::object{{"id", p.id},           {"digest", p.digest},   {"name", p.name},
                      {"product", p.product}, {"version", p.version}, {"vnfdId", p.vnfd_id}};
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

json::object op_view(const OpRecord& op) {
  static const std::map<std::string, std::string> kOpName = {{"instantiate", "INSTANTIATE"},
                                                             {"terminate", "TERMINATE"},
                                                             {"heal", "HEAL"},
                                                             {"scale", "SCALE"},
                                                             {"change_ext_conn", "CHANGE_EXT_CONN"},
                                                             {"modify_info", "MODIFY_INFO"}};
  json::object o{
      {"id", op.id},
      {"operationState", std::string(to_string(op.state))},
      {"stateEnteredTime", iso_time(op.updated_ms)},
      {"startTime", iso_time(op.created_ms)},
      {"vnfInstanceId", op.instance_id},
      {"operation", kOpName.count(op.operation) ? kOpName.at(op.operation) : op.operation},
      {"isAutomaticInvocation", false},
      {"operationParams", actions::redact(op.request)},
      {"isCancelPending", op.cancel_requested}};
  if (op.error.is_object()) {
    const auto& e = op.error.get_object();
    o["error"] = json::object{{"status", 500},
                              {"title", e.contains("class") ? e.at("class") : json::value("error")},
                              {"detail", e.contains("message") ? e.at("message") : json::value("")},
                              {"state", e.contains("state") ? e.at("state") : json::value("")}};
  }
  o["packageDigest"] = op.package_digest;
  o["machineDigest"] = op.machine_digest;
  if (op.cursor.is_object()) {
    if (const json::value* c = op.cursor.get_object().if_contains("cur"))
      o["position"] = *c;
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
  return o;
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
