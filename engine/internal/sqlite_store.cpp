// The SQLite Store: one file, WAL, synchronous=FULL. A write connection (the executor's
// writer thread and commands) and a read connection (polls, history), each behind a mutex.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>
#include <sqlite3.h>
#include <unistd.h>

#include "actions/actions.h"
#include "engine/engine.h"

namespace engine {

namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS packages(
  id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, name TEXT, provider TEXT, product TEXT,
  version TEXT, vnfd_id TEXT, onboarded_ms INTEGER NOT NULL, bytes BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS instances(
  id TEXT PRIMARY KEY, package_id TEXT NOT NULL REFERENCES packages(id), name TEXT,
  instantiation_state TEXT NOT NULL, record TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS machines(digest TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ops(
  id TEXT PRIMARY KEY, instance_id TEXT NOT NULL REFERENCES instances(id),
  operation TEXT NOT NULL, state TEXT NOT NULL,
  machine TEXT NOT NULL REFERENCES machines(digest), package_digest TEXT NOT NULL,
  request TEXT NOT NULL, error TEXT, cursor TEXT, owner TEXT,
  cancel_requested INTEGER NOT NULL DEFAULT 0, wake_at_ms INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);
DROP INDEX IF EXISTS ops_one_open_per_instance;
DROP INDEX IF EXISTS ops_active;
-- Partial indexes spell their conditions with OR: SQLite evaluates "state IN (...)" in an
-- index condition through a temporary table on every write of the row.
CREATE UNIQUE INDEX IF NOT EXISTS ops_one_open ON ops(instance_id)
  WHERE state = 'STARTING' OR state = 'PROCESSING' OR state = 'FAILED_TEMP' OR state = 'ROLLING_BACK';
CREATE INDEX IF NOT EXISTS ops_running ON ops(created_ms)
  WHERE state = 'STARTING' OR state = 'PROCESSING' OR state = 'ROLLING_BACK';
CREATE INDEX IF NOT EXISTS ops_unclaimed ON ops(created_ms)
  WHERE owner IS NULL AND (state = 'STARTING' OR state = 'PROCESSING' OR state = 'ROLLING_BACK');
CREATE INDEX IF NOT EXISTS ops_cancel ON ops(id) WHERE cancel_requested = 1;
CREATE TABLE IF NOT EXISTS outputs(
  op_id TEXT NOT NULL, state TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(op_id, state)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_by_instance ON ops(instance_id, created_ms);
CREATE TABLE IF NOT EXISTS events(
  op_id TEXT NOT NULL, seq INTEGER NOT NULL, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
  state TEXT, item INTEGER, attempt INTEGER, key TEXT, data TEXT,
  PRIMARY KEY(op_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vims(
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
  summary TEXT NOT NULL, sealed TEXT NOT NULL, extra TEXT NOT NULL,
  is_default INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);
)SQL";

constexpr const char* kOpColumns =
    "id, instance_id, operation, state, machine, package_digest, request, error, cursor, "
    "owner, cancel_requested, wake_at_ms, created_ms, updated_ms";

json::value parse_or_null(const std::string& s) {
  if (s.empty())
    return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(s, ec);
  return ec ? json::value(nullptr) : v;
}

std::string text(SQLite::Statement& st, int i) {
  auto c = st.getColumn(i);
  return c.isNull() ? std::string() : c.getString();
}

// Secret fields at rest. Requests, instance records, cursors and state outputs are JSON;
// a field whose name says it holds a secret (actions::is_secret_name: password, token,
// private_key..., in any letter case) is stored sealed (AES-256-GCM, the database's key
// file) and opened again when read. The executor and the workflows see plain values; the
// file never holds them.
//
//   "vnflow-sealed:s1:<sealed>"  a string value
//   "vnflow-sealed:j1:<sealed>"  any other value (a map, a list, a number), as JSON text
//   "vnflow-sealed:v1:..."       written by vnflow before owners were bound (read only)
//
// Each sealed value is bound to its owner and place (the associated data is e.g.
// "op/<id>/request#/vimConnectionInfo/0/accessInfo/password"): copied into another record
// or another field, it no longer opens. A value that does not open is left sealed, and the
// executor never hands a sealed value to an action.
constexpr std::string_view kSealedPrefix = "vnflow-sealed:";
constexpr std::string_view kLegacyFieldAad = "vnflow-field";
constexpr std::string_view kKeyCheckText = "vnflow database key check";

// A cheap test before any parsing: most texts name no secret at all. A text that holds a
// secret-named field contains that name, so the field-name rule itself, applied to the whole
// text, is the test (one word list, one letter-case rule: they cannot drift apart).
bool may_hold_secret(std::string_view t) {
  return actions::is_secret_name(t);
}

struct SealWalk {
  const std::string& key;
  std::string owner;
  std::string err;
  std::vector<std::string> path;

  std::string aad() const {
    std::string a = owner + "#";
    for (const auto& p : path)
      a += "/" + p;
    return a;
  }

  bool seal_value(json::value& x) {
    bool is_str = x.is_string();
    if (is_str && x.get_string().starts_with(kSealedPrefix))
      return true;  // sealed already (it opens only where it was sealed)
    if (is_str && x.get_string().empty())
      return true;
    std::string plain = is_str ? std::string(x.get_string()) : json::serialize(x);
    auto c = base::seal(key, plain, aad());
    if (!c.ok()) {
      err = c.status().message();
      return false;
    }
    x = std::string(kSealedPrefix) + (is_str ? "s1:" : "j1:") + c.value();
    return true;
  }

  // Seals every secret-named field below `v`.
  bool seal(json::value& v) {
    if (v.is_array()) {
      size_t i = 0;
      for (auto& x : v.get_array()) {
        path.push_back(std::to_string(i++));
        bool ok = seal(x);
        path.pop_back();
        if (!ok)
          return false;
      }
      return true;
    }
    if (!v.is_object())
      return true;
    for (auto& kv : v.get_object()) {
      path.emplace_back(kv.key());
      bool ok = !kv.value().is_null() && actions::is_secret_name(kv.key()) ? seal_value(kv.value())
                                                                           : seal(kv.value());
      path.pop_back();
      if (!ok)
        return false;
    }
    return true;
  }

  // Opens every sealed value below `v`; false (the reason in `err`) when one does not open.
  // The others are opened all the same.
  bool open(json::value& v) {
    bool all = true;
    if (v.is_string()) {
      std::string_view sv = v.get_string();
      if (!sv.starts_with(kSealedPrefix))
        return true;
      std::string_view body = sv.substr(kSealedPrefix.size());
      std::string where = path.empty() ? std::string("a value") : "field \"" + path.back() + "\"";
      if (body.starts_with("s1:") || body.starts_with("j1:")) {
        auto plain = base::unseal(key, body.substr(3), aad());
        if (!plain.ok()) {
          err = "sealed " + where + " of " + owner +
                " does not open here: " + plain.status().message();
          return false;
        }
        if (body[0] == 's') {
          v = plain.value();
        } else {
          boost::system::error_code ec;
          json::value parsed = json::parse(plain.value(), ec);
          if (ec) {
            err = "sealed " + where + " of " + owner + " is not JSON";
            return false;
          }
          v = std::move(parsed);
        }
        return true;
      }
      auto plain = base::unseal(key, body, kLegacyFieldAad);
      if (!plain.ok()) {
        err = "sealed " + where + " of " + owner + ": " + plain.status().message();
        return false;
      }
      v = plain.value();
      return true;
    }
    if (v.is_array()) {
      size_t i = 0;
      for (auto& x : v.get_array()) {
        path.push_back(std::to_string(i++));
        all = open(x) && all;
        path.pop_back();
      }
    } else if (v.is_object()) {
      for (auto& kv : v.get_object()) {
        path.emplace_back(kv.key());
        all = open(kv.value()) && all;
        path.pop_back();
      }
    }
    return all;
  }
};

OpRecord read_op(SQLite::Statement& st) {
  OpRecord r;
  r.id = text(st, 0);
  r.instance_id = text(st, 1);
  r.operation = text(st, 2);
  r.state = parse_op_state(text(st, 3)).value_or(OpState::kFailed);
  r.machine_digest = text(st, 4);
  r.package_digest = text(st, 5);
  r.request = parse_or_null(text(st, 6));
  r.error = parse_or_null(text(st, 7));
  r.cursor = parse_or_null(text(st, 8));
  r.owner = text(st, 9);
  r.cancel_requested = st.getColumn(10).getInt() != 0;
  r.wake_at_ms = st.getColumn(11).getInt64();
  r.created_ms = st.getColumn(12).getInt64();
  r.updated_ms = st.getColumn(13).getInt64();
  return r;
}

PackageRecord read_package(SQLite::Statement& st) {
  PackageRecord p;
  p.id = text(st, 0);
  p.digest = text(st, 1);
  p.name = text(st, 2);
  p.provider = text(st, 3);
  p.product = text(st, 4);
  p.version = text(st, 5);
  p.vnfd_id = text(st, 6);
  p.onboarded_ms = st.getColumn(7).getInt64();
  return p;
}

InstanceRecord read_instance(SQLite::Statement& st) {
  InstanceRecord r;
  r.id = text(st, 0);
  r.package_id = text(st, 1);
  r.name = text(st, 2);
  r.instantiation_state = text(st, 3);
  r.record = parse_or_null(text(st, 4));
  r.created_ms = st.getColumn(5).getInt64();
  return r;
}

constexpr const char* kRunning =
    "(state = 'STARTING' OR state = 'PROCESSING' OR state = 'ROLLING_BACK')";
constexpr const char* kOpen =
    "(state = 'STARTING' OR state = 'PROCESSING' OR state = 'FAILED_TEMP' OR state = "
    "'ROLLING_BACK')";

class SqliteStore : public Store {
 public:
  // `path` is the database's resolved path: its key file is named after it, so that an
  // alias (a symbolic or hard link) never gets a key of its own.
  explicit SqliteStore(const std::string& path)
      : key_path_(path + ".key"),
        w_(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_FULLMUTEX, 10000),
        r_(path, SQLite::OPEN_READWRITE | SQLite::OPEN_FULLMUTEX, 10000) {}

  base::Status init() {
    return guard([&] {
      w_.exec("PRAGMA journal_mode=WAL");
      w_.exec("PRAGMA synchronous=FULL");
      // A bigger page cache and fewer, larger checkpoints: group commits touch many ops
      // rows and event pages at once.
      w_.exec("PRAGMA cache_size=-32768");
      w_.exec("PRAGMA wal_autocheckpoint=4000");
      w_.exec("PRAGMA foreign_keys=ON");
      r_.exec("PRAGMA foreign_keys=ON");
      w_.exec("BEGIN IMMEDIATE");
      try {
        w_.exec(kSchema);
        SQLite::Statement q(w_, "SELECT value FROM meta WHERE key = 'schema_version'");
        if (q.executeStep()) {
          int v = std::stoi(q.getColumn(0).getString());
          if (v > kSchemaVersion) {
            w_.exec("ROLLBACK");
            return base::Status::FailedPrecondition(
                "the database was written by a newer vnflow (schema " + std::to_string(v) + ")");
          }
        } else {
          SQLite::Statement ins(w_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
          ins.bind(1, std::to_string(kSchemaVersion));
          ins.exec();
        }
        q.reset();
        base::Status ks = check_key();
        if (!ks.ok()) {
          w_.exec("ROLLBACK");
          return ks;
        }
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      upd_op_ = std::make_unique<SQLite::Statement>(
          w_,
          "UPDATE ops SET state = COALESCE(?2, state), cursor = COALESCE(?3, cursor),"
          " error = CASE WHEN ?4 THEN ?5 ELSE error END, wake_at_ms = COALESCE(?6, wake_at_ms),"
          " owner = COALESCE(?7, owner), updated_ms = ?8 WHERE id = ?1 AND " +
              std::string(kRunning));
      // Most commits change neither state nor owner: leave them out of the SET list so
      // that no index of ops is rewritten.
      upd_op_plain_ = std::make_unique<SQLite::Statement>(
          w_,
          "UPDATE ops SET cursor = COALESCE(?2, cursor),"
          " error = CASE WHEN ?3 THEN ?4 ELSE error END, wake_at_ms = COALESCE(?5, wake_at_ms),"
          " updated_ms = ?6 WHERE id = ?1 AND " +
              std::string(kRunning));
      ins_output_ = std::make_unique<SQLite::Statement>(
          w_, "INSERT OR REPLACE INTO outputs(op_id, state, value) VALUES(?, ?, ?)");
      ins_event_ = std::make_unique<SQLite::Statement>(
          w_,
          "INSERT INTO events(op_id, seq, at_ms, kind, state, item, attempt, key, data)"
          " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
      upd_inst_ = std::make_unique<SQLite::Statement>(
          w_, "UPDATE instances SET instantiation_state = ?2, record = ?3 WHERE id = ?1");
      return base::Status::Ok();
    });
  }

  base::Status apply(const std::vector<const Batch*>& batches) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      w_.exec("BEGIN IMMEDIATE");
      try {
        int64_t now = now_ms();
        for (const Batch* b : batches) {
          b->fenced = false;
          for (const auto& o : b->ops) {
            bool full = o.state || o.owner;
            auto& st = full ? *upd_op_ : *upd_op_plain_;
            st.reset();
            int i = 1;
            st.bind(i++, o.op_id);
            if (full) {
              if (o.state)
                st.bind(i++, std::string(to_string(*o.state)));
              else
                st.bind(i++);
            }
            if (o.cursor)
              st.bind(i++, sealed_text(*o.cursor, "op/" + o.op_id + "/cursor"));
            else
              st.bind(i++);
            st.bind(i++, o.set_error ? 1 : 0);
            bind_text_or_null(st, i++, o.error);
            if (o.wake_at_ms)
              st.bind(i++, static_cast<int64_t>(*o.wake_at_ms));
            else
              st.bind(i++);
            if (full) {
              if (o.owner)
                st.bind(i++, *o.owner);
              else
                st.bind(i++);
            }
            st.bind(i++, static_cast<int64_t>(now));
            if (st.exec() != 1) {
              // Fencing: an operation that is no longer active (an operator forced it to
              // FAILED) takes no write from an executor; the rest of the group commits.
              auto cur = get_op_locked(w_, o.op_id);
              if (!cur.ok())
                throw std::runtime_error("no operation " + o.op_id);
              b->fenced = true;
            }
          }
          if (b->fenced)
            continue;
          for (const auto& e : b->events) {
            auto& st = *ins_event_;
            st.reset();
            st.bind(1, e.op_id);
            st.bind(2, static_cast<int64_t>(e.seq));
            st.bind(3, static_cast<int64_t>(e.at_ms));
            st.bind(4, e.kind);
            bind_text_or_null(st, 5, e.state);
            if (e.item >= 0)
              st.bind(6, e.item);
            else
              st.bind(6);
            st.bind(7, e.attempt);
            bind_text_or_null(st, 8, e.key);
            if (e.data.is_null())
              st.bind(9);
            else
              st.bind(9, json::serialize(e.data));
            st.exec();
          }
          for (const auto& o : b->outputs) {
            auto& st = *ins_output_;
            st.reset();
            st.bind(1, o.op_id);
            st.bind(2, o.state);
            st.bind(3, o.secret ? sealed_whole(o.value, "op/" + o.op_id + "/output/" + o.state)
                                : sealed_text(o.value, "op/" + o.op_id + "/output/" + o.state));
            st.exec();
          }
          for (const auto& i : b->instances) {
            auto& st = *upd_inst_;
            st.reset();
            st.bind(1, i.instance_id);
            st.bind(2, i.instantiation_state);
            st.bind(3, sealed_text(i.record, "instance/" + i.instance_id));
            st.exec();
          }
        }
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      return base::Status::Ok();
    });
  }

  base::Result<PackageRecord> put_package(const PackageRecord& rec,
                                          const std::string& bytes) override {
    std::lock_guard<std::mutex> lock(wmu_);
    PackageRecord out;
    base::Status s = guard([&] {
      SQLite::Statement q(
          w_,
          "SELECT id, digest, name, provider, product, version, vnfd_id, onboarded_ms"
          " FROM packages WHERE digest = ?");
      q.bind(1, rec.digest);
      if (q.executeStep()) {
        out = read_package(q);
        return base::Status::Ok();
      }
      SQLite::Statement ins(w_,
                            "INSERT INTO packages(id, digest, name, provider, product, version,"
                            " vnfd_id, onboarded_ms, bytes) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
      ins.bind(1, rec.id);
      ins.bind(2, rec.digest);
      ins.bind(3, rec.name);
      ins.bind(4, rec.provider);
      ins.bind(5, rec.product);
      ins.bind(6, rec.version);
      ins.bind(7, rec.vnfd_id);
      ins.bind(8, static_cast<int64_t>(rec.onboarded_ms));
      ins.bind(9, bytes.data(), static_cast<int>(bytes.size()));
      ins.exec();
      out = rec;
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<PackageRecord> get_package(std::string_view id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    PackageRecord out;
    base::Status s = guard([&] {
      SQLite::Statement q(
          r_,
          "SELECT id, digest, name, provider, product, version, vnfd_id, onboarded_ms"
          " FROM packages WHERE id = ?1 OR digest = ?1");
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no package \"" + std::string(id) + "\"");
      out = read_package(q);
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<std::string> package_bytes(std::string_view id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::string out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_, "SELECT bytes FROM packages WHERE id = ?");
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no package \"" + std::string(id) + "\"");
      auto c = q.getColumn(0);
      out.assign(static_cast<const char*>(c.getBlob()), static_cast<size_t>(c.getBytes()));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<std::vector<PackageRecord>> list_packages() override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<PackageRecord> out;
    base::Status s = guard([&] {
      SQLite::Statement q(
          r_,
          "SELECT id, digest, name, provider, product, version, vnfd_id, onboarded_ms"
          " FROM packages ORDER BY onboarded_ms");
      while (q.executeStep())
        out.push_back(read_package(q));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Status create_instance(const InstanceRecord& rec) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      SQLite::Statement ins(w_,
                            "INSERT INTO instances(id, package_id, name, instantiation_state,"
                            " record, created_ms) VALUES(?, ?, ?, ?, ?, ?)");
      ins.bind(1, rec.id);
      ins.bind(2, rec.package_id);
      ins.bind(3, rec.name);
      ins.bind(4, rec.instantiation_state);
      ins.bind(5, sealed_text(rec.record, "instance/" + rec.id));
      ins.bind(6, static_cast<int64_t>(rec.created_ms));
      ins.exec();
      return base::Status::Ok();
    });
  }

  base::Result<InstanceRecord> get_instance(std::string_view id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    InstanceRecord out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_,
                          "SELECT id, package_id, name, instantiation_state, record, created_ms"
                          " FROM instances WHERE id = ?");
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no VNF instance \"" + std::string(id) + "\"");
      out = opened(read_instance(q));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<std::vector<InstanceRecord>> list_instances() override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<InstanceRecord> out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_,
                          "SELECT id, package_id, name, instantiation_state, record, created_ms"
                          " FROM instances ORDER BY created_ms");
      while (q.executeStep())
        out.push_back(opened(read_instance(q)));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Status delete_instance(std::string_view id) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      w_.exec("BEGIN IMMEDIATE");
      try {
        SQLite::Statement q(w_, "SELECT instantiation_state FROM instances WHERE id = ?");
        q.bind(1, std::string(id));
        if (!q.executeStep()) {
          w_.exec("ROLLBACK");
          return base::Status::NotFound("no VNF instance \"" + std::string(id) + "\"");
        }
        if (q.getColumn(0).getString() != "NOT_INSTANTIATED") {
          w_.exec("ROLLBACK");
          return base::Status::FailedPrecondition("VNF instance " + std::string(id) +
                                                  " is INSTANTIATED; terminate it first");
        }
        SQLite::Statement open(
            w_, std::string("SELECT id, state FROM ops WHERE instance_id = ? AND ") + kOpen);
        open.bind(1, std::string(id));
        if (open.executeStep()) {
          std::string msg = "VNF instance " + std::string(id) + " has operation " +
                            open.getColumn(0).getString() + " in " + open.getColumn(1).getString();
          w_.exec("ROLLBACK");
          return base::Status::FailedPrecondition(msg);
        }
        for (const char* sql :
             {"DELETE FROM events WHERE op_id IN (SELECT id FROM ops WHERE instance_id = ?)",
              "DELETE FROM outputs WHERE op_id IN (SELECT id FROM ops WHERE instance_id = ?)",
              "DELETE FROM ops WHERE instance_id = ?", "DELETE FROM instances WHERE id = ?"}) {
          SQLite::Statement d(w_, sql);
          d.bind(1, std::string(id));
          d.exec();
        }
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      return base::Status::Ok();
    });
  }

  base::Status put_machine(const std::string& digest, const std::string& body) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      SQLite::Statement ins(w_, "INSERT OR IGNORE INTO machines(digest, body) VALUES(?, ?)");
      ins.bind(1, digest);
      ins.bind(2, body);
      ins.exec();
      return base::Status::Ok();
    });
  }

  base::Result<std::string> get_machine(std::string_view digest) override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::string out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_, "SELECT body FROM machines WHERE digest = ?");
      q.bind(1, std::string(digest));
      if (!q.executeStep())
        return base::Status::NotFound("no stored machine " + std::string(digest));
      out = q.getColumn(0).getString();
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Status create_op(const OpRecord& rec) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      w_.exec("BEGIN IMMEDIATE");
      try {
        SQLite::Statement open(
            w_,
            std::string("SELECT id, state, operation FROM ops WHERE instance_id = ? AND ") + kOpen);
        open.bind(1, rec.instance_id);
        if (open.executeStep()) {
          std::string msg = "VNF instance " + rec.instance_id + " already has operation " +
                            open.getColumn(0).getString() + " (" + open.getColumn(2).getString() +
                            ") in " + open.getColumn(1).getString() +
                            "; one operation at a time per instance";
          w_.exec("ROLLBACK");
          return base::Status::FailedPrecondition(msg);
        }
        SQLite::Statement ins(w_, std::string("INSERT INTO ops(") + kOpColumns +
                                      ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, 0, ?, ?)");
        ins.bind(1, rec.id);
        ins.bind(2, rec.instance_id);
        ins.bind(3, rec.operation);
        ins.bind(4, std::string(to_string(rec.state)));
        ins.bind(5, rec.machine_digest);
        ins.bind(6, rec.package_digest);
        ins.bind(7, sealed_text(rec.request, "op/" + rec.id + "/request"));
        if (rec.error.is_null())
          ins.bind(8);
        else
          ins.bind(8, json::serialize(rec.error));
        if (rec.cursor.is_null())
          ins.bind(9);
        else
          ins.bind(9, sealed_text(rec.cursor, "op/" + rec.id + "/cursor"));
        ins.bind(10, static_cast<int64_t>(rec.created_ms));
        ins.bind(11, static_cast<int64_t>(rec.created_ms));
        ins.exec();
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      return base::Status::Ok();
    });
  }

  base::Result<OpRecord> get_op(std::string_view id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    return get_op_locked(r_, id);
  }

  base::Result<std::vector<OpRecord>> list_ops(const OpFilter& f) override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<OpRecord> out;
    base::Status s = guard([&] {
      std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE 1 = 1";
      if (!f.instance_id.empty())
        sql += " AND instance_id = ?1";
      if (f.state)
        sql += " AND state = ?2";
      sql += " ORDER BY created_ms DESC, id LIMIT ?3";
      SQLite::Statement q(r_, sql);
      if (!f.instance_id.empty())
        q.bind(1, f.instance_id);
      if (f.state)
        q.bind(2, std::string(to_string(*f.state)));
      q.bind(3, static_cast<int64_t>(f.limit));
      while (q.executeStep())
        out.push_back(opened(read_op(q)));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<OpRecord> transition(std::string_view id, const std::vector<OpState>& from,
                                    OpState to, const std::optional<std::string>& error) override {
    std::lock_guard<std::mutex> lock(wmu_);
    base::Status s = guard([&] {
      w_.exec("BEGIN IMMEDIATE");
      try {
        auto cur = get_op_locked(w_, id);
        if (!cur.ok()) {
          w_.exec("ROLLBACK");
          return cur.status();
        }
        bool allowed = false;
        std::string list;
        for (OpState f : from) {
          allowed = allowed || cur.value().state == f;
          list += (list.empty() ? "" : " or ") + std::string(to_string(f));
        }
        if (!allowed) {
          w_.exec("ROLLBACK");
          return base::Status::FailedPrecondition("operation " + std::string(id) + " is " +
                                                  std::string(to_string(cur.value().state)) +
                                                  "; this needs " + list);
        }
        SQLite::Statement u(
            w_,
            "UPDATE ops SET state = ?2, owner = NULL, cancel_requested = 0,"
            " updated_ms = ?3, error = CASE WHEN ?4 THEN ?5 ELSE error END WHERE id = ?1");
        u.bind(1, std::string(id));
        u.bind(2, std::string(to_string(to)));
        u.bind(3, static_cast<int64_t>(now_ms()));
        u.bind(4, error ? 1 : 0);
        if (error && !error->empty())
          u.bind(5, *error);
        else
          u.bind(5);
        u.exec();
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    std::lock_guard<std::mutex> rlock(rmu_);
    return get_op_locked(r_, id);
  }

  base::Status request_cancel(std::string_view id) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      SQLite::Statement u(w_,
                          "UPDATE ops SET cancel_requested = 1 WHERE id = ? AND (state = "
                          "'STARTING' OR state = 'PROCESSING')");
      u.bind(1, std::string(id));
      if (u.exec() == 1)
        return base::Status::Ok();
      auto cur = get_op_locked(w_, id);
      if (!cur.ok())
        return cur.status();
      return base::Status::FailedPrecondition(
          "operation " + std::string(id) + " is " + std::string(to_string(cur.value().state)) +
          "; only a STARTING or PROCESSING operation can be cancelled");
    });
  }

  base::Result<std::vector<OpRecord>> runnable(bool all) override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<OpRecord> out;
    base::Status s = guard([&] {
      std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE ";
      if (!all)
        sql += "owner IS NULL AND ";
      sql += kRunning;
      sql += " ORDER BY created_ms";
      SQLite::Statement q(r_, sql);
      while (q.executeStep())
        out.push_back(opened(read_op(q)));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<std::vector<std::string>> cancel_requests() override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<std::string> out;
    base::Status s = guard([&] {
      SQLite::Statement q(
          r_, std::string("SELECT id FROM ops WHERE cancel_requested = 1 AND ") + kRunning);
      while (q.executeStep())
        out.push_back(q.getColumn(0).getString());
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<json::object> outputs(std::string_view op_id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    json::object out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_, "SELECT state, value FROM outputs WHERE op_id = ?");
      q.bind(1, std::string(op_id));
      while (q.executeStep()) {
        std::string state = q.getColumn(0).getString();
        std::string owner = "op/" + std::string(op_id) + "/output/" + state;
        std::string t = q.getColumn(1).getString();
        json::value v;
        if (std::string_view(t).starts_with(kSealedPrefix)) {
          // A secret output, sealed whole. One that does not open stays sealed.
          v = t;
          auto k = key();
          if (k.ok() && t.compare(kSealedPrefix.size(), 3, "j1:") == 0) {
            auto plain = base::unseal(
                k.value(), std::string_view(t).substr(kSealedPrefix.size() + 3), owner + "#");
            if (plain.ok())
              v = parse_or_null(plain.value());
          }
        } else {
          v = parse_or_null(t);
          open_fields(v, owner);
        }
        out[state] = std::move(v);
      }
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Result<std::vector<EventRecord>> history(std::string_view op_id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<EventRecord> out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_,
                          "SELECT op_id, seq, at_ms, kind, state, item, attempt, key, data"
                          " FROM events WHERE op_id = ? ORDER BY seq");
      q.bind(1, std::string(op_id));
      while (q.executeStep()) {
        EventRecord e;
        e.op_id = text(q, 0);
        e.seq = q.getColumn(1).getInt64();
        e.at_ms = q.getColumn(2).getInt64();
        e.kind = text(q, 3);
        e.state = text(q, 4);
        e.item = q.getColumn(5).isNull() ? -1 : q.getColumn(5).getInt();
        e.attempt = q.getColumn(6).getInt();
        e.key = text(q, 7);
        e.data = parse_or_null(text(q, 8));
        out.push_back(std::move(e));
      }
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

 private:
  template <typename F>
  base::Status guard(F&& f) {
    try {
      return f();
    } catch (const SQLite::Exception& e) {
      int code = e.getErrorCode();
      if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return base::Status::Unavailable(std::string("database busy: ") + e.what());
      return base::Status::Internal(std::string("database: ") + e.what());
    } catch (const std::exception& e) {
      return base::Status::Internal(std::string("database: ") + e.what());
    }
  }

  // After a failed COMMIT (disk full, read-only file) SQLite has already rolled back: a
  // ROLLBACK would fail with "no transaction is active" and hide the real cause.
  void rollback_quietly() {
    try {
      if (!w_.getHandle() || sqlite3_get_autocommit(w_.getHandle()) == 0)
        w_.exec("ROLLBACK");
    } catch (...) {
    }
  }

  static void bind_text_or_null(SQLite::Statement& st, int i, const std::string& s) {
    if (s.empty())
      st.bind(i);
    else
      st.bind(i, s);
  }

  base::Result<OpRecord> get_op_locked(SQLite::Database& db, std::string_view id) {
    OpRecord out;
    base::Status s = guard([&] {
      SQLite::Statement q(db, std::string("SELECT ") + kOpColumns + " FROM ops WHERE id = ?");
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no operation \"" + std::string(id) + "\"");
      out = opened(read_op(q));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  // The sealing key, checked (or created for a new database) by init().
  base::Result<std::string> key() {
    std::lock_guard<std::mutex> l(kmu_);
    if (key_.empty())
      return base::Status::FailedPrecondition("no sealing key for " + key_path_);
    return key_;
  }

  // Called inside init's transaction. A database that has sealed anything records a check
  // value sealed with its key: from then on the key file must be there and must open it;
  // vnflow never makes a new key for such a database (a hook would otherwise receive
  // sealed text as a password, and every secret would be lost).
  base::Status check_key() {
    SQLite::Statement q(w_, "SELECT value FROM meta WHERE key = 'key_check'");
    std::string check;
    if (q.executeStep())
      check = q.getColumn(0).getString();
    q.reset();
    bool key_exists = ::access(key_path_.c_str(), F_OK) == 0;
    if (!key_exists && (!check.empty() || has_sealed_data()))
      return base::Status::FailedPrecondition(
          "the database holds sealed secrets but its key file " + key_path_ +
          " is missing; restore it (vnflow does not make a new key for a database with "
          "sealed data)");
    auto k = base::load_or_create_key(key_path_);
    if (!k.ok())
      return k.status();
    std::string next_path = key_path_ + ".new";
    bool next_exists = ::access(next_path.c_str(), F_OK) == 0;
    if (!check.empty()) {
      auto plain = base::unseal(k.value(), check, kKeyCheckText);
      if (!plain.ok() && next_exists) {
        // A rotation committed but did not rename its key into place: finish it.
        auto next = base::load_or_create_key(next_path);
        if (next.ok() && base::unseal(next.value(), check, kKeyCheckText).ok() &&
            ::rename(next_path.c_str(), key_path_.c_str()) == 0) {
          k = next;
          plain = base::unseal(k.value(), check, kKeyCheckText);
          next_exists = false;
        }
      }
      if (!plain.ok() || plain.value() != kKeyCheckText)
        return base::Status::PermissionDenied(
            "the key file " + key_path_ +
            " does not open this database's secrets (the key of another database?)");
      if (next_exists)
        ::unlink(next_path.c_str());  // a rotation that never committed
    } else {
      auto c = base::seal(k.value(), kKeyCheckText, kKeyCheckText);
      if (!c.ok())
        return c.status();
      SQLite::Statement ins(w_, "INSERT INTO meta(key, value) VALUES('key_check', ?)");
      ins.bind(1, c.value());
      ins.exec();
    }
    std::lock_guard<std::mutex> l(kmu_);
    key_ = k.value();
    return base::Status::Ok();
  }

  bool has_sealed_data() {
    SQLite::Statement q(
        w_,
        "SELECT EXISTS(SELECT 1 FROM vims) OR"
        " EXISTS(SELECT 1 FROM ops WHERE instr(request, 'vnflow-sealed:') > 0"
        "        OR instr(cursor, 'vnflow-sealed:') > 0) OR"
        " EXISTS(SELECT 1 FROM instances WHERE instr(record, 'vnflow-sealed:') > 0) OR"
        " EXISTS(SELECT 1 FROM outputs WHERE instr(value, 'vnflow-sealed:') > 0)");
    return q.executeStep() && q.getColumn(0).getInt() != 0;
  }

  // JSON text as stored: secret fields sealed, bound to `owner`. Throws (the write fails)
  // when sealing is impossible, rather than storing a secret in clear.
  std::string sealed_text(const std::string& text, const std::string& owner) {
    if (!may_hold_secret(text))
      return text;
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec)
      return text;
    auto k = key();
    if (!k.ok())
      throw std::runtime_error("cannot seal a secret field: " + k.status().message());
    SealWalk w{k.value(), owner, {}, {}};
    if (!w.seal(v))
      throw std::runtime_error("cannot seal a secret field: " + w.err);
    return json::serialize(v);
  }
  std::string sealed_text(const json::value& v, const std::string& owner) {
    return sealed_text(json::serialize(v), owner);
  }
  // A whole value sealed (a secret output): "vnflow-sealed:j1:..." as the column's text.
  std::string sealed_whole(const std::string& json_text, const std::string& owner) {
    auto k = key();
    if (!k.ok())
      throw std::runtime_error("cannot seal a secret output: " + k.status().message());
    auto c = base::seal(k.value(), json_text, owner + "#");
    if (!c.ok())
      throw std::runtime_error("cannot seal a secret output: " + c.status().message());
    return std::string(kSealedPrefix) + "j1:" + c.value();
  }

  static bool has_sealed(const json::value& v) {
    if (v.is_string())
      return v.get_string().starts_with(kSealedPrefix);
    if (v.is_array()) {
      for (const auto& x : v.get_array()) {
        if (has_sealed(x))
          return true;
      }
    } else if (v.is_object()) {
      for (const auto& kv : v.get_object()) {
        if (has_sealed(kv.value()))
          return true;
      }
    }
    return false;
  }
  // Opens the sealed values of a value read back. One that does not open (a value moved
  // from another record, a wrong key) stays sealed: the executor refuses to use it.
  void open_fields(json::value& v, const std::string& owner) {
    if (!has_sealed(v))
      return;
    auto k = key();
    if (!k.ok())
      return;
    SealWalk w{k.value(), owner, {}, {}};
    w.open(v);
  }
  OpRecord opened(OpRecord r) {
    open_fields(r.request, "op/" + r.id + "/request");
    open_fields(r.cursor, "op/" + r.id + "/cursor");
    return r;
  }
  InstanceRecord opened(InstanceRecord r) {
    open_fields(r.record, "instance/" + r.id);
    return r;
  }

  VimRecord read_vim(SQLite::Statement& q) {
    VimRecord v;
    v.id = text(q, 0);
    v.name = text(q, 1);
    v.type = text(q, 2);
    json::value sm = parse_or_null(text(q, 3));
    if (sm.is_object())
      v.summary = sm.get_object();
    json::value ex = parse_or_null(text(q, 5));
    if (ex.is_object())
      v.extra = ex.get_object();
    v.is_default = q.getColumn(6).getInt() != 0;
    v.created_ms = q.getColumn(7).getInt64();
    return v;
  }

 public:
  base::Status put_vim(const VimRecord& rec) override {
    auto k = key();
    if (!k.ok())
      return k.status();
    auto sealed = base::seal(k.value(), json::serialize(rec.access), rec.id);
    if (!sealed.ok())
      return sealed.status();
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      SQLite::Transaction tx(w_);
      SQLite::Statement dup(w_, "SELECT id FROM vims WHERE name = ? AND id <> ?");
      dup.bind(1, rec.name);
      dup.bind(2, rec.id);
      if (dup.executeStep())
        return base::Status(
            base::StatusCode::kAlreadyExists,
            "a VIM named \"" + rec.name + "\" exists already (" + text(dup, 0) + ")");
      if (rec.is_default)
        w_.exec("UPDATE vims SET is_default = 0");
      SQLite::Statement ins(w_,
                            "INSERT OR REPLACE INTO vims(id, name, type, summary, sealed, extra,"
                            " is_default, created_ms) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
      ins.bind(1, rec.id);
      ins.bind(2, rec.name);
      ins.bind(3, rec.type);
      ins.bind(4, json::serialize(rec.summary));
      ins.bind(5, sealed.value());
      ins.bind(6, json::serialize(rec.extra));
      ins.bind(7, rec.is_default ? 1 : 0);
      ins.bind(8, static_cast<int64_t>(rec.created_ms));
      ins.exec();
      tx.commit();
      return base::Status::Ok();
    });
  }

  base::Result<VimRecord> get_vim(std::string_view id, bool with_secrets) override {
    VimRecord out;
    std::string sealed;
    {
      std::lock_guard<std::mutex> lock(rmu_);
      base::Status s = guard([&] {
        SQLite::Statement q(r_,
                            "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
                            " FROM vims WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1");
        q.bind(1, std::string(id));
        if (!q.executeStep())
          return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
        out = read_vim(q);
        sealed = text(q, 4);
        return base::Status::Ok();
      });
      if (!s.ok())
        return s;
    }
    if (with_secrets) {
      auto k = key();
      if (!k.ok())
        return k.status();
      auto plain = base::unseal(k.value(), sealed, out.id);
      if (!plain.ok())
        return base::Status::PermissionDenied("VIM \"" + out.id +
                                              "\": " + plain.status().message());
      json::value a = parse_or_null(plain.value());
      if (a.is_object())
        out.access = a.get_object();
    }
    return out;
  }

  base::Result<std::vector<VimRecord>> list_vims() override {
    std::lock_guard<std::mutex> lock(rmu_);
    std::vector<VimRecord> out;
    base::Status s = guard([&] {
      SQLite::Statement q(r_,
                          "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
                          " FROM vims ORDER BY created_ms, id");
      while (q.executeStep())
        out.push_back(read_vim(q));
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
    return out;
  }

  base::Status rotate_key() override {
    std::string next_path = key_path_ + ".new";
    ::unlink(next_path.c_str());
    auto next = base::load_or_create_key(next_path);
    if (!next.ok())
      return next.status();
    auto old_key = key();
    if (!old_key.ok())
      return old_key.status();
    const std::string& ok = old_key.value();
    const std::string& nk = next.value();
    std::lock_guard<std::mutex> lock(wmu_);
    base::Status st = guard([&] {
      w_.exec("BEGIN IMMEDIATE");
      try {
        // JSON texts: every sealed value opened with the old key, sealed with the new one.
        auto reseal_json = [&](const std::string& text, const std::string& owner,
                               std::string& out) -> base::Status {
          if (text.find(kSealedPrefix) == std::string::npos) {
            out = text;
            return base::Status::Ok();
          }
          if (std::string_view(text).starts_with(kSealedPrefix)) {  // sealed whole
            auto plain = base::unseal(ok, std::string_view(text).substr(kSealedPrefix.size() + 3),
                                      owner + "#");
            if (!plain.ok())
              return base::Status::FailedPrecondition(owner + " does not open with the key");
            auto c = base::seal(nk, plain.value(), owner + "#");
            if (!c.ok())
              return c.status();
            out = std::string(kSealedPrefix) + "j1:" + c.value();
            return base::Status::Ok();
          }
          boost::system::error_code ec;
          json::value v = json::parse(text, ec);
          if (ec)
            return base::Status::FailedPrecondition(owner + " is not JSON");
          SealWalk opener{ok, owner, {}, {}};
          if (!opener.open(v))
            return base::Status::FailedPrecondition(opener.err);
          SealWalk sealer{nk, owner, {}, {}};
          if (!sealer.seal(v))
            return base::Status::Internal(sealer.err);
          out = json::serialize(v);
          return base::Status::Ok();
        };
        struct Column {
          const char* select;
          const char* update;
          std::function<std::string(SQLite::Statement&)> owner;
        };
        std::vector<Column> columns = {
            {"SELECT id, request FROM ops", "UPDATE ops SET request = ?2 WHERE id = ?1",
             [](SQLite::Statement& q) { return "op/" + text(q, 0) + "/request"; }},
            {"SELECT id, cursor FROM ops WHERE cursor IS NOT NULL",
             "UPDATE ops SET cursor = ?2 WHERE id = ?1",
             [](SQLite::Statement& q) { return "op/" + text(q, 0) + "/cursor"; }},
            {"SELECT id, record FROM instances", "UPDATE instances SET record = ?2 WHERE id = ?1",
             [](SQLite::Statement& q) { return "instance/" + text(q, 0); }},
            {"SELECT op_id || char(31) || state, value FROM outputs",
             "UPDATE outputs SET value = ?2 WHERE op_id || char(31) || state = ?1",
             [](SQLite::Statement& q) {
               std::string k = text(q, 0);
               size_t sep = k.find('\x1f');
               return "op/" + k.substr(0, sep) + "/output/" + k.substr(sep + 1);
             }},
        };
        for (const auto& col : columns) {
          std::vector<std::pair<std::string, std::string>> changed;
          SQLite::Statement q(w_, col.select);
          while (q.executeStep()) {
            std::string t = text(q, 1), out;
            base::Status rs = reseal_json(t, col.owner(q), out);
            if (!rs.ok()) {
              rollback_quietly();
              return base::Status::FailedPrecondition("cannot rotate the key: " + rs.message());
            }
            if (out != t)
              changed.emplace_back(text(q, 0), std::move(out));
          }
          for (const auto& [id, value] : changed) {
            SQLite::Statement u(w_, col.update);
            u.bind(1, id);
            u.bind(2, value);
            u.exec();
          }
        }
        std::vector<std::pair<std::string, std::string>> vims;
        SQLite::Statement q(w_, "SELECT id, sealed FROM vims");
        while (q.executeStep()) {
          auto plain = base::unseal(ok, text(q, 1), text(q, 0));
          if (!plain.ok()) {
            rollback_quietly();
            return base::Status::FailedPrecondition("cannot rotate the key: VIM " + text(q, 0) +
                                                    " does not open with the key");
          }
          auto c = base::seal(nk, plain.value(), text(q, 0));
          if (!c.ok()) {
            rollback_quietly();
            return c.status();
          }
          vims.emplace_back(text(q, 0), c.value());
        }
        for (const auto& [id, sealed] : vims) {
          SQLite::Statement u(w_, "UPDATE vims SET sealed = ?2 WHERE id = ?1");
          u.bind(1, id);
          u.bind(2, sealed);
          u.exec();
        }
        auto check = base::seal(nk, kKeyCheckText, kKeyCheckText);
        if (!check.ok()) {
          rollback_quietly();
          return check.status();
        }
        SQLite::Statement u(w_, "UPDATE meta SET value = ? WHERE key = 'key_check'");
        u.bind(1, check.value());
        u.exec();
        w_.exec("COMMIT");
      } catch (...) {
        rollback_quietly();
        throw;
      }
      return base::Status::Ok();
    });
    if (!st.ok()) {
      ::unlink(next_path.c_str());
      return st;
    }
    // Committed: the new key goes into place (an interruption here is finished at the next
    // open, which finds the check value opening with the ".new" key).
    if (::rename(next_path.c_str(), key_path_.c_str()) != 0)
      return base::Status::Unavailable("the secrets are sealed with the new key, but " + next_path +
                                       " could not be renamed to " + key_path_ +
                                       "; the next start does it");
    std::lock_guard<std::mutex> l(kmu_);
    key_ = nk;
    return base::Status::Ok();
  }

  std::vector<std::string> private_files() const override {
    std::string db = key_path_.substr(0, key_path_.size() - 4);
    return {db, db + "-wal", db + "-shm", key_path_};
  }

  base::Status delete_vim(std::string_view id) override {
    std::lock_guard<std::mutex> lock(wmu_);
    return guard([&] {
      SQLite::Statement d(w_, "DELETE FROM vims WHERE id = ?");
      d.bind(1, std::string(id));
      if (d.exec() == 0)
        return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
      return base::Status::Ok();
    });
  }

 private:
  std::string key_path_;
  std::mutex kmu_;
  std::string key_;
  std::mutex wmu_, rmu_;
  SQLite::Database w_;
  SQLite::Database r_;
  std::unique_ptr<SQLite::Statement> upd_op_, upd_op_plain_, ins_output_, ins_event_, upd_inst_;
};

}  // namespace

base::Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  try {
    // The write connection creates the file and the schema before the reader opens it.
    { SQLite::Database create(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE, 10000); }
    std::error_code ec;
    std::string resolved = std::filesystem::canonical(path, ec).string();
    if (ec)
      return base::Status::Unavailable("cannot resolve database path \"" + path +
                                       "\": " + ec.message());
    // Two processes opening a new database at once can see SQLITE_BUSY without the busy
    // handler (switching to WAL needs the file to itself): try again for a while.
    base::Status st;
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto s = std::make_unique<SqliteStore>(resolved);
      st = s->init();
      if (st.ok())
        return std::unique_ptr<Store>(std::move(s));
      if (st.code() != base::StatusCode::kUnavailable)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * attempt));
    }
    return st;
  } catch (const std::exception& e) {
    return base::Status::Unavailable("cannot open database \"" + path + "\": " + e.what());
  }
}

}  // namespace engine
