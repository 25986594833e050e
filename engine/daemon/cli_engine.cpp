// vnflow package|instance|op|daemon: the engine's commands on a database.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <fcntl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine/daemon/cli_internal.h"
#include "engine/engine.h"

namespace vnflow_cli {

namespace json = boost::json;
using engine::OpState;

int fail(const base::Status& s) {
  std::cerr << "vnflow: " << s.message() << "\n";
  return 1;
}

namespace {

struct Opts {
  std::vector<std::string> pos;  // positional words after the subcommand
  std::map<std::string, std::string> kv;
  std::set<std::string> flags;
};

// Options that take a value; everything else starting with "--" is a flag.
const std::set<std::string> kValued = {
    "--db", "--package", "--name", "--description", "--request", "--workers", "--work-dir",
    "--timeout", "--from", "--state", "--instance", "--limit", "--poll-ms",
    // vim register
    "--type", "--cloud", "--clouds-file", "--auth-url", "--username", "--password-file",
    "--project", "--user-domain", "--project-domain", "--region", "--interface", "--cacert",
    "--heat-env", "--server", "--token-file", "--ca-file", "--id", "--orchestration-endpoint",
    "--heat-stall-secs"};

bool parse(const std::vector<std::string>& argv, size_t start, Opts& o, std::string& err) {
  for (size_t i = start; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.rfind("--", 0) == 0) {
      if (kValued.count(s)) {
        if (i + 1 >= argv.size()) {
          err = s + " needs a value";
          return false;
        }
        o.kv[s] = argv[++i];
      } else {
        o.flags.insert(s);
      }
    } else {
      o.pos.push_back(s);
    }
  }
  return true;
}

std::string default_db() {
  if (const char* e = std::getenv("VNFLOW_DB"); e != nullptr && *e != '\0')
    return e;
  std::string dir;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != '\0')
    dir = std::string(x) + "/vnflow";
  else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    dir = std::string(h) + "/.local/share/vnflow";
  else
    dir = "/tmp/vnflow-" + std::to_string(::getuid());
  return dir + "/vnflow.db";
}

std::string db_path(const Opts& o) {
  auto it = o.kv.find("--db");
  return it != o.kv.end() ? it->second : default_db();
}

std::unique_ptr<engine::Store> open_store(const Opts& o) {
  std::string path = db_path(o);
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty())
    std::filesystem::create_directories(parent, ec);
  auto s = engine::open_sqlite_store(path);
  if (!s.ok()) {
    std::cerr << "vnflow: " << s.status().message() << "\n";
    return nullptr;
  }
  return std::move(s).value();
}

void print_diags(const base::Diagnostics& diags) {
  for (const auto& d : diags.sorted())
    std::cerr << base::to_string(d) << "\n";
}

std::string iso(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

json::value op_json(const engine::OpRecord& op) {
  // SOL003 VnfLcmOpOcc field names where they exist.
  static const std::map<std::string, std::string> kOpName = {{"instantiate", "INSTANTIATE"},
                                                             {"terminate", "TERMINATE"},
                                                             {"heal", "HEAL"},
                                                             {"scale", "SCALE"},
                                                             {"change_ext_conn", "CHANGE_EXT_CONN"},
                                                             {"modify_info", "MODIFY_INFO"}};
  json::object o{
      {"id", op.id},
      {"operationState", std::string(engine::to_string(op.state))},
      {"stateEnteredTime", iso(op.updated_ms)},
      {"startTime", iso(op.created_ms)},
      {"vnfInstanceId", op.instance_id},
      {"operation", kOpName.count(op.operation) ? kOpName.at(op.operation) : op.operation},
      {"isAutomaticInvocation", false},
      {"operationParams", actions::redact(op.request)},
      {"isCancelPending", op.cancel_requested}};
  if (!op.error.is_null()) {
    const auto& e = op.error.as_object();
    o["error"] = json::object{{"status", 500},
                              {"title", e.contains("class") ? e.at("class") : json::value("error")},
                              {"detail", e.contains("message") ? e.at("message") : json::value("")},
                              {"state", e.contains("state") ? e.at("state") : json::value("")}};
  }
  o["packageDigest"] = op.package_digest;
  o["machineDigest"] = op.machine_digest;
  if (op.cursor.is_object()) {
    if (const json::value* c = op.cursor.as_object().if_contains("cur"))
      o["position"] = *c;
  }
  return o;
}

std::string position_name(engine::Store& store, const engine::OpRecord& op) {
  if (!op.cursor.is_object())
    return "";
  auto m = engine::operation_machine(store, op);
  if (!m.ok())
    return "";
  const json::value* c = op.cursor.as_object().if_contains("cur");
  if (c == nullptr || !c->is_int64())
    return "";
  auto i = static_cast<size_t>(c->get_int64());
  return i < m.value()->states.size() ? m.value()->states[i].name : "";
}

void print_op(engine::Store& store, const engine::OpRecord& op) {
  std::cout << "operation " << op.id << "\n  " << op.operation << " of instance " << op.instance_id
            << "\n  state " << engine::to_string(op.state);
  std::string pos = position_name(store, op);
  if (!pos.empty() && !engine::is_final(op.state))
    std::cout << " at " << pos;
  std::cout << "\n  started " << iso(op.created_ms) << ", last change " << iso(op.updated_ms)
            << "\n";
  if (!op.error.is_null()) {
    const auto& e = op.error.as_object();
    std::cout << "  error: " << (e.contains("state") ? std::string(e.at("state").as_string()) : "")
              << ": " << (e.contains("class") ? std::string(e.at("class").as_string()) : "") << ": "
              << (e.contains("message") ? std::string(e.at("message").as_string()) : "") << "\n";
  }
  if (op.cancel_requested)
    std::cout << "  cancel requested\n";
}

std::string event_line(const engine::EventRecord& e) {
  std::string s = iso(e.at_ms) + "  #" + std::to_string(e.seq) + " " + e.kind;
  if (!e.state.empty()) {
    s += " " + e.state;
    if (e.item >= 0) {  // not `"[" + std::to_string(...)`: g++ 12's false -Wrestrict at -O3
      s += '[';
      s += std::to_string(e.item);
      s += ']';
    }
  }
  if (e.attempt > 0)
    s += " attempt " + std::to_string(e.attempt);
  if (!e.key.empty())
    s += " key " + e.key;
  if (e.kind == "failed" || e.kind == "retry_scheduled" || e.kind == "op_failed_temp" ||
      e.kind == "choice" || e.kind == "on_failure") {
    if (e.data.is_object()) {
      const auto& o = e.data.get_object();
      if (o.contains("next"))
        s += " -> " + std::string(o.at("next").as_string());
      if (o.contains("class"))
        s += ": " + std::string(o.at("class").as_string());
      if (o.contains("message"))
        s += ": " + std::string(o.at("message").as_string());
      if (o.contains("delay_s"))
        s += " (again in " + json::serialize(o.at("delay_s")) + " s)";
    }
  }
  return s;
}

json::value event_json(const engine::EventRecord& e) {
  json::object o{{"seq", e.seq}, {"time", iso(e.at_ms)}, {"kind", e.kind}};
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

base::Result<json::value> read_request(const Opts& o) {
  auto it = o.kv.find("--request");
  if (it == o.kv.end())
    return json::value(json::object());
  std::ifstream in(it->second, std::ios::binary);
  if (!in)
    return base::Status::NotFound("cannot read request file \"" + it->second + "\"");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec)
    return base::Status::InvalidArgument("request file \"" + it->second +
                                         "\" is not JSON: " + ec.message());
  return v;
}

// --------------------------------------------------------------------------------------

int cmd_package(const std::vector<std::string>& argv, const Opts& o) {
  const std::string& sub = argv[2];
  auto store = open_store(o);
  if (!store)
    return 1;
  bool as_json = o.flags.count("--json") > 0;
  if (sub == "onboard") {
    if (o.pos.empty()) {
      std::cerr << "usage: vnflow package onboard PATH [--db FILE] [--json]\n";
      return 2;
    }
    base::Diagnostics diags;
    auto rec = engine::onboard_package(*store, o.pos[0], diags);
    print_diags(diags);
    if (!rec.ok())
      return fail(rec.status());
    if (as_json)
      std::cout << json::serialize(
                       json::object{{"id", rec.value().id}, {"digest", rec.value().digest}})
                << "\n";
    else
      std::cout << rec.value().id << "\n";
    return 0;
  }
  if (sub == "list") {
    auto list = store->list_packages();
    if (!list.ok())
      return fail(list.status());
    json::array a;
    for (const auto& p : list.value()) {
      if (as_json)
        a.push_back(json::object{{"id", p.id},
                                 {"digest", p.digest},
                                 {"name", p.name},
                                 {"product", p.product},
                                 {"version", p.version},
                                 {"vnfdId", p.vnfd_id}});
      else
        std::cout << p.id << "  " << p.name << "  " << p.product << " " << p.version
                  << "  sha256:" << p.digest.substr(0, 12) << "\n";
    }
    if (as_json)
      std::cout << json::serialize(a) << "\n";
    return 0;
  }
  std::cerr << "usage: vnflow package onboard PATH | list\n";
  return 2;
}

const std::map<std::string, std::string> kLcmCommands = {{"instantiate", "instantiate"},
                                                         {"terminate", "terminate"},
                                                         {"heal", "heal"},
                                                         {"scale", "scale"},
                                                         {"change-ext-conn", "change_ext_conn"},
                                                         {"modify", "modify_info"}};

int cmd_instance(const std::vector<std::string>& argv, const Opts& o) {
  const std::string& sub = argv[2];
  bool as_json = o.flags.count("--json") > 0;
  if (sub == "create") {
    auto p = o.kv.find("--package");
    if (p == o.kv.end()) {
      std::cerr
          << "usage: vnflow instance create --package ID [--name NAME] [--description TEXT]\n";
      return 2;
    }
    auto store = open_store(o);
    if (!store)
      return 1;
    auto r =
        engine::create_instance(*store, p->second, o.kv.count("--name") ? o.kv.at("--name") : "",
                                o.kv.count("--description") ? o.kv.at("--description") : "");
    if (!r.ok())
      return fail(r.status());
    std::cout << r.value().id << "\n";
    return 0;
  }
  if (sub == "list" || sub == "show") {
    auto store = open_store(o);
    if (!store)
      return 1;
    std::vector<engine::InstanceRecord> list;
    if (sub == "show") {
      if (o.pos.empty()) {
        std::cerr << "usage: vnflow instance show ID [--json]\n";
        return 2;
      }
      auto r = store->get_instance(o.pos[0]);
      if (!r.ok())
        return fail(r.status());
      list.push_back(r.value());
    } else {
      auto r = store->list_instances();
      if (!r.ok())
        return fail(r.status());
      list = r.value();
    }
    if (as_json) {
      json::array a;
      for (const auto& i : list)
        a.push_back(actions::redact(i.record));
      std::cout << json::serialize(sub == "show" ? a[0] : json::value(a)) << "\n";
      return 0;
    }
    for (const auto& i : list) {
      std::cout << i.id << "  " << i.name << "  " << i.instantiation_state << "  package "
                << i.package_id << "\n";
      if (sub == "show")
        std::cout << json::serialize(actions::redact(i.record)) << "\n";
    }
    return 0;
  }
  if (sub == "delete") {
    if (o.pos.empty()) {
      std::cerr << "usage: vnflow instance delete ID\n";
      return 2;
    }
    auto store = open_store(o);
    if (!store)
      return 1;
    base::Status s = store->delete_instance(o.pos[0]);
    return s.ok() ? 0 : fail(s);
  }
  auto lcm = kLcmCommands.find(sub);
  if (lcm != kLcmCommands.end()) {
    if (o.pos.empty()) {
      std::cerr << "usage: vnflow instance " << sub << " ID --request FILE.json\n";
      return 2;
    }
    auto req = read_request(o);
    if (!req.ok())
      return fail(req.status());
    auto store = open_store(o);
    if (!store)
      return 1;
    base::Diagnostics diags;
    auto op = engine::request_operation(*store, o.pos[0], lcm->second, req.value(), diags);
    print_diags(diags);
    if (!op.ok())
      return fail(op.status());
    std::cout << op.value().id << "\n";
    return 0;
  }
  std::cerr << "usage: vnflow instance "
               "create|list|show|delete|instantiate|heal|scale|terminate|change-ext-conn|modify\n";
  return 2;
}

bool settled(OpState s) {
  return engine::is_final(s) || s == OpState::kFailedTemp;
}

int cmd_op(const std::vector<std::string>& argv, const Opts& o) {
  const std::string& sub = argv[2];
  bool as_json = o.flags.count("--json") > 0;
  auto store = open_store(o);
  if (!store)
    return 1;
  if (sub == "list") {
    engine::OpFilter f;
    if (o.kv.count("--instance"))
      f.instance_id = o.kv.at("--instance");
    if (o.kv.count("--state")) {
      f.state = engine::parse_op_state(o.kv.at("--state"));
      if (!f.state) {
        std::cerr << "vnflow op list: unknown state \"" << o.kv.at("--state") << "\"\n";
        return 2;
      }
    }
    if (o.kv.count("--limit"))
      f.limit = static_cast<size_t>(std::max(1, std::atoi(o.kv.at("--limit").c_str())));
    auto list = store->list_ops(f);
    if (!list.ok())
      return fail(list.status());
    json::array a;
    for (const auto& op : list.value()) {
      if (as_json)
        a.push_back(op_json(op));
      else
        std::cout << op.id << "  " << op.operation << "  " << engine::to_string(op.state)
                  << "  instance " << op.instance_id << "  " << iso(op.created_ms) << "\n";
    }
    if (as_json)
      std::cout << json::serialize(a) << "\n";
    return 0;
  }
  if (o.pos.empty()) {
    std::cerr << "usage: vnflow op " << sub << " OP_ID\n";
    return 2;
  }
  const std::string& id = o.pos[0];
  if (sub == "show") {
    auto op = store->get_op(id);
    if (!op.ok())
      return fail(op.status());
    if (as_json)
      std::cout << json::serialize(op_json(op.value())) << "\n";
    else
      print_op(*store, op.value());
    return 0;
  }
  if (sub == "history") {
    auto op = store->get_op(id);
    if (!op.ok())
      return fail(op.status());
    auto h = store->history(id);
    if (!h.ok())
      return fail(h.status());
    json::array a;
    for (const auto& e : h.value()) {
      if (as_json)
        a.push_back(event_json(e));
      else
        std::cout << event_line(e) << "\n";
    }
    if (as_json)
      std::cout << json::serialize(a) << "\n";
    return 0;
  }
  if (sub == "wait" || sub == "watch") {
    double timeout = o.kv.count("--timeout") ? std::atof(o.kv.at("--timeout").c_str()) : 3600;
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
    int64_t seen = 0;
    for (;;) {
      auto op = store->get_op(id);
      if (!op.ok())
        return fail(op.status());
      if (sub == "watch") {
        auto h = store->history(id);
        if (h.ok()) {
          for (const auto& e : h.value()) {
            if (e.seq > seen) {
              std::cout << event_line(e) << "\n" << std::flush;
              seen = e.seq;
            }
          }
        }
      }
      if (settled(op.value().state)) {
        if (as_json)
          std::cout << json::serialize(op_json(op.value())) << "\n";
        else
          print_op(*store, op.value());
        return op.value().state == OpState::kCompleted ? 0 : 1;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "vnflow op " << sub << ": operation " << id << " is still "
                  << engine::to_string(op.value().state) << " after " << timeout << " s\n";
        return 3;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (sub == "retry" || sub == "rollback" || sub == "fail") {
    auto r = sub == "retry"      ? engine::retry_operation(*store, id)
             : sub == "rollback" ? engine::rollback_operation(*store, id)
                                 : engine::fail_operation(*store, id);
    if (!r.ok())
      return fail(r.status());
    if (as_json)
      std::cout << json::serialize(op_json(r.value())) << "\n";
    else
      std::cout << id << " " << engine::to_string(r.value().state) << "\n";
    return 0;
  }
  if (sub == "cancel") {
    base::Status s = engine::cancel_operation(*store, id);
    if (!s.ok())
      return fail(s);
    std::cout << id << " cancel requested; it stops at its next transition\n";
    return 0;
  }
  if (sub == "replay") {
    auto op = store->get_op(id);
    if (!op.ok())
      return fail(op.status());
    if (o.kv.count("--from")) {
      auto n = engine::replay_from(*store, id, o.kv.at("--from"));
      if (!n.ok())
        return fail(n.status());
      std::cout << n.value().id << "\n";
      return 0;
    }
    if (!o.flags.count("--dry-run")) {
      std::cerr << "usage: vnflow op replay OP_ID --dry-run [--package PATH] | --from STATE\n";
      return 2;
    }
    std::shared_ptr<const workflows::Machine> m;
    if (o.kv.count("--package")) {
      base::Diagnostics diags;
      auto pkg = tosca::load_package(o.kv.at("--package"), tosca::LoadOptions{}, diags);
      if (pkg == nullptr || diags.has_errors()) {
        print_diags(diags);
        return fail(base::Status::InvalidArgument("the package is not valid"));
      }
      auto cur = engine::operation_machine(*store, op.value());
      m = workflows::compile(*pkg, {op.value().operation, cur.ok() ? cur.value()->flavour : ""},
                             diags);
      print_diags(diags);
      if (m == nullptr)
        return fail(base::Status::InvalidArgument("the package's " + op.value().operation +
                                                  " workflow does not compile"));
    } else {
      auto cur = engine::operation_machine(*store, op.value());
      if (!cur.ok())
        return fail(cur.status());
      m = cur.value();
    }
    auto rep = engine::replay_dry_run(*store, op.value(), *m);
    if (!rep.ok())
      return fail(rep.status());
    if (as_json) {
      json::array steps;
      for (const auto& s : rep.value().steps)
        steps.push_back(json::string(s));
      std::cout << json::serialize(json::object{{"diverged", rep.value().diverged},
                                                {"divergence", rep.value().divergence},
                                                {"steps", std::move(steps)}})
                << "\n";
    } else {
      for (const auto& s : rep.value().steps)
        std::cout << "  " << s << "\n";
      if (rep.value().diverged)
        std::cout << "diverges: " << rep.value().divergence << "\n";
      else
        std::cout << "reproduces the recording (" << rep.value().steps.size() << " steps)\n";
    }
    return rep.value().diverged ? 1 : 0;
  }
  std::cerr
      << "usage: vnflow op show|list|wait|watch|history|retry|rollback|fail|cancel|replay ...\n";
  return 2;
}

std::atomic<int> g_signals{0};

int cmd_daemon(const Opts& o) {
  std::string path = db_path(o);
  auto store = open_store(o);
  if (!store)
    return 1;
  // One daemon per database (many daemons over one PostgreSQL come later, with leases).
  std::string lock_path = path + ".lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::cerr << "vnflow daemon: another daemon is running on " << path << "\n";
    return 1;
  }
  engine::EngineOptions eo;
  if (o.kv.count("--workers"))
    eo.workers = std::max(1, std::atoi(o.kv.at("--workers").c_str()));
  eo.work_root = o.kv.count("--work-dir")
                     ? o.kv.at("--work-dir")
                     : (std::filesystem::path(path).parent_path() / "work").string();
  if (o.kv.count("--poll-ms"))
    eo.poll = std::chrono::milliseconds(std::max(1, std::atoi(o.kv.at("--poll-ms").c_str())));
  eo.owner = "daemon-" + std::to_string(::getpid());
  engine::Engine eng(*store, actions::Registry::standard(), eo);
  // Signals on a thread of their own: the first SIGTERM/SIGINT drains, a second stops hard.
  boost::asio::io_context sig_io;
  boost::asio::signal_set signals(sig_io, SIGTERM, SIGINT);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec)
          return;
        int n = ++g_signals;
        spdlog::info("signal {}: {}", sig,
                     n == 1 ? "draining (in-flight steps finish; a second signal stops now)"
                            : "stopping now");
        eng.stop(n == 1);
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread sig_thread([&] { sig_io.run(); });
  spdlog::info("vnflow daemon on {} ({} workers, work dir {})", path, eo.workers, eo.work_root);
  eng.run();
  auto st = eng.stats();
  spdlog::info("stopped: {} commits, {} transitions, {} actions", st.commits, st.batches,
               st.actions);
  sig_io.stop();
  sig_thread.join();
  ::close(lock_fd);
  return 0;
}

}  // namespace

int cmd_engine(const std::vector<std::string>& argv) {
  const std::string& group = argv[1];
  Opts o;
  std::string err;
  size_t start = group == "daemon" ? 2 : 3;
  if (group != "daemon" && argv.size() < 3) {
    std::cerr << "usage: vnflow " << group << " SUBCOMMAND ... (vnflow help)\n";
    return 2;
  }
  if (!parse(argv, start, o, err)) {
    std::cerr << "vnflow " << group << ": " << err << "\n";
    return 2;
  }
  // Logs go to stderr: stdout carries ids and JSON for scripts.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vnflow"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (group == "package")
    return cmd_package(argv, o);
  if (group == "instance")
    return cmd_instance(argv, o);
  if (group == "op")
    return cmd_op(argv, o);
  if (group == "vim") {
    auto store = open_store(o);
    if (!store)
      return 1;
    return cmd_vim(argv, o.kv, o.flags, o.pos, *store);
  }
  if (group == "daemon")
    return cmd_daemon(o);
  return 2;
}

}  // namespace vnflow_cli
