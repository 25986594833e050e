// Regression tests for the holes the hardening issue lists (secrets at rest, keys, VIM
// ownership, bounds, keys per loop pass, the poison-step guard, fencing), on real SQLite
// files and the real executor.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <sqlite3.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"

#include "tests/unit/engine/replay_check.h"
#include "tests/unit/engine/store_param.h"

namespace fs = std::filesystem;
namespace json = boost::json;
using engine::OpState;

namespace {

std::string source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return r != nullptr ? r : ".";
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-hardening-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void sql(const fs::path& db, const std::string& statement) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(h, statement.c_str(), nullptr, nullptr, &err);
  INFO((err != nullptr ? err : ""));
  sqlite3_free(err);
  sqlite3_close(h);
  REQUIRE(rc == SQLITE_OK);
}

std::string sql_text(const fs::path& db, const std::string& query) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(h, query.c_str(), -1, &st, nullptr) == SQLITE_OK);
  std::string out;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr)
    out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

// Records what each call received; answers with its own stdout.
struct Calls {
  std::mutex mu;
  std::vector<std::pair<std::string, json::object>> seen;  // key, inputs
  std::set<std::string> applied;                           // keys applied (dedupe by key)
  int status_calls = 0;
};

class RecordingExec : public actions::Action {
 public:
  explicit RecordingExec(std::shared_ptr<Calls> c, std::string out = "ok")
      : c_(std::move(c)), out_(std::move(out)) {}
  actions::Outcome run(const json::object& in, const actions::Context& ctx) const override {
    std::lock_guard<std::mutex> l(c_->mu);
    c_->seen.emplace_back(ctx.key, in);
    c_->applied.insert(ctx.key);
    std::string out = out_;
    if (ctx.state.find("get_status") != std::string::npos)
      out = std::to_string(++c_->status_calls);  // a poll that advances by its own count
    return actions::Outcome::success(json::object{{"exit_code", 0},
                                                  {"stdout", out},
                                                  {"stderr", ""},
                                                  {"truncated", false},
                                                  {"duration_ms", 0}});
  }

 private:
  std::shared_ptr<Calls> c_;
  std::string out_;
};

struct Fixture {
  TempDir dir;
  vnflow_test::TestDb tdb;
  fs::path db;  // SQLite: the file
  std::unique_ptr<engine::Store> store;
  std::string package_id, instance_id;
  std::shared_ptr<Calls> calls = std::make_shared<Calls>();

  explicit Fixture(const std::string& package = source_root() + "/csar-samples/local-demo") {
    tdb = vnflow_test::new_test_db(dir.path);
    db = tdb.target;
    reopen();
    base::Diagnostics diags;
    auto p = engine::onboard_package(*store, package, diags);
    INFO(p.status().to_string());
    REQUIRE(p.ok());
    package_id = p.value().id;
    auto i = engine::create_instance(*store, package_id, "test", "");
    REQUIRE(i.ok());
    instance_id = i.value().id;
  }
  ~Fixture() {
    if (store != nullptr)
      vnflow_test::check_every_history_replays(*store);
  }
  void reopen() {
    store.reset();
    auto s = tdb.open();
    INFO(s.status().to_string());
    REQUIRE(s.ok());
    store = std::move(s).value();
  }
  json::value instantiate_request(const std::string& extra = "") {
    return json::parse(R"({"flavourId": "simple", "additionalParams": {"work_dir": ")" +
                       (dir.path / "work").string() + R"(", "nodes": ["a"])" + extra + "}}");
  }
  base::Result<engine::OpRecord> request(const std::string& op, const json::value& body) {
    base::Diagnostics diags;
    return engine::request_operation(*store, instance_id, op, body, diags);
  }
  void run(const std::string& out = "ok") {
    actions::Registry r = actions::Registry::standard();
    r.add("local.exec", std::make_shared<RecordingExec>(calls, out));
    engine::EngineOptions o;
    o.workers = 2;
    o.work_root = (dir.path / "wd").string();
    o.poll = std::chrono::milliseconds(5);
    engine::Engine e(*store, std::move(r), o);
    e.run_until_idle();
  }
  OpState state(const std::string& op) { return store->get_op(op).value().state; }
};

}  // namespace

TEST_CASE("secret fields are sealed at rest whatever their letter case (item 7)") {
  Fixture f;
  auto op = f.request("instantiate", f.instantiate_request(R"(, "ADMIN_PASSWORD": "value-one-A1",
                         "ApiKey": "value-two-B2", "TOKEN": "value-three-C3",
                         "Db": {"Private_Key": {"pem": "value-four-D4"}})"));
  INFO(op.status().to_string());
  REQUIRE(op.ok());
  std::string disk = vnflow_test::at_rest(f.tdb);
  CHECK(disk.find(op.value().id) != std::string::npos);  // the rows were read
  for (const char* v : {"value-one-A1", "value-two-B2", "value-three-C3", "value-four-D4"}) {
    INFO(v);
    CHECK(disk.find(v) == std::string::npos);
  }
  // Read back, the values are plain again (a map under a secret name included).
  auto back = f.store->get_op(op.value().id).value();
  const auto& ap = back.request.at("additionalParams");
  CHECK(ap.at("ADMIN_PASSWORD") == "value-one-A1");
  CHECK(ap.at("TOKEN") == "value-three-C3");
  CHECK(ap.at("Db").at("Private_Key").at("pem") == "value-four-D4");
}

TEST_CASE("a missing or foreign key file is refused, never replaced by a new one (item 9)") {
  Fixture f;
  engine::VimRecord v;
  v.id = "vim-1";
  v.name = "cloud";
  v.type = "openstack";
  v.access = json::object{{"auth_url", "http://127.0.0.1:5000/v3"}, {"password", "pw-secret"}};
  REQUIRE(f.store->put_vim(v).ok());
  f.store.reset();
  fs::path key = f.tdb.key;
  REQUIRE(fs::exists(key));
  std::string good = slurp(key);
  fs::remove(key);
  auto s = f.tdb.open();
  REQUIRE(!s.ok());
  CHECK(s.status().message().find("key file") != std::string::npos);
  CHECK(s.status().message().find("missing") != std::string::npos);
  CHECK(!fs::exists(key));  // no new key was made
  // A key of another database.
  TempDir other;
  auto other_db = vnflow_test::new_test_db(other.path, "x.db");
  auto o = other_db.open();
  REQUIRE(o.ok());
  o.value().reset();
  fs::copy_file(other_db.key, key);
  s = f.tdb.open();
  REQUIRE(!s.ok());
  CHECK(s.status().message().find("does not open") != std::string::npos);
  // The right key again: the VIM opens.
  fs::remove(key);
  {
    std::ofstream out(key, std::ios::binary);
    out << good;
  }
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  f.reopen();
  CHECK(f.store->get_vim("vim-1", true).value().access.at("password") == "pw-secret");
}

TEST_CASE("an alias of the database (a symbolic link) shares its key file (item 4)") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: a database file and its aliases are SQLite's");
    return;
  }
  Fixture f;
  f.store.reset();
  fs::path alias = f.dir.path / "alias.db";
  fs::create_symlink(f.db, alias);
  auto s = engine::open_sqlite_store(alias.string());
  REQUIRE(s.ok());
  CHECK(!fs::exists(alias.string() + ".key"));
}

TEST_CASE("a sealed value moved to another record does not open and reaches no action (10)") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: the test moves the value with SQLite's own SQL on the file");
    return;
  }
  Fixture f;
  auto a = f.request("instantiate", f.instantiate_request(R"(, "db_password": "tenant-a-pw")"));
  REQUIRE(a.ok());
  std::string sealed = sql_text(f.db,
                                "SELECT json_extract(request, "
                                "'$.additionalParams.db_password') FROM ops WHERE id = '" +
                                    a.value().id + "'");
  REQUIRE(sealed.rfind("vnflow-sealed:", 0) == 0);
  // Another operation of another instance whose stored request gets the sealed text.
  REQUIRE(engine::fail_operation(*f.store, a.value().id, true).ok());
  auto other = engine::create_instance(*f.store, f.package_id, "other", "");
  REQUIRE(other.ok());
  f.instance_id = other.value().id;
  auto b = f.request("instantiate", f.instantiate_request(R"(, "db_password": "tenant-b-pw")"));
  REQUIRE(b.ok());
  sql(f.db, "UPDATE ops SET request = json_set(request, '$.additionalParams.db_password', '" +
                sealed + "') WHERE id = '" + b.value().id + "'");
  f.reopen();
  auto rb = f.store->get_op(b.value().id).value();
  CHECK(rb.request.at("additionalParams")
            .at("db_password")
            .as_string()
            .starts_with("vnflow-sealed:"));
  // The same value bound to a different field of the same record does not open either.
  f.run();
  for (const auto& [key, in] : f.calls->seen) {
    INFO(key);
    CHECK(json::serialize(in).find("tenant-a-pw") == std::string::npos);
    CHECK(json::serialize(in).find("vnflow-sealed:") == std::string::npos);
  }
}

TEST_CASE("a request may name a VIM but never change one it does not own (item 14)") {
  Fixture f;
  engine::VimRecord v;
  v.id = "operators-vim";
  v.name = "prod";
  v.type = "openstack";
  v.is_default = true;
  v.access = json::object{{"auth_url", "https://keystone.example:5000/v3"},
                          {"username", "admin"},
                          {"password", "operator-pw"},
                          {"project_name", "admin"}};
  REQUIRE(f.store->put_vim(v).ok());
  auto body = f.instantiate_request();
  body.as_object()["vimConnectionInfo"] = json::array{json::object{
      {"id", "c1"},
      {"vimId", "operators-vim"},
      {"vimType", "ETSINFV.OPENSTACK_KEYSTONE.V_3"},
      {"interfaceInfo", {{"endpoint", "http://127.0.0.66:5000/v3"}}},
      {"accessInfo", {{"username", "attacker"}, {"password", "x"}, {"project", "p"}}}}};
  auto op = f.request("instantiate", body);
  REQUIRE(!op.ok());
  CHECK(op.status().message().find("does not own") != std::string::npos);
  auto after = f.store->get_vim("operators-vim", true).value();
  CHECK(after.access.at("password") == "operator-pw");
  CHECK(after.access.at("auth_url") == "https://keystone.example:5000/v3");
  CHECK(after.is_default);
  // Naming it without accessInfo is fine; bringing a new VIM makes one owned by the instance.
  body.as_object()["vimConnectionInfo"] = json::array{
      json::object{{"id", "c1"},
                   {"vimId", "new-vim"},
                   {"vimType", "ETSINFV.OPENSTACK_KEYSTONE.V_3"},
                   {"interfaceInfo", {{"endpoint", "http://127.0.0.1:5000/v3"}}},
                   {"accessInfo", {{"username", "u"}, {"password", "x"}, {"project", "p"}}}}};
  REQUIRE(f.request("instantiate", body).ok());
  auto mine = f.store->get_vim("new-vim", false).value();
  CHECK(mine.extra.at("registered_by_instance").as_string() == f.instance_id);
}

TEST_CASE("requests and names are bounded (item 16)") {
  Fixture f;
  std::string big(2 << 20, 'x');
  auto op = f.request("instantiate", f.instantiate_request(R"(, "blob": ")" + big + "\""));
  REQUIRE(!op.ok());
  CHECK(op.status().message().find("limit") != std::string::npos);
  auto n = engine::create_instance(*f.store, f.package_id, std::string(300, 'n'), "");
  REQUIRE(!n.ok());
  auto esc = engine::create_instance(*f.store, f.package_id, "evil\x1b[2Jname", "");
  REQUIRE(!esc.ok());
  CHECK(esc.status().message().find("control character") != std::string::npos);
  CHECK(f.store->list_instances().value().size() == 1);
}

TEST_CASE("each visit of a state in a loop gets keys of its own (item 6)") {
  TempDir pkgdir;
  fs::path pkg = pkgdir.path / "pkg";
  fs::copy(source_root() + "/csar-samples/local-demo", pkg, fs::copy_options::recursive);
  // A poll loop: get_status -> choice -> wait -> get_status, until the third pass.
  {
    std::ofstream w(pkg / "Workflows" / "instantiate_end.yaml");
    w << R"(description: a poll loop
start: get_status
states:
  get_status:
    action: local.exec
    with:
      shell: "echo polled"
    timeout: 10s
    next: check
  check:
    choice:
      - when: ${int(trim(states.get_status.stdout)) >= 3}
        next: done
    default: pause
  pause:
    wait: 0
    next: get_status
  done:
    succeed: true
)";
  }
  fs::remove(pkg / "local-demo.mf");  // the manifest's digests no longer match
  {
    std::string meta = slurp(pkg / "TOSCA-Metadata" / "TOSCA.meta");
    std::ofstream m(pkg / "TOSCA-Metadata" / "TOSCA.meta");
    std::string out;
    std::istringstream lines(meta);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("ETSI-Entry-Manifest", 0) != 0 && line.rfind("Entry-Manifest", 0) != 0)
        out += line + "\n";
    }
    m << out;
  }
  Fixture f(pkg.string());
  auto op = f.request("instantiate", f.instantiate_request());
  INFO(op.status().to_string());
  REQUIRE(op.ok());
  f.run();
  CHECK(f.state(op.value().id) == OpState::kCompleted);
  std::vector<std::string> keys;
  for (const auto& [key, in] : f.calls->seen) {
    if (key.find("get_status") != std::string::npos)
      keys.push_back(key);
  }
  REQUIRE(keys.size() == 3);
  // Three passes, three keys: an action that dedupes by key applies each pass.
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == 3);
  CHECK(keys[0] == op.value().id + "/instantiate_end.get_status/1");
  CHECK(keys[1] == op.value().id + "/instantiate_end.get_status@2/1");
}

TEST_CASE("op fail --force ends an active operation; its daemon's next commit is fenced (1)") {
  Fixture f;
  auto op = f.request("instantiate", f.instantiate_request());
  REQUIRE(op.ok());
  auto plain = engine::fail_operation(*f.store, op.value().id);
  REQUIRE(!plain.ok());  // STARTING: only with force
  auto forced = engine::fail_operation(*f.store, op.value().id, true);
  REQUIRE(forced.ok());
  CHECK(forced.value().state == OpState::kFailed);
  // A batch for an operation that is no longer active is not written; the rest is.
  engine::Batch b;
  b.ops.push_back({op.value().id, OpState::kCompleted, std::string("{}"), false, "", 0, "x"});
  engine::EventRecord e;
  e.op_id = op.value().id;
  e.seq = 99;
  e.kind = "late";
  b.events.push_back(e);
  REQUIRE(f.store->apply({&b}).ok());
  CHECK(b.fenced);
  CHECK(f.state(op.value().id) == OpState::kFailed);
  CHECK(f.store->history(op.value().id).value().empty());
}

TEST_CASE("the key rotates: every sealed value re-sealed, an interrupted rotation finished") {
  Fixture f;
  engine::VimRecord v;
  v.id = "vim-r";
  v.name = "cloud-r";
  v.type = "openstack";
  v.access = json::object{{"auth_url", "http://127.0.0.1:5000/v3"}, {"password", "vim-pw-r"}};
  REQUIRE(f.store->put_vim(v).ok());
  auto op = f.request("instantiate", f.instantiate_request(R"(, "db_password": "req-pw-r")"));
  REQUIRE(op.ok());
  f.run();
  fs::path key = f.tdb.key;
  std::string old_key = slurp(key);
  REQUIRE(f.store->rotate_key().ok());
  std::string new_key = slurp(key);
  CHECK(new_key.size() == 32);
  CHECK(new_key != old_key);
  CHECK(!fs::exists(key.string() + ".new"));
  f.reopen();
  CHECK(f.store->get_vim("vim-r", true).value().access.at("password") == "vim-pw-r");
  CHECK(f.store->get_op(op.value().id).value().request.at("additionalParams").at("db_password") ==
        "req-pw-r");
  // The old key no longer opens the database.
  f.store.reset();
  fs::rename(key, key.string() + ".new");  // as if the rename had not happened yet...
  {
    std::ofstream out(key, std::ios::binary);
    out << old_key;  // ...with the old key still in place
  }
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  f.reopen();  // finishes the rotation
  CHECK(slurp(key) == new_key);
  CHECK(f.store->get_vim("vim-r", true).value().access.at("password") == "vim-pw-r");
}

namespace {

// local-demo whose instantiate_end hook is two local.exec states (their outputs are what
// the RecordingExec answers).
fs::path two_exec_package(const TempDir& dir) {
  fs::path pkg = dir.path / "pkg";
  fs::copy(source_root() + "/csar-samples/local-demo", pkg, fs::copy_options::recursive);
  fs::remove(pkg / "local-demo.mf");
  std::string meta = slurp(pkg / "TOSCA-Metadata" / "TOSCA.meta"), out;
  std::istringstream lines(meta);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("ETSI-Entry-Manifest", 0) != 0 && line.rfind("Entry-Manifest", 0) != 0)
      out += line + "\n";
  std::ofstream(pkg / "TOSCA-Metadata" / "TOSCA.meta") << out;
  std::ofstream(pkg / "Workflows" / "instantiate_end.yaml") << R"(description: two steps
start: first
states:
  first:
    action: local.exec
    with:
      shell: "true"
    timeout: 10s
    next: second
  second:
    action: local.exec
    with:
      shell: "true"
    timeout: 10s
    next: done
  done:
    succeed: true
)";
  return pkg;
}

}  // namespace

TEST_CASE("state outputs: sealed at rest, read back after a restart and a key rotation") {
  TempDir pkgdir;
  Fixture f(two_exec_package(pkgdir).string());
  // Every local.exec of the sample answers with the request's password: outputs that
  // repeat a known secret are sealed whole.
  auto op = f.request("instantiate", f.instantiate_request(R"(, "db_password": "out-pw-Q7")"));
  REQUIRE(op.ok());
  f.run("out-pw-Q7");
  INFO(json::serialize(f.store->get_op(op.value().id).value().error));
  REQUIRE(f.state(op.value().id) == OpState::kCompleted);
  auto read = [&] {
    auto o = f.store->outputs(op.value().id);
    REQUIRE(o.ok());
    return std::move(o).value();
  };
  json::object before = read();
  REQUIRE(!before.empty());
  int echoed = 0;
  for (const auto& kv : before)
    if (kv.value().is_object() && kv.value().get_object().contains("stdout")) {
      CHECK(kv.value().at("stdout") == "out-pw-Q7");
      ++echoed;
    }
  CHECK(echoed > 0);
  CHECK(vnflow_test::at_rest(f.tdb).find("out-pw-Q7") == std::string::npos);
  if (!vnflow_test::on_postgres()) {
    // SQLite keeps them on the events that finished their states: no row of their own.
    CHECK(sql_text(f.db, "SELECT count(*) FROM outputs") == "0");
    CHECK(sql_text(f.db, "SELECT count(*) FROM events WHERE outputs IS NOT NULL") != "0");
  }
  f.reopen();
  CHECK(read() == before);
  REQUIRE(f.store->rotate_key().ok());
  f.reopen();
  CHECK(read() == before);
  CHECK(vnflow_test::at_rest(f.tdb).find("out-pw-Q7") == std::string::npos);
}

TEST_CASE("state outputs that repeat a multi-line secret are sealed whole") {
  // A private key or a certificate's key is text of several lines; the outputs that repeat it
  // were once looked for in their serialized JSON, where its line breaks are "\n".
  TempDir pkgdir;
  Fixture f(two_exec_package(pkgdir).string());
  auto op = f.request("instantiate",
                      f.instantiate_request(R"(, "db_password": "ml-pw-Q8\nsecond-line-R3")"));
  REQUIRE(op.ok());
  f.run("ml-pw-Q8\nsecond-line-R3");
  REQUIRE(f.state(op.value().id) == OpState::kCompleted);
  auto outs = f.store->outputs(op.value().id);
  REQUIRE(outs.ok());
  int echoed = 0;
  for (const auto& kv : outs.value())
    if (kv.value().is_object() && kv.value().get_object().contains("stdout")) {
      CHECK(kv.value().at("stdout") == "ml-pw-Q8\nsecond-line-R3");
      ++echoed;
    }
  CHECK(echoed > 0);
  CHECK(vnflow_test::at_rest(f.tdb).find("second-line-R3") == std::string::npos);
}

namespace {

// An http.request that answers from a table: the item's value (a region) picks the answer.
class TableHttp : public actions::Action {
 public:
  actions::Outcome run(const json::object& in, const actions::Context&) const override {
    std::string url(in.at("url").as_string());
    if (url.ends_with("/fail"))
      return actions::Outcome::failure(base::ErrorClass::kFailed, "the API said no");
    if (url.find("many") != std::string::npos) {
      json::array items;
      for (int k = 0; k < 65; ++k)
        items.push_back(json::object{{"token", "tok-" + std::to_string(k) + "-abcdef"}});
      return actions::Outcome::success(json::object{{"json", json::object{{"items", items}}}});
    }
    std::string region = url.substr(url.rfind('/') + 1);
    return actions::Outcome::success(
        json::object{{"status", 201},
                     {"json", json::object{{"name", "key-" + region},
                                           {"pin", region == "r1" ? 987654321 : 918273645},
                                           {"short", "ab"},
                                           {"material", "-----BEGIN KEY-----\nMAT-" + region +
                                                            "-Z8Q\n-----END KEY-----\n"}}},
                     {"probed", false}});
  }
};

// Runs the fixture's queue until idle with TableHttp as http.request; local.exec prints `out`.
void run_with_table_http(Fixture& f, const std::string& out = "ok") {
  actions::Registry r = actions::Registry::standard();
  r.add("local.exec", std::make_shared<RecordingExec>(f.calls, out));
  r.add("http.request", std::make_shared<TableHttp>());
  engine::EngineOptions o;
  o.workers = 2;
  o.work_root = (f.dir.path / "wd").string();
  o.poll = std::chrono::milliseconds(5);
  engine::Engine(*f.store, std::move(r), o).run_until_idle();
}

fs::path http_package(const TempDir& dir) {
  fs::path pkg = two_exec_package(dir);
  std::ofstream(pkg / "Workflows" / "instantiate_end.yaml") << R"(description: secrets in answers
start: keys
states:
  keys:
    action: http.request
    for_each: ${['r1', 'r2']}
    as: region
    with:
      method: POST
      url: http://api.test/keys/${region}
      secret_fields: [json.pin, json.short, json.material]
    timeout: 10s
    next: use
  use:
    action: local.exec
    with:
      shell: echo "$K"
      env: {K: "${states.keys[0].json.material}"}
    timeout: 10s
    next: many
  many:
    action: http.request
    with:
      url: ${default(request.additionalParams.many_url, 'http://api.test/few/r1')}
      secret_fields: [json, json.material, "json.items[*].token"]   # inside what the first masks
    timeout: 10s
    next: done
  done:
    succeed: true
)";
  return pkg;
}

}  // namespace

TEST_CASE("secret_fields: the values at those paths masked in the history, sealed at rest") {
  TempDir pkgdir;
  Fixture f(http_package(pkgdir).string());
  auto op = f.request("instantiate", f.instantiate_request());
  REQUIRE(op.ok());
  run_with_table_http(f, "echoed");
  REQUIRE(f.state(op.value().id) == OpState::kCompleted);
  auto h = f.store->history(op.value().id);
  REQUIRE(h.ok());
  int masked = 0;
  std::string all;
  for (const auto& e : h.value()) {
    all += json::serialize(e.data) + "\n";
    if (e.kind == "succeeded" && e.state == "instantiate_end.keys") {
      const auto& j = e.data.at("json");
      CHECK(j.at("pin") == "***");    // a number, masked by its path
      CHECK(j.at("short") == "***");  // a string too short to scrub elsewhere
      CHECK(j.at("material") == "***");
      CHECK(j.at("name").as_string().starts_with("key-r"));  // the rest stays visible
      ++masked;
    }
  }
  CHECK(masked == 2);
  // Nested paths (json, then json.material): masked one after the other.
  bool whole = false;
  for (const auto& e : h.value())
    if (e.kind == "succeeded" && e.state == "instantiate_end.many")
      whole = e.data.at("json") == "***";
  CHECK(whole);
  for (const char* s : {"MAT-r1-Z8Q", "MAT-r2-Z8Q", "987654321", "918273645"})
    CHECK(all.find(s) == std::string::npos);
  // The next state read the value itself; its dispatch shows ***.
  bool used = false;
  for (const auto& [key, in] : f.calls->seen)
    used = used || (in.contains("env") &&
                    in.at("env").at("K").as_string().find("MAT-r1-Z8Q") != std::string::npos);
  CHECK(used);
  std::string rest = vnflow_test::at_rest(f.tdb);
  for (const char* s : {"MAT-r1-Z8Q", "MAT-r2-Z8Q", "987654321", "918273645"})
    CHECK(rest.find(s) == std::string::npos);
  auto outs = f.store->outputs(op.value().id);
  REQUIRE(outs.ok());
  CHECK(outs.value().at("instantiate_end.keys").at(1).at("json").at("pin") == 918273645);
}

TEST_CASE("secret_fields: an answer with too many secrets fails the state as invalid") {
  TempDir pkgdir;
  Fixture f(http_package(pkgdir).string());
  auto op =
      f.request("instantiate", f.instantiate_request(R"(, "many_url": "http://api.test/many")"));
  REQUIRE(op.ok());
  run_with_table_http(f);
  REQUIRE(f.state(op.value().id) == OpState::kFailedTemp);
  std::string err = json::serialize(f.store->get_op(op.value().id).value().error);
  CHECK(err.find("secret_fields found more than 64 values") != std::string::npos);
  CHECK(err.find("tok-1-abcdef") == std::string::npos);
}

namespace {

// Three undoable states whose compensations answer new secrets, then a failure. `whole`:
// what the first state's compensation keeps secret.
fs::path compensating_package(const TempDir& dir,
                              const std::string& whole = "secret_output: true") {
  fs::path pkg = two_exec_package(dir);
  std::ofstream(pkg / "Workflows" / "instantiate_end.yaml") << R"(description: undo with secrets
start: whole
states:
  whole:
    action: http.request
    with: {method: POST, url: http://api.test/keys/r1, secret_fields: [json.material]}
    timeout: 10s
    compensate:
      action: http.request
      with: {method: DELETE, url: http://api.test/keys/r7, )"
                                                            << whole << R"(}
      timeout: 10s
    next: hidden
  hidden:
    action: http.request
    with: {url: http://api.test/keys/r1}
    timeout: 10s
    compensate:
      action: http.request
      with: {method: DELETE, url: http://api.test/keys/r8, hide_output: true}
      timeout: 10s
    next: fields
  fields:
    action: http.request
    with: {url: http://api.test/keys/r1}
    timeout: 10s
    compensate:
      action: http.request
      with: {method: DELETE, url: http://api.test/keys/r9, secret_fields: [json.material, json.pin]}
      timeout: 10s
    next: broken
  broken:
    action: http.request
    with: {url: http://api.test/fail}
    timeout: 10s
    next: done
  done:
    succeed: true
)";
  return pkg;
}

// Instantiates (which fails at `broken`), then rolls back; the operation's id.
std::string instantiate_then_roll_back(Fixture& f) {
  auto op = f.request("instantiate", f.instantiate_request());
  REQUIRE(op.ok());
  run_with_table_http(f);
  REQUIRE(f.state(op.value().id) == OpState::kFailedTemp);
  REQUIRE(engine::rollback_operation(*f.store, op.value().id).ok());
  run_with_table_http(f);
  return op.value().id;
}

}  // namespace

TEST_CASE("compensations keep their own secret_output, hide_output and secret_fields") {
  TempDir pkgdir;
  Fixture f(compensating_package(pkgdir).string());
  std::string op = instantiate_then_roll_back(f);
  REQUIRE(f.state(op) == OpState::kRolledBack);
  auto h = f.store->history(op);
  REQUIRE(h.ok());
  std::map<std::string, json::value> compensated;
  std::string all;
  for (const auto& e : h.value()) {
    all += json::serialize(e.data) + "\n";
    if (e.kind == "compensated")
      compensated[e.state] = e.data;
  }
  REQUIRE(compensated.size() >= 3);
  CHECK(compensated["instantiate_end.whole"] == "*** (secret_output)");
  CHECK(compensated["instantiate_end.hidden"] == "*** (hide_output)");
  const json::value& fields = compensated["instantiate_end.fields"];
  REQUIRE(fields.is_object());
  CHECK(fields.at("json").at("material") == "***");
  CHECK(fields.at("json").at("pin") == "***");
  CHECK(fields.at("json").at("name") == "key-r9");  // the rest stays visible
  // None of the answers' secrets in any event; the secret ones not at rest either.
  for (const char* s : {"MAT-r7-Z8Q", "MAT-r8-Z8Q", "MAT-r9-Z8Q", "918273645"})
    CHECK(all.find(s) == std::string::npos);
  std::string rest = vnflow_test::at_rest(f.tdb);
  for (const char* s : {"MAT-r7-Z8Q", "MAT-r9-Z8Q", "918273645"})
    CHECK(rest.find(s) == std::string::npos);
}

TEST_CASE("a compensation whose secret_fields cannot be kept fails as invalid, named") {
  TempDir pkgdir;
  std::string paths;
  for (int k = 0; k < 17; ++k)
    paths += (k ? ", " : "") + std::string("json.p") + std::to_string(k);
  Fixture f(compensating_package(pkgdir, "secret_fields: [" + paths + "]").string());
  std::string op = instantiate_then_roll_back(f);
  REQUIRE(f.state(op) == OpState::kFailedTemp);  // the rollback stopped there
  auto h = f.store->history(op);
  REQUIRE(h.ok());
  bool failed = false;
  for (const auto& e : h.value())
    if (e.kind == "failed" && e.state == "instantiate_end.whole") {
      CHECK(e.data.at("class") == "invalid");
      CHECK(e.data.at("message").as_string().find("secret_fields names 17 paths; at most 16") !=
            json::string::npos);
      failed = true;
    }
  CHECK(failed);
}

namespace {

// Turns the current schema's events table back into schema 6's.
void to_schema6_events(const std::string& db) {
  sql(db, std::string(vnflow_test::kSqliteEventsToSchema6) +
              "UPDATE meta SET value = '6' WHERE key = 'schema_version'");
}

std::string history_text(engine::Store& store, const std::string& op_id) {
  auto h = store.history(op_id);
  REQUIRE(h.ok());
  std::string out;
  for (const auto& e : h.value())
    out += e.op_id + " " + std::to_string(e.seq) + " " + std::to_string(e.at_ms) + " " + e.kind +
           " " + e.state + " " + std::to_string(e.item) + " " + std::to_string(e.attempt) + " " +
           e.key + " " + json::serialize(e.data) + " " + std::to_string(e.started_ms) + "\n";
  return out;
}

}  // namespace

TEST_CASE("a schema 6 database gets operation numbers and events in commit order (7)") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: SQLite's schema versions");
    return;
  }
  TempDir pkgdir;
  Fixture f(two_exec_package(pkgdir).string());
  std::vector<std::string> ops;
  std::map<std::string, std::string> histories;
  std::map<std::string, json::object> outputs;
  for (int i = 0; i < 2; ++i) {
    auto op = f.request("instantiate", f.instantiate_request());
    REQUIRE(op.ok());
    f.run();
    REQUIRE(f.state(op.value().id) == OpState::kCompleted);
    auto t = f.request("terminate", json::parse(R"({"terminationType": "FORCEFUL"})"));
    REQUIRE(t.ok());
    f.run();
    REQUIRE(f.state(t.value().id) == OpState::kCompleted);
    for (const auto& id : {op.value().id, t.value().id}) {
      ops.push_back(id);
      histories[id] = history_text(*f.store, id);
      outputs[id] = f.store->outputs(id).value();
      REQUIRE(!histories[id].empty());
    }
  }
  CHECK(!outputs[ops[0]].empty());
  f.store.reset();
  to_schema6_events(f.db);
  REQUIRE(sql_text(f.db, "SELECT count(*) FROM pragma_table_info('ops') WHERE name = 'num'") ==
          "0");
  f.reopen();
  CHECK(sql_text(f.db, "SELECT value FROM meta WHERE key = 'schema_version'") == "7");
  // Numbered in creation order, and every event carried over, in commit order per operation.
  std::string nums;
  for (const auto& id : ops)
    nums += sql_text(f.db, "SELECT num FROM ops WHERE id = '" + id + "'") + " ";
  CHECK(nums == "1 2 3 4 ");
  for (const auto& id : ops) {
    CHECK(history_text(*f.store, id) == histories[id]);
    CHECK(f.store->outputs(id).value() == outputs[id]);
  }
  // New operations take the next numbers and run as before.
  auto op = f.request("instantiate", f.instantiate_request());
  REQUIRE(op.ok());
  f.run();
  CHECK(f.state(op.value().id) == OpState::kCompleted);
  CHECK(sql_text(f.db, "SELECT num FROM ops WHERE id = '" + op.value().id + "'") == "5");
  // An operation a vnflow of schema 6 (still running) inserts without a number gets one.
  sql(f.db,
      "INSERT INTO ops(id, instance_id, operation, state, machine, package_digest, request,"
      " created_ms, updated_ms) SELECT 'from-v6', instance_id, operation, 'COMPLETED', machine,"
      " package_digest, request, 0, 0 FROM ops LIMIT 1");
  CHECK(sql_text(f.db, "SELECT num FROM ops WHERE id = 'from-v6'") == "6");
  CHECK(!f.store->outputs(op.value().id).value().empty());
  CHECK(history_text(*f.store, op.value().id).find(" succeeded ") != std::string::npos);
}

TEST_CASE("a schema 1 database is brought to the current schema (7) when opened") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: SQLite's schema versions");
    return;
  }
  TempDir pkgdir;
  Fixture f(two_exec_package(pkgdir).string());
  f.store.reset();
  // Schema 1 had no events.outputs column (nor notices and their triggers, which name
  // the columns dropped here), and its events were keyed by (op_id, seq).
  to_schema6_events(f.db);
  sql(f.db,
      "DROP TRIGGER notice_op_created; DROP TRIGGER notice_op_state;"
      "DROP TRIGGER notice_instance_created; DROP TRIGGER notice_instance_deleted;"
      "DROP TRIGGER notice_package_stored; DROP TRIGGER notice_package_onboarded;"
      "DROP TRIGGER notice_package_changed; DROP TRIGGER notice_package_deleted;"
      "DROP TABLE notices; DROP TABLE subscriptions;"
      "ALTER TABLE events DROP COLUMN outputs;"
      "ALTER TABLE events DROP COLUMN started_ms;"
      "ALTER TABLE packages DROP COLUMN vnfd_version;"
      "UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  f.reopen();
  CHECK(sql_text(f.db, "SELECT value FROM meta WHERE key = 'schema_version'") == "7");
  CHECK(sql_text(f.db, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == "9");
  CHECK(sql_text(f.db,
                 "SELECT count(*) FROM pragma_table_info('events') WHERE name = 'started_ms'") ==
        "1");
  CHECK(sql_text(f.db,
                 "SELECT count(*) FROM pragma_table_info('packages')"
                 " WHERE name = 'vnfd_version'") == "1");
  CHECK(sql_text(f.db, "SELECT count(*) FROM pragma_table_info('events') WHERE name = 'outputs'") ==
        "1");
  auto op = f.request("instantiate", f.instantiate_request());
  REQUIRE(op.ok());
  f.run();
  CHECK(f.state(op.value().id) == OpState::kCompleted);
  CHECK(!f.store->outputs(op.value().id).value().empty());
}

namespace {

// The write-ahead log tests commit package rows of a chosen size: a record named `name`,
// its digest unique.
engine::PackageRecord log_test_package(const std::string& name) {
  engine::PackageRecord p;
  p.id = engine::new_id();
  p.digest = name + "-" + p.id;
  p.name = p.provider = p.product = name;
  p.version = "1";
  p.vnfd_id = name;
  p.onboarded_ms = engine::now_ms();
  return p;
}

// A file's size, 0 when it does not exist.
uintmax_t size_or_zero(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? uintmax_t{0} : n;
}

}  // namespace

TEST_CASE("the write-ahead log is checkpointed in the background: it does not grow unbounded") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: SQLite's write-ahead log");
    return;
  }
  TempDir dir;
  std::string db = (dir.path / "wal.db").string();
  auto store = engine::open_sqlite_store(db);
  REQUIRE(store.ok());
  // One commit of ~4,400 pages: past the checkpointer's threshold (4,000 pages), and no
  // commit after it. SQLite's automatic checkpoint is off; the background one copies the
  // pages into the database file.
  engine::PackageRecord p = log_test_package("wal");
  REQUIRE(store.value()->put_package(p, std::string(18u << 20, 'x')).ok());
  auto size = [&] { return size_or_zero(db); };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (size() < (18u << 20) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(size() >= (18u << 20));
  // Still readable, and the store closes cleanly (its checkpointer stopped first).
  CHECK(store.value()->package_bytes(p.id).value().size() == (18u << 20));
  store.value().reset();
  CHECK(!fs::exists(db + "-wal"));
}

TEST_CASE("a daemon's store reserves its log: commits overwrite it in place, it stays bounded") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: SQLite's write-ahead log");
    return;
  }
  TempDir dir;
  std::string db = (dir.path / "log.db").string();
  auto store = engine::open_sqlite_store(db);
  REQUIRE(store.ok());
  auto log_size = [&] { return size_or_zero(db + "-wal"); };
  auto put = [&](size_t bytes) {
    return store.value()->put_package(log_test_package("log"), std::string(bytes, 'x')).ok();
  };
  // Written out to the checkpointer's threshold: 4,000 frames of a 4 KiB page and the
  // header (what SqliteStore::reserve_log computes).
  constexpr uintmax_t kReserved = 32 + (4096 + 24) * 4000;
  REQUIRE(put(100));
  REQUIRE(log_size() < kReserved);
  REQUIRE(store.value()->reserve_log().ok());
  CHECK(log_size() == kReserved);
  CHECK(store.value()->reserve_log().ok());  // again: nothing to do
  CHECK(log_size() == kReserved);
  // Small commits land inside the reserved file: none makes it longer.
  for (int i = 0; i < 40; ++i)
    REQUIRE(put(100));
  CHECK(log_size() == kReserved);
  // A copy taken now (what a crash leaves: the file and its log, no shared memory) holds
  // every commit: the zeros past them read as the log's end.
  fs::create_directories(dir.path / "copy");
  fs::copy_file(db, dir.path / "copy" / "log.db");
  fs::copy_file(db + "-wal", dir.path / "copy" / "log.db-wal");
  fs::copy_file(db + ".key", dir.path / "copy" / "log.db.key");
  {
    auto copy = engine::open_sqlite_store((dir.path / "copy" / "log.db").string());
    REQUIRE(copy.ok());
    auto pkgs = copy.value()->list_packages();
    REQUIRE(pkgs.ok());
    CHECK(pkgs.value().size() == 41);
  }
  // A transaction larger than the limit (twice the reserve) makes the log longer; once the
  // checkpointer restarted it, the next commit cuts it back to the limit, not below.
  REQUIRE(put(36u << 20));
  CHECK(log_size() > 2 * kReserved);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (log_size() != 2 * kReserved && std::chrono::steady_clock::now() < deadline) {
    REQUIRE(put(100));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(log_size() == 2 * kReserved);
  auto pkgs = store.value()->list_packages();
  REQUIRE(pkgs.ok());
  CHECK(pkgs.value().size() >= 43);
}

TEST_CASE(
    "a log under commits without a pause is restarted once checkpointed: it stays near its "
    "reserve") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: SQLite's write-ahead log");
    return;
  }
  TempDir dir;
  std::string db = (dir.path / "busy.db").string();
  auto store = engine::open_sqlite_store(db);
  REQUIRE(store.ok());
  REQUIRE(store.value()->reserve_log().ok());
  auto log_size = [&] { return size_or_zero(db + "-wal"); };
  const uintmax_t reserved = log_size();
  REQUIRE(reserved > 0);
  // Back to back, as a busy daemon's writer commits: past the checkpointer's threshold
  // (4,000 frames) twice over. The log restarts only at a transaction that begins once
  // every frame is checkpointed; a checkpoint in the background finished after the next
  // commit had begun, every time, and the log grew for as long as the commits came.
  for (int i = 0; i < 3000; ++i) {
    REQUIRE(store.value()->put_package(log_test_package("busy"), std::string(100, 'x')).ok());
    // The executor's work between two commits (stepping, dispatching): 50 us.
    for (auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
         std::chrono::steady_clock::now() < until;) {
    }
  }
  // Past the reserve by at most what was committed while the checkpointer's thread ran its
  // pass, and the few frames the writer then checkpointed itself (the thread's pass
  // copies the 4,000 frames' pages: a few milliseconds; a loaded machine gets more slack).
  constexpr uintmax_t kFrame = 4096 + 24;
  CHECK(log_size() <= reserved + 512 * kFrame);
}

TEST_CASE("the checkpointer: a thread's pass past the threshold, the last frames by the writer") {
  using C = engine::internal::Checkpointer;
  using S = C::Step;
  CHECK(C::decide(10, 0) == S::kNone);
  CHECK(C::decide(C::kBackgroundPages - 1, 0) == S::kNone);
  CHECK(C::decide(C::kBackgroundPages - 1, 4100) == S::kNone);  // restarted since that pass
  CHECK(C::decide(C::kBackgroundPages, 0) == S::kThread);
  // The thread checkpointed 4,000 frames; the writer committed some more meanwhile: it
  // checkpoints those itself, so that its next transaction restarts the log.
  CHECK(C::decide(C::kBackgroundPages + 30, C::kBackgroundPages) == S::kHere);
  CHECK(C::decide(C::kBackgroundPages + C::kCatchUpFrames, C::kBackgroundPages) == S::kHere);
  // Too many for a commit to wait on: another pass on the thread.
  CHECK(C::decide(C::kBackgroundPages + C::kCatchUpFrames + 1, C::kBackgroundPages) == S::kThread);
  // A count from before a restart (larger than the log) is not taken for this log's.
  CHECK(C::decide(C::kBackgroundPages + 10, C::kBackgroundPages + 50) == S::kThread);
  CHECK(C::decide(C::kInlinePages, 0) == S::kHere);
}
