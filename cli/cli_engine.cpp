// vnflow package|instance|op|key|daemon: their options and their output over the engine's
// commands and views (engine/engine.h: the rules, the database checks and the daemon's
// lifecycle live there).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/json.hpp>
#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "engine/engine.h"

#include "api/api.h"

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
                   "           [--trust CA.pem [--require-signature]] [--signing-cert FILE]\n"
                   "\n"
                   "Validates a package (.csar/.zip archive or folder), compiles every LCM\n"
                   "operation and stores it; prints its id (--json: {\"id\", \"digest\"}).\n"
                   "Onboarding the same package again gives the same id.\n"
                   "\n"
                   "  --trust FILE    PEM file of trusted CA certificates: verify the SOL004\n"
                   "                  signatures; a signature that does not verify refuses it\n"
                   "  --require-signature   with --trust: refuse a package that is not signed\n"
                   "  --signing-cert FILE   the signing certificate, when the package lacks it\n"
                   "A SOL004 option-2 zip (the CSAR, its .cms and .cert) stores the CSAR.\n\n",
                   true),
       {"--db", "--trust", "--signing-cert"},
       {"--json", "--require-signature"},
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
                                   " ID --request FILE.json [--wait [--timeout SECS]]\n"
                                   "           [--db FILE] [--json]\n"
                                   "\n"
                                   "Queues the " +
                                   op +
                                   " operation of an instance; a running daemon runs it.\n"
                                   "The request is the SOL003 body (at most 1 MiB), checked "
                                   "field by field\nbefore anything is queued. Prints the "
                                   "operation id (--json: the VnfLcmOpOcc).\n"
                                   "\n"
                                   "  --wait        then wait as op wait does, and print what "
                                   "it prints:\n"
                                   "                exit status 0 COMPLETED, 1 otherwise, 3 "
                                   "still running\n"
                                   "                after --timeout (default 3600 s)\n",
                               true),
                   {"--db", "--request", "--timeout"},
                   {"--json", "--wait"},
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
       with_common("usage: vnflow op show OP [--timing] [--db FILE] [--json]\n"
                   "\n"
                   "The operation's state, where it is, its error (--json: the VnfLcmOpOcc).\n"
                   "--timing: where its time went: waiting for a daemon, paused in\n"
                   "FAILED_TEMP, retry backoff, action calls, and vnflow's own time (stepping,\n"
                   "commits, hand-offs); per state its calls and their time\n\n",
                   true),
       {"--db"},
       {"--json", "--timing"},
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
          "                     [--max-redispatch N] [--name NAME] [--lease-ms N] [--db FILE]\n"
          "\n"
          "Runs queued operations and resumes interrupted ones. On SQLite, one daemon per\n"
          "database; on PostgreSQL (--db postgresql://...), any number, each under its own\n"
          "name, sharing the work through leases (docs/persistence.md).\n"
          "SIGTERM, SIGINT or SIGHUP drains (running steps finish and are recorded, no new\n"
          "step starts); a second signal stops at once. Logs go to stderr.\n"
          "\n"
          "  --workers N         threads running actions (default 8)\n"
          "  --work-dir DIR      local.exec runs in DIR/<instance> (default: the folder\n"
          "                      work beside the database)\n"
          "  --poll-ms N         how often new requests are read, in ms (default 50)\n"
          "  --hook-user USER    run hooks as USER (the daemon must run as root)\n"
          "  --max-redispatch N  a step re-dispatched N times after daemon deaths while it\n"
          "                      ran is not dispatched again: FAILED_TEMP (default 3)\n"
          "  --name NAME         PostgreSQL: this daemon's name (default: the host name);\n"
          "                      a restart keeps it, two daemons of one name are refused\n"
          "  --lease-ms N        PostgreSQL: how long its lease lasts unrenewed; another\n"
          "                      daemon takes its operations over once it ran out\n"
          "                      (1000 to 600000, default 10000)\n"
          "  --metrics-listen ADDR:PORT  serve GET /metrics (Prometheus' text format) on\n"
          "                      ADDR:PORT without credentials (PORT alone: 127.0.0.1);\n"
          "                      counts only, no ids (docs/operations.md)\n"
          "  --log-format F      human (default) or json: one JSON object a line, with the\n"
          "                      operation's op_id, instance_id, state and attempt\n"
          "  --notify-retry-s N  a notification that cannot be delivered is tried again,\n"
          "                      without end; after N s (default 3600) its subscription is\n"
          "                      marked failing (vnflow subscription list)\n"
          "  --notify-backoff-max-ms N  the longest wait between two attempts (default\n"
          "                      60000; they start at 1000 and double)\n"
          "  --notify-cacert F   the CA of https callbacks (default: the system's)\n"
          "  --notify-allow NETS  callbacks and token endpoints only in these networks\n"
          "                      (CIDR,CIDR...; default: anywhere); others are not contacted\n"
          "  --http-allow NETS   http.request calls only to these networks (CIDR,CIDR...;\n"
          "                      default: anywhere); others fail as invalid, uncontacted\n"
          "  --public-url URL    where notifications' links point (default: the API's\n"
          "                      http(s)://ADDR:PORT)\n"
          "\n"
          "The ETSI REST API (SOL003 /vnflcm/v1, SOL005 /vnfpkgm/v1; docs/api.md), served\n"
          "beside the engine when --listen or --api is given:\n"
          "  --listen ADDR:PORT  serve HTTP on ADDR:PORT (PORT alone: 127.0.0.1:PORT)\n"
          "  --api               serve on 127.0.0.1:9890\n"
          "  --auth-file FILE    credentials, one a line: \"token T\" (X-Auth-Token or\n"
          "                      Bearer) or \"basic USER:PASSWORD\"; mode 600\n"
          "  --auth none         no credentials checked (only on a loopback address)\n"
          "  --auth keystone     X-Auth-Token checked with Keystone's token API; --auth-file\n"
          "                      holds the service user: \"user U\", \"password P\",\n"
          "                      \"project P\" [\"domain D\"] lines\n"
          "  --keystone-url URL  Keystone's identity endpoint (http(s)://HOST:PORT/v3)\n"
          "  --keystone-role R   a role the token must carry\n"
          "  --keystone-project P  the project (name or id) the token must be scoped to\n"
          "  --keystone-cacert F   the CA of an https Keystone (default: the system's)\n"
          "  --tls-cert F --tls-key F  serve HTTPS (TLS 1.2+) with this PEM certificate\n"
          "                      chain and key (mode 600)\n"
          "  --api-page-size N   list entries per page (default 100)\n"
          "  --api-threads N     threads answering requests that use the database (default\n"
          "                      8; up to 256): one waiting on it holds up no I/O thread;\n"
          "                      0: answer them on the I/O threads\n"
          "  --trust FILE        packages uploaded over the API: verify their SOL004\n"
          "                      signatures against these CAs (PEM), as package onboard\n"
          "  --require-signature   with --trust: an unsigned upload is not onboarded\n"
          "  --signing-cert FILE   the signing certificate, when a package lacks it\n",
          false),
      {"--db",
       "--workers",
       "--work-dir",
       "--poll-ms",
       "--hook-user",
       "--max-redispatch",
       "--name",
       "--lease-ms",
       "--metrics-listen",
       "--log-format",
       "--notify-retry-s",
       "--notify-backoff-max-ms",
       "--notify-cacert",
       "--notify-allow",
       "--http-allow",
       "--public-url",
       "--listen",
       "--auth",
       "--auth-file",
       "--api-page-size",
       "--api-threads",
       "--keystone-url",
       "--keystone-role",
       "--keystone-project",
       "--keystone-cacert",
       "--tls-cert",
       "--tls-key",
       "--trust",
       "--signing-cert"},
      {"--api", "--require-signature"},
      0,
      0};
  return spec;
}

// ---------------------------------------------------------------------------------------
// The database

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

// The database, checked (engine::check_database) and opened. Files it creates are 0600
// (umask 077, main()).
std::unique_ptr<engine::Store> open_store(const Opts& o) {
  auto s = engine::open_database(db_path(o));
  if (!s.ok()) {
    fail(s.status());
    return nullptr;
  }
  return std::move(s).value();
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
  std::string pos = engine::op_position(store, op);
  if (!pos.empty() && !engine::is_final(op.state))
    std::cout << " at " << printable(pos);
  std::cout << "\n  started " << engine::iso_time(op.created_ms) << ", last change "
            << engine::iso_time(op.updated_ms) << "\n";
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
  std::string s =
      engine::iso_time(e.at_ms) + "  #" + std::to_string(e.seq) + " " + printable(e.kind);
  if (!e.state.empty())
    s += " " + printable(e.state) + (e.item >= 0 ? "[" + std::to_string(e.item) + "]" : "");
  if (e.attempt > 0)
    s += " attempt " + std::to_string(e.attempt);
  if (!e.key.empty())
    s += " key " + printable(e.key);
  if (e.kind == "called" && e.data.is_object() && e.data.get_object().contains("workflow"))
    s += " -> " + printable(field(e.data.get_object(), "workflow"));
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
      static_cast<uint64_t>(st.st_size) > engine::kMaxRequestBytes) {
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
    if (text.size() > engine::kMaxRequestBytes) {
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
  engine::PackageCheckOptions check;  // before the database: a usage error opens nothing
  if (spec.words == "package onboard" && !signature_options(spec, o, check.signatures))
    return 2;
  auto store = open_store(o);
  if (!store)
    return 1;
  bool as_json = o.flags.count("--json") > 0;
  if (spec.words == "package onboard") {
    base::Diagnostics diags;
    auto rec = engine::onboard_package(*store, o.pos[0], diags, check);
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
      a.push_back(engine::package_view(p));
    else
      std::cout << printable(p.id) << "  " << printable(p.name) << "  " << printable(p.product)
                << " " << printable(p.version) << "  sha256:" << printable(p.digest.substr(0, 12))
                << "\n";
  }
  if (as_json)
    std::cout << json_text(a) << "\n";
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

// Waits until operation `id` settles (op wait, op watch, a lifecycle command's --wait);
// `watch` prints the history as it grows. Exit status: 0 COMPLETED, 1 otherwise, 3 still
// running after `timeout` seconds.
int wait_op(engine::Store& store, const std::string& id, double timeout, bool watch, bool as_json,
            const std::string& command) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  int64_t seen = 0;
  // Woken by the next commit (Store::wait_for_change), not by a timer: the first call
  // arms the watch before the first read, so no commit between them is missed.
  store.wait_for_change(std::chrono::milliseconds(0));
  for (;;) {
    auto op = store.get_op(id);
    if (!op.ok())
      return fail(op.status());
    if (watch) {
      auto h = store.history(id);
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
        std::cout << json_text(engine::op_view(op.value())) << "\n";
      else
        print_op(store, op.value());
      return op.value().state == OpState::kCompleted ? 0 : 1;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::cerr << "vnflow " << command << ": operation " << printable(id) << " is still "
                << engine::to_string(op.value().state) << " after " << timeout << " s\n";
      return 3;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    store.wait_for_change(
        std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(100)));
  }
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
        a.push_back(engine::instance_view(i));
      std::cout << json_text(sub == "show" ? a[0] : json::value(a)) << "\n";
      return 0;
    }
    for (const auto& i : list) {
      std::cout << printable(i.id) << "  " << printable(i.name) << "  "
                << printable(i.instantiation_state) << "  package " << printable(i.package_id)
                << "\n";
      if (sub == "show")
        std::cout << json_text(engine::instance_view(i)) << "\n";
    }
    return 0;
  }
  if (sub == "delete") {
    auto store = open_store(o);
    if (!store)
      return 1;
    base::Status s = engine::delete_instance(*store, o.pos[0]);
    return s.ok() ? 0 : fail(s);
  }
  // An LCM operation.
  bool wait = o.flags.count("--wait") > 0;
  double timeout = 3600;
  if (o.kv.count("--timeout")) {
    auto t = parse_seconds(o.kv.at("--timeout"));
    if (!t || !wait)
      return usage_error(spec, !wait ? "--timeout goes with --wait"
                                     : "--timeout needs a positive number of seconds, not \"" +
                                           o.kv.at("--timeout") + "\"");
    timeout = *t;
  }
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
  engine::wake_daemon(db_path(o));
  if (wait) {
    if (::isatty(STDERR_FILENO) != 0)  // for whoever interrupts the wait: the operation goes on
      std::cerr << "operation " << printable(op.value().id) << " queued; waiting for it\n";
    return wait_op(*store, op.value().id, timeout, false, as_json, spec.words);
  }
  if (as_json)
    std::cout << json_text(engine::op_view(op.value())) << "\n";
  else
    std::cout << printable(op.value().id) << "\n";
  return 0;
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
    auto page = engine::list_operations(*store, f);
    if (!page.ok())
      return fail(page.status());
    const std::vector<engine::OpRecord>& ops = page.value().ops;
    bool cut = page.value().more;
    size_t limit = f.limit;
    json::array a;
    for (const auto& op : ops) {
      if (as_json)
        a.push_back(engine::op_view(op));
      else
        std::cout << printable(op.id) << "  " << printable(op.operation) << "  "
                  << engine::to_string(op.state) << "  instance " << printable(op.instance_id)
                  << "  " << engine::iso_time(op.created_ms) << "\n";
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
    if (o.flags.count("--timing") > 0) {
      auto h = store->history(id);
      if (!h.ok())
        return fail(h.status());
      engine::OpTiming t = engine::op_timing(op.value(), h.value(), engine::now_ms());
      if (as_json) {
        std::cout << json_text(engine::timing_view(t)) << "\n";
        return 0;
      }
      auto line = [&t](const char* what, int64_t ms) {
        double share = t.wall_ms > 0 ? 100.0 * static_cast<double>(ms) / t.wall_ms : 0;
        std::printf("  %-9s %10.3f s  %5.1f%%\n", what, static_cast<double>(ms) / 1000, share);
      };
      std::cout << "operation " << printable(op.value().id) << "  "
                << printable(op.value().operation) << "  " << engine::to_string(op.value().state)
                << "\n";
      std::printf("  %-9s %10.3f s\n", "wall", static_cast<double>(t.wall_ms) / 1000);
      line("queue", t.queue_ms);
      line("paused", t.paused_ms);
      line("timers", t.timers_ms);
      line("actions", t.actions_ms);
      line("own", t.own_ms);
      std::cout << std::flush;
      for (const auto& s : t.states) {
        std::cout << "  " << printable(s.state) << ": " << s.calls << " call(s) " << s.action_ms
                  << " ms, span " << s.span_ms << " ms\n";
      }
      return 0;
    }
    if (as_json)
      std::cout << json_text(engine::op_view(op.value())) << "\n";
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
        a.push_back(engine::event_view(e));
      else
        std::cout << event_line(e) << "\n";
    }
    if (as_json)
      std::cout << json_text(a) << "\n";
    return 0;
  }
  if (sub == "wait" || sub == "watch")
    return wait_op(*store, id, timeout, sub == "watch", as_json, "op " + sub);
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
    engine::wake_daemon(db_path(o));
    if (as_json)
      std::cout << json_text(engine::op_view(r.value())) << "\n";
    else
      std::cout << printable(id) << " " << engine::to_string(r.value().state) << "\n";
    return 0;
  }
  if (sub == "cancel") {
    base::Status s = engine::cancel_operation(*store, id);
    if (!s.ok())
      return fail(s);
    engine::wake_daemon(db_path(o));
    if (as_json) {
      auto op = store->get_op(id);
      if (!op.ok())
        return fail(op.status());
      std::cout << json_text(engine::op_view(op.value())) << "\n";
    } else {
      std::cout << printable(id) << " cancel requested; it stops at its next transition\n";
    }
    return 0;
  }
  // replay
  if (o.kv.count("--from")) {
    auto n = engine::replay_from(*store, id, o.kv.at("--from"));
    if (!n.ok())
      return fail(n.status());
    engine::wake_daemon(db_path(o));
    if (as_json)
      std::cout << json_text(engine::op_view(n.value())) << "\n";
    else
      std::cout << printable(n.value().id) << "\n";
    return 0;
  }
  base::Diagnostics diags;
  auto rep = engine::replay_dry_run(*store, id, o.get("--package"), diags);
  print_diags(diags);
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

// --log-format json: one JSON object a line on stderr: time, level, msg, and the fields of
// the scope it was written in (base::LogFields: op_id, instance_id, state, attempt, ...).
// JSON's escapes keep every line one line; printable(kJson) removes what a terminal would
// still obey (C1, bidi controls) and keeps the document valid for bytes that are not UTF-8.
class JsonLogSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    json::object line;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch());
    line["time"] = engine::iso_time(ms.count());
    auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string_view(level.data(), level.size());
    line["msg"] = std::string_view(msg.payload.data(), msg.payload.size());
    for (const auto& [k, v] : base::LogFields::current()) {
      if (v.empty() || k == "time" || k == "level" || k == "msg")
        continue;
      if (k == "attempt" || k == "item")  // numbers
        line[k] = std::strtoll(v.c_str(), nullptr, 10);
      else
        line[k] = v;
    }
    std::string text = base::printable(json::serialize(line), base::PrintMode::kJson) + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

void use_json_log() {
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("vnflow", std::make_shared<JsonLogSink>()));
}

int cmd_key(const Opts& o) {
  std::string path = db_path(o);
  if (base::Status s = engine::rotate_database_key(path); !s.ok())
    return fail(s);
  std::cout << "key rotated: every secret of " << printable(engine::display_db(path))
            << " is sealed with the new key\n";
  return 0;
}

int cmd_daemon(const CommandSpec& spec, const Opts& o) {
  engine::DaemonOptions d;
  engine::EngineOptions& eo = d.engine;
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
  if (o.has("--lease-ms")) {
    auto n = parse_positive(o.get("--lease-ms"), 600000);
    if (!n || *n < 1000)
      return usage_error(spec, "--lease-ms needs an integer from 1000 to 600000, not \"" +
                                   o.get("--lease-ms") + "\"");
    eo.lease_ttl = std::chrono::milliseconds(*n);
  }
  if (o.has("--name")) {
    if (base::Status s = engine::check_daemon_name(o.get("--name")); !s.ok())
      return usage_error(spec, s.message());
    d.name = o.get("--name");
  }
  if (o.kv.count("--hook-user")) {
    // A usage error (exit 2) before anything is opened; the engine's rule.
    if (base::Status s = engine::check_hook_user(o.kv.at("--hook-user"), "--hook-user"); !s.ok())
      return usage_error(spec, s.message());
    eo.hook_user = o.kv.at("--hook-user");
  }
  // The REST API: its options are usage errors before anything is opened.
  std::optional<api::ServerOptions> ao;
  if (o.has("--listen") || o.has("--api")) {
    ao.emplace();
    if (o.has("--listen")) {
      if (base::Status s = api::parse_listen(o.get("--listen"), *ao); !s.ok())
        return usage_error(spec, s.message());
    }
    bool keystone = o.get("--auth") == "keystone";
    if (o.has("--auth") && !keystone) {
      if (o.get("--auth") != "none" || o.has("--auth-file"))
        return usage_error(spec, "--auth takes \"none\" (and no --auth-file) or \"keystone\"");
      ao->auth = api::AuthMode::kNone;
    } else if (o.has("--auth-file")) {
      auto c = api::load_auth_file(o.get("--auth-file"));
      if (!c.ok())
        return usage_error(spec, c.status().message());
      ao->credentials = std::move(c).value();
      ao->auth_file = o.get("--auth-file");
    }
    if (keystone) {
      ao->auth = api::AuthMode::kKeystone;
      ao->keystone.url = o.get("--keystone-url");
      ao->keystone.role = o.get("--keystone-role");
      ao->keystone.project = o.get("--keystone-project");
      ao->keystone.ca_file = o.get("--keystone-cacert");
    } else if (o.has("--keystone-url") || o.has("--keystone-role") || o.has("--keystone-project") ||
               o.has("--keystone-cacert")) {
      return usage_error(spec, "--keystone-* options need --auth keystone");
    }
    ao->tls.cert_file = o.get("--tls-cert");
    ao->tls.key_file = o.get("--tls-key");
    if (o.has("--api-page-size")) {
      auto n = parse_positive(o.get("--api-page-size"), 10000);
      if (!n)
        return usage_error(spec, "--api-page-size needs an integer from 1 to 10000");
      ao->page_size = static_cast<size_t>(*n);
    }
    if (o.has("--api-threads")) {
      auto n = o.get("--api-threads") == "0" ? std::optional<long long>(0)
                                             : parse_positive(o.get("--api-threads"), 256);
      if (!n)
        return usage_error(spec, "--api-threads needs an integer from 0 to 256");
      ao->handler_threads = static_cast<int>(*n);
    }
    auto checks = std::make_shared<engine::PackageCheckOptions>();
    if (!signature_options(spec, o, checks->signatures))
      return 2;
    ao->package_checks = std::move(checks);
    if (base::Status s = api::check_options(*ao); !s.ok())
      return usage_error(spec, s.message());
  } else if (o.has("--trust") || o.has("--signing-cert") ||
             o.flags.count("--require-signature") > 0) {
    return usage_error(spec,
                       "--trust, --signing-cert and --require-signature need --listen or --api");
  } else if (o.has("--auth") || o.has("--auth-file") || o.has("--api-page-size") ||
             o.has("--api-threads") || o.has("--tls-cert") || o.has("--tls-key") ||
             o.has("--keystone-url")) {
    return usage_error(spec,
                       "--auth, --auth-file, --tls-* and --api-page-size need --listen or --api");
  }
  std::optional<api::ServerOptions> mo;
  if (o.has("--metrics-listen")) {
    mo.emplace();
    mo->auth = api::AuthMode::kNone;
    mo->metrics_only = true;
    mo->threads = 1;
    mo->max_connections = 64;
    mo->request_timeout = std::chrono::seconds(5);  // idle connections do not hold it long
    mo->body_limit = mo->package_body_limit = 4096;
    if (base::Status s = api::parse_listen(o.get("--metrics-listen"), *mo); !s.ok())
      return usage_error(spec, "--metrics-" + s.message().substr(2));  // "--listen ..."
  }
  if (o.has("--log-format")) {
    if (o.get("--log-format") != "human" && o.get("--log-format") != "json")
      return usage_error(spec, "--log-format takes \"human\" or \"json\"");
    if (o.get("--log-format") == "json")
      use_json_log();
  }
  if (o.has("--notify-retry-s")) {
    auto n = parse_positive(o.get("--notify-retry-s"), 30 * 86400);
    if (!n)
      return usage_error(spec, "--notify-retry-s needs an integer from 1 to 2592000");
    d.notify.retry_for = std::chrono::seconds(*n);
  }
  if (o.has("--notify-backoff-max-ms")) {
    auto n = parse_positive(o.get("--notify-backoff-max-ms"), 3600 * 1000);
    if (!n || *n < 10)
      return usage_error(spec, "--notify-backoff-max-ms needs an integer from 10 to 3600000");
    d.notify.backoff_max = std::chrono::milliseconds(*n);
    d.notify.backoff_min = std::min(d.notify.backoff_min, d.notify.backoff_max);
  }
  d.notify.ca_file = o.get("--notify-cacert");
  if (o.has("--notify-allow")) {
    auto nets = actions::parse_networks(o.get("--notify-allow"));
    if (!nets.ok())
      return usage_error(spec, "--notify-allow: " + nets.status().message());
    d.notify.allow = std::move(nets.value());
  }
  if (o.has("--http-allow")) {
    auto nets = actions::parse_networks(o.get("--http-allow"));
    if (!nets.ok())
      return usage_error(spec, "--http-allow: " + nets.status().message());
    actions::Services services;
    services.http_allow = std::move(nets.value());
    d.registry = actions::Registry::standard(services);
  }
  if (o.has("--public-url")) {
    const std::string& u = o.get("--public-url");
    bool plain = std::all_of(u.begin(), u.end(), [](char ch) {
      return static_cast<unsigned char>(ch) > 0x20 && static_cast<unsigned char>(ch) < 0x7f;
    });
    if ((u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) || u.size() > 1024 || !plain)
      return usage_error(spec, "--public-url needs an http:// or https:// URL");
    d.notify.base_url = u;
    while (!d.notify.base_url.empty() && d.notify.base_url.back() == '/')
      d.notify.base_url.pop_back();
  } else if (ao) {
    bool v6 = ao->address.find(':') != std::string::npos;
    d.notify.base_url = std::string(ao->tls.cert_file.empty() ? "http://" : "https://") +
                        (v6 ? "[" + ao->address + "]" : ao->address) + ":" +
                        std::to_string(ao->port);
  }
  if (ao)
    ao->notify = std::make_shared<const engine::NotifyOptions>(d.notify);
  d.db_path = db_path(o);
  d.work_dir = o.get("--work-dir");
  // SIGHUP: the API reads its credentials file and TLS files again (the server is set
  // while it serves; the signal thread may call this at any time before the daemon ends).
  struct Reloadable {
    std::mutex mu;
    api::Server* server = nullptr;
  };
  auto reloadable = std::make_shared<Reloadable>();
  d.on_reload = [reloadable] {
    std::lock_guard<std::mutex> l(reloadable->mu);
    if (reloadable->server == nullptr) {
      spdlog::info("nothing to reload: no REST API is served");
      return;
    }
    if (base::Status s = reloadable->server->reload(); !s.ok())
      spdlog::error("reload refused, the API goes on as it was: {}", s.message());
  };
  engine::Daemon daemon(std::move(d));
  if (base::Status s = daemon.start(); !s.ok())
    return fail(s);
  std::optional<api::Server> server, metrics_server;
  // Gone before the server, on every way out.
  struct Unset {
    std::shared_ptr<Reloadable> r;
    ~Unset() {
      std::lock_guard<std::mutex> l(r->mu);
      r->server = nullptr;
    }
  } unset{reloadable};
  if (ao) {
    ao->on_queued = [&daemon] { daemon.wake(); };
    ao->create_op = [&daemon](const engine::OpRecord& op) { return daemon.start_op(op); };
    ao->metrics = &daemon.metrics();
    server.emplace(*daemon.store(), std::move(*ao));
    if (base::Status s = server->start(); !s.ok())
      return fail(s);
    std::lock_guard<std::mutex> l(reloadable->mu);
    reloadable->server = &*server;
  }
  if (mo) {
    mo->metrics = &daemon.metrics();
    metrics_server.emplace(*daemon.store(), std::move(*mo));
    if (base::Status s = metrics_server->start(); !s.ok())
      return fail(s);
  }
  engine::notify_service("READY=1\nSTATUS=running the operations of " +
                         engine::display_db(daemon.options().db_path));
  daemon.run();
  {
    std::lock_guard<std::mutex> l(reloadable->mu);
    reloadable->server = nullptr;  // stopping: a late SIGHUP reloads nothing
  }
  if (server)
    server->stop();
  if (metrics_server)
    metrics_server->stop();
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
                           group == "package"        ? package_commands()
                           : group == "instance"     ? instance_commands()
                           : group == "op"           ? op_commands()
                           : group == "key"          ? key_commands()
                           : group == "subscription" ? subscription_commands()
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
  if (group == "vim" || group == "subscription") {
    auto store = open_store(o);
    if (!store)
      return 1;
    return group == "vim" ? cmd_vim(*spec, o, *store) : cmd_subscription(*spec, o, *store);
  }
  return cmd_daemon(*spec, o);
}

}  // namespace vnflow_cli
