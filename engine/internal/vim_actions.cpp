#include "engine/internal/vim_actions.h"

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
  const json::value* access = in.if_contains("access");
  if (name.empty())
    return Outcome::failure(base::ErrorClass::kInvalid,
                            "vim.register: \"name\" must be a non-empty string");
  if (access == nullptr || !access->is_object())
    return Outcome::failure(base::ErrorClass::kInvalid,
                            "vim.register " + name + ": \"access\" must be a map");
  std::string instance_id = record.is_object() ? str_field(record.get_object(), "id") : "";
  VimRecord v;
  v.id = derived_id(instance_id, name);
  v.name = name;
  v.type = str_field(in, "type");
  v.access = access->get_object();
  if (const json::value* e = in.if_contains("extra"); e != nullptr && e->is_object())
    v.extra = e->get_object();
  bool replaced = false;
  if (store != nullptr) {
    // The instance owns what it registers.
    auto reg = register_vim(*store, std::move(v), instance_id, &replaced);
    if (!reg.ok()) {
      base::StatusCode c = reg.status().code();
      bool invalid = c == base::StatusCode::kInvalidArgument ||
                     c == base::StatusCode::kAlreadyExists ||
                     c == base::StatusCode::kPermissionDenied;
      return Outcome::failure(invalid ? base::ErrorClass::kInvalid : base::ErrorClass::kFailed,
                              "vim.register " + name + ": " + reg.status().message());
    }
    v = std::move(reg).value();
  } else {
    // Replay: no registry, the same rules.
    base::Status check = check_vim_access(v.type, v.access);
    if (!check.ok())
      return Outcome::failure(base::ErrorClass::kInvalid,
                              "vim.register " + name + ": " + check.message());
    v.type = vim_type(v.type);
  }
  std::string type = v.type;

  std::string conn_id = str_field(in, "connection_id");
  if (conn_id.empty())
    conn_id = name;
  json::object entry{{"id", conn_id}, {"vimId", v.id}, {"vimType", etsi_vim_type(type)}};
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
    return Outcome::failure(base::ErrorClass::kInvalid,
                            "vim.deregister: give \"vim_id\" or \"name\"");
  std::string instance_id = record.is_object() ? str_field(record.get_object(), "id") : "";
  std::string id;
  bool removed = false;
  if (store != nullptr) {
    auto v = store->get_vim(key, false);
    if (v.ok()) {
      const VimRecord& rec = v.value();
      std::string owner = str_field(rec.extra, "registered_by_instance");
      if (owner != instance_id)
        return Outcome::failure(
            base::ErrorClass::kInvalid,
            "vim.deregister: VIM \"" + rec.name + "\" was not registered by this instance");
      id = rec.id;
      base::Status st = store->delete_vim(id);
      if (!st.ok() && st.code() != base::StatusCode::kNotFound)
        return Outcome::failure(base::ErrorClass::kFailed,
                                "vim.deregister " + rec.name + ": " + st.message());
      removed = st.ok();
    } else if (v.status().code() != base::StatusCode::kNotFound) {
      return Outcome::failure(base::ErrorClass::kFailed,
                              "vim.deregister " + key + ": " + v.status().message());
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

actions::Outcome run_vim_action(Store* store, std::string_view name, const json::object& inputs,
                                json::value& record) {
  if (name == "vim.register")
    return vim_register(store, inputs, record);
  if (name == "vim.deregister")
    return vim_deregister(store, inputs, record);
  return Outcome::failure(base::ErrorClass::kInvalid,
                          "no VIM action \"" + std::string(name) + "\"");
}

void add_vim_actions(actions::Registry& registry, Store* store) {
  registry.add_inline(
      "vim.register",
      actions::Signature::of({"name: string", "type: string", "access: map(any)",
                              "extra?: map(any)", "connection_id?: string"},
                             {"vim_id: string", "connection: any", "replaced: boolean"}),
      [store](const json::object& in, json::value& record) {
        return run_vim_action(store, "vim.register", in, record);
      });
  registry.add_inline(
      "vim.deregister",
      actions::Signature::of({"vim_id?: string", "name?: string"}, {"removed: boolean"}),
      [store](const json::object& in, json::value& record) {
        return run_vim_action(store, "vim.deregister", in, record);
      });
}

}  // namespace engine
