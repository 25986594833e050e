// The store the engine's unit tests run on: SQLite (a new file in the test's folder), or
// PostgreSQL when VNFLOW_TEST_PG holds a database URL (meson test --suite postgres starts a
// cluster and sets it): a new schema of that database for each test, its key file in the
// test's folder. One suite for both stores; a test of something only SQLite has (its file,
// WAL, flock) says so and skips on PostgreSQL.
#pragma once

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <libpq-fe.h>
#include <unistd.h>

#include "engine/engine.h"

namespace vnflow_test {

// The PostgreSQL database the tests use, "" for SQLite.
inline std::string test_pg_url() {
  const char* u = std::getenv("VNFLOW_TEST_PG");
  return u != nullptr ? u : "";
}

inline bool on_postgres() {
  return !test_pg_url().empty();
}

struct TestDb {
  std::string target;  // the SQLite file, or the PostgreSQL URL naming the test's schema
  std::string key;     // the key file (SQLite: beside the file)

  base::Result<std::unique_ptr<engine::Store>> open() const {
    if (engine::is_postgres_url(target))
      return engine::open_postgres_store(target, key);
    return engine::open_sqlite_store(target);
  }
};

// A new, empty database for one test; `dir` (the test's own folder) holds its files.
inline TestDb new_test_db(const std::filesystem::path& dir, const std::string& file = "vnflow.db") {
  TestDb db;
  std::string url = test_pg_url();
  if (url.empty()) {
    db.target = (dir / file).string();
    db.key = db.target + ".key";
    return db;
  }
  static std::atomic<int> n{0};
  std::string schema = "t" + std::to_string(::getpid()) + "_" + std::to_string(++n) + "_" +
                       std::to_string(std::random_device{}() % 100000);
  PGconn* c = PQconnectdb(url.c_str());
  std::string err;
  if (PQstatus(c) != CONNECTION_OK) {
    err = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, ("CREATE SCHEMA " + schema).c_str());  // a name made above
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
      err = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  if (!err.empty())
    throw std::runtime_error("VNFLOW_TEST_PG: cannot create schema " + schema + ": " + err);
  db.target =
      url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema;
  db.key = (dir / (file + ".key")).string();
  return db;
}

// What the database holds at rest, as bytes a reader of its storage would see: SQLite's file
// and WAL; every row of the PostgreSQL schema as text.
inline std::string at_rest(const TestDb& db) {
  if (!engine::is_postgres_url(db.target)) {
    std::string out;
    for (const char* suffix : {"", "-wal"}) {
      std::ifstream f(db.target + suffix, std::ios::binary);
      out.append(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    return out;
  }
  PGconn* c = PQconnectdb(db.target.c_str());
  std::string out;
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult* r = PQexec(c,
                         "SELECT t::text FROM meta t UNION ALL SELECT t::text FROM packages t"
                         " UNION ALL SELECT t::text FROM instances t UNION ALL SELECT t::text"
                         " FROM ops t UNION ALL SELECT t::text FROM outputs t UNION ALL SELECT"
                         " t::text FROM events t UNION ALL SELECT t::text FROM vims t");
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
      for (int i = 0; i < PQntuples(r); ++i)
        out += std::string(PQgetvalue(r, i, 0)) + "\n";
    }
    PQclear(r);
  }
  PQfinish(c);
  if (out.empty())
    throw std::runtime_error("cannot read the test schema back");
  return out;
}

// A queued modify_info operation of `instance_id` on machine "m1" of package digest "d1".
inline engine::OpRecord test_op(const std::string& instance_id, int64_t created_ms) {
  engine::OpRecord op;
  op.id = engine::new_id();
  op.instance_id = instance_id;
  op.operation = "modify_info";
  op.machine_digest = "m1";
  op.package_digest = "d1";
  op.request = boost::json::object();
  op.created_ms = created_ms;
  return op;
}

// `n` instances of one package, each with one queued operation (ids "i<k>"; `first` offsets
// the names and creation times, for a second call on one store); returns the operations' ids.
inline std::vector<std::string> queue_ops(engine::Store& store, int n, int first = 0) {
  engine::PackageRecord p;
  p.id = "pkg-1";
  p.digest = "d1";
  p.name = "p";
  auto pkg = store.put_package(p, "bytes");
  REQUIRE(pkg.ok());
  REQUIRE(store.put_machine("m1", "{}").ok());
  std::vector<std::string> ids;
  for (int i = first; i < first + n; ++i) {
    auto inst = engine::create_instance(store, pkg.value().id, "i" + std::to_string(i), "");
    REQUIRE(inst.ok());
    engine::OpRecord op = test_op(inst.value().id, 1000 + i);
    REQUIRE(store.create_op(op).ok());
    ids.push_back(op.id);
  }
  return ids;
}

// SQL that turns a SQLite database's events table back into schema 6's (keyed by (op_id,
// seq), no operation numbers): for the tests that rebuild an older schema from today's.
inline constexpr const char* kSqliteEventsToSchema6 =
    "DROP INDEX events_by_op; DROP INDEX ops_num; DROP TRIGGER ops_number;"
    "CREATE TABLE events_v6(op_id TEXT NOT NULL, seq INTEGER NOT NULL, at_ms INTEGER NOT NULL,"
    " kind TEXT NOT NULL, state TEXT, item INTEGER, attempt INTEGER, key TEXT, data TEXT,"
    " outputs TEXT, started_ms INTEGER, PRIMARY KEY(op_id, seq)) WITHOUT ROWID;"
    "INSERT INTO events_v6 SELECT o.id, e.seq, e.at_ms, e.kind, e.state, e.item, e.attempt,"
    " e.key, e.data, e.outputs, e.started_ms FROM events e JOIN ops o ON o.num = e.opn;"
    "DROP TABLE events; ALTER TABLE events_v6 RENAME TO events;"
    "ALTER TABLE ops DROP COLUMN num;";

}  // namespace vnflow_test
