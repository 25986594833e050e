#include "engine/internal/vim_actions.h"

#include <chrono>
#include <string>

#include <boost/json.hpp>

namespace engine {

namespace {

namespace json = boost::json;
using actions::Outcome;

std::string str_field(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

// A stable id for (instance, name), UUID-shaped like every other vnflow id.
std::string derived_id(std::string_view instance_id, std::string_view name) {
  std::string seed = "vnflow-vim\n" + std::string(instance_id) + "\n" + std::string(name);
  std::string h = base::digest_hex(base::DigestAlgorithm::kSha256, seed);
  h[12] = '5';  // version 5-like: name-based
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

std::string canonical_type(std::string_view t) {
  if (t == "openstack" || t.find("OPENSTACK") != std::string_view::npos)
    return "openstack";
  if (t == "kubernetes" || t.find("KUBERNETES") != std::string_view::npos)
    return "kubernetes";
  return {};
}

const char* etsi_type(const std::string& type) {
  return type == "openstack" ? "ETSINFV.OPENSTACK_KEYSTONE.V_3" : "ETSINFV.KUBERNETES.V_1";
}

base::Status check_kubernetes_access(const json::object& a) {
  std::string server = str_field(a, "server");
  if (server.rfind("https://", 0) != 0 && server.rfind("http://", 0) != 0)
    return base::Status::InvalidArgument(
        "a Kubernetes VIM needs \"server\", the API server's http(s):// URL");
  bool token = !str_field(a, "bearer_token").empty();
  bool user = !str_field(a, "username").empty() && !str_field(a, "password").empty();
  if (!token && !user)
    return base::Status::InvalidArgument(
        "a Kubernetes VIM needs \"bearer_token\" (or \"username\" and \"password\")");
  return base::Status::Ok();
}

json::array& connections(json::value& record) {
  if (!record.is_object())
    record = json::object();
  json::object& r = record.get_object();
  json::value& v = r["vim_connection_info"];
  if (!v.is_array())
    v = json::array();
  return v.get_array();
}

Outcome vim_register(Store* store, const json::object& in, json::value& record) {
  std::string name = str_field(in, "name");
  std::string type = canonical_type(str_field(in, "type"));
  const json::value* access = in.if_contains("access");
  if (name.empty())
    return Outcome::failure("invalid", "vim.register: \"name\" must be a non-empty string");
  if (type.empty())
    return Outcome::failure("invalid",
                            "vim.register " + name + ": \"type\" must be openstack or kubernetes");
  if (access == nullptr || !access->is_object())
    return Outcome::failure("invalid", "vim.register " + name + ": \"access\" must be a map");
  base::Status check = type == "openstack" ? actions::check_openstack_access(access->get_object())
                                           : check_kubernetes_access(access->get_object());
  if (!check.ok())
    return Outcome::failure("invalid", "vim.register " + name + ": " + check.message());

  std::string instance_id = record.is_object() ? str_field(record.get_object(), "id") : "";
  VimRecord v;
  v.id = derived_id(instance_id, name);
  v.name = name;
  v.type = type;
  v.access = access->get_object();
  v.summary = actions::redact(v.access).as_object();
  if (const json::value* e = in.if_contains("extra"); e != nullptr && e->is_object())
    v.extra = e->get_object();
  v.extra["registered_by_instance"] = instance_id;
  v.created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  bool replaced = false;
  if (store != nullptr) {
    auto prev = store->get_vim(v.id, false);
    replaced = prev.ok();
    if (replaced)
      v.created_ms = prev.value().created_ms;
    base::Status st = store->put_vim(v);
    if (!st.ok())
      return Outcome::failure(st.code() == base::StatusCode::kAlreadyExists ? "invalid" : "failed",
                              "vim.register " + name + ": " + st.message());
  }

  std::string conn_id = str_field(in, "connection_id");
  if (conn_id.empty())
    conn_id = name;
  json::object entry{{"id", conn_id}, {"vimId", v.id}, {"vimType", etsi_type(type)}};
  json::array& list = connections(record);
  json::array kept;
  for (auto& e : list) {
    bool same = e.is_object() && (str_field(e.get_object(), "id") == conn_id ||
                                  str_field(e.get_object(), "vimId") == v.id);
    if (!same)
      kept.push_back(std::move(e));
  }
  kept.push_back(entry);
  list = std::move(kept);
  return Outcome::success(
      json::object{{"vim_id", v.id}, {"connection", entry}, {"replaced", replaced}});
}

Outcome vim_deregister(Store* store, const json::object& in, json::value& record) {
  std::string key = str_field(in, "vim_id");
  if (key.empty())
    key = str_field(in, "name");
  if (key.empty())
    return Outcome::failure("invalid", "vim.deregister: give \"vim_id\" or \"name\"");
  std::string instance_id = record.is_object() ? str_field(record.get_object(), "id") : "";
  std::string id;
  bool removed = false;
  if (store != nullptr) {
    auto v = store->get_vim(key, false);
    if (v.ok()) {
      const VimRecord& rec = v.value();
      std::string owner = str_field(rec.extra, "registered_by_instance");
      if (owner != instance_id)
        return Outcome::failure("invalid", "vim.deregister: VIM \"" + rec.name +
                                               "\" was not registered by this instance");
      id = rec.id;
      base::Status st = store->delete_vim(id);
      if (!st.ok() && st.code() != base::StatusCode::kNotFound)
        return Outcome::failure("failed", "vim.deregister " + rec.name + ": " + st.message());
      removed = st.ok();
    } else if (v.status().code() != base::StatusCode::kNotFound) {
      return Outcome::failure("failed", "vim.deregister " + key + ": " + v.status().message());
    }
  }
  // The record forgets the entry whether or not the registry still had it (404 = done).
  std::string derived = derived_id(instance_id, key);
  json::array& list = connections(record);
  json::array kept;
  for (auto& e : list) {
    std::string vid = e.is_object() ? str_field(e.get_object(), "vimId") : "";
    std::string cid = e.is_object() ? str_field(e.get_object(), "id") : "";
    bool match = vid == key || vid == derived || (!id.empty() && vid == id) || cid == key;
    if (!match)
      kept.push_back(std::move(e));
  }
  list = std::move(kept);
  return Outcome::success(json::object{{"removed", removed}});
}

}  // namespace

bool is_vim_action(std::string_view name) {
  return name == "vim.register" || name == "vim.deregister";
}

actions::Outcome run_vim_action(Store* store, std::string_view name, const json::object& inputs,
                                json::value& record) {
  if (name == "vim.register")
    return vim_register(store, inputs, record);
  if (name == "vim.deregister")
    return vim_deregister(store, inputs, record);
  return Outcome::failure("invalid", "no VIM action \"" + std::string(name) + "\"");
}

}  // namespace engine
