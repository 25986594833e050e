// What only a store on a server has to get right (the PostgreSQL store; on SQLite the tests
// that need a server skip): a lost connection, a URL's password in messages, hostile text
// as values.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <libpq-fe.h>
#include <unistd.h>

#include "engine/engine.h"

#include "tests/unit/engine/store_param.h"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-pg-store-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Ends every connection vnflow's stores hold (as a server restart or a network cut does).
int drop_store_connections() {
  PGconn* c = PQconnectdb(vnflow_test::test_pg_url().c_str());
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PGresult* r = PQexec(c,
                       "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                       " WHERE application_name = 'vnflow' AND pid <> pg_backend_pid()");
  REQUIRE(PQresultStatus(r) == PGRES_TUPLES_OK);
  int n = std::atoi(PQgetvalue(r, 0, 0));
  PQclear(r);
  PQfinish(c);
  return n;
}

}  // namespace

TEST_CASE("a lost connection fails one call as unavailable; the next one reconnects") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: no server connection to lose");
    return;
  }
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto s = db.open();
  REQUIRE(s.ok());
  auto& store = *s.value();
  REQUIRE(store.put_machine("m1", "{\"a\":1}").ok());
  REQUIRE(store.get_machine("m1").ok());  // both connections open
  CHECK(drop_store_connections() == 2);
  // A read: at most one failure, reported as unavailable (try again), never as corruption.
  auto r = store.get_machine("m1");
  if (!r.ok())
    CHECK(r.status().code() == base::StatusCode::kUnavailable);
  r = store.get_machine("m1");
  REQUIRE(r.ok());
  CHECK(r.value() == "{\"a\":1}");
  // A write the same way; what was committed is there once.
  base::Status w = store.put_machine("m2", "{\"b\":2}");
  if (!w.ok())
    CHECK(w.code() == base::StatusCode::kUnavailable);
  REQUIRE(store.put_machine("m2", "{\"b\":2}").ok());
  CHECK(store.get_machine("m2").value() == "{\"b\":2}");
}

TEST_CASE("the daemons' lock: shared by daemons, a key rotation takes it alone") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: the daemon's lock there is a flock (commands_test)");
    return;
  }
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto first = engine::open_postgres_store(db.target, db.key, engine::DbLock::kDaemon);
  REQUIRE(first.ok());

  SECTION("many daemons; no rotation while one runs; its writes stop when it lost the lock") {
    auto second = engine::open_postgres_store(db.target, db.key, engine::DbLock::kDaemon);
    CHECK(second.ok());
    auto rotation = engine::open_postgres_store(db.target, db.key, engine::DbLock::kAlone);
    REQUIRE_FALSE(rotation.ok());
    CHECK(rotation.status().message().find("a daemon is running on") != std::string::npos);
    // The daemons lose their connections (and with them the lock); a rotation takes the
    // lock meanwhile: the daemons' writes are refused, not committed beside it.
    drop_store_connections();
    auto alone = engine::open_postgres_store(db.target, db.key, engine::DbLock::kAlone);
    REQUIRE(alone.ok());
    for (int i = 0; i < 2; ++i) {
      base::Status w = first.value()->put_machine("m", "{}");
      CHECK_FALSE(w.ok());
    }
    CHECK(alone.value()->get_machine("m").status().code() == base::StatusCode::kNotFound);
  }

  SECTION("a rotation started while the last daemon is stopping gets the lock once it is free") {
    // The daemon goes 300 ms after the rotation starts (its session not yet ended by the
    // server): the rotation waits for the lock instead of refusing.
    std::unique_ptr<engine::Store> leaving = std::move(first).value();
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      leaving.reset();
    });
    auto alone = engine::open_postgres_store(db.target, db.key, engine::DbLock::kAlone);
    stopper.join();
    CHECK(alone.ok());
  }
}

TEST_CASE("a database URL's password never appears in a message") {
  CHECK(engine::display_db("postgresql://u:s3cr3t@db.example:5432/vnflow") ==
        "postgresql://u:***@db.example:5432/vnflow");
  CHECK(engine::display_db("postgres://u:p%40ss:w@h/db?password=s3cr3t&sslmode=require") ==
        "postgres://u:***@h/db?password=***&sslmode=require");
  CHECK(engine::display_db("/var/lib/vnflow/vnflow.db") == "/var/lib/vnflow/vnflow.db");
  TempDir dir;
  // Nothing listens on port 1: the connection fails, naming the server without the password.
  auto s = engine::open_postgres_store("postgresql://vnflow:s3cr3t@127.0.0.1:1/vnflow",
                                       (dir.path / "k").string());
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("127.0.0.1") != std::string::npos);
  CHECK(s.status().message().find("s3cr3t") == std::string::npos);
}

TEST_CASE("hostile text is stored as a value, never as SQL") {
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto s = db.open();
  REQUIRE(s.ok());
  auto& store = *s.value();
  // Built in one expression: gcc 12 at -O3 reports a false -Wmaybe-uninitialized for
  // short literals assigned one by one to a default-constructed record.
  const engine::PackageRecord p{.id = "pkg-1",
                                .digest = "d1",
                                .name = "x'); DROP TABLE ops; --",
                                .provider = "$1 $2 ? ?1 \\ \" '' ;",
                                .product = "",
                                .version = "",
                                .vnfd_id = "",
                                .vnfd_version = "1.0'; --",
                                .onboarded_ms = 1,
                                .onboarding_state = "ONBOARDED",
                                .operational_state = "ENABLED",
                                .user_data = "{}",
                                .failure = ""};
  std::string bytes("\0\x01\xff' bytes", 10);
  REQUIRE(store.put_package(p, bytes).ok());
  auto back = store.get_package("pkg-1");
  REQUIRE(back.ok());
  CHECK(back.value().name == p.name);
  CHECK(back.value().provider == p.provider);
  CHECK(back.value().vnfd_version == p.vnfd_version);
  CHECK(store.package_bytes("pkg-1").value() == bytes);
  CHECK(store.get_package("' OR '1'='1").status().code() == base::StatusCode::kNotFound);
  CHECK(store.list_ops(engine::OpFilter{}).ok());  // ops is still there
}
