// The PostgreSQL Store (pg_store.h): connections, the schema, packages, instances, machines,
// VIM records and key rotation.
#include "engine/internal/pg_store.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json.hpp>
#include <libpq-fe.h>

#include "engine/engine.h"
#include "engine/internal/sealing.h"

namespace engine::internal {

namespace {

constexpr int kSchemaVersion = 6;

// Advisory lock classes (the second key is the schema's hash, so that several vnflow schemas
// can share one database): the schema script, and the daemon of a database.
constexpr int kSchemaLock = 0x766e;
constexpr int kDaemonLock = 0x766f;

// The same concepts as the SQLite schema (docs/persistence.md). Partial indexes may use IN
// here: PostgreSQL has no temporary-table cost for it.
constexpr const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS packages(
  id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, name TEXT, provider TEXT, product TEXT,
  version TEXT, vnfd_id TEXT, onboarded_ms BIGINT NOT NULL, bytes BYTEA NOT NULL,
  onboarding_state TEXT NOT NULL DEFAULT 'ONBOARDED',
  operational_state TEXT NOT NULL DEFAULT 'ENABLED', user_data TEXT NOT NULL DEFAULT '{}',
  failure TEXT NOT NULL DEFAULT '', vnfd_version TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS instances(
  id TEXT PRIMARY KEY, package_id TEXT NOT NULL REFERENCES packages(id), name TEXT,
  instantiation_state TEXT NOT NULL, record TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS machines(digest TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ops(
  id TEXT PRIMARY KEY, instance_id TEXT NOT NULL REFERENCES instances(id),
  operation TEXT NOT NULL, state TEXT NOT NULL,
  machine TEXT NOT NULL REFERENCES machines(digest), package_digest TEXT NOT NULL,
  request TEXT NOT NULL, error TEXT, cursor TEXT, owner TEXT,
  cancel_requested SMALLINT NOT NULL DEFAULT 0, wake_at_ms BIGINT NOT NULL DEFAULT 0,
  created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, epoch BIGINT NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS ops_one_open ON ops(instance_id)
  WHERE state IN ('STARTING', 'PROCESSING', 'FAILED_TEMP', 'ROLLING_BACK');
CREATE INDEX IF NOT EXISTS ops_running ON ops(created_ms)
  WHERE state IN ('STARTING', 'PROCESSING', 'ROLLING_BACK');
CREATE INDEX IF NOT EXISTS ops_unclaimed ON ops(created_ms)
  WHERE owner IS NULL AND state IN ('STARTING', 'PROCESSING', 'ROLLING_BACK');
CREATE INDEX IF NOT EXISTS ops_cancel ON ops(id) WHERE cancel_requested = 1;
CREATE INDEX IF NOT EXISTS ops_by_instance ON ops(instance_id, created_ms);
CREATE TABLE IF NOT EXISTS outputs(
  op_id TEXT NOT NULL, state TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(op_id, state));
CREATE TABLE IF NOT EXISTS events(
  op_id TEXT NOT NULL, seq BIGINT NOT NULL, at_ms BIGINT NOT NULL, kind TEXT NOT NULL,
  state TEXT, item INTEGER, attempt INTEGER, key TEXT, data TEXT, owner TEXT,
  epoch BIGINT NOT NULL DEFAULT 0, started_ms BIGINT, PRIMARY KEY(op_id, seq));
CREATE TABLE IF NOT EXISTS daemons(
  name TEXT PRIMARY KEY, incarnation BIGINT NOT NULL, lease_until_ms BIGINT NOT NULL,
  host TEXT NOT NULL, pid BIGINT NOT NULL, started_ms BIGINT NOT NULL);
CREATE SEQUENCE IF NOT EXISTS op_epochs;
CREATE TABLE IF NOT EXISTS vims(
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
  summary TEXT NOT NULL, sealed TEXT NOT NULL, extra TEXT NOT NULL,
  is_default SMALLINT NOT NULL DEFAULT 0, created_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS subscriptions(
  id TEXT PRIMARY KEY, api TEXT NOT NULL, callback_uri TEXT NOT NULL, filter TEXT NOT NULL,
  auth_types TEXT NOT NULL, auth TEXT NOT NULL, verbosity TEXT NOT NULL,
  created_ms BIGINT NOT NULL, cursor_xid BIGINT NOT NULL, cursor_seq BIGINT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, failing_since_ms BIGINT NOT NULL DEFAULT 0,
  next_attempt_ms BIGINT NOT NULL DEFAULT 0, failing SMALLINT NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '', delivered BIGINT NOT NULL DEFAULT 0,
  last_delivered_ms BIGINT NOT NULL DEFAULT 0, sender TEXT NOT NULL DEFAULT '',
  sender_until_ms BIGINT NOT NULL DEFAULT 0);
-- A notice's xid is its transaction's: readers take only notices of transactions older than
-- every running one (pg_snapshot_xmin), in (xid, seq) order, so none appears behind them.
CREATE TABLE IF NOT EXISTS notices(
  seq BIGSERIAL PRIMARY KEY,
  xid BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
  id TEXT NOT NULL DEFAULT md5(random()::text || clock_timestamp()::text),
  at_ms BIGINT NOT NULL, kind TEXT NOT NULL, op_id TEXT, instance_id TEXT, package_id TEXT,
  operation TEXT, state TEXT, error TEXT, subject TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS notices_order ON notices(xid, seq);
-- The notices (engine.h, NoticeRecord), written in the transaction of the change itself,
-- whichever statement makes it; only while a subscription exists.
CREATE OR REPLACE FUNCTION vnflow_notice_op() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.state = OLD.state THEN RETURN NULL; END IF;
  IF NOT EXISTS (SELECT 1 FROM subscriptions) THEN RETURN NULL; END IF;
  INSERT INTO notices(at_ms, kind, op_id, instance_id, package_id, operation, state, error,
                      subject)
  SELECT CASE WHEN TG_OP = 'INSERT' THEN NEW.created_ms ELSE NEW.updated_ms END, 'op', NEW.id,
         NEW.instance_id, i.package_id, NEW.operation, NEW.state, NEW.error,
         json_build_object('instance_name', i.name, 'vnfd_id', p.vnfd_id,
                           'provider', p.provider, 'product', p.product,
                           'software_version', p.version, 'vnfd_version', p.vnfd_version)::text
  FROM instances i LEFT JOIN packages p ON p.id = i.package_id WHERE i.id = NEW.instance_id;
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER notice_op AFTER INSERT OR UPDATE OF state ON ops
  FOR EACH ROW EXECUTE FUNCTION vnflow_notice_op();
CREATE OR REPLACE FUNCTION vnflow_notice_instance() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r instances%ROWTYPE;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM subscriptions) THEN RETURN NULL; END IF;
  IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
  INSERT INTO notices(at_ms, kind, instance_id, package_id, subject)
  SELECT CASE WHEN TG_OP = 'INSERT' THEN r.created_ms
              ELSE (extract(epoch FROM clock_timestamp()) * 1000)::bigint END,
         CASE WHEN TG_OP = 'INSERT' THEN 'instance_created' ELSE 'instance_deleted' END,
         r.id, r.package_id,
         json_build_object('instance_name', r.name, 'vnfd_id', p.vnfd_id,
                           'provider', p.provider, 'product', p.product,
                           'software_version', p.version, 'vnfd_version', p.vnfd_version)::text
  FROM (SELECT 1) one LEFT JOIN packages p ON p.id = r.package_id;
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER notice_instance AFTER INSERT OR DELETE ON instances
  FOR EACH ROW EXECUTE FUNCTION vnflow_notice_instance();
CREATE OR REPLACE FUNCTION vnflow_notice_package() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r packages%ROWTYPE; k TEXT;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM subscriptions) THEN RETURN NULL; END IF;
  IF TG_OP = 'DELETE' THEN
    r := OLD;
    IF r.onboarding_state <> 'ONBOARDED' THEN RETURN NULL; END IF;
    k := 'package_deleted';
  ELSE
    r := NEW;
    IF r.onboarding_state <> 'ONBOARDED' THEN RETURN NULL; END IF;
    IF TG_OP = 'INSERT' OR OLD.onboarding_state <> 'ONBOARDED' THEN
      k := 'package_onboarded';
    ELSIF NEW.operational_state <> OLD.operational_state THEN
      k := 'package_changed';
    ELSE
      RETURN NULL;
    END IF;
  END IF;
  INSERT INTO notices(at_ms, kind, package_id, state, subject)
  VALUES((extract(epoch FROM clock_timestamp()) * 1000)::bigint, k, r.id, r.operational_state,
         json_build_object('vnfd_id', r.vnfd_id, 'provider', r.provider, 'product', r.product,
                           'software_version', r.version, 'vnfd_version', r.vnfd_version,
                           'operational_state', r.operational_state, 'usage_state',
                           CASE WHEN TG_OP <> 'DELETE' AND EXISTS
                                  (SELECT 1 FROM instances WHERE package_id = r.id)
                                THEN 'IN_USE' ELSE 'NOT_IN_USE' END)::text);
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER notice_package AFTER INSERT OR DELETE OR UPDATE ON packages
  FOR EACH ROW EXECUTE FUNCTION vnflow_notice_package();
)SQL";

constexpr const char* kPackageColumns =
    "id, digest, name, provider, product, version, vnfd_id, onboarded_ms, onboarding_state,"
    " operational_state, user_data, failure, vnfd_version";

// A package without content yet keeps this in the digest column (NOT NULL UNIQUE since
// schema 1): never a SHA-256.
std::string stored_digest(const PackageRecord& p) {
  return p.digest.empty() ? "created:" + p.id : p.digest;
}
constexpr const char* kInstanceColumns =
    "id, package_id, name, instantiation_state, record, created_ms";
constexpr const char* kVimColumns =
    "id, name, type, summary, sealed, extra, is_default, created_ms";

PackageRecord read_package(const PgResult& q, int row) {
  PackageRecord p;
  p.id = q.text(row, 0);
  p.digest = q.text(row, 1);
  if (p.digest.rfind("created:", 0) == 0)
    p.digest.clear();
  p.name = q.text(row, 2);
  p.provider = q.text(row, 3);
  p.product = q.text(row, 4);
  p.version = q.text(row, 5);
  p.vnfd_id = q.text(row, 6);
  p.onboarded_ms = q.i64(row, 7);
  p.onboarding_state = q.text(row, 8);
  p.operational_state = q.text(row, 9);
  p.user_data = q.text(row, 10);
  p.failure = q.text(row, 11);
  p.vnfd_version = q.text(row, 12);
  return p;
}

InstanceRecord read_instance(const PgResult& q, int row) {
  InstanceRecord r;
  r.id = q.text(row, 0);
  r.package_id = q.text(row, 1);
  r.name = q.text(row, 2);
  r.instantiation_state = q.text(row, 3);
  r.record = parse_or_null(q.text(row, 4));
  r.created_ms = q.i64(row, 5);
  return r;
}

VimRecord read_vim(const PgResult& q, int row) {
  VimRecord v;
  v.id = q.text(row, 0);
  v.name = q.text(row, 1);
  v.type = q.text(row, 2);
  json::value sm = parse_or_null(q.text(row, 3));
  if (sm.is_object())
    v.summary = sm.get_object();
  json::value ex = parse_or_null(q.text(row, 5));
  if (ex.is_object())
    v.extra = ex.get_object();
  v.is_default = q.i64(row, 6) != 0;
  v.created_ms = q.i64(row, 7);
  return v;
}

void no_notices(void*, const char*) {}

}  // namespace

// ---------------------------------------------------------------------------------------
// PgConn

PgConn::~PgConn() {
  if (c_ != nullptr)
    pq().PQfinish(c_);
}

void PgConn::ensure() {
  if (c_ != nullptr && pq().PQstatus(c_) == CONNECTION_OK)
    return;
  if (c_ != nullptr)
    pq().PQfinish(c_);
  prepared_.clear();
  if (const std::string& why = load_libpq(); !why.empty())
    throw PgError("cannot connect to " + display_ + ": " + why, "", false);
  // The URL's own settings win over these defaults (later keywords override earlier ones).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "vnflow", conninfo_.c_str(), nullptr};
  c_ = pq().PQconnectdbParams(keys, values, 1);
  if (c_ == nullptr)
    throw PgError("cannot connect to " + display_ + ": out of memory", "", true);
  if (pq().PQstatus(c_) != CONNECTION_OK) {
    std::string msg = pq().PQerrorMessage(c_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
      msg.pop_back();
    pq().PQfinish(c_);
    c_ = nullptr;
    throw PgError("cannot connect to " + display_ + ": " + msg, "", true);
  }
  pq().PQsetNoticeProcessor(c_, &no_notices, nullptr);
  if (on_connect) {
    try {
      on_connect(*this);
    } catch (...) {
      pq().PQfinish(c_);  // never left connected without what on_connect sets up
      c_ = nullptr;
      throw;
    }
  }
}

void PgConn::fail(PGresult* r, const std::string& what) {
  std::string state, msg;
  if (r != nullptr) {
    const char* s = pq().PQresultErrorField(r, PG_DIAG_SQLSTATE);
    state = s != nullptr ? s : "";
    msg = pq().PQresultErrorMessage(r);
    pq().PQclear(r);
  }
  if (msg.empty())
    msg = pq().PQerrorMessage(c_);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
    msg.pop_back();
  bool lost = pq().PQstatus(c_) != CONNECTION_OK;
  throw PgError(what + ": " + msg, state, lost);
}

PgResult PgConn::run(const std::string& sql, const std::vector<PgArg>& args, bool binary_result) {
  ensure();
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    std::string name = "s" + std::to_string(prepared_.size());
    PGresult* p =
        pq().PQprepare(c_, name.c_str(), sql.c_str(), static_cast<int>(args.size()), nullptr);
    if (p == nullptr || pq().PQresultStatus(p) != PGRES_COMMAND_OK)
      fail(p, "prepare");
    pq().PQclear(p);
    it = prepared_.emplace(sql, std::move(name)).first;
  }
  std::vector<const char*> values(args.size());
  std::vector<int> lengths(args.size()), formats(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    values[i] = args[i].value ? args[i].value->data() : nullptr;
    lengths[i] = args[i].value ? static_cast<int>(args[i].value->size()) : 0;
    formats[i] = args[i].binary ? 1 : 0;
  }
  PGresult* r =
      pq().PQexecPrepared(c_, it->second.c_str(), static_cast<int>(args.size()), values.data(),
                          lengths.data(), formats.data(), binary_result ? 1 : 0);
  ExecStatusType st = r != nullptr ? pq().PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    fail(r, "statement");
  return PgResult(r);
}

void PgConn::exec(const char* sql) {
  ensure();
  PGresult* r = pq().PQexec(c_, sql);
  if (r == nullptr ||
      (pq().PQresultStatus(r) != PGRES_COMMAND_OK && pq().PQresultStatus(r) != PGRES_TUPLES_OK))
    fail(r, std::string(sql).substr(0, 20));
  pq().PQclear(r);
}

int PgConn::take_notifies() {
  if (c_ == nullptr)
    throw PgError("not connected to " + display_, "", true);
  if (pq().PQconsumeInput(c_) == 0) {
    pq().PQfinish(c_);
    c_ = nullptr;
    prepared_.clear();
    throw PgError("lost the connection to " + display_, "", true);
  }
  int n = 0;
  while (PGnotify* note = pq().PQnotifies(c_)) {
    pq().PQfreemem(note);
    ++n;
  }
  return n;
}

void PgConn::rollback_quietly() {
  if (c_ == nullptr || pq().PQstatus(c_) != CONNECTION_OK ||
      pq().PQtransactionStatus(c_) == PQTRANS_IDLE)
    return;
  pq().PQclear(pq().PQexec(c_, "ROLLBACK"));
}

// ---------------------------------------------------------------------------------------
// PgStore: opening and the schema

PgStore::PgStore(const std::string& url, const std::string& key_path, DbLock lock)
    : display_(display_db(url)),
      sealer_(key_path),
      w_(url, display_),
      r_(url, display_),
      url_(url) {
  // The lock lives in the write connection's session: every commit goes through that
  // connection, so none happens without it (a reconnect takes it again, or fails).
  // Daemons share it; a key rotation takes it alone.
  // The server ends a closed session a moment after its client has gone, so the lock of
  // a process that just stopped (a restart) may still be held: asked again for up to 2 s.
  lock_ = lock;
  w_.on_connect = [this](PgConn& c) {
    if (lock_ != DbLock::kNone)
      take_lock(c);
    bound_statements(c);
  };
  r_.on_connect = [](PgConn& c) { bound_statements(c); };
}

void PgStore::bound_statements(PgConn& c) {
  const int64_t ms = [] {
    const char* v = std::getenv("VNFLOW_PG_STATEMENT_TIMEOUT_MS");
    char* end = nullptr;
    long long n = v != nullptr ? std::strtoll(v, &end, 10) : 0;
    return v != nullptr && *v != '\0' && *end == '\0' && n >= 100 && n <= 86400000
               ? static_cast<int64_t>(n)
               : int64_t{kStatementTimeoutMs};
  }();
  // One round trip; a value from the URL, the role, the database or the server's own
  // configuration (any source but the built-in default) is kept, 0 included.
  c.exec(("SELECT set_config('statement_timeout', '" + std::to_string(ms) +
          "', false) FROM pg_settings WHERE name = 'statement_timeout' AND source = 'default'")
             .c_str());
}

void PgStore::take_lock(PgConn& c) {
  bool alone = lock_ == DbLock::kAlone;
  for (int attempt = 0;; ++attempt) {
    auto q = c.run(alone ? "SELECT pg_try_advisory_lock($1::int, hashtext(current_schema()))"
                         : "SELECT pg_try_advisory_lock_shared($1::int,"
                           " hashtext(current_schema()))",
                   {kDaemonLock});
    if (q.text(0, 0) == "t")
      return;
    if (attempt == 20)
      throw PgError(alone ? "a daemon is running on " + display_
                          : "the key of " + display_ + " is being rotated",
                    kRefused, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

base::Status PgStore::init() {
  return transaction(w_, [&] { return init_schema(); });
}

// Inside init's transaction, under the schema lock: concurrent opens of a new database wait
// for each other (CREATE ... IF NOT EXISTS is not safe against itself in PostgreSQL).
base::Status PgStore::init_schema() {
  // A current database gets no DDL: CREATE INDEX IF NOT EXISTS takes a SHARE lock on its
  // table before it finds the index there, so every open (every CLI command) would wait
  // for the daemons' open transactions and hold up their next ones behind it.
  if (w_.run("SELECT to_regclass('meta') IS NOT NULL").text(0, 0) == "t" &&
      w_.run("SELECT 1 FROM meta WHERE key = 'schema_version' AND value = $1",
             {std::to_string(kSchemaVersion)})
              .rows() > 0)
    return settle_key();
  w_.exec("SET LOCAL statement_timeout = 0");  // a migration may take its time
  w_.run("SELECT pg_advisory_xact_lock($1::int, hashtext(current_schema()))", {kSchemaLock});
  w_.exec(kSchema);
  auto q = w_.run("SELECT value FROM meta WHERE key = 'schema_version'");
  if (q.rows() > 0) {
    int v = std::atoi(q.text(0, 0).c_str());
    if (v > kSchemaVersion)
      return base::Status::FailedPrecondition(
          "the database was written by a newer vnflow (schema " + std::to_string(v) + ")");
    if (v < 2) {
      // 1 -> 2: SOL005 package states (every package so far was onboarded by the CLI:
      // ONBOARDED, ENABLED, its name as user data).
      w_.exec(
          "ALTER TABLE packages ADD COLUMN IF NOT EXISTS onboarding_state TEXT NOT NULL"
          " DEFAULT 'ONBOARDED';"
          "ALTER TABLE packages ADD COLUMN IF NOT EXISTS operational_state TEXT NOT NULL"
          " DEFAULT 'ENABLED';"
          "ALTER TABLE packages ADD COLUMN IF NOT EXISTS user_data TEXT NOT NULL DEFAULT '{}';"
          "ALTER TABLE packages ADD COLUMN IF NOT EXISTS failure TEXT NOT NULL DEFAULT '';"
          "UPDATE packages SET user_data = json_build_object('name', name)::text"
          " WHERE name IS NOT NULL AND user_data = '{}';");
    }
    if (v < 3) {
      // 2 -> 3: leases (many daemons): the claim epoch of each operation, and who committed
      // each event under which epoch. The daemons table and the sequence are in kSchema.
      w_.exec(
          "ALTER TABLE ops ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0;"
          "ALTER TABLE events ADD COLUMN IF NOT EXISTS owner TEXT;"
          "ALTER TABLE events ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0;");
    }
    if (v < 4) {
      // 3 -> 4: the VNFD's own version (vnfdVersion); packages stored before keep "".
      w_.exec(
          "ALTER TABLE packages ADD COLUMN IF NOT EXISTS vnfd_version TEXT NOT NULL DEFAULT ''");
    }
    if (v < 5) {
      // 4 -> 5: when a result's action call started (op show --timing).
      w_.exec("ALTER TABLE events ADD COLUMN IF NOT EXISTS started_ms BIGINT");
    }
    // 5 -> 6: subscriptions and notices, new tables, functions and triggers (kSchema).
    if (v < kSchemaVersion)
      w_.run("UPDATE meta SET value = $1 WHERE key = 'schema_version'",
             {std::to_string(kSchemaVersion)});
  } else {
    w_.run("INSERT INTO meta(key, value) VALUES('schema_version', $1)",
           {std::to_string(kSchemaVersion)});
  }
  return settle_key();
}

// The key file against meta.key_check (sealing.h): created, checked, or an interrupted
// rotation finished.
base::Status PgStore::settle_key() {
  auto c = w_.run("SELECT value FROM meta WHERE key = 'key_check'");
  std::string check = c.rows() > 0 ? c.text(0, 0) : "";
  auto settled = sealer_.settle(check, [&] { return has_sealed_data(); });
  if (!settled.ok())
    return settled.status();
  if (!settled.value().empty())
    w_.run("INSERT INTO meta(key, value) VALUES('key_check', $1)", {settled.value()});
  return base::Status::Ok();
}

bool PgStore::has_sealed_data() {
  return w_.run(has_sealed_sql()).text(0, 0) == "t";
}

// ---------------------------------------------------------------------------------------
// Packages, instances, machines

base::Result<PackageRecord> PgStore::put_package(const PackageRecord& rec,
                                                 const std::string& bytes) {
  std::lock_guard lock(wmu_);
  PackageRecord out;
  base::Status s = guard(w_, [&] {
    // Stored once per digest, also when two processes onboard it at the same moment.
    w_.run(
        "INSERT INTO packages(id, digest, name, provider, product, version, vnfd_id,"
        " onboarded_ms, bytes, onboarding_state, operational_state, user_data, failure,"
        " vnfd_version) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        " ON CONFLICT (digest) DO NOTHING",
        {rec.id, stored_digest(rec), rec.name, rec.provider, rec.product, rec.version, rec.vnfd_id,
         rec.onboarded_ms, PgArg::bytes(bytes), rec.onboarding_state, rec.operational_state,
         rec.user_data, rec.failure, rec.vnfd_version});
    auto q = w_.run(std::string("SELECT ") + kPackageColumns + " FROM packages WHERE digest = $1",
                    {stored_digest(rec)});
    if (q.rows() == 0)
      return base::Status::Internal("package " + rec.digest + " vanished while onboarded");
    out = read_package(q, 0);
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<PackageRecord> PgStore::get_package(std::string_view id) {
  std::lock_guard<std::mutex> lock(rmu_);
  PackageRecord out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(
        std::string("SELECT ") + kPackageColumns + " FROM packages WHERE id = $1 OR digest = $1",
        {id});
    if (q.rows() == 0)
      return base::Status::NotFound("no package \"" + std::string(id) + "\"");
    out = read_package(q, 0);
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::string> PgStore::package_bytes(std::string_view id) {
  std::lock_guard<std::mutex> lock(rmu_);
  std::string out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run("SELECT bytes FROM packages WHERE id = $1", {id}, /*binary_result=*/true);
    if (q.rows() == 0)
      return base::Status::NotFound("no package \"" + std::string(id) + "\"");
    out = q.text(0, 0);
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<PackageRecord>> PgStore::list_packages() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<PackageRecord> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT ") + kPackageColumns +
                    " FROM packages ORDER BY onboarded_ms, id");
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(read_package(q, i));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status PgStore::update_package(const PackageRecord& rec, const std::string* bytes,
                                     std::string_view expect_state) {
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    auto q = w_.run("SELECT onboarding_state FROM packages WHERE id = $1 FOR UPDATE", {rec.id});
    if (q.rows() == 0)
      return base::Status::NotFound("no package \"" + rec.id + "\"");
    if (q.text(0, 0) != expect_state)
      return base::Status::FailedPrecondition("package " + rec.id + " is " + q.text(0, 0) +
                                              ", not " + std::string(expect_state));
    auto dup = w_.run("SELECT id FROM packages WHERE digest = $1 AND id <> $2",
                      {stored_digest(rec), rec.id});
    if (dup.rows() > 0)
      return base::Status{base::StatusCode::kAlreadyExists,
                          "the same package content is package " + dup.text(0, 0)};
    w_.run(
        "UPDATE packages SET digest = $2, name = $3, provider = $4, product = $5, version = $6,"
        " vnfd_id = $7, onboarded_ms = $8, onboarding_state = $9, operational_state = $10,"
        " user_data = $11, failure = $12, bytes = COALESCE($13, bytes), vnfd_version = $14"
        " WHERE id = $1",
        {rec.id, stored_digest(rec), rec.name, rec.provider, rec.product, rec.version, rec.vnfd_id,
         rec.onboarded_ms, rec.onboarding_state, rec.operational_state, rec.user_data, rec.failure,
         bytes != nullptr ? PgArg::bytes(*bytes) : PgArg(std::nullopt), rec.vnfd_version});
    return base::Status::Ok();
  });
}

base::Status PgStore::delete_package(std::string_view id) {
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    auto q = w_.run("SELECT id FROM packages WHERE id = $1 FOR UPDATE", {id});
    if (q.rows() == 0)
      return base::Status::NotFound("no package \"" + std::string(id) + "\"");
    auto inst = w_.run("SELECT id FROM instances WHERE package_id = $1 LIMIT 1", {id});
    if (inst.rows() > 0)
      return base::Status::FailedPrecondition("package " + std::string(id) +
                                              " is in use by VNF instance " + inst.text(0, 0));
    w_.run("DELETE FROM packages WHERE id = $1", {id});
    return base::Status::Ok();
  });
}

base::Status PgStore::create_instance(const InstanceRecord& rec) {
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    w_.run(
        "INSERT INTO instances(id, package_id, name, instantiation_state, record, created_ms)"
        " VALUES($1, $2, $3, $4, $5, $6)",
        {rec.id, rec.package_id, rec.name, rec.instantiation_state,
         sealer_.sealed_text(rec.record, "instance/" + rec.id), rec.created_ms});
    return base::Status::Ok();
  });
}

base::Result<InstanceRecord> PgStore::get_instance(std::string_view id) {
  std::lock_guard<std::mutex> lock(rmu_);
  InstanceRecord out;
  base::Status s = guard(r_, [&] {
    auto q =
        r_.run(std::string("SELECT ") + kInstanceColumns + " FROM instances WHERE id = $1", {id});
    if (q.rows() == 0)
      return base::Status::NotFound("no VNF instance \"" + std::string(id) + "\"");
    out = sealer_.opened(read_instance(q, 0));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<InstanceRecord>> PgStore::list_instances() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<InstanceRecord> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT ") + kInstanceColumns +
                    " FROM instances ORDER BY created_ms, id");
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(sealer_.opened(read_instance(q, i)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status PgStore::delete_instance(std::string_view id) {
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    // The instance's row lock orders this against create_op of the same instance.
    auto q = w_.run("SELECT instantiation_state FROM instances WHERE id = $1 FOR UPDATE", {id});
    if (q.rows() == 0)
      return base::Status::NotFound("no VNF instance \"" + std::string(id) + "\"");
    if (q.text(0, 0) != "NOT_INSTANTIATED")
      return base::Status::FailedPrecondition("VNF instance " + std::string(id) +
                                              " is INSTANTIATED; terminate it first");
    auto open = w_.run(
        "SELECT id, state FROM ops WHERE instance_id = $1 AND state IN ('STARTING',"
        " 'PROCESSING', 'FAILED_TEMP', 'ROLLING_BACK')",
        {id});
    if (open.rows() > 0)
      return base::Status::FailedPrecondition("VNF instance " + std::string(id) +
                                              " has operation " + open.text(0, 0) + " in " +
                                              open.text(0, 1));
    for (const char* sql :
         {"DELETE FROM events WHERE op_id IN (SELECT id FROM ops WHERE instance_id = $1)",
          "DELETE FROM outputs WHERE op_id IN (SELECT id FROM ops WHERE instance_id = $1)",
          "DELETE FROM ops WHERE instance_id = $1", "DELETE FROM instances WHERE id = $1"})
      w_.run(sql, {id});
    return base::Status::Ok();
  });
}

base::Status PgStore::put_machine(const std::string& digest, const std::string& body) {
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    w_.run("INSERT INTO machines(digest, body) VALUES($1, $2) ON CONFLICT (digest) DO NOTHING",
           {digest, body});
    return base::Status::Ok();
  });
}

base::Result<std::string> PgStore::get_machine(std::string_view digest) {
  std::lock_guard<std::mutex> lock(rmu_);
  std::string out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run("SELECT body FROM machines WHERE digest = $1", {digest});
    if (q.rows() == 0)
      return base::Status::NotFound("no stored machine " + std::string(digest));
    out = q.text(0, 0);
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

// ---------------------------------------------------------------------------------------
// VIMs and the key

base::Status PgStore::put_vim(const VimRecord& rec) {
  auto sealed = sealer_.seal_vim(rec.access, rec.id);
  if (!sealed.ok())
    return sealed.status();
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    // One writer of vims at a time: the name check and the default flag hold across daemons.
    w_.exec("LOCK TABLE vims IN SHARE ROW EXCLUSIVE MODE");
    auto dup = w_.run("SELECT id FROM vims WHERE name = $1 AND id <> $2", {rec.name, rec.id});
    if (dup.rows() > 0)
      return base::Status(
          base::StatusCode::kAlreadyExists,
          "a VIM named \"" + rec.name + "\" exists already (" + dup.text(0, 0) + ")");
    if (rec.is_default)
      w_.exec("UPDATE vims SET is_default = 0 WHERE is_default <> 0");
    w_.run(
        "INSERT INTO vims(id, name, type, summary, sealed, extra, is_default, created_ms)"
        " VALUES($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO UPDATE SET"
        " name = EXCLUDED.name, type = EXCLUDED.type, summary = EXCLUDED.summary,"
        " sealed = EXCLUDED.sealed, extra = EXCLUDED.extra, is_default = EXCLUDED.is_default,"
        " created_ms = EXCLUDED.created_ms",
        {rec.id, rec.name, rec.type, json::serialize(rec.summary), sealed.value(),
         json::serialize(rec.extra), rec.is_default ? 1 : 0, rec.created_ms});
    return base::Status::Ok();
  });
}

base::Result<VimRecord> PgStore::get_vim(std::string_view id, bool with_secrets) {
  VimRecord out;
  std::string sealed;
  {
    std::lock_guard<std::mutex> lock(rmu_);
    base::Status s = guard(r_, [&] {
      auto q = r_.run(std::string("SELECT ") + kVimColumns +
                          " FROM vims WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1",
                      {id});
      if (q.rows() == 0)
        return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
      out = read_vim(q, 0);
      sealed = q.text(0, 4);
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
  }
  if (with_secrets) {
    auto access = sealer_.open_vim(sealed, out.id);
    if (!access.ok())
      return access.status();
    out.access = std::move(access).value();
  }
  return out;
}

base::Result<std::vector<VimRecord>> PgStore::list_vims() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<VimRecord> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT ") + kVimColumns + " FROM vims ORDER BY created_ms, id");
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(read_vim(q, i));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status PgStore::delete_vim(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    if (w_.run("DELETE FROM vims WHERE id = $1", {id}).affected() == 0)
      return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
    return base::Status::Ok();
  });
}

base::Status PgStore::rotate_key() {
  if (base::Status s = sealer_.begin_rotation(); !s.ok())
    return s;
  std::lock_guard lock(wmu_);
  base::Status st = transaction(w_, [&]() -> base::Status {
    // Every sealed value is read and rewritten in this transaction: nothing else writes them
    // meanwhile (the rows are locked by the updates, the tables by this lock). Every row is
    // read at once: without the statement timeout.
    w_.exec("SET LOCAL statement_timeout = 0");
    w_.exec("LOCK TABLE ops, instances, outputs, vims, meta IN SHARE ROW EXCLUSIVE MODE");
    base::Status rs = sealer_.reseal_columns(
        [](int n) { return "$" + std::to_string(n); },
        [&](const std::string& sql) {
          auto q = w_.run(sql);
          std::vector<std::pair<std::string, std::string>> rows;
          for (int i = 0; i < q.rows(); ++i)
            rows.emplace_back(q.text(i, 0), q.text(i, 1));
          return rows;
        },
        [&](const std::string& sql, const std::string& key, const std::string& text) {
          w_.run(sql, {key, text});
        });
    if (!rs.ok())
      return rs;
    auto q = w_.run("SELECT id, sealed FROM vims");
    for (int i = 0; i < q.rows(); ++i) {
      std::string out;
      base::Status vs = sealer_.reseal_vim(q.text(i, 1), q.text(i, 0), out);
      if (!vs.ok())
        return base::Status::FailedPrecondition("cannot rotate the key: " + vs.message());
      w_.run("UPDATE vims SET sealed = $2 WHERE id = $1", {q.text(i, 0), out});
    }
    auto check = sealer_.next_check();
    if (!check.ok())
      return check.status();
    w_.run("UPDATE meta SET value = $1 WHERE key = 'key_check'", {check.value()});
    return base::Status::Ok();
  });
  if (!st.ok()) {
    sealer_.abort_rotation();
    return st;
  }
  return sealer_.finish_rotation();
}

std::vector<std::string> PgStore::private_files() const {
  return {sealer_.key_path()};
}

}  // namespace engine::internal

namespace engine {

bool is_postgres_url(std::string_view db) {
  return db.starts_with("postgresql://") || db.starts_with("postgres://");
}

std::string display_db(std::string_view db) {
  if (!is_postgres_url(db))
    return std::string(db);
  std::string out(db);
  // postgresql://user:PASSWORD@host/...: the user info ends at the last '@' before the path.
  size_t start = out.find("://") + 3;
  size_t end = out.find_first_of("/?", start);
  size_t at = out.rfind('@', end == std::string::npos ? out.size() : end);
  if (at != std::string::npos && at >= start) {
    size_t colon = out.find(':', start);
    if (colon != std::string::npos && colon < at)
      out.replace(colon + 1, at - colon - 1, "***");
  }
  // ...?password=PASSWORD&...
  for (size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p + 1)) {
    size_t v = p + 9;
    size_t e = out.find('&', v);
    out.replace(v, (e == std::string::npos ? out.size() : e) - v, "***");
  }
  return out;
}

base::Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url,
                                                         const std::string& key_path, DbLock lock) {
  if (!is_postgres_url(url))
    return base::Status::InvalidArgument("not a PostgreSQL URL: " + display_db(url));
  if (const std::string& why = internal::load_libpq(); !why.empty())
    return base::Status::FailedPrecondition(why);
  auto s = std::make_unique<internal::PgStore>(url, key_path, lock);
  base::Status st = s->init();
  if (!st.ok())
    return st;
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace engine
