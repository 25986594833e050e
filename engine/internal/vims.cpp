// The VIM registry's rules: types, what each type needs, ids, names, who may change what.
// `vim register`, a request's vimConnectionInfo (commands.cpp) and the vim.register action
// (vim_actions.cpp) all register through register_vim.
#include <string>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/commands.h"

namespace engine {

namespace {

std::string str_field(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
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

}  // namespace

std::string vim_type(std::string_view t) {
  if (t == "openstack" || t == "ETSINFV.OPENSTACK_KEYSTONE.V_3")
    return "openstack";
  if (t == "kubernetes" || t == "ETSINFV.KUBERNETES.V_1" || t == "ETSINFV.HELM.V_3")
    return "kubernetes";
  return {};
}

std::string_view etsi_vim_type(std::string_view type) {
  return vim_type(type) == "openstack" ? "ETSINFV.OPENSTACK_KEYSTONE.V_3"
                                       : "ETSINFV.KUBERNETES.V_1";
}

base::Status check_vim_access(std::string_view type, const json::object& access) {
  std::string t = vim_type(type);
  if (t == "openstack")
    return actions::check_openstack_access(access);
  if (t == "kubernetes")
    return check_kubernetes_access(access);
  return base::Status::InvalidArgument(
      "the VIM type must be openstack (ETSINFV.OPENSTACK_KEYSTONE.V_3) or kubernetes "
      "(ETSINFV.KUBERNETES.V_1, ETSINFV.HELM.V_3), not \"" +
      std::string(type) + "\"");
}

base::Result<VimRecord> register_vim(Store& store, VimRecord v, std::string_view owner_instance,
                                     bool* replaced) {
  if (replaced != nullptr)
    *replaced = false;
  std::string type = vim_type(v.type);
  if (type.empty())
    return check_vim_access(v.type, v.access);  // the message naming the types
  v.type = type;
  if (!v.name.empty()) {
    if (base::Status s = check_text("the VIM name", v.name, kMaxNameBytes); !s.ok())
      return s;
  }
  if (v.id.empty()) {
    auto named = v.name.empty() ? base::Result<VimRecord>(base::Status::NotFound(""))
                                : store.get_vim(v.name, false);
    v.id = named.ok() && named.value().name == v.name ? named.value().id : new_id();
  } else if (base::Status s = check_text("the VIM id", v.id, kMaxNameBytes); !s.ok()) {
    return s;
  }
  // Who may change the record of this id comes before anything about the new access.
  auto prev = store.get_vim(v.id, false);
  if (prev.ok() && prev.value().id == v.id) {
    if (!owner_instance.empty() &&
        str_field(prev.value().extra, "registered_by_instance") != owner_instance)
      return base::Status::PermissionDenied(
          "VIM \"" + v.id +
          "\" is a registered VIM that this instance does not own: a request may name it "
          "(without accessInfo) but never change it");
    if (v.name.empty())
      v.name = prev.value().name;
    v.created_ms = prev.value().created_ms;
    if (replaced != nullptr)
      *replaced = true;
  } else if (prev.ok()) {
    return base::Status::InvalidArgument("\"" + v.id +
                                         "\" is the name of another VIM; give a new id");
  } else if (prev.status().code() != base::StatusCode::kNotFound) {
    return prev.status();
  } else {
    if (v.name.empty())
      v.name = "inline-" + v.id;
    v.created_ms = now_ms();
  }
  if (base::Status s = check_vim_access(type, v.access); !s.ok())
    return s;
  v.summary = actions::redact(v.access).as_object();
  if (!owner_instance.empty())
    v.extra["registered_by_instance"] = std::string(owner_instance);
  if (base::Status s = store.put_vim(v); !s.ok())
    return s;
  return v;
}

base::Result<VimRecord> show_vim(Store& store, std::string_view id_or_name) {
  return store.get_vim(id_or_name, false);
}

base::Result<VimRecord> delete_vim(Store& store, std::string_view id_or_name) {
  auto v = store.get_vim(id_or_name, false);
  if (!v.ok())
    return v.status();
  if (base::Status s = store.delete_vim(v.value().id); !s.ok())
    return s;
  return v;
}

}  // namespace engine
