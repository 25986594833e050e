// The SQLite Store (sqlite_store.h): opening a database, its schema, packages, instances and
// machines.
#include "engine/internal/sqlite_store.h"

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/statvfs.h>

#include "engine/engine.h"

namespace engine::internal {

namespace {

constexpr int kSchemaVersion = 7;

// The events table (schema 7): rows in commit order (`id`), found through the operation's
// number (`opn` = ops.num, given in creation order) by the index events_by_op. A group commit
// of P running operations then appends its events to the table's last pages and touches the
// index where the running operations' numbers sit together, instead of one page of a
// (op_id, seq)-keyed table per operation: 7x fewer bytes written per commit with 200 running
// operations (bench/engine_bench, concurrent).
#define EVENTS_COLUMNS                                                                      \
  "id INTEGER PRIMARY KEY, opn INTEGER NOT NULL, seq INTEGER NOT NULL,"                     \
  " at_ms INTEGER NOT NULL, kind TEXT NOT NULL, state TEXT, item INTEGER, attempt INTEGER," \
  " key TEXT, data TEXT, outputs TEXT, started_ms INTEGER"

// What refers to columns a migration adds: made once the migrations ran. The trigger
// numbers an operation inserted without a number (by a vnflow of schema 6 still running
// while a newer one migrated the file), so that its events can be written.
std::string schema_after_migrations() {
  return std::string(
             "CREATE UNIQUE INDEX IF NOT EXISTS ops_num ON ops(num);\n"
             "CREATE TRIGGER IF NOT EXISTS ops_number AFTER INSERT ON ops WHEN NEW.num IS NULL"
             " BEGIN UPDATE ops SET num = ") +
         kNextOpNum +
         " WHERE id = NEW.id; END;\n"
         "CREATE UNIQUE INDEX IF NOT EXISTS events_by_op ON events(opn, seq);\n";
}

constexpr const char* kSchema =
    R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS packages(
  id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, name TEXT, provider TEXT, product TEXT,
  version TEXT, vnfd_id TEXT, onboarded_ms INTEGER NOT NULL, bytes BLOB NOT NULL,
  onboarding_state TEXT NOT NULL DEFAULT 'ONBOARDED',
  operational_state TEXT NOT NULL DEFAULT 'ENABLED', user_data TEXT NOT NULL DEFAULT '{}',
  failure TEXT NOT NULL DEFAULT '', vnfd_version TEXT NOT NULL DEFAULT '');
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
  created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, num INTEGER);
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
CREATE TABLE IF NOT EXISTS events()SQL" EVENTS_COLUMNS R"SQL();
CREATE TABLE IF NOT EXISTS vims(
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
  summary TEXT NOT NULL, sealed TEXT NOT NULL, extra TEXT NOT NULL,
  is_default INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS subscriptions(
  id TEXT PRIMARY KEY, api TEXT NOT NULL, callback_uri TEXT NOT NULL, filter TEXT NOT NULL,
  auth_types TEXT NOT NULL, auth TEXT NOT NULL, verbosity TEXT NOT NULL,
  created_ms INTEGER NOT NULL, cursor_seq INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
  failing_since_ms INTEGER NOT NULL DEFAULT 0, next_attempt_ms INTEGER NOT NULL DEFAULT 0,
  failing INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '',
  delivered INTEGER NOT NULL DEFAULT 0, last_delivered_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS notices(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, at_ms INTEGER NOT NULL,
  kind TEXT NOT NULL, op_id TEXT, instance_id TEXT, package_id TEXT, operation TEXT, state TEXT,
  error TEXT, subject TEXT NOT NULL);
)SQL";

// The triggers that write the notices (engine.h, NoticeRecord) in the transaction of the
// change itself, whichever statement makes it; only while a subscription exists.
std::string notice_triggers() {
  const std::string id = "lower(hex(randomblob(16)))";
  const std::string now = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";
  const std::string any = "EXISTS (SELECT 1 FROM subscriptions)";
  // What filters match on: the instance `i`'s name and its package `p`'s identity.
  auto product = [](const std::string& p) {
    return "'vnfd_id', " + p + ".vnfd_id, 'provider', " + p + ".provider, 'product', " + p +
           ".product, 'software_version', " + p + ".version, 'vnfd_version', " + p +
           ".vnfd_version";
  };
  auto trigger = [&](const std::string& name, const std::string& on, const std::string& when,
                     const std::string& insert) {
    return "CREATE TRIGGER IF NOT EXISTS " + name + " " + on + " WHEN " + when + " " + any +
           " BEGIN " + insert + "; END;\n";
  };
  std::string out;
  // An operation entering a state.
  for (auto [name, on, when, at] :
       {std::tuple{"notice_op_created", "AFTER INSERT ON ops", "", "NEW.created_ms"},
        std::tuple{"notice_op_state", "AFTER UPDATE OF state ON ops", "NEW.state <> OLD.state AND",
                   "NEW.updated_ms"}}) {
    out += trigger(name, on, when,
                   "INSERT INTO notices(id, at_ms, kind, op_id, instance_id, package_id,"
                   " operation, state, error, subject) SELECT " +
                       id + ", " + at +
                       ", 'op', NEW.id, NEW.instance_id, i.package_id, NEW.operation, NEW.state,"
                       " NEW.error, json_object('instance_name', i.name, " +
                       product("p") +
                       ") FROM instances i LEFT JOIN packages p ON p.id = i.package_id"
                       " WHERE i.id = NEW.instance_id");
  }
  // An instance created or deleted.
  for (auto [name, on, row, kind, at] :
       {std::tuple{"notice_instance_created", "AFTER INSERT ON instances", "NEW",
                   "instance_created", std::string("NEW.created_ms")},
        std::tuple{"notice_instance_deleted", "BEFORE DELETE ON instances", "OLD",
                   "instance_deleted", now}}) {
    std::string r(row);
    out +=
        trigger(name, on, "",
                "INSERT INTO notices(id, at_ms, kind, instance_id, package_id, subject) SELECT " +
                    id + ", " + at + ", '" + kind + "', " + r + ".id, " + r +
                    ".package_id, json_object('instance_name', " + r + ".name, " + product("p") +
                    ") FROM (SELECT 1) LEFT JOIN packages p ON p.id = " + r + ".package_id");
  }
  // A package onboarded (stored onboarded by the CLI, or its upload done), its operational
  // state changed, an onboarded one deleted.
  const std::string in_use =
      "CASE WHEN EXISTS (SELECT 1 FROM instances WHERE package_id = NEW.id)"
      " THEN 'IN_USE' ELSE 'NOT_IN_USE' END";
  for (auto [name, on, when, row, kind, usage] :
       {std::tuple{"notice_package_stored", "AFTER INSERT ON packages",
                   "NEW.onboarding_state = 'ONBOARDED' AND", "NEW", "package_onboarded",
                   std::string("'NOT_IN_USE'")},
        std::tuple{"notice_package_onboarded", "AFTER UPDATE OF onboarding_state ON packages",
                   "NEW.onboarding_state = 'ONBOARDED' AND OLD.onboarding_state <> 'ONBOARDED' AND",
                   "NEW", "package_onboarded", in_use},
        // (An upload's UPDATE onboards and enables at once: the onboarding notice alone.)
        std::tuple{"notice_package_changed", "AFTER UPDATE OF operational_state ON packages",
                   "NEW.operational_state <> OLD.operational_state AND"
                   " NEW.onboarding_state = 'ONBOARDED' AND OLD.onboarding_state = 'ONBOARDED' AND",
                   "NEW", "package_changed", in_use},
        std::tuple{"notice_package_deleted", "BEFORE DELETE ON packages",
                   "OLD.onboarding_state = 'ONBOARDED' AND", "OLD", "package_deleted",
                   std::string("'NOT_IN_USE'")}}) {
    std::string r(row);
    out += trigger(name, on, when,
                   "INSERT INTO notices(id, at_ms, kind, package_id, state, subject) VALUES(" + id +
                       ", " + now + ", '" + kind + "', " + r + ".id, " + r +
                       ".operational_state, json_object(" + product(r) + ", 'operational_state', " +
                       r + ".operational_state, 'usage_state', " + usage + "))");
  }
  return out;
}

// A package without content yet keeps this in the digest column (NOT NULL UNIQUE since
// schema 1): never a SHA-256.
std::string stored_digest(const PackageRecord& p) {
  return p.digest.empty() ? "created:" + p.id : p.digest;
}

constexpr const char* kPackageColumns =
    "SELECT id, digest, name, provider, product, version, vnfd_id, onboarded_ms,"
    " onboarding_state, operational_state, user_data, failure, vnfd_version";

// Binds ?1..?12 and ?15 of an INSERT or UPDATE of packages to `p` (the columns' order in
// kPackageColumns; ?13 and ?14 are the statement's own).
void bind_package(SQLite::Statement& st, const PackageRecord& p) {
  int i = 0;
  for (const std::string* v :
       {&p.id, &p.digest, &p.name, &p.provider, &p.product, &p.version, &p.vnfd_id}) {
    ++i;
    st.bind(i, i == 2 ? stored_digest(p) : *v);
  }
  st.bind(8, static_cast<int64_t>(p.onboarded_ms));
  st.bind(9, p.onboarding_state);
  st.bind(10, p.operational_state);
  st.bind(11, p.user_data);
  st.bind(12, p.failure);
  st.bind(15, p.vnfd_version);
}

PackageRecord read_package(SQLite::Statement& st) {
  PackageRecord p;
  p.id = text(st, 0);
  p.digest = text(st, 1);
  if (p.digest.rfind("created:", 0) == 0)
    p.digest.clear();
  p.name = text(st, 2);
  p.provider = text(st, 3);
  p.product = text(st, 4);
  p.version = text(st, 5);
  p.vnfd_id = text(st, 6);
  p.onboarded_ms = st.getColumn(7).getInt64();
  p.onboarding_state = text(st, 8);
  p.operational_state = text(st, 9);
  p.user_data = text(st, 10);
  p.failure = text(st, 11);
  p.vnfd_version = text(st, 12);
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

}  // namespace

std::string text(SQLite::Statement& st, int i) {
  auto c = st.getColumn(i);
  return c.isNull() ? std::string() : c.getString();
}

// `path` is the database's resolved path: its key file is named after it, so that an
// alias (a symbolic or hard link) never gets a key of its own.
SqliteStore::SqliteStore(const std::string& path)
    : sealer_(path + ".key"),
      w_(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_FULLMUTEX, 10000),
      readers_(path, kReaders),
      checkpointer_(path) {}

Checkpointer::~Checkpointer() {
  stop();
}

void Checkpointer::attach(sqlite3* db) {
  attached_ = db;
  sqlite3_wal_hook(db, &Checkpointer::on_commit, this);
}

void Checkpointer::stop() {
  if (attached_ != nullptr) {
    sqlite3_wal_hook(attached_, nullptr, nullptr);
    attached_ = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

Checkpointer::Step Checkpointer::decide(int pages, int backfilled) {
  if (pages >= kInlinePages)
    return Step::kHere;
  if (pages < kBackgroundPages)
    return Step::kNone;
  if (backfilled > 0 && pages >= backfilled && pages - backfilled <= kCatchUpFrames)
    return Step::kHere;
  return Step::kThread;
}

int Checkpointer::on_commit(void* self, sqlite3* db, const char* name, int pages) {
  auto* c = static_cast<Checkpointer*>(self);
  int done = c->backfilled_;
  Step step = decide(pages, done);
  if (pages < kBackgroundPages && done != 0)
    c->backfilled_ = 0;  // the log restarted
  if (step == Step::kNone)
    return SQLITE_OK;
  if (step == Step::kHere) {
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    c->backfilled_ = 0;
    return SQLITE_OK;
  }
  std::lock_guard<std::mutex> lock(c->mu_);
  if (c->stopping_)
    return SQLITE_OK;
  c->wanted_ = true;
  if (!c->thread_.joinable()) {
    try {
      c->thread_ = std::thread([c] { c->run(); });
    } catch (const std::exception&) {
      // No thread: checkpoint here, as SQLite's automatic checkpoint would.
      c->wanted_ = false;
      sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      return SQLITE_OK;
    }
  }
  c->cv_.notify_one();
  return SQLITE_OK;
}

// The thread's connection, or null (then the writer's inline checkpoint at kInlinePages
// bounds the log until an open succeeds).
sqlite3* Checkpointer::open() {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
          SQLITE_OK ||
      // A connection checkpoints only once it has read the database (and so knows its log).
      sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) !=
          SQLITE_OK) {
    sqlite3_close(db);
    return nullptr;
  }
  return db;
}

void Checkpointer::run() {
  sqlite3* db = open();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return wanted_ || stopping_; });
    if (stopping_)
      break;
    wanted_ = false;
    lock.unlock();
    if (db == nullptr)
      db = open();  // it failed before: try again (a transient failure must not last)
    if (db != nullptr) {
      int log = 0, done = 0;
      if (sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done) ==
              SQLITE_OK &&
          log >= kBackgroundPages && done > 0)
        backfilled_ = done;
    }
    lock.lock();
  }
  lock.unlock();
  sqlite3_close(db);
}

// The write-ahead log written out (zeros) to the checkpointer's threshold, once per
// daemon start: SQLite appends each commit's frames to the log and syncs it, and while the
// log grows, that sync must also make its new length durable (a journal commit of the file
// system: 0.31-0.36 ms against 0.20 ms for a commit that overwrites frames within the file,
// bench/wal_reuse.py). A log the checkpointer restarts is overwritten in place
// from then on. journal_size_limit is twice the reserve: the frames written while a
// checkpoint runs grow the file once, not after every restart, and a large transaction
// leaves no longer file than that behind. Zeros beyond the log's valid frames are what SQLite
// itself leaves there (frames carry their salt and checksum), and they are written under
// the write lock, after whatever any process has committed. Skipped on a file system
// without ample room: a nearly full disk needs that space for the database.
base::Status SqliteStore::reserve_log() {
  if (!wal_)
    return base::Status::Ok();
  std::lock_guard lock(wmu_);
  return guard([&] {
    const int64_t page = w_.execAndGet("PRAGMA page_size").getInt64();
    const int64_t target = 32 + (page + 24) * Checkpointer::kBackgroundPages;
    w_.exec("PRAGMA journal_size_limit=" + std::to_string(2 * target));
    struct statvfs fs {};
    std::string dir = std::filesystem::path(db_file()).parent_path().string();
    if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) != 0 ||
        static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) < 16 * target)
      return base::Status::FailedPrecondition("the log is not reserved: less than " +
                                              std::to_string(16 * target >> 20) +
                                              " MiB free beside the database");
    w_.exec("BEGIN IMMEDIATE");  // the write lock: no process appends frames meanwhile
    base::Status out;
    try {
      sqlite3_file* f = nullptr;
      sqlite3_int64 size = 0;
      if (sqlite3_file_control(w_.getHandle(), "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) !=
              SQLITE_OK ||
          f == nullptr || f->pMethods == nullptr || f->pMethods->xFileSize(f, &size) != SQLITE_OK) {
        out = base::Status::Unavailable("the log is not reserved: its file is not open");
      } else if (size < target) {
        std::vector<char> zeros(64 << 10, 0);  // SQLite's unix VFS writes < 128 KiB a call
        for (sqlite3_int64 at = size; at < target && out.ok();) {
          int n = static_cast<int>(std::min<sqlite3_int64>(zeros.size(), target - at));
          if (int rc = f->pMethods->xWrite(f, zeros.data(), n, at); rc != SQLITE_OK)
            out = base::Status::Unavailable("the log is not reserved: " +
                                            std::string(sqlite3_errstr(rc)));
          at += n;
        }
        // Durable before the first commit relies on it; a log left part-written is as
        // harmless as one never reserved.
        if (out.ok() && f->pMethods->xSync(f, SQLITE_SYNC_NORMAL) != SQLITE_OK)
          out = base::Status::Unavailable("the log is not reserved: its sync failed");
      }
      w_.exec("COMMIT");
    } catch (...) {
      rollback_quietly();
      throw;
    }
    return out;
  });
}

base::Status SqliteStore::init() {
  return guard([&] {
    wal_ = w_.execAndGet("PRAGMA journal_mode=WAL").getString() == "wal";
    w_.exec("PRAGMA synchronous=FULL");
    // A bigger page cache and fewer, larger checkpoints, off the commit path (Checkpointer):
    // group commits touch many ops rows and event pages at once.
    w_.exec("PRAGMA cache_size=-32768");
    checkpointer_.attach(w_.getHandle());
    w_.exec("PRAGMA foreign_keys=ON");
    readers_.each([](SQLite::Database& db) { db.exec("PRAGMA foreign_keys=ON"); });
    w_.exec("BEGIN IMMEDIATE");
    try {
      w_.exec(kSchema);
      w_.exec(notice_triggers());
      SQLite::Statement q(w_, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (q.executeStep()) {
        int v = std::stoi(q.getColumn(0).getString());
        if (v > kSchemaVersion) {
          w_.exec("ROLLBACK");
          return base::Status::FailedPrecondition(
              "the database was written by a newer vnflow (schema " + std::to_string(v) + ")");
        }
        q.reset();
        // ALTER TABLE `table` ADD COLUMN `column` ("name TYPE ..."), unless it is there
        // (CREATE TABLE IF NOT EXISTS of a newer kSchema may have made it).
        auto add_column = [&](const std::string& table, const std::string& column) {
          SQLite::Statement has(w_, "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?");
          has.bind(1, table);
          has.bind(2, column.substr(0, column.find(' ')));
          if (has.executeStep() && has.getColumn(0).getInt() == 0)
            w_.exec("ALTER TABLE " + table + " ADD COLUMN " + column);
        };
        if (v < 2) {
          // 1 -> 2: a state's outputs ride on the event row committed with them
          // (events.outputs) instead of a row of their own in `outputs`.
          w_.exec("ALTER TABLE events ADD COLUMN outputs TEXT");
        }
        if (v < 3) {
          // 2 -> 3: SOL005 package states (every package so far was onboarded by the CLI:
          // ONBOARDED, ENABLED, its name as user data).
          for (const char* column :
               {"onboarding_state TEXT NOT NULL DEFAULT 'ONBOARDED'",
                "operational_state TEXT NOT NULL DEFAULT 'ENABLED'",
                "user_data TEXT NOT NULL DEFAULT '{}'", "failure TEXT NOT NULL DEFAULT ''"})
            add_column("packages", column);
          w_.exec(
              "UPDATE packages SET user_data = json_object('name', name)"
              " WHERE name IS NOT NULL AND user_data = '{}'");
        }
        if (v < 4) {
          // 3 -> 4: the VNFD's own version (SOL003/SOL005 vnfdVersion). Packages stored
          // before keep "" (the version is in their bytes, not read back here).
          add_column("packages", "vnfd_version TEXT NOT NULL DEFAULT ''");
        }
        if (v < 5) {
          // 4 -> 5: when a result's action call started (op show --timing).
          add_column("events", "started_ms INTEGER");
        }
        // 5 -> 6: subscriptions and notices, new tables and triggers (kSchema makes them).
        if (v < 7) {
          // 6 -> 7: operations get numbers in creation order, and events are kept in
          // commit order and found by that number (EVENTS_COLUMNS). Events of an operation
          // that no longer exists are not carried over (nothing could read them).
          add_column("ops", "num INTEGER");
          w_.exec(
              "UPDATE ops SET num = r.k FROM (SELECT id, ROW_NUMBER() OVER"
              " (ORDER BY created_ms, id) AS k FROM ops) AS r WHERE r.id = ops.id");
          w_.exec("CREATE TABLE events_v7(" EVENTS_COLUMNS ")");
          w_.exec(
              "INSERT INTO events_v7(opn, seq, at_ms, kind, state, item, attempt, key, data,"
              " outputs, started_ms) SELECT o.num, e.seq, e.at_ms, e.kind, e.state, e.item,"
              " e.attempt, e.key, e.data, e.outputs, e.started_ms FROM events e"
              " JOIN ops o ON o.id = e.op_id ORDER BY o.num, e.seq");
          w_.exec("DROP TABLE events");
          w_.exec("ALTER TABLE events_v7 RENAME TO events");
        }
        if (v < kSchemaVersion)
          w_.exec("UPDATE meta SET value = '" + std::to_string(kSchemaVersion) +
                  "' WHERE key = 'schema_version'");
      } else {
        SQLite::Statement ins(w_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
        ins.bind(1, std::to_string(kSchemaVersion));
        ins.exec();
      }
      q.reset();
      w_.exec(schema_after_migrations());
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
        "INSERT INTO events(opn, seq, at_ms, kind, state, item, attempt, key, data, outputs,"
        " started_ms) VALUES((SELECT num FROM ops WHERE id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
        " ?9, ?10, ?11)");
    upd_inst_ = std::make_unique<SQLite::Statement>(
        w_, "UPDATE instances SET instantiation_state = ?2, record = ?3 WHERE id = ?1");
    return base::Status::Ok();
  });
}

base::Result<PackageRecord> SqliteStore::put_package(const PackageRecord& rec,
                                                     const std::string& bytes) {
  std::lock_guard lock(wmu_);
  PackageRecord out;
  base::Status s = guard([&] {
    SQLite::Statement q(w_, std::string(kPackageColumns) + " FROM packages WHERE digest = ?");
    q.bind(1, stored_digest(rec));
    if (q.executeStep()) {
      out = read_package(q);
      return base::Status::Ok();
    }
    SQLite::Statement ins(w_,
                          "INSERT INTO packages(id, digest, name, provider, product, version,"
                          " vnfd_id, onboarded_ms, onboarding_state, operational_state,"
                          " user_data, failure, bytes, vnfd_version) VALUES(?1, ?2, ?3, ?4, ?5,"
                          " ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?15)");
    bind_package(ins, rec);
    ins.bind(13, bytes.data(), static_cast<int>(bytes.size()));
    ins.exec();
    out = rec;
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<PackageRecord> SqliteStore::get_package(std::string_view id) {
  auto rd = readers_.acquire();
  PackageRecord out;
  base::Status s = guard([&] {
    auto q_use =
        rd->q.prepare(std::string(kPackageColumns) + " FROM packages WHERE id = ?1 OR digest = ?1");
    SQLite::Statement& q = *q_use;
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

base::Result<std::string> SqliteStore::package_bytes(std::string_view id) {
  auto rd = readers_.acquire();
  std::string out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare("SELECT bytes FROM packages WHERE id = ?");
    SQLite::Statement& q = *q_use;
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

base::Result<std::vector<PackageRecord>> SqliteStore::list_packages() {
  auto rd = readers_.acquire();
  std::vector<PackageRecord> out;
  base::Status s = guard([&] {
    auto q_use =
        rd->q.prepare(std::string(kPackageColumns) + " FROM packages ORDER BY onboarded_ms");
    SQLite::Statement& q = *q_use;
    while (q.executeStep())
      out.push_back(read_package(q));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status SqliteStore::update_package(const PackageRecord& rec, const std::string* bytes,
                                         std::string_view expect_state) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      SQLite::Statement q(w_, "SELECT onboarding_state FROM packages WHERE id = ?");
      q.bind(1, rec.id);
      if (!q.executeStep()) {
        w_.exec("ROLLBACK");
        return base::Status::NotFound("no package \"" + rec.id + "\"");
      }
      if (q.getColumn(0).getString() != expect_state) {
        std::string now = q.getColumn(0).getString();
        w_.exec("ROLLBACK");
        return base::Status::FailedPrecondition("package " + rec.id + " is " + now + ", not " +
                                                std::string(expect_state));
      }
      SQLite::Statement dup(w_, "SELECT id FROM packages WHERE digest = ? AND id != ?");
      dup.bind(1, stored_digest(rec));
      dup.bind(2, rec.id);
      if (dup.executeStep()) {
        std::string other = dup.getColumn(0).getString();
        w_.exec("ROLLBACK");
        return base::Status{base::StatusCode::kAlreadyExists,
                            "the same package content is package " + other};
      }
      SQLite::Statement up(
          w_,
          "UPDATE packages SET digest = ?2, name = ?3, provider = ?4, product = ?5,"
          " version = ?6, vnfd_id = ?7, onboarded_ms = ?8, onboarding_state = ?9,"
          " operational_state = ?10, user_data = ?11, failure = ?12, vnfd_version = ?15,"
          " bytes = CASE WHEN ?13 THEN ?14 ELSE bytes END WHERE id = ?1");
      bind_package(up, rec);
      up.bind(13, bytes != nullptr ? 1 : 0);
      if (bytes != nullptr)
        up.bind(14, bytes->data(), static_cast<int>(bytes->size()));
      else
        up.bind(14);
      up.exec();
      w_.exec("COMMIT");
      return base::Status::Ok();
    } catch (...) {
      rollback_quietly();
      throw;
    }
  });
}

base::Status SqliteStore::delete_package(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      SQLite::Statement q(w_, "SELECT id FROM instances WHERE package_id = ? LIMIT 1");
      q.bind(1, std::string(id));
      if (q.executeStep()) {
        std::string inst = q.getColumn(0).getString();
        w_.exec("ROLLBACK");
        return base::Status::FailedPrecondition("package " + std::string(id) +
                                                " is in use by VNF instance " + inst);
      }
      SQLite::Statement del(w_, "DELETE FROM packages WHERE id = ?");
      del.bind(1, std::string(id));
      int n = del.exec();
      w_.exec("COMMIT");
      if (n == 0)
        return base::Status::NotFound("no package \"" + std::string(id) + "\"");
      return base::Status::Ok();
    } catch (...) {
      rollback_quietly();
      throw;
    }
  });
}

base::Status SqliteStore::create_instance(const InstanceRecord& rec) {
  std::lock_guard lock(wmu_);
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

base::Result<InstanceRecord> SqliteStore::get_instance(std::string_view id) {
  auto rd = readers_.acquire();
  InstanceRecord out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT id, package_id, name, instantiation_state, record, created_ms"
        " FROM instances WHERE id = ?");
    SQLite::Statement& q = *q_use;
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

base::Result<std::vector<InstanceRecord>> SqliteStore::list_instances() {
  auto rd = readers_.acquire();
  std::vector<InstanceRecord> out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT id, package_id, name, instantiation_state, record, created_ms"
        " FROM instances ORDER BY created_ms");
    SQLite::Statement& q = *q_use;
    while (q.executeStep())
      out.push_back(opened(read_instance(q)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status SqliteStore::delete_instance(std::string_view id) {
  std::lock_guard lock(wmu_);
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
           {"DELETE FROM events WHERE opn IN (SELECT num FROM ops WHERE instance_id = ?)",
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

base::Status SqliteStore::put_machine(const std::string& digest, const std::string& body) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement ins(w_, "INSERT OR IGNORE INTO machines(digest, body) VALUES(?, ?)");
    ins.bind(1, digest);
    ins.bind(2, body);
    ins.exec();
    return base::Status::Ok();
  });
}

base::Result<std::string> SqliteStore::get_machine(std::string_view digest) {
  auto rd = readers_.acquire();
  std::string out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare("SELECT body FROM machines WHERE digest = ?");
    SQLite::Statement& q = *q_use;
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

// After a failed COMMIT (disk full, read-only file) SQLite has already rolled back: a
// ROLLBACK would fail with "no transaction is active" and hide the real cause.
void SqliteStore::rollback_quietly() {
  try {
    if (!w_.getHandle() || sqlite3_get_autocommit(w_.getHandle()) == 0)
      w_.exec("ROLLBACK");
  } catch (...) {
  }
}

}  // namespace engine::internal

namespace engine {

base::Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  // Once per process, before its first connection (a daemon opens its store before it
  // starts threads): SQLite without its memory statistics, which take one process-wide
  // mutex at every allocation of every connection (the API's readers queued on it). A
  // process that used SQLite before keeps them (SQLITE_MISUSE, nothing changed).
  static std::once_flag once;
  std::call_once(once, [] {
    if (int rc = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); rc != SQLITE_OK)
      spdlog::debug("sqlite: memory statistics stay on (sqlite3_config: {})", rc);
  });
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
      auto s = std::make_unique<internal::SqliteStore>(resolved);
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
