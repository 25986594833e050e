// SOL005 package management in the engine (the REST API's /vnfpkgm/v1 over these
// commands): a package created empty, its content onboarded exactly as `package onboard`
// does or refused with the reason kept, the operational state and user data, who may be
// deleted; and the schema migration that brought package states to existing databases.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"
#include "tosca/tosca.h"

#include "tests/unit/engine/store_param.h"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Db {
  fs::path dir;
  vnflow_test::TestDb tdb;
  std::unique_ptr<engine::Store> store;
  Db() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-packages-test-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    tdb = vnflow_test::new_test_db(dir);
    reopen();
  }
  void reopen() {
    store.reset();
    auto s = tdb.open();
    REQUIRE(s.ok());
    store = std::move(s).value();
  }
  ~Db() {
    store.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Runs SQL on the database as it is at rest (the store closed).
  void sql(const std::string& text) {
    store.reset();
    if (vnflow_test::on_postgres()) {
      PGconn* c = PQconnectdb(tdb.target.c_str());
      REQUIRE(PQstatus(c) == CONNECTION_OK);
      PGresult* r = PQexec(c, text.c_str());
      INFO(PQresultErrorMessage(r));
      CHECK(PQresultStatus(r) == PGRES_COMMAND_OK);
      PQclear(r);
      PQfinish(c);
    } else {
      sqlite3* h = nullptr;
      REQUIRE(sqlite3_open(tdb.target.c_str(), &h) == SQLITE_OK);
      char* err = nullptr;
      int rc = sqlite3_exec(h, text.c_str(), nullptr, nullptr, &err);
      INFO((err != nullptr ? err : ""));
      sqlite3_free(err);
      sqlite3_close(h);
      CHECK(rc == SQLITE_OK);
    }
    reopen();
  }
};

std::string demo_path() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return std::string(r != nullptr ? r : ".") + "/csar-samples/local-demo";
}

// The local demo as a zip, made different from every other by a trailing zip comment
// (another digest, the same package).
std::string demo_zip(const std::string& comment = "") {
  auto b = tosca::package_archive_bytes(demo_path(), tosca::Limits{});
  REQUIRE(b.ok());
  std::string z = std::move(b).value();
  if (!comment.empty()) {
    // The end-of-central-directory record closes the archive: its last two bytes are the
    // comment's length.
    REQUIRE(z.size() > 22);
    REQUIRE(z[z.size() - 2] == 0);
    REQUIRE(z[z.size() - 1] == 0);
    z[z.size() - 2] = static_cast<char>(comment.size());
    z += comment;
  }
  return z;
}

engine::PackageRecord created(engine::Store& s, json::object data = {}) {
  auto p = engine::create_package(s, std::move(data));
  REQUIRE(p.ok());
  return p.value();
}

engine::PackageRecord reread(engine::Store& s, const std::string& id) {
  auto p = s.get_package(id);
  REQUIRE(p.ok());
  return p.value();
}

}  // namespace

TEST_CASE("a package created empty is CREATED, DISABLED, without VNF fields") {
  Db db;
  auto p = created(*db.store, json::object{{"owner", "ci"}});
  auto r = reread(*db.store, p.id);
  CHECK(r.onboarding_state == "CREATED");
  CHECK(r.operational_state == "DISABLED");
  CHECK(r.digest.empty());
  CHECK(json::parse(r.user_data) == json::object{{"owner", "ci"}});
  json::object view = engine::vnf_package_view(r, false);
  CHECK(!view.contains("vnfdId"));
  CHECK(!view.contains("checksum"));
  CHECK(view.at("userDefinedData") == json::object{{"owner", "ci"}});
  // Several empty packages live side by side.
  auto q = created(*db.store);
  CHECK(q.id != p.id);
  CHECK(db.store->list_packages().value().size() == 2);
  // No instance of a package that is not onboarded.
  auto inst = engine::create_instance(*db.store, p.id, "x", "");
  CHECK(inst.status().code() == base::StatusCode::kFailedPrecondition);
  auto big = engine::create_package(*db.store, json::object{{"x", std::string(70000, 'a')}});
  CHECK(big.status().code() == base::StatusCode::kInvalidArgument);
}

TEST_CASE(
    "an upload onboards as package onboard does: ONBOARDED, ENABLED, the digest of the bytes") {
  Db db;
  auto p = created(*db.store, json::object{{"owner", "ci"}});
  std::string zip = demo_zip();
  base::Diagnostics diags;
  auto r = engine::upload_package(*db.store, p.id, zip, diags);
  REQUIRE(r.ok());
  CHECK(!diags.has_errors());
  auto got = reread(*db.store, p.id);
  CHECK(got.onboarding_state == "ONBOARDED");
  CHECK(got.operational_state == "ENABLED");
  CHECK(got.vnfd_id == "3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c");
  CHECK(got.vnfd_version == "1.0");  // the VNF node's descriptor_version
  CHECK(engine::vnf_package_view(got, false).at("vnfdVersion") == "1.0");
  CHECK(got.digest == base::digest_hex(base::DigestAlgorithm::kSha256, zip));
  CHECK(got.failure.empty());
  CHECK(json::parse(got.user_data) == json::object{{"owner", "ci"}});
  CHECK(db.store->package_bytes(p.id).value() == zip);
  // A second upload is refused and changes nothing.
  base::Diagnostics d2;
  auto again = engine::upload_package(*db.store, p.id, demo_zip("x"), d2);
  CHECK(again.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(reread(*db.store, p.id).digest == got.digest);
  // Its files can be read; the VNFD is the Definitions folder's three YAML files.
  auto pkg = engine::open_package(*db.store, p.id);
  REQUIRE(pkg.ok());
  CHECK(engine::vnfd_files(*pkg.value()) ==
        std::vector<std::string>{"Definitions/local_demo_df_simple.yaml",
                                 "Definitions/local_demo_top.vnfd.yaml",
                                 "Definitions/local_demo_types.yaml"});
  CHECK(engine::open_package(*db.store, created(*db.store).id).status().code() ==
        base::StatusCode::kFailedPrecondition);
  // Instances of it, and it survives a reopen.
  CHECK(engine::create_instance(*db.store, p.id, "a", "").ok());
  db.reopen();
  CHECK(reread(*db.store, p.id).onboarding_state == "ONBOARDED");
}

TEST_CASE(
    "a bad upload: not a zip changes nothing; an invalid package returns to CREATED with the "
    "reason") {
  Db db;
  auto p = created(*db.store);
  base::Diagnostics diags;
  auto r = engine::upload_package(*db.store, p.id, "not a zip at all", diags);
  CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
  auto same = reread(*db.store, p.id);
  CHECK(same.onboarding_state == "CREATED");
  CHECK(same.failure.empty());
  // A zip whose entries are cut off: the loader's located error is kept.
  std::string zip = demo_zip();
  std::string cut = zip.substr(0, zip.size() / 2);
  base::Diagnostics d2;
  auto bad = engine::upload_package(*db.store, p.id, cut, d2);
  REQUIRE(bad.ok());
  CHECK(d2.has_errors());
  auto failed = reread(*db.store, p.id);
  CHECK(failed.onboarding_state == "CREATED");
  CHECK(failed.failure.find("error") != std::string::npos);
  CHECK(engine::vnf_package_view(failed, false).contains("onboardingFailureDetails"));
  // It may be uploaded again: the reason goes.
  base::Diagnostics d3;
  REQUIRE(engine::upload_package(*db.store, p.id, zip, d3).ok());
  auto ok = reread(*db.store, p.id);
  CHECK(ok.onboarding_state == "ONBOARDED");
  CHECK(ok.failure.empty());
  // The same bytes into another package: refused, naming the package that has them.
  auto other = created(*db.store);
  base::Diagnostics d4;
  auto dup = engine::upload_package(*db.store, other.id, zip, d4);
  REQUIRE(dup.ok());
  auto o = reread(*db.store, other.id);
  CHECK(o.onboarding_state == "CREATED");
  CHECK(o.failure.find(p.id) != std::string::npos);
}

TEST_CASE("PackageIdentities: an instance view's package identity, never from before onboarding") {
  Db db;
  engine::PackageIdentities ids;
  auto p = created(*db.store);
  // Asked while CREATED: empty fields, and not kept (the upload fills them).
  auto before = ids.get(*db.store, p.id);
  REQUIRE(before.ok());
  CHECK(before.value().vnfd_id.empty());
  base::Diagnostics diags;
  REQUIRE(engine::upload_package(*db.store, p.id, demo_zip(), diags).ok());
  auto after = ids.get(*db.store, p.id);
  REQUIRE(after.ok());
  CHECK(after.value().vnfd_id == "3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c");
  CHECK(after.value().vnfd_version == "1.0");
  CHECK(after.value().id == p.id);
  // Mutable fields are not part of it: a view never shows a stale operational state.
  CHECK(after.value().operational_state.empty());
  CHECK(after.value().user_data.empty());
  // Once ONBOARDED it is answered from memory: a package deleted later (no instance
  // refers to it any more) is no longer read.
  REQUIRE(
      engine::modify_package(*db.store, p.id, json::object{{"operationalState", "DISABLED"}}).ok());
  REQUIRE(engine::delete_package(*db.store, p.id).ok());
  auto kept = ids.get(*db.store, p.id);
  REQUIRE(kept.ok());
  CHECK(kept.value().vnfd_id == "3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c");
  // An unknown package: the store's error.
  CHECK(ids.get(*db.store, "no-such-package").status().code() == base::StatusCode::kNotFound);
}

TEST_CASE("modify_package: operational state and merged user data of ONBOARDED packages only") {
  Db db;
  auto p = created(*db.store, json::object{{"a", 1}, {"b", 2}});
  json::object disable{{"operationalState", "DISABLED"}};
  CHECK(engine::modify_package(*db.store, p.id, disable).status().code() ==
        base::StatusCode::kFailedPrecondition);
  base::Diagnostics diags;
  REQUIRE(engine::upload_package(*db.store, p.id, demo_zip(), diags).ok());
  auto same =
      engine::modify_package(*db.store, p.id, json::object{{"operationalState", "ENABLED"}});
  CHECK(same.status().code() == base::StatusCode::kFailedPrecondition);
  for (const char* bad : {R"({})", R"({"operationalState": "ON"})", R"({"userDefinedData": 1})",
                          R"({"onboardingState": "CREATED"})"}) {
    INFO(bad);
    CHECK(engine::modify_package(*db.store, p.id, json::parse(bad).as_object()).status().code() ==
          base::StatusCode::kInvalidArgument);
  }
  auto changed = engine::modify_package(
      *db.store, p.id,
      json::object{{"operationalState", "DISABLED"},
                   {"userDefinedData", json::object{{"a", nullptr}, {"b", 2}, {"c", "x"}}}});
  REQUIRE(changed.ok());
  CHECK(changed.value() ==
        json::object{{"operationalState", "DISABLED"},
                     {"userDefinedData", json::object{{"a", nullptr}, {"c", "x"}}}});
  auto r = reread(*db.store, p.id);
  CHECK(r.operational_state == "DISABLED");
  CHECK(json::parse(r.user_data) == json::object{{"b", 2}, {"c", "x"}});
  CHECK(engine::modify_package(*db.store, p.id,
                               json::object{{"userDefinedData", json::object{{"b", 2}}}})
            .status()
            .code() == base::StatusCode::kFailedPrecondition);
  // A DISABLED package gets no new instance.
  CHECK(engine::create_instance(*db.store, p.id, "x", "").status().code() ==
        base::StatusCode::kFailedPrecondition);
}

TEST_CASE("delete_package: refused while ENABLED or in use") {
  Db db;
  auto p = created(*db.store);
  base::Diagnostics diags;
  REQUIRE(engine::upload_package(*db.store, p.id, demo_zip(), diags).ok());
  CHECK(engine::delete_package(*db.store, p.id).code() == base::StatusCode::kFailedPrecondition);
  auto inst = engine::create_instance(*db.store, p.id, "user", "");
  REQUIRE(inst.ok());
  REQUIRE(
      engine::modify_package(*db.store, p.id, json::object{{"operationalState", "DISABLED"}}).ok());
  base::Status inuse = engine::delete_package(*db.store, p.id);
  CHECK(inuse.code() == base::StatusCode::kFailedPrecondition);
  CHECK(inuse.message().find(inst.value().id) != std::string::npos);
  REQUIRE(engine::delete_instance(*db.store, inst.value().id).ok());
  CHECK(engine::delete_package(*db.store, p.id).ok());
  CHECK(db.store->get_package(p.id).status().code() == base::StatusCode::kNotFound);
  CHECK(engine::delete_package(*db.store, p.id).code() == base::StatusCode::kNotFound);
  // A package never onboarded is DISABLED: it may go.
  CHECK(engine::delete_package(*db.store, created(*db.store).id).ok());
}

TEST_CASE("fetch_package reads file URLs and refuses other schemes") {
  Db db;
  std::string zip = demo_zip();
  fs::path f = db.dir / "p.zip";
  {
    std::ofstream out(f, std::ios::binary);
    out << zip;
  }
  auto got = engine::fetch_package("file://" + f.string(), "", "", std::chrono::seconds(5));
  REQUIRE(got.ok());
  CHECK(got.value() == zip);
  for (std::string bad : {"ftp://127.0.0.1/p.zip", "file://p.zip", "gopher://x", "p.zip"}) {
    INFO(bad);
    CHECK(engine::fetch_package(bad, "", "", std::chrono::seconds(5)).status().code() ==
          base::StatusCode::kInvalidArgument);
  }
  CHECK(!engine::fetch_package("file://" + db.dir.string(), "", "", std::chrono::seconds(5)).ok());
  CHECK(!engine::fetch_package("file:///nonexistent/p.zip", "", "", std::chrono::seconds(5)).ok());
}

TEST_CASE("a database from before package states gets them: its packages ONBOARDED and ENABLED") {
  Db db;
  base::Diagnostics diags;
  auto p = engine::onboard_package(*db.store, demo_path(), diags);
  REQUIRE(p.ok());
  bool pg = vnflow_test::on_postgres();
  // The schema before: no state columns (nor notices and the triggers that name them), the
  // version before.
  db.sql(
      std::string(pg ? "" : vnflow_test::kSqliteEventsToSchema6) +
      std::string(pg ? ""
                     : "DROP TRIGGER notice_op_created; DROP TRIGGER notice_op_state;"
                       "DROP TRIGGER notice_instance_created; DROP TRIGGER notice_instance_deleted;"
                       "DROP TRIGGER notice_package_stored; DROP TRIGGER notice_package_onboarded;"
                       "DROP TRIGGER notice_package_changed; DROP TRIGGER notice_package_deleted;"
                       "DROP TABLE notices; DROP TABLE subscriptions;") +
      "ALTER TABLE packages DROP COLUMN onboarding_state;"
      "ALTER TABLE packages DROP COLUMN operational_state;"
      "ALTER TABLE packages DROP COLUMN user_data;"
      "ALTER TABLE packages DROP COLUMN failure;"
      "ALTER TABLE packages DROP COLUMN vnfd_version;"
      "ALTER TABLE events DROP COLUMN started_ms;" +
      (pg ? "UPDATE meta SET value = '1' WHERE key = 'schema_version'"
          : "UPDATE meta SET value = '2' WHERE key = 'schema_version'"));
  auto r = reread(*db.store, p.value().id);
  CHECK(r.onboarding_state == "ONBOARDED");
  CHECK(r.operational_state == "ENABLED");
  CHECK(json::parse(r.user_data) == json::object{{"name", "local-demo"}});
  CHECK(r.vnfd_version.empty());  // not read back from the stored bytes
  // And the new commands work on it.
  auto q = created(*db.store);
  base::Diagnostics d2;
  REQUIRE(engine::upload_package(*db.store, q.id, demo_zip("v2"), d2).ok());
  CHECK(reread(*db.store, q.id).onboarding_state == "ONBOARDED");
  CHECK(reread(*db.store, q.id).vnfd_version == "1.0");
  db.reopen();
  CHECK(db.store->list_packages().value().size() == 2);
  CHECK(db.store->history("no-such-op").ok());  // reads events.started_ms (schema 5)
}

// The REST API's I/O threads read one record in a NoWaitReads scope (engine.h): SQLite's
// store takes a free read connection or declines at once; it never waits there.
TEST_CASE("SQLite's read connections: in a NoWaitReads scope, a free one or a decline") {
  Db d;
  if (!d.store->reads_never_wait())
    SUCCEED("this store is never read in such a scope (PostgreSQL)");
  else {
    auto path = d.dir / "vnflow.db";
    REQUIRE(fs::exists(path));
    {
      engine::NoWaitReads scope;  // every connection free: an answer, no decline
      CHECK(d.store->get_instance("00000000-0000-4000-8000-000000000009").status().code() ==
            base::StatusCode::kNotFound);
      CHECK(!scope.declined());
    }
    {
      // Another process holds the file in exclusive mode: a read would wait on SQLite's
      // busy handler (10 s out of the scope); in the scope it fails at once, declined.
      d.store.reset();  // its connections share the file
      sqlite3* other = nullptr;
      REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
      REQUIRE(sqlite3_exec(other, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE", nullptr,
                           nullptr, nullptr) == SQLITE_OK);
      engine::internal::ReaderPool fresh(path.string(), 1);
      engine::NoWaitReads scope;
      auto t0 = std::chrono::steady_clock::now();
      auto rd = fresh.acquire();
      CHECK_THROWS(rd->db.execAndGet("SELECT count(*) FROM ops"));
      CHECK(scope.declined());
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
      sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_close(other);
    }
    engine::internal::ReaderPool pool(path.string(), 2);
    std::optional<engine::internal::ReaderPool::Lease> a, b;
    a.emplace(pool.acquire());
    {
      engine::NoWaitReads scope;
      b.emplace(pool.acquire());  // the second connection is free
      CHECK(!scope.declined());
      auto t0 = std::chrono::steady_clock::now();
      CHECK_THROWS_AS(pool.acquire(), engine::WouldWait);  // both taken
      CHECK(scope.declined());
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));  // not 10 s
    }
    CHECK(!engine::NoWaitReads::active());
    // Out of the scope a read waits for a connection, and gets one when it is given back.
    std::atomic<bool> started{false}, got{false};
    std::thread waiter([&] {
      started = true;
      auto c = pool.acquire();
      got = true;
    });
    while (!started)
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(!got);
    a.reset();
    b.reset();
    waiter.join();
    CHECK(got);
  }
}
