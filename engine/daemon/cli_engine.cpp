// vnflow package|instance|op|vim|daemon: the engine's commands on a database, the checks
// of the database's folder and files, and the daemon.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <fcntl.h>
#include <pwd.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/daemon/cli_internal.h"
#include "engine/engine.h"

namespace vnflow_cli {

namespace json = boost::json;
using engine::OpState;

namespace {

// ---------------------------------------------------------------------------------------
// The commands and their options

constexpr const char* kDbHelp =
    "  --db FILE     the database, else $VNFLOW_DB, else ~/.local/share/vnflow/vnflow.db;\n"
    "                its folder must be yours and writable by nobody else (created 0700)\n";
constexpr const char* kJsonHelp = "  --json        one JSON document on stdout instead of text\n";

std::string with_common(std::string usage, bool json) {
  return usage + kDbHelp + (json ? kJsonHelp : "");
}

const std::map<std::string, std::string> kLcmCommands = {{"instantiate", "instantiate"},
                                                         {"terminate", "terminate"},
                                                         {"heal", "heal"},
                                                         {"scale", "scale"},
                                                         {"change-ext-conn", "change_ext_conn"},
                                                         {"modify", "modify_info"}};

const std::vector<CommandSpec>& package_commands() {
  static const std::vector<CommandSpec> specs = {
      {"package onboard",
       with_common("usage: vnflow package onboard PATH [--db FILE] [--json]\n"
                   "\n"
                   "Validates a package (.csar/.zip archive or folder), compiles every LCM\n"
                   "operation and stores it; prints its id (--json: {\"id\", \"digest\"}).\n"
                   "Onboarding the same package again gives the same id.\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"package list",
       with_common("usage: vnflow package list [--db FILE] [--json]\n\n", true),
       {"--db"},
       {"--json"},
       0,
       0},
  };
  return specs;
}

const std::vector<CommandSpec>& instance_commands() {
  static const std::vector<CommandSpec> specs = [] {
    std::vector<CommandSpec> v = {
        {"instance create",
         with_common("usage: vnflow instance create --package ID [--name NAME] "
                     "[--description TEXT] [--db FILE] [--json]\n"
                     "\n"
                     "Creates a NOT_INSTANTIATED instance of an onboarded package; prints its\n"
                     "id (--json: {\"id\", \"name\"}).\n\n",
                     true),
         {"--db", "--package", "--name", "--description"},
         {"--json"},
         0,
         0},
        {"instance list",
         with_common("usage: vnflow instance list [--db FILE] [--json]\n\n", true),
         {"--db"},
         {"--json"},
         0,
         0},
        {"instance show",
         with_common("usage: vnflow instance show ID [--db FILE] [--json]\n"
                     "\n"
                     "The instance and its record (secrets shown as ***).\n\n",
                     true),
         {"--db"},
         {"--json"},
         1,
         1},
        {"instance delete",
         with_common("usage: vnflow instance delete ID [--db FILE]\n"
                     "\n"
                     "Deletes a NOT_INSTANTIATED instance.\n\n",
                     false),
         {"--db"},
         {},
         1,
         1},
    };
    for (const auto& [cmd, op] : kLcmCommands) {
      v.push_back({"instance " + cmd,
                   with_common("usage: vnflow instance " + cmd +
                                   " ID --request FILE.json [--db FILE] [--json]\n"
                                   "\n"
                                   "Queues the " +
                                   op +
                                   " operation of an instance; a running daemon runs it.\n"
                                   "The request is the SOL003 body (at most 1 MiB), checked "
                                   "field by field\nbefore anything is queued. Prints the "
                                   "operation id (--json: the VnfLcmOpOcc).\n\n",
                               true),
                   {"--db", "--request"},
                   {"--json"},
                   1,
                   1});
    }
    return v;
  }();
  return specs;
}

const std::vector<CommandSpec>& op_commands() {
  static const std::vector<CommandSpec> specs = {
      {"op list",
       with_common(
           "usage: vnflow op list [--instance ID] [--state S] [--limit N] [--db FILE] [--json]\n"
           "\n"
           "Operations, newest first: the newest 100 unless --limit says otherwise; when\n"
           "there are more, stderr says so.\n"
           "\n"
           "  --instance ID  only this instance's\n"
           "  --state S      only those in state S (STARTING, PROCESSING, COMPLETED,\n"
           "                 FAILED_TEMP, FAILED, ROLLING_BACK, ROLLED_BACK)\n"
           "  --limit N      at most N (a positive integer; default 100)\n",
           true),
       {"--db", "--instance", "--state", "--limit"},
       {"--json"},
       0,
       0},
      {"op show",
       with_common("usage: vnflow op show OP [--db FILE] [--json]\n"
                   "\n"
                   "The operation's state, where it is, its error (--json: the VnfLcmOpOcc).\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"op history",
       with_common("usage: vnflow op history OP [--db FILE] [--json]\n"
                   "\n"
                   "Every dispatch (with its idempotency key) and result, in order.\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"op wait",
       with_common("usage: vnflow op wait OP [--timeout SECS] [--db FILE] [--json]\n"
                   "\n"
                   "Waits until the operation is COMPLETED, FAILED_TEMP, FAILED or ROLLED_BACK.\n"
                   "exit status: 0 COMPLETED, 1 otherwise, 3 still running after --timeout\n"
                   "(default 3600 s)\n\n",
                   true),
       {"--db", "--timeout"},
       {"--json"},
       1,
       1},
      {"op watch",
       with_common("usage: vnflow op watch OP [--timeout SECS] [--db FILE] [--json]\n"
                   "\n"
                   "As op wait, printing the history as it grows.\n\n",
                   true),
       {"--db", "--timeout"},
       {"--json"},
       1,
       1},
      {"op retry",
       with_common("usage: vnflow op retry OP [--db FILE] [--json]\n"
                   "\n"
                   "Runs a FAILED_TEMP operation again from the step that failed.\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"op rollback",
       with_common("usage: vnflow op rollback OP [--db FILE] [--json]\n"
                   "\n"
                   "Undoes a FAILED_TEMP operation's finished steps (their compensations).\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"op fail",
       with_common("usage: vnflow op fail OP [--force] [--db FILE] [--json]\n"
                   "\n"
                   "Gives up a FAILED_TEMP operation: FAILED, final.\n"
                   "\n"
                   "  --force       from any non-final state (STARTING, PROCESSING,\n"
                   "                ROLLING_BACK too), e.g. one a lost daemon left behind\n",
                   true),
       {"--db"},
       {"--json", "--force"},
       1,
       1},
      {"op cancel",
       with_common("usage: vnflow op cancel OP [--db FILE] [--json]\n"
                   "\n"
                   "Asks a running operation to stop at its next transition (FAILED_TEMP).\n\n",
                   true),
       {"--db"},
       {"--json"},
       1,
       1},
      {"op replay",
       with_common("usage: vnflow op replay OP --dry-run [--package PATH] [--db FILE] [--json]\n"
                   "       vnflow op replay OP --from STATE [--db FILE] [--json]\n"
                   "\n"
                   "  --dry-run       would the recorded operation (or PATH's package) take the\n"
                   "                  same steps? exit 0 yes, 1 it diverges\n"
                   "  --from STATE    a new occurrence of the operation from a checkpoint\n",
                   true),
       {"--db", "--package", "--from"},
       {"--json", "--dry-run"},
       1,
       1},
  };
  return specs;
}

const std::vector<CommandSpec>& key_commands() {
  static const std::vector<CommandSpec> specs = {
      {"key rotate",
       with_common("usage: vnflow key rotate [--db FILE]\n"
                   "\n"
                   "Re-seals every secret of the database with a new key and replaces the key\n"
                   "file (<database>.key). Stop the daemon first. An interrupted rotation is\n"
                   "finished the next time the database is opened (docs/security.md).\n\n",
                   true),
       {"--db"},
       {},
       0,
       0},
  };
  return specs;
}

const CommandSpec& daemon_command() {
  static const CommandSpec spec = {
      "daemon",
      with_common(
          "usage: vnflow daemon [--workers N] [--work-dir DIR] [--poll-ms N] [--hook-user USER]\n"
          "                     [--max-redispatch N] [--db FILE]\n"
          "\n"
          "Runs queued operations and resumes interrupted ones; one daemon per database.\n"
          "SIGTERM, SIGINT or SIGHUP drains (running steps finish and are recorded, no new\n"
          "step starts); a second signal stops at once. Logs go to stderr.\n"
          "\n"
          "  --workers N         threads running actions (default 8)\n"
          "  --work-dir DIR      local.exec runs in DIR/<instance> (default: the folder\n"
          "                      work beside the database)\n"
          "  --poll-ms N         how often new requests are read, in ms (default 50)\n"
          "  --hook-user USER    run hooks as USER (the daemon must run as root)\n"
          "  --max-redispatch N  a step re-dispatched N times after daemon deaths while it\n"
          "                      ran is not dispatched again: FAILED_TEMP (default 3)\n",
          false),
      {"--db", "--workers", "--work-dir", "--poll-ms", "--hook-user", "--max-redispatch"},
      {},
      0,
      0};
  return spec;
}

// ---------------------------------------------------------------------------------------
// The database and its folder

std::string default_db() {
  if (const char* e = std::getenv("VNFLOW_DB"); e != nullptr && *e != '\0')
    return e;
  std::string dir;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != '\0')
    dir = std::string(x) + "/vnflow";
  else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    dir = std::string(h) + "/.local/share/vnflow";
  else
    dir = "/tmp/vnflow-" + std::to_string(::geteuid());
  return dir + "/vnflow.db";
}

std::string db_path(const Opts& o) {
  return o.get("--db", default_db());
}

std::string who(uid_t uid) {
  std::string s = "uid " + std::to_string(uid);
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(4096);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    s += " (" + std::string(found->pw_name) + ")";
  return s;
}

std::string octal(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// Creates the missing folders of `dir`, each 0700.
base::Status make_dirs(const std::filesystem::path& dir) {
  std::error_code ec;
  if (dir.empty() || std::filesystem::exists(dir, ec))
    return base::Status::Ok();
  if (base::Status s = make_dirs(dir.parent_path()); !s.ok())
    return s;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return base::Status::Unavailable("cannot create folder \"" + dir.string() +
                                     "\": " + std::strerror(errno));
  return base::Status::Ok();
}

// The database's folder decides who can swap the database or read the key beside it: it
// must belong to this user (or root) and be writable by nobody else, sticky or not.
base::Status check_folder(const std::filesystem::path& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return base::Status::Unavailable("cannot use folder \"" + dir.string() +
                                     "\": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return base::Status::FailedPrecondition("\"" + dir.string() + "\" is not a folder");
  uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return base::Status::PermissionDenied(
        "the database folder \"" + dir.string() + "\" belongs to " + who(st.st_uid) + ", not to " +
        who(me) + ": its owner could read the secrets or swap the database; refusing it");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return base::Status::PermissionDenied(
        "the database folder \"" + dir.string() + "\" is writable by group or others (mode " +
        octal(st.st_mode) + "): they could swap the database; refusing it");
  return base::Status::Ok();
}

// Checks the database's folder (creating it 0700 when missing), the file and its key file
// before anything opens them: refused when another user could read or swap them.
base::Status check_database(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty())
    dir = ".";
  if (base::Status s = make_dirs(dir); !s.ok())
    return s;
  if (base::Status s = check_folder(dir); !s.ok())
    return s;
  uid_t me = ::geteuid();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return base::Status::FailedPrecondition("\"" + path + "\" is not a regular file");
    if (st.st_uid != me)
      return base::Status::PermissionDenied("the database \"" + path + "\" belongs to " +
                                            who(st.st_uid) + ", not to " + who(me) +
                                            "; refusing it");
    // SQLite keeps a WAL per file name: two names of one file (a hard link) would each get a
    // journal of their own and corrupt it.
    if (st.st_nlink > 1)
      return base::Status::FailedPrecondition(
          "the database \"" + path + "\" has " + std::to_string(st.st_nlink) +
          " hard links: each name would get a journal of its own; use one name (a symbolic "
          "link is fine)");
    // SQLite would take a 0-byte file for a new database and write a schema into it.
    if (st.st_size == 0)
      return base::Status::FailedPrecondition(
          "\"" + path + "\" is empty: not a vnflow database; remove it to start a new one");
  }
  // Through a symlink, the WAL and the key are beside the file it points to.
  std::error_code ec;
  std::filesystem::path real = std::filesystem::weakly_canonical(path, ec);
  if (ec)
    real = path;
  else if (base::Status s = check_folder(real.parent_path()); !s.ok())
    return s;
  std::string key = real.string() + ".key";
  if (::stat(key.c_str(), &st) == 0) {
    if (st.st_uid != me)
      return base::Status::PermissionDenied("the key file \"" + key + "\" belongs to " +
                                            who(st.st_uid) + ", not to " + who(me) +
                                            "; refusing it");
    if ((st.st_mode & 077) != 0)
      return base::Status::PermissionDenied("the key file \"" + key + "\" has mode " +
                                            octal(st.st_mode) +
                                            ": others could read or change it; refusing it");
  }
  return base::Status::Ok();
}

// Opens the database after check_database(). Files it creates are 0600 (umask 077, main()).
std::unique_ptr<engine::Store> open_checked(const std::string& path) {
  auto s = engine::open_sqlite_store(path);
  if (!s.ok()) {
    fail(s.status());
    return nullptr;
  }
  return std::move(s).value();
}

std::unique_ptr<engine::Store> open_store(const Opts& o) {
  std::string path = db_path(o);
  if (base::Status s = check_database(path); !s.ok()) {
    fail(s);
    return nullptr;
  }
  return open_checked(path);
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

// A field of a JSON object as text ("" when absent), for human output.
std::string field(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null())
    return "";
  return v->is_string() ? std::string(v->get_string()) : json::serialize(*v);
}

void print_op(engine::Store& store, const engine::OpRecord& op) {
  std::cout << "operation " << printable(op.id) << "\n  " << printable(op.operation)
            << " of instance " << printable(op.instance_id) << "\n  state "
            << engine::to_string(op.state);
  std::string pos = position_name(store, op);
  if (!pos.empty() && !engine::is_final(op.state))
    std::cout << " at " << printable(pos);
  std::cout << "\n  started " << iso(op.created_ms) << ", last change " << iso(op.updated_ms)
            << "\n";
  if (op.error.is_object()) {
    const auto& e = op.error.get_object();
    std::cout << "  error: " << printable(field(e, "state")) << ": " << printable(field(e, "class"))
              << ": " << printable(field(e, "message")) << "\n";
  }
  if (op.cancel_requested)
    std::cout << "  cancel requested\n";
}

// One history event on one line (printable: messages carry hooks' output).
std::string event_line(const engine::EventRecord& e) {
  std::string s = iso(e.at_ms) + "  #" + std::to_string(e.seq) + " " + printable(e.kind);
  if (!e.state.empty())
    s += " " + printable(e.state) + (e.item >= 0 ? "[" + std::to_string(e.item) + "]" : "");
  if (e.attempt > 0)
    s += " attempt " + std::to_string(e.attempt);
  if (!e.key.empty())
    s += " key " + printable(e.key);
  if (e.kind == "failed" || e.kind == "retry_scheduled" || e.kind == "op_failed_temp" ||
      e.kind == "choice" || e.kind == "on_failure") {
    if (e.data.is_object()) {
      const auto& o = e.data.get_object();
      if (o.contains("next"))
        s += " -> " + printable(field(o, "next"));
      if (o.contains("class"))
        s += ": " + printable(field(o, "class"));
      if (o.contains("message"))
        s += ": " + printable(field(o, "message"));
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

constexpr size_t kMaxRequestBytes = 1 << 20;

// The --request file's JSON ({} without one), refused beyond 1 MiB without reading it all.
base::Result<json::value> read_request(const Opts& o) {
  auto it = o.kv.find("--request");
  if (it == o.kv.end())
    return json::value(json::object());
  const std::string& path = it->second;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return base::Status::NotFound("cannot read request file \"" + path +
                                  "\": " + std::strerror(errno));
  auto too_big = [&](const std::string& size) {
    return base::Status::InvalidArgument("request file \"" + path + "\" is " + size +
                                         "; the limit is 1 MiB");
  };
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > kMaxRequestBytes) {
    ::close(fd);
    return too_big(std::to_string(st.st_size) + " bytes");
  }
  // Bounded for what has no size (a pipe) or grows while read.
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return base::Status::NotFound("cannot read request file \"" + path +
                                    "\": " + std::strerror(err));
    }
    if (n == 0)
      break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxRequestBytes) {
      ::close(fd);
      return too_big("more than 1 MiB");
    }
  }
  ::close(fd);
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec)
    return base::Status::InvalidArgument("request file \"" + path +
                                         "\" is not JSON: " + ec.message());
  return v;
}

// --------------------------------------------------------------------------------------

int cmd_package(const CommandSpec& spec, const Opts& o) {
  auto store = open_store(o);
  if (!store)
    return 1;
  bool as_json = o.flags.count("--json") > 0;
  if (spec.words == "package onboard") {
    base::Diagnostics diags;
    auto rec = engine::onboard_package(*store, o.pos[0], diags);
    print_diags(diags);
    if (!rec.ok())
      return fail(rec.status());
    if (as_json)
      std::cout << json_text(json::object{{"id", rec.value().id}, {"digest", rec.value().digest}})
                << "\n";
    else
      std::cout << printable(rec.value().id) << "\n";
    return 0;
  }
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
      std::cout << printable(p.id) << "  " << printable(p.name) << "  " << printable(p.product)
                << " " << printable(p.version) << "  sha256:" << printable(p.digest.substr(0, 12))
                << "\n";
  }
  if (as_json)
    std::cout << json_text(a) << "\n";
  return 0;
}

int cmd_instance(const CommandSpec& spec, const Opts& o) {
  const std::string sub = spec.words.substr(std::string("instance ").size());
  bool as_json = o.flags.count("--json") > 0;
  if (sub == "create") {
    if (!o.kv.count("--package"))
      return usage_error(spec, "--package is required");
    auto store = open_store(o);
    if (!store)
      return 1;
    auto r = engine::create_instance(*store, o.kv.at("--package"), o.get("--name"),
                                     o.get("--description"));
    if (!r.ok())
      return fail(r.status());
    if (as_json)
      std::cout << json_text(json::object{{"id", r.value().id}, {"name", r.value().name}}) << "\n";
    else
      std::cout << printable(r.value().id) << "\n";
    return 0;
  }
  if (sub == "list" || sub == "show") {
    auto store = open_store(o);
    if (!store)
      return 1;
    std::vector<engine::InstanceRecord> list;
    if (sub == "show") {
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
      std::cout << json_text(sub == "show" ? a[0] : json::value(a)) << "\n";
      return 0;
    }
    for (const auto& i : list) {
      std::cout << printable(i.id) << "  " << printable(i.name) << "  "
                << printable(i.instantiation_state) << "  package " << printable(i.package_id)
                << "\n";
      if (sub == "show")
        std::cout << json_text(actions::redact(i.record)) << "\n";
    }
    return 0;
  }
  if (sub == "delete") {
    auto store = open_store(o);
    if (!store)
      return 1;
    base::Status s = store->delete_instance(o.pos[0]);
    return s.ok() ? 0 : fail(s);
  }
  // An LCM operation.
  auto req = read_request(o);
  if (!req.ok())
    return fail(req.status());
  auto store = open_store(o);
  if (!store)
    return 1;
  base::Diagnostics diags;
  auto op = engine::request_operation(*store, o.pos[0], kLcmCommands.at(sub), req.value(), diags);
  print_diags(diags);
  if (!op.ok())
    return fail(op.status());
  if (as_json)
    std::cout << json_text(op_json(op.value())) << "\n";
  else
    std::cout << printable(op.value().id) << "\n";
  return 0;
}

bool settled(OpState s) {
  return engine::is_final(s) || s == OpState::kFailedTemp;
}

// A positive number of seconds (op wait --timeout).
std::optional<double> parse_seconds(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(d > 0) || d > 1e7)
    return std::nullopt;
  return d;
}

int cmd_op(const CommandSpec& spec, const Opts& o) {
  const std::string sub = spec.words.substr(std::string("op ").size());
  bool as_json = o.flags.count("--json") > 0;
  // Usage errors first: nothing is opened for a command that cannot run.
  engine::OpFilter f;
  double timeout = 3600;
  if (sub == "list") {
    f.instance_id = o.get("--instance");
    if (o.kv.count("--state")) {
      f.state = engine::parse_op_state(o.kv.at("--state"));
      if (!f.state)
        return usage_error(spec, "unknown state \"" + o.kv.at("--state") + "\"");
    }
    if (o.kv.count("--limit")) {
      auto n = parse_positive(o.kv.at("--limit"), 1000000000);
      if (!n)
        return usage_error(spec, "--limit needs a positive integer (at most 1000000000), not \"" +
                                     o.kv.at("--limit") + "\"");
      f.limit = static_cast<size_t>(*n);
    }
  }
  if (o.kv.count("--timeout")) {
    auto t = parse_seconds(o.kv.at("--timeout"));
    if (!t)
      return usage_error(spec, "--timeout needs a positive number of seconds, not \"" +
                                   o.kv.at("--timeout") + "\"");
    timeout = *t;
  }
  if (sub == "replay" && !o.kv.count("--from") && !o.flags.count("--dry-run"))
    return usage_error(spec, "--dry-run or --from STATE is required");
  auto store = open_store(o);
  if (!store)
    return 1;
  if (sub == "list") {
    // One more than shown tells whether the list was cut.
    size_t limit = f.limit;
    f.limit = limit + 1;
    auto list = store->list_ops(f);
    if (!list.ok())
      return fail(list.status());
    std::vector<engine::OpRecord> ops = std::move(list).value();
    bool cut = ops.size() > limit;
    if (cut)
      ops.resize(limit);
    json::array a;
    for (const auto& op : ops) {
      if (as_json)
        a.push_back(op_json(op));
      else
        std::cout << printable(op.id) << "  " << printable(op.operation) << "  "
                  << engine::to_string(op.state) << "  instance " << printable(op.instance_id)
                  << "  " << iso(op.created_ms) << "\n";
    }
    if (as_json)
      std::cout << json_text(a) << "\n";
    std::cout.flush();
    if (cut)
      std::cerr << "vnflow op list: showing the newest " << limit
                << " operations; --limit N for more\n";
    return 0;
  }
  const std::string& id = o.pos[0];
  if (sub == "show") {
    auto op = store->get_op(id);
    if (!op.ok())
      return fail(op.status());
    if (as_json)
      std::cout << json_text(op_json(op.value())) << "\n";
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
      std::cout << json_text(a) << "\n";
    return 0;
  }
  if (sub == "wait" || sub == "watch") {
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
          std::cout << json_text(op_json(op.value())) << "\n";
        else
          print_op(*store, op.value());
        return op.value().state == OpState::kCompleted ? 0 : 1;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "vnflow op " << sub << ": operation " << printable(id) << " is still "
                  << engine::to_string(op.value().state) << " after " << timeout << " s\n";
        return 3;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (sub == "retry" || sub == "rollback" || sub == "fail") {
    bool force = o.flags.count("--force") > 0;
    auto r = sub == "retry"      ? engine::retry_operation(*store, id)
             : sub == "rollback" ? engine::rollback_operation(*store, id)
                                 : engine::fail_operation(*store, id, force);
    if (!r.ok()) {
      if (sub == "fail" && !force && r.status().code() == base::StatusCode::kFailedPrecondition) {
        auto cur = store->get_op(id);
        if (cur.ok() && !engine::is_final(cur.value().state))
          return fail(base::Status::FailedPrecondition(
              r.status().message() +
              " (--force moves an operation in any non-final state to FAILED)"));
      }
      return fail(r.status());
    }
    if (as_json)
      std::cout << json_text(op_json(r.value())) << "\n";
    else
      std::cout << printable(id) << " " << engine::to_string(r.value().state) << "\n";
    return 0;
  }
  if (sub == "cancel") {
    base::Status s = engine::cancel_operation(*store, id);
    if (!s.ok())
      return fail(s);
    if (as_json) {
      auto op = store->get_op(id);
      if (!op.ok())
        return fail(op.status());
      std::cout << json_text(op_json(op.value())) << "\n";
    } else {
      std::cout << printable(id) << " cancel requested; it stops at its next transition\n";
    }
    return 0;
  }
  // replay
  auto op = store->get_op(id);
  if (!op.ok())
    return fail(op.status());
  if (o.kv.count("--from")) {
    auto n = engine::replay_from(*store, id, o.kv.at("--from"));
    if (!n.ok())
      return fail(n.status());
    if (as_json)
      std::cout << json_text(op_json(n.value())) << "\n";
    else
      std::cout << printable(n.value().id) << "\n";
    return 0;
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
    std::cout << json_text(json::object{{"diverged", rep.value().diverged},
                                        {"divergence", rep.value().divergence},
                                        {"steps", std::move(steps)}})
              << "\n";
  } else {
    for (const auto& s : rep.value().steps)
      std::cout << "  " << printable(s) << "\n";
    if (rep.value().diverged)
      std::cout << "diverges: " << printable(rep.value().divergence) << "\n";
    else
      std::cout << "reproduces the recording (" << rep.value().steps.size() << " steps)\n";
  }
  return rep.value().diverged ? 1 : 0;
}

// --------------------------------------------------------------------------------------
// The daemon

std::atomic<int> g_signals{0};

// Log lines with their message made printable (hooks' output, names from packages): a log
// read on a terminal cannot be used to control it, and one event stays one line.
class PrintableSink : public spdlog::sinks::sink {
 public:
  explicit PrintableSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    std::string text = printable(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(text.data(), text.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

// A descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Locks the database file itself (flock on its inode: a symlink or a hard link to it is the
// same database; flock does not touch SQLite's POSIX locks on Linux). A forked child of a
// daemon killed a moment ago can hold the lock until it execs, so a held lock is tried
// again every 50 ms for 3 s. Returns false after printing why.
bool lock_database(const std::string& path, Fd& lock) {
  std::error_code ec;
  std::string real = std::filesystem::canonical(path, ec).string();
  if (ec)
    real = path;
  lock.fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock.fd < 0) {
    std::cerr << "vnflow daemon: cannot open " << printable(real) << ": " << std::strerror(errno)
              << "\n";
    return false;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  bool said = false;
  while (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR)
      continue;
    if (errno != EWOULDBLOCK) {
      std::cerr << "vnflow daemon: cannot lock " << printable(real) << ": " << std::strerror(errno)
                << "\n";
      return false;
    }
    if (g_signals > 0)
      return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::cerr << "vnflow daemon: another daemon is running on " << printable(real) << "\n";
      return false;
    }
    if (!said)
      spdlog::info("database locked by another process, trying again for 3 s");
    said = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

int cmd_key(const Opts& o) {
  std::string path = db_path(o);
  if (base::Status s = check_database(path); !s.ok())
    return fail(s);
  if (::access(path.c_str(), F_OK) != 0)
    return fail(base::Status::NotFound("no database \"" + path + "\""));
  // The daemon keeps the key in memory: rotating under it would leave it sealing with the
  // old one. Its lock on the database file says whether it runs.
  Fd lock;
  std::error_code ec;
  std::string real = std::filesystem::canonical(path, ec).string();
  lock.fd = ::open(ec ? path.c_str() : real.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX | LOCK_NB) != 0)
    return fail(base::Status::FailedPrecondition("a daemon is running on " + path +
                                                 "; stop it before rotating the key"));
  auto store = open_checked(path);
  if (!store)
    return 1;
  if (base::Status s = store->rotate_key(); !s.ok())
    return fail(s);
  std::cout << "key rotated: every secret of " << printable(path)
            << " is sealed with the new key\n";
  return 0;
}

int cmd_daemon(const CommandSpec& spec, const Opts& o) {
  engine::EngineOptions eo;
  struct {
    const char* name;
    int* to;
    long long max;
  } counts[] = {{"--workers", &eo.workers, 4096}, {"--max-redispatch", &eo.max_redispatch, 1000}};
  for (const auto& c : counts) {
    if (!o.kv.count(c.name))
      continue;
    auto n = parse_positive(o.kv.at(c.name), c.max);
    if (!n)
      return usage_error(spec, std::string(c.name) + " needs an integer from 1 to " +
                                   std::to_string(c.max) + ", not \"" + o.kv.at(c.name) + "\"");
    *c.to = static_cast<int>(*n);
  }
  if (o.kv.count("--poll-ms")) {
    auto n = parse_positive(o.kv.at("--poll-ms"), 60000);
    if (!n)
      return usage_error(
          spec, "--poll-ms needs an integer from 1 to 60000, not \"" + o.kv.at("--poll-ms") + "\"");
    eo.poll = std::chrono::milliseconds(*n);
  }
  if (o.kv.count("--hook-user")) {
    const std::string& user = o.kv.at("--hook-user");
    if (::geteuid() != 0)
      return usage_error(spec, "--hook-user needs the daemon to run as root (it runs as " +
                                   who(::geteuid()) + "; hooks run as that user)");
    struct passwd pw;
    struct passwd* found = nullptr;
    std::vector<char> buf(4096);
    if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
      return usage_error(spec, "--hook-user: no user \"" + user + "\"");
    if (found->pw_uid == 0)
      return usage_error(spec, "--hook-user must not be root");
    eo.hook_user = user;
  }
  // Hooks run as the daemon's user unless --hook-user: not dumpable, this process's memory
  // (the database key, VIM secrets) and /proc/<pid>/fd stay out of their reach.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Signals are caught from here on (a SIGTERM while waiting for the lock stops the wait):
  // the first SIGTERM/SIGINT/SIGHUP drains, a second stops hard.
  std::atomic<engine::Engine*> running{nullptr};
  boost::asio::io_context sig_io;
  boost::asio::signal_set signals(sig_io, SIGTERM, SIGINT, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec)
          return;
        int n = ++g_signals;
        spdlog::info("signal {}: {}", sig,
                     n == 1 ? "draining (in-flight steps finish; a second signal stops now)"
                            : "stopping now");
        if (engine::Engine* e = running.load())
          e->stop(n == 1);
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread sig_thread([&] { sig_io.run(); });
  struct Joiner {
    boost::asio::io_context& io;
    std::thread& t;
    ~Joiner() {
      io.stop();
      if (t.joinable())
        t.join();
    }
  } joiner{sig_io, sig_thread};

  std::string path = db_path(o);
  if (base::Status s = check_database(path); !s.ok())
    return fail(s);
  // Declared before the store, so closed after it: closing any descriptor of the database
  // file drops this process's POSIX locks on it, SQLite's included. An existing database is
  // locked before SQLite opens it (a second daemon must not touch it, even through another
  // name with a WAL of its own); a new one once SQLite has made it.
  Fd lock;
  bool existed = ::access(path.c_str(), F_OK) == 0;
  if (existed && !lock_database(path, lock))
    return 1;
  auto store = open_checked(path);
  if (!store)
    return 1;
  if (!existed && !lock_database(path, lock))
    return 1;
  eo.work_root = o.kv.count("--work-dir")
                     ? o.kv.at("--work-dir")
                     : (std::filesystem::path(path).parent_path() / "work").string();
  eo.owner = "daemon-" + std::to_string(::getpid());
  engine::Engine eng(*store, actions::Registry::standard(), eo);
  // The work root, and no hook of a previous daemon still running (waits up to 30 s).
  if (base::Status s = eng.prepare(); !s.ok())
    return fail(s);
  running = &eng;
  if (int n = g_signals.load(); n > 0)
    eng.stop(n == 1);
  spdlog::info("vnflow daemon on {} ({} workers, work dir {})", path, eo.workers, eo.work_root);
  eng.run();
  auto st = eng.stats();
  spdlog::info("stopped: {} commits, {} transitions, {} actions", st.commits, st.batches,
               st.actions);
  sig_io.stop();
  sig_thread.join();
  running = nullptr;
  return 0;
}

}  // namespace

int cmd_engine(const std::vector<std::string>& argv) {
  const std::string& group = argv[1];
  const CommandSpec* spec = nullptr;
  int status = 2;
  if (group == "daemon")
    spec = &daemon_command();
  else
    spec = find_subcommand(argv,
                           group == "package"    ? package_commands()
                           : group == "instance" ? instance_commands()
                           : group == "op"       ? op_commands()
                           : group == "key"      ? key_commands()
                                                 : vim_commands(),
                           status);
  if (spec == nullptr)
    return status;
  Opts o;
  if (auto st = parse_command(argv, group == "daemon" ? 2 : 3, *spec, o))
    return *st;
  // Logs go to stderr: stdout carries ids and JSON for scripts.
  auto sink =
      std::make_shared<PrintableSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("vnflow", sink));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (group == "package")
    return cmd_package(*spec, o);
  if (group == "instance")
    return cmd_instance(*spec, o);
  if (group == "op")
    return cmd_op(*spec, o);
  if (group == "key")
    return cmd_key(o);
  if (group == "vim") {
    auto store = open_store(o);
    if (!store)
      return 1;
    return cmd_vim(*spec, o, *store);
  }
  return cmd_daemon(*spec, o);
}

}  // namespace vnflow_cli
