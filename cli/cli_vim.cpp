// vnflow vim register|list|show|delete: the VIM registry. Credentials come from flags,
// files (never a password on the command line), OS_* variables or a clouds.yaml entry, as
// every OpenStack tool reads them. Secrets are sealed by the store and never printed.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>

#include <boost/json.hpp>

#include "cli/cli_internal.h"
#include "engine/engine.h"
#include "tosca/tosca.h"

namespace vnflow_cli {

namespace json = boost::json;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

base::Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return base::Status::InvalidArgument(std::string(what) + " \"" + path + "\" cannot be read");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

std::string trim_nl(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s;
}

void put(json::object& o, const char* k, const std::string& v) {
  if (!v.empty())
    o[k] = v;
}

// The access info of cloud `name` from clouds.yaml (`file`, else OS_CLIENT_CONFIG_FILE,
// ./clouds.yaml, ~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml).
base::Result<json::object> from_clouds_yaml(const std::string& name, std::string file) {
  std::vector<std::string> paths;
  if (!file.empty()) {
    paths.push_back(file);
  } else {
    if (!env("OS_CLIENT_CONFIG_FILE").empty())
      paths.push_back(env("OS_CLIENT_CONFIG_FILE"));
    paths.push_back("clouds.yaml");
    if (!env("HOME").empty())
      paths.push_back(env("HOME") + "/.config/openstack/clouds.yaml");
    paths.push_back("/etc/openstack/clouds.yaml");
  }
  for (const auto& p : paths) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec))
      continue;
    auto text = read_text(p, "clouds file");
    if (!text.ok())
      return text.status();
    base::Diagnostics diags;
    auto doc = tosca::parse_yaml_file(p, text.value(), tosca::Limits{}, diags);
    if (doc == nullptr)
      return base::Status::InvalidArgument("clouds file \"" + p + "\" is not YAML");
    tosca::Node cloud = doc->root().get("clouds");
    if (cloud)
      cloud = cloud.get(name);
    if (!cloud || !cloud.is_map())
      return base::Status::NotFound("no cloud \"" + name + "\" in " + p);
    json::object a;
    tosca::Node auth = cloud.get("auth");
    for (const char* k : {"auth_url", "username", "password", "project_name", "project_id",
                          "user_domain_name", "project_domain_name", "application_credential_id",
                          "application_credential_name", "application_credential_secret"}) {
      if (auth && auth.get(k) && auth.get(k).is_scalar())
        a[k] = std::string(auth.get(k).scalar());
    }
    for (auto [from, to] : {std::pair{"region_name", "region"}, std::pair{"interface", "interface"},
                            std::pair{"cacert", "cacert"}}) {
      if (cloud.get(from) && cloud.get(from).is_scalar())
        a[to] = std::string(cloud.get(from).scalar());
    }
    return a;
  }
  return base::Status::NotFound("no clouds.yaml found for cloud \"" + name + "\"");
}

// A Heat environment file and the template files its resource_registry names (relative
// to the file), for clouds whose resource types differ (vim extra: heat_environment,
// heat_files).
base::Status load_heat_env(const std::string& path, json::object& extra) {
  auto text = read_text(path, "Heat environment");
  if (!text.ok())
    return text.status();
  base::Diagnostics diags;
  auto doc = tosca::parse_yaml_file(path, text.value(), tosca::Limits{}, diags);
  if (doc == nullptr)
    return base::Status::InvalidArgument("Heat environment \"" + path + "\" is not YAML");
  json::object files;
  tosca::Node reg = doc->root().get("resource_registry");
  auto dir = std::filesystem::path(path).parent_path();
  if (reg && reg.is_map()) {
    for (size_t i = 0; i < reg.size(); ++i) {
      tosca::Node v = reg.value(i);
      if (!v.is_scalar())
        continue;
      std::string f(v.scalar());
      if (f.size() < 5 || f.find("::") != std::string::npos || f.find("..") != std::string::npos)
        continue;
      auto t = read_text((dir / f).string(), "template");
      if (!t.ok())
        return t.status();
      files[f] = t.value();
    }
  }
  extra["heat_environment"] = text.value();
  extra["heat_files"] = std::move(files);
  return base::Status::Ok();
}

constexpr const char* kVimCommon =
    "  --db FILE     the database, else $VNFLOW_DB, else ~/.local/share/vnflow/vnflow.db\n";

void print_vim(const engine::VimRecord& v, bool as_json) {
  if (as_json) {
    std::cout << json_text(engine::vim_view(v)) << "\n";
    return;
  }
  json::object view = engine::vim_view(v);
  std::cout << "id:       " << printable(v.id) << "\nname:     " << printable(v.name)
            << "\ntype:     " << printable(v.type) << (v.is_default ? " (default)" : "") << "\n";
  for (const auto& [k, val] : view.at("auth_cred").as_object())
    std::cout << "  " << printable(k) << ": "
              << printable(val.is_string() ? std::string(val.get_string()) : json::serialize(val))
              << "\n";
}

}  // namespace

const std::vector<CommandSpec>& vim_commands() {
  static const std::vector<CommandSpec> specs = {
      {"vim register",
       std::string(
           "usage: vnflow vim register --name NAME [--type openstack|kubernetes] [--default]\n"
           "         [--id ID] [--db FILE] [--json]\n"
           "  openstack: --from-env | --cloud NAME [--clouds-file F] |\n"
           "             --auth-url URL --username U --password-file F --project P\n"
           "             [--user-domain D] [--project-domain D] [--region R]\n"
           "             [--interface public] [--cacert FILE] [--heat-env FILE]\n"
           "             [--orchestration-endpoint URL] [--heat-stall-secs N]\n"
           "  kubernetes: --server URL --token-file F [--ca-file FILE]\n"
           "\n"
           "Registers (or replaces, by name) a VIM; secrets are sealed at rest and never\n"
           "printed; prints its id (--json: {\"id\", \"name\"}).\n"
           "\n"
           "  --from-env            OS_* variables, or OS_CLOUD's clouds.yaml entry\n"
           "  --orchestration-endpoint URL  Heat's endpoint (%(project_id)s is replaced)\n"
           "  --heat-stall-secs N   resume a stack idle this long (default 600; 0 = never)\n"
           "  --default             the VIM of requests that name none\n") +
           kVimCommon,
       {"--db",
        "--name",
        "--type",
        "--cloud",
        "--clouds-file",
        "--auth-url",
        "--username",
        "--password-file",
        "--project",
        "--user-domain",
        "--project-domain",
        "--region",
        "--interface",
        "--cacert",
        "--heat-env",
        "--orchestration-endpoint",
        "--heat-stall-secs",
        "--server",
        "--token-file",
        "--ca-file",
        "--id"},
       {"--json", "--from-env", "--default"},
       0,
       0},
      {"vim list",
       std::string("usage: vnflow vim list [--db FILE] [--json]\n\n") + kVimCommon,
       {"--db"},
       {"--json"},
       0,
       0},
      {"vim show",
       std::string("usage: vnflow vim show ID|NAME [--db FILE] [--json]\n\n") + kVimCommon,
       {"--db"},
       {"--json"},
       1,
       1},
      {"vim delete",
       std::string("usage: vnflow vim delete ID|NAME [--db FILE] [--json]\n\n") + kVimCommon,
       {"--db"},
       {"--json"},
       1,
       1},
  };
  return specs;
}

int cmd_vim(const CommandSpec& spec, const Opts& o, engine::Store& store) {
  const std::string sub = spec.words.substr(std::string("vim ").size());
  const auto& flags = o.flags;
  const auto& pos = o.pos;
  bool as_json = flags.count("--json") > 0;
  auto opt = [&](const char* k) { return o.get(k); };
  if (sub == "register") {
    engine::VimRecord v;
    v.name = opt("--name");
    std::string type = opt("--type").empty() ? "openstack" : opt("--type");
    if (v.name.empty())
      return usage_error(spec, "--name is required");
    v.type = engine::vim_type(type);
    if (v.type.empty())
      return usage_error(spec, "--type is openstack or kubernetes, not \"" + type + "\"");
    json::object a;
    if (v.type == "openstack") {
      std::string cloud = opt("--cloud");
      if (cloud.empty() && flags.count("--from-env"))
        cloud = env("OS_CLOUD");
      if (!cloud.empty()) {
        auto c = from_clouds_yaml(cloud, opt("--clouds-file"));
        if (!c.ok())
          return fail(c.status());
        a = c.value();
      } else if (flags.count("--from-env")) {
        put(a, "auth_url", env("OS_AUTH_URL"));
        put(a, "username", env("OS_USERNAME"));
        put(a, "password", env("OS_PASSWORD"));
        put(a, "project_name",
            env("OS_PROJECT_NAME").empty() ? env("OS_TENANT_NAME") : env("OS_PROJECT_NAME"));
        put(a, "project_id", env("OS_PROJECT_ID"));
        put(a, "user_domain_name", env("OS_USER_DOMAIN_NAME"));
        put(a, "project_domain_name", env("OS_PROJECT_DOMAIN_NAME"));
        put(a, "region", env("OS_REGION_NAME"));
        put(a, "interface", env("OS_INTERFACE"));
        put(a, "cacert", env("OS_CACERT"));
        put(a, "application_credential_id", env("OS_APPLICATION_CREDENTIAL_ID"));
        put(a, "application_credential_secret", env("OS_APPLICATION_CREDENTIAL_SECRET"));
      }
      put(a, "auth_url", opt("--auth-url"));
      put(a, "username", opt("--username"));
      put(a, "project_name", opt("--project"));
      put(a, "user_domain_name", opt("--user-domain"));
      put(a, "project_domain_name", opt("--project-domain"));
      put(a, "region", opt("--region"));
      put(a, "interface", opt("--interface"));
      put(a, "cacert", opt("--cacert"));
      put(a, "orchestration_endpoint", opt("--orchestration-endpoint"));
      if (!opt("--password-file").empty()) {
        auto p = read_text(opt("--password-file"), "password file");
        if (!p.ok())
          return fail(p.status());
        a["password"] = trim_nl(p.value());
      }
      if (!a.contains("cacert") || a.at("cacert").as_string().empty()) {
        // nothing: the system's CA store verifies HTTPS
      } else {
        std::string ca(a.at("cacert").as_string());
        a["cacert"] = std::filesystem::absolute(ca).string();
      }
      if (!opt("--heat-env").empty()) {
        base::Status h = load_heat_env(opt("--heat-env"), v.extra);
        if (!h.ok())
          return fail(h);
      }
      if (std::string n = opt("--heat-stall-secs"); !n.empty()) {
        char* end = nullptr;
        long secs = std::strtol(n.c_str(), &end, 10);
        if (end == n.c_str() || *end != '\0' || secs < 0)
          return fail(base::Status::InvalidArgument(
              "--heat-stall-secs takes a number of seconds (0 = never resume)"));
        v.extra["heat_stall_secs"] = static_cast<int64_t>(secs);
      }
    } else {
      put(a, "server", opt("--server"));
      if (!opt("--token-file").empty()) {
        auto t = read_text(opt("--token-file"), "token file");
        if (!t.ok())
          return fail(t.status());
        a["bearer_token"] = trim_nl(t.value());
      }
      if (!opt("--ca-file").empty()) {
        auto t = read_text(opt("--ca-file"), "CA file");
        if (!t.ok())
          return fail(t.status());
        a["ssl_ca_cert"] = t.value();
      }
    }
    v.access = std::move(a);
    v.is_default = flags.count("--default") > 0;
    v.id = opt("--id");
    auto reg = engine::register_vim(store, std::move(v), "");
    if (!reg.ok())
      return fail(reg.status());
    v = std::move(reg).value();
    if (as_json)
      std::cout << json_text(json::object{{"id", v.id}, {"name", v.name}}) << "\n";
    else
      std::cout << printable(v.id) << "\n";
    return 0;
  }
  if (sub == "list") {
    auto list = store.list_vims();
    if (!list.ok())
      return fail(list.status());
    json::array arr;
    for (const auto& v : list.value()) {
      json::object view = engine::vim_view(v);
      if (as_json) {
        arr.push_back(std::move(view));
        continue;
      }
      const json::object& cred = view.at("auth_cred").as_object();
      std::string where = cred.contains("auth_url") && cred.at("auth_url").is_string()
                              ? std::string(cred.at("auth_url").get_string())
                          : cred.contains("server") && cred.at("server").is_string()
                              ? std::string(cred.at("server").get_string())
                              : std::string();
      std::cout << printable(v.id) << "  " << printable(v.name) << "  " << printable(v.type) << "  "
                << printable(where) << (v.is_default ? "  (default)" : "") << "\n";
    }
    if (as_json)
      std::cout << json_text(arr) << "\n";
    return 0;
  }
  auto v = sub == "show" ? engine::show_vim(store, pos[0]) : engine::delete_vim(store, pos[0]);
  if (!v.ok())
    return fail(v.status());
  if (sub == "show") {
    print_vim(v.value(), as_json);
    return 0;
  }
  if (as_json)
    std::cout << json_text(json::object{{"id", v.value().id}, {"name", v.value().name}}) << "\n";
  else
    std::cout << printable(v.value().id) << "\n";
  return 0;
}

}  // namespace vnflow_cli
