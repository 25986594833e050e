// The engine's command surface: the VIM rules (one set, for `vim register`, a request's
// vimConnectionInfo and the vim.register action), ids, secrets as "***" in every view, the
// daemon's lock and hook-user rule.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/vim_actions.h"

#include "tests/unit/engine/store_param.h"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// A database opened as the CLI and the daemon open one (engine::open_database): SQLite, or
// PostgreSQL (vnflow_test::on_postgres) with its key file given by VNFLOW_DB_KEY.
struct TempDb {
  fs::path dir;
  vnflow_test::TestDb tdb;
  std::unique_ptr<engine::Store> store;
  TempDb() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-commands-test-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    tdb = vnflow_test::new_test_db(dir);
    if (vnflow_test::on_postgres())
      ::setenv("VNFLOW_DB_KEY", tdb.key.c_str(), 1);
    auto s = engine::open_database(tdb.target);
    REQUIRE(s.ok());
    store = std::move(s).value();
  }
  ~TempDb() {
    store.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

bool uuid_shaped(const std::string& id) {
  if (id.size() != 36)
    return false;
  for (size_t i = 0; i < id.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (id[i] == '-') || (!dash && !std::isxdigit(static_cast<unsigned char>(id[i]))))
      return false;
  }
  return true;
}

// Access that a VIM of `type` (openstack / kubernetes, canonical) needs, in the record's
// own field names; `server_or_url` is where it is reached.
json::object good_access(const std::string& type) {
  if (type == "kubernetes")
    return json::object{{"server", "https://10.0.0.1:6443"}, {"bearer_token", "tok-s3cret"}};
  return json::object{{"auth_url", "http://127.0.0.1:5000/v3"},
                      {"username", "u"},
                      {"password", "pw-s3cret"},
                      {"project_name", "p"}};
}

// The three ways a VIM comes in, each answering "registered?" for (vimType, access).
bool by_command(engine::Store& store, const std::string& vim_type, const json::object& access,
                std::string* type_stored) {
  engine::VimRecord v;
  v.name = "cmd-" + std::to_string(std::hash<std::string>{}(vim_type + json::serialize(access)));
  v.type = vim_type;
  v.access = access;
  auto r = engine::register_vim(store, v, "");
  if (r.ok())
    *type_stored = store.get_vim(r.value().id, false).value().type;
  return r.ok();
}

bool by_request(engine::Store& store, const std::string& vim_type, const json::object& access,
                std::string* type_stored) {
  json::value req = json::object{
      {"vimConnectionInfo",
       json::array{json::object{{"id", "c"}, {"vimType", vim_type}, {"accessInfo", access}}}}};
  base::Status s = engine::normalize_vim_connections(store, req, true, "inst-r");
  if (s.ok()) {
    std::string id(req.at("vimConnectionInfo").at(0).at("vimId").as_string());
    *type_stored = store.get_vim(id, false).value().type;
  }
  return s.ok();
}

bool by_action(engine::Store& store, const std::string& vim_type, const json::object& access,
               std::string* type_stored) {
  json::value record = json::object{{"id", "inst-a"}};
  json::object in{
      {"name",
       "act-" + std::to_string(std::hash<std::string>{}(vim_type + json::serialize(access)))},
      {"type", vim_type},
      {"access", access}};
  auto out = engine::run_vim_action(&store, "vim.register", in, record);
  if (out.ok)
    *type_stored =
        store.get_vim(std::string(out.outputs.at("vim_id").as_string()), false).value().type;
  return out.ok;
}

}  // namespace

TEST_CASE("vim register, a request's vimConnectionInfo and vim.register accept the same VIMs") {
  TempDb db;
  struct Case {
    std::string vim_type;
    std::string canonical;  // "" = refused
  };
  const Case cases[] = {
      {"openstack", "openstack"},
      {"ETSINFV.OPENSTACK_KEYSTONE.V_3", "openstack"},
      {"kubernetes", "kubernetes"},
      {"ETSINFV.KUBERNETES.V_1", "kubernetes"},
      // Tacker v2 names a Kubernetes VIM with Helm so; it is reached as Kubernetes.
      {"ETSINFV.HELM.V_3", "kubernetes"},
      {"ETSINFV.TERRAFORM.V_1", ""},
      {"MY_OPENSTACK_CLOUD", ""},
      {"", ""},
  };
  for (const auto& c : cases) {
    INFO("vimType \"" << c.vim_type << "\"");
    json::object access = good_access(c.canonical.empty() ? "openstack" : c.canonical);
    std::string t1, t2, t3;
    bool a = by_command(*db.store, c.vim_type, access, &t1);
    bool b = by_request(*db.store, c.vim_type, access, &t2);
    bool d = by_action(*db.store, c.vim_type, access, &t3);
    CHECK(a == !c.canonical.empty());
    CHECK(b == a);
    CHECK(d == a);
    if (a && b && d) {
      CHECK(t1 == c.canonical);
      CHECK(t2 == c.canonical);
      CHECK(t3 == c.canonical);
    }
  }
}

TEST_CASE("the three ways refuse the same incomplete access, naming what is missing") {
  TempDb db;
  struct Case {
    std::string type;
    json::object access;
    std::string says;
  };
  const Case cases[] = {
      {"kubernetes", {{"bearer_token", "t"}}, "server"},
      {"kubernetes", {{"server", "ftp://10.0.0.1"}, {"bearer_token", "t"}}, "server"},
      {"kubernetes", {{"server", "https://10.0.0.1:6443"}}, "bearer_token"},
      {"ETSINFV.HELM.V_3", {{"server", "https://10.0.0.1:6443"}}, "bearer_token"},
      {"openstack", {{"username", "u"}, {"password", "p"}, {"project_name", "p"}}, "auth_url"},
      {"openstack", {{"auth_url", "http://k/v3"}, {"username", "u"}, {"project_name", "p"}}, ""},
  };
  for (const auto& c : cases) {
    INFO(c.type << " " << json::serialize(c.access));
    std::string t;
    CHECK_FALSE(by_command(*db.store, c.type, c.access, &t));
    CHECK_FALSE(by_request(*db.store, c.type, c.access, &t));
    CHECK_FALSE(by_action(*db.store, c.type, c.access, &t));
    base::Status s = engine::check_vim_access(c.type, c.access);
    CHECK_FALSE(s.ok());
    CHECK(s.message().find(c.says) != std::string::npos);
  }
  CHECK(db.store->list_vims().value().empty());
}

TEST_CASE("VIM ids: new ones are UUIDs, a name keeps its id, created time is kept") {
  TempDb db;
  engine::VimRecord v;
  v.name = "cloud-a";
  v.type = "openstack";
  v.access = good_access("openstack");
  bool replaced = true;
  auto first = engine::register_vim(*db.store, v, "", &replaced);
  REQUIRE(first.ok());
  CHECK_FALSE(replaced);
  CHECK(uuid_shaped(first.value().id));
  // Registering the name again replaces that VIM: same id, same creation time.
  v.access["password"] = "rotated";
  auto again = engine::register_vim(*db.store, v, "", &replaced);
  REQUIRE(again.ok());
  CHECK(replaced);
  CHECK(again.value().id == first.value().id);
  CHECK(again.value().created_ms == first.value().created_ms);
  CHECK(db.store->list_vims().value().size() == 1);
  CHECK(db.store->get_vim("cloud-a", true).value().access.at("password") == "rotated");
  // An explicit id is kept; an id that is another VIM's name is refused.
  v.name = "cloud-b";
  v.id = "b-1";
  REQUIRE(engine::register_vim(*db.store, v, "").ok());
  CHECK(engine::show_vim(*db.store, "cloud-b").value().id == "b-1");
  v.name = "cloud-c";
  v.id = "cloud-a";
  auto clash = engine::register_vim(*db.store, v, "");
  CHECK_FALSE(clash.ok());
  CHECK(clash.status().message().find("name of another VIM") != std::string::npos);
  // Names are shown on terminals: no control characters.
  v.id.clear();
  v.name = "evil\x1b[2J";
  auto evil = engine::register_vim(*db.store, v, "");
  CHECK_FALSE(evil.ok());
  CHECK(evil.status().message().find("control character") != std::string::npos);
  // A request's VIM without a name is named after its id; the action's id is stable.
  json::value req = json::object{
      {"vimConnectionInfo", json::array{json::object{{"id", "c"},
                                                     {"vimId", "inline-vim-1"},
                                                     {"vimType", "ETSINFV.KUBERNETES.V_1"},
                                                     {"accessInfo", good_access("kubernetes")}}}}};
  REQUIRE(engine::normalize_vim_connections(*db.store, req, true, "inst-1").ok());
  CHECK(engine::show_vim(*db.store, "inline-vim-1").value().name == "inline-inline-vim-1");
  // Deleting returns what was deleted; then it is gone.
  auto gone = engine::delete_vim(*db.store, "cloud-b");
  REQUIRE(gone.ok());
  CHECK(gone.value().id == "b-1");
  CHECK(engine::show_vim(*db.store, "b-1").status().code() == base::StatusCode::kNotFound);
}

TEST_CASE("an instance changes only its own VIMs; the operator may replace any") {
  TempDb db;
  engine::VimRecord v;
  v.name = "prod";
  v.type = "openstack";
  v.access = good_access("openstack");
  auto op = engine::register_vim(*db.store, v, "");
  REQUIRE(op.ok());
  v.id = op.value().id;
  v.access["password"] = "attacker";
  auto taken = engine::register_vim(*db.store, v, "inst-1");
  CHECK(taken.status().code() == base::StatusCode::kPermissionDenied);
  CHECK(taken.status().message().find("does not own") != std::string::npos);
  CHECK(db.store->get_vim("prod", true).value().access.at("password") == "pw-s3cret");
  // The instance's own VIM, registered by a request, is its to change.
  engine::VimRecord mine;
  mine.id = "mine-1";
  mine.type = "ETSINFV.HELM.V_3";
  mine.access = good_access("kubernetes");
  REQUIRE(engine::register_vim(*db.store, mine, "inst-1").ok());
  mine.access["bearer_token"] = "new-token";
  REQUIRE(engine::register_vim(*db.store, mine, "inst-1").ok());
  CHECK_FALSE(engine::register_vim(*db.store, mine, "inst-2").ok());
  CHECK(db.store->get_vim("mine-1", true).value().access.at("bearer_token") == "new-token");
}

TEST_CASE("every view shows secrets as ***") {
  TempDb db;
  engine::VimRecord v;
  v.name = "sealed";
  v.type = "openstack";
  v.access = good_access("openstack");
  auto r = engine::register_vim(*db.store, v, "");
  REQUIRE(r.ok());
  std::string vim =
      json::serialize(engine::vim_view(engine::show_vim(*db.store, "sealed").value()));
  CHECK(vim.find("pw-s3cret") == std::string::npos);
  CHECK(engine::vim_view(r.value()).at("auth_cred").at("password") == "***");
  CHECK(engine::vim_view(r.value()).at("auth_cred").at("username") == "u");

  engine::InstanceRecord inst;
  inst.record = json::object{{"id", "i"}, {"extensions", {{"admin_password", "inst-s3cret"}}}};
  json::value iv = engine::instance_view(inst);
  CHECK(iv.at("extensions").at("admin_password") == "***");
  CHECK(json::serialize(iv).find("inst-s3cret") == std::string::npos);
  // The SOL003 view: each field it shows redacted, whatever else the record holds.
  inst.instantiation_state = "INSTANTIATED";
  inst.record =
      json::object{{"name", "n"},
                   {"description", "image from https://admin:d-s3cret@mirror.example/x.qcow2"},
                   {"vim_connection_info",
                    json::array{{{"id", "v"}, {"accessInfo", {{"password", "v-s3cret"}}}}}},
                   {"metadata", {{"token", "m-s3cret"}, {"k", "v"}}},
                   {"extensions", {{"admin_password", "e-s3cret"}}},
                   {"scale_status", {{"worker", 2}}},
                   {"vnfcs", json::array{{{"id", "c1"}, {"vdu", "VDU1"}, {"resource_id", "r1"}}}},
                   {"host_keys", {{"10.0.0.1", "ssh-ed25519 AAAA"}}},
                   {"private_key", "k-s3cret"}};
  json::object sol = engine::vnf_instance_view(inst, engine::PackageRecord{});
  std::string shown = json::serialize(sol);
  for (const char* secret : {"v-s3cret", "m-s3cret", "e-s3cret", "k-s3cret", "d-s3cret"})
    CHECK(shown.find(secret) == std::string::npos);
  CHECK(sol.at("vimConnectionInfo").at(0).at("accessInfo").at("password") == "***");
  CHECK(sol.at("metadata").at("token") == "***");
  CHECK(sol.at("metadata").at("k") == "v");
  CHECK(sol.at("extensions").at("admin_password") == "***");
  CHECK(sol.at("instantiatedVnfInfo").at("scaleStatus").at(0).at("scaleLevel") == 2);
  CHECK(sol.at("instantiatedVnfInfo").at("vnfcResourceInfo").at(0).at("vduId") == "VDU1");
  CHECK(sol.at("vnfInstanceName") == "n");
  CHECK(sol.at("vnfInstanceDescription") == "image from https://admin:***@mirror.example/x.qcow2");

  engine::OpRecord op;
  op.id = "op-1";
  op.operation = "instantiate";
  op.state = engine::OpState::kFailedTemp;
  op.request =
      json::object{{"flavourId", "simple"}, {"additionalParams", {{"password", "req-s3cret"}}}};
  op.error = json::object{{"state", "s"}, {"class", "failed"}, {"message", "m"}};
  json::object ov = engine::op_view(op);
  CHECK(ov.at("operationParams").at("additionalParams").at("password") == "***");
  CHECK(json::serialize(ov).find("req-s3cret") == std::string::npos);
  CHECK(ov.at("operation") == "INSTANTIATE");
  CHECK(ov.at("operationState") == "FAILED_TEMP");
  CHECK(ov.at("error").at("title") == "failed");
  CHECK(engine::iso_time(1700000000123) == "2023-11-14T22:13:20.123Z");
}

TEST_CASE("the hook user: an existing user that is not root, for a daemon running as root") {
  base::Status root = engine::check_hook_user("root", "--hook-user");
  base::Status none = engine::check_hook_user("no-such-user-xyz", "--hook-user");
  CHECK_FALSE(root.ok());
  CHECK_FALSE(none.ok());
  if (::geteuid() == 0) {
    CHECK(root.message() == "--hook-user must not be root");
    CHECK(none.message() == "--hook-user: no user \"no-such-user-xyz\"");
    CHECK(engine::check_hook_user("nobody").ok());
  } else {
    CHECK(none.message().rfind("--hook-user needs the daemon to run as root", 0) == 0);
  }
}

TEST_CASE("one daemon per database (SQLite) or per name (PostgreSQL); no key rotation then") {
  TempDb db;
  std::string path = db.tdb.target;
  db.store.reset();
  engine::DaemonOptions o;
  o.db_path = path;
  o.engine.workers = 1;
  o.engine.lease_ttl = std::chrono::milliseconds(1000);
  if (vnflow_test::on_postgres())
    o.name = "alpha";
  engine::Daemon first(o);
  REQUIRE(first.start().ok());
  if (vnflow_test::on_postgres()) {
    // Its own work root (the hooks' lock is per root) and its name as the owner.
    CHECK(first.options().engine.work_root == (db.dir / "work" / "alpha").string());
    CHECK(first.options().engine.owner == "alpha");
  } else {
    CHECK(first.options().engine.work_root == (db.dir / "work").string());
    CHECK(first.options().engine.owner == "daemon-" + std::to_string(::getpid()));
  }
  engine::Daemon second(o);
  base::Status s = second.start();
  CHECK_FALSE(s.ok());
  if (vnflow_test::on_postgres()) {
    CHECK(s.message().find("a daemon named \"alpha\" is running") != std::string::npos);
    // Another name shares the database.
    engine::DaemonOptions other = o;
    other.name = "beta";
    engine::Daemon third(other);
    CHECK(third.start().ok());
  } else {
    CHECK(s.message().find("another daemon is running on") != std::string::npos);
  }
  CHECK(engine::rotate_database_key(path).message().find("a daemon is running") !=
        std::string::npos);
  first.stop(true);
}

TEST_CASE("a database folder others can write is refused before anything is opened") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: the database is no file in a folder");
    return;
  }
  TempDb db;
  fs::path open_dir = db.dir / "shared";
  fs::create_directory(open_dir);
  ::chmod(open_dir.c_str(), 0777);
  auto s = engine::open_database((open_dir / "v.db").string());
  CHECK_FALSE(s.ok());
  CHECK(s.status().message().find("writable by group or others") != std::string::npos);
  CHECK_FALSE(fs::exists(open_dir / "v.db"));
}

TEST_CASE("a daemon reloads on SIGHUP and drains on SIGTERM: run() returns, the lock released") {
  TempDb db;
  std::string path = db.tdb.target;
  db.store.reset();
  engine::DaemonOptions o;
  o.db_path = path;
  o.engine.workers = 1;
  o.engine.poll = std::chrono::milliseconds(10);
  std::atomic<int> reloads{0};
  o.on_reload = [&reloads] { ++reloads; };
  {
    engine::Daemon d(o);
    REQUIRE(d.start().ok());
    std::atomic<bool> returned{false};
    std::thread t([&] {
      d.run();
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(returned);
    // SIGHUP (caught by the daemon, not the end of this test): the owner's reload, and the
    // daemon goes on.
    ::kill(::getpid(), SIGHUP);
    for (int i = 0; i < 500 && reloads.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(reloads.load() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(returned);
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 500 && !returned; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(returned);
    if (!returned)
      d.stop(false);
    t.join();
  }
  // Gone with the daemon: the lock is free for the next one (and for key rotation).
  CHECK(engine::rotate_database_key(path).ok());
}

TEST_CASE("op list pages: at most the limit, newest first, and whether there were more") {
  TempDb db;
  engine::PackageRecord p;
  p.id = "pkg-1";
  p.digest = "d1";
  p.name = "p";
  auto pkg = db.store->put_package(p, "bytes");
  REQUIRE(pkg.ok());
  auto inst = engine::create_instance(*db.store, pkg.value().id, "i", "");
  REQUIRE(inst.ok());
  REQUIRE(db.store->put_machine("m1", "{}").ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    engine::OpRecord op = vnflow_test::test_op(inst.value().id, 1000 + i);
    base::Status created = db.store->create_op(op);
    INFO(created.message());
    REQUIRE(created.ok());
    REQUIRE(engine::fail_operation(*db.store, op.id, true).ok());
    ids.push_back(op.id);
  }
  engine::OpFilter f;
  f.limit = 2;
  auto two = engine::list_operations(*db.store, f);
  REQUIRE(two.ok());
  CHECK(two.value().more);
  REQUIRE(two.value().ops.size() == 2);
  CHECK(two.value().ops[0].id == ids[2]);
  CHECK(two.value().ops[1].id == ids[1]);
  f.limit = 3;
  auto all = engine::list_operations(*db.store, f);
  REQUIRE(all.ok());
  CHECK_FALSE(all.value().more);
  CHECK(all.value().ops.size() == 3);
  f.state = engine::OpState::kCompleted;
  CHECK(engine::list_operations(*db.store, f).value().ops.empty());
}

TEST_CASE("reads on several threads beside commits: each sees every commit made before it") {
  // The reads run on a pool of connections (SQLite) with prepared statements reused: a
  // record committed before a read starts is seen by it, whatever connection it gets, and a
  // statement's earlier use (its bindings, its snapshot) never leaks into the next.
  TempDb t;
  constexpr int kVims = 60;
  std::atomic<int> committed{0};
  std::atomic<int> errors{0};
  std::thread writer([&] {
    for (int i = 0; i < kVims; ++i) {
      engine::VimRecord v;
      v.id = "vim-" + std::to_string(i);
      v.name = "cloud-" + std::to_string(i);
      v.type = "openstack";
      v.access = json::object{{"auth_url", "http://127.0.0.1:5000/v3"},
                              {"password", "pw-" + std::to_string(i)}};
      if (!t.store->put_vim(v).ok())
        ++errors;
      committed = i + 1;
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (int round = 0; round < 300; ++round) {
        int seen = committed.load();
        if (seen == 0)
          continue;
        int k = (round * 7 + r) % seen;
        auto v = t.store->get_vim("vim-" + std::to_string(k), true);
        if (!v.ok() || v.value().access.at("password").as_string() != "pw-" + std::to_string(k))
          ++errors;
        if (t.store->get_vim("vim-none", true).ok())  // the same statement, another binding
          ++errors;
        auto all = t.store->list_vims();
        if (!all.ok() || static_cast<int>(all.value().size()) < seen)
          ++errors;
      }
    });
  }
  writer.join();
  for (auto& th : readers)
    th.join();
  CHECK(errors == 0);
  CHECK(committed == kVims);
}
