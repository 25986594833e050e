// The PostgreSQL Store (libpq): the same tables, rules and sealing as the SQLite store, on a
// database several processes can reach. A write connection (the executor's group commits and
// commands that write) and a read connection (polls, histories, views), each behind a mutex.
// Every statement is prepared once per connection and takes its values as parameters: no
// value is ever spliced into SQL text.
//
// Engine-internal: open_postgres_store (engine.h) is the way in. The class is defined in:
//   pg_store.cpp    connections, the schema, packages, instances, machines, VIMs, key rotation
//   pg_ops.cpp      the executor's commits, operations, outputs and events, leases
//   pg_notices.cpp  subscriptions and the notices the triggers write
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/internal/libpq.h"
#include "engine/internal/sealing.h"

namespace engine::internal {

// A failed statement: its SQLSTATE ("" when the connection itself failed; kRefused when
// vnflow itself refused, e.g. another daemon holds the database).
inline constexpr const char* kRefused = "vnflow-refused";
// The writer's and the reader's statement_timeout when nothing set one (a value from the
// URL's options, the role, the database or the server's configuration wins, 0 included): a
// statement stuck on a lock that another session holds gives up with kUnavailable instead of
// holding the API's request, a CLI command or the daemon's commits for ever. A migration at open
// runs without it. VNFLOW_PG_STATEMENT_TIMEOUT_MS (100 or more) replaces the default.
inline constexpr int kStatementTimeoutMs = 30000;

class PgError : public std::runtime_error {
 public:
  PgError(std::string msg, std::string state, bool lost)
      : std::runtime_error(std::move(msg)), sqlstate(std::move(state)), connection_lost(lost) {}
  std::string sqlstate;
  bool connection_lost;
};

// One statement parameter: text, bytes (bytea, sent binary) or NULL.
struct PgArg {
  PgArg(std::nullopt_t) {}                                      // NOLINT: NULL
  PgArg(std::string s) : value(std::move(s)) {}                 // NOLINT
  PgArg(std::string_view s) : value(std::string(s)) {}          // NOLINT
  PgArg(const char* s) : value(std::string(s)) {}               // NOLINT
  PgArg(int64_t v) : value(std::to_string(v)) {}                // NOLINT
  PgArg(int v) : value(std::to_string(v)) {}                    // NOLINT
  PgArg(std::optional<std::string> s) : value(std::move(s)) {}  // NOLINT
  static PgArg bytes(std::string s) {
    PgArg a(std::move(s));
    a.binary = true;
    return a;
  }
  std::optional<std::string> value;
  bool binary = false;
};

class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r, pq().PQclear) {}
  int rows() const { return pq().PQntuples(r_.get()); }
  bool null(int row, int col) const { return pq().PQgetisnull(r_.get(), row, col) != 0; }
  std::string text(int row, int col) const {
    return std::string(pq().PQgetvalue(r_.get(), row, col),
                       static_cast<size_t>(pq().PQgetlength(r_.get(), row, col)));
  }
  int64_t i64(int row, int col) const {
    return null(row, col) ? 0 : std::strtoll(pq().PQgetvalue(r_.get(), row, col), nullptr, 10);
  }
  int64_t affected() const { return std::strtoll(pq().PQcmdTuples(r_.get()), nullptr, 10); }

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> r_;
};

// One connection. Reconnects (and prepares its statements again) when it was lost.
class PgConn {
 public:
  PgConn(std::string conninfo, std::string display) noexcept
      : conninfo_(std::move(conninfo)), display_(std::move(display)) {}
  ~PgConn();
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  // Connects when not connected; runs `on_connect` after each new connection.
  void ensure();
  // Runs `sql` (prepared on this connection the first time) with `args`.
  PgResult run(const std::string& sql, const std::vector<PgArg>& args = {},
               bool binary_result = false);
  // A statement without parameters (BEGIN, COMMIT, the schema script).
  void exec(const char* sql);
  void rollback_quietly();
  // Called after each (re)connection, e.g. to take the daemon lock again.
  std::function<void(PgConn&)> on_connect;

  // For a listening connection (PgListener): connected now; its socket; the notifications
  // that arrived (read from the socket without waiting), dropped and counted. A connection
  // lost meanwhile throws (connection_lost) and is connected again by the next ensure().
  bool connected() const { return c_ != nullptr && pq().PQstatus(c_) == CONNECTION_OK; }
  int socket() const { return c_ != nullptr ? pq().PQsocket(c_) : -1; }
  int take_notifies();

 private:
  [[noreturn]] void fail(PGresult* r, const std::string& what);

  std::string conninfo_, display_;
  PGconn* c_ = nullptr;
  std::unordered_map<std::string, std::string> prepared_;  // SQL text -> statement name
};

// The channels a commit notifies (pg_notify, delivered when it commits) and listeners
// LISTEN on: one pair per schema, so databases in schemas of one PostgreSQL database do not
// wake each other. kQueueChannel: work for the daemons (an operation created, resumed by an
// operator, cancelled, let go by a daemon). kChangeChannel: an operation settled, or was
// created or moved by an operator (what `op wait` waits for). The SQL computes the name from
// current_schema(); the listener reads it back once per connection.
inline constexpr const char* kQueueChannel = "'vnflow_q_' || to_hex(hashtext(current_schema()))";
inline constexpr const char* kChangeChannel = "'vnflow_c_' || to_hex(hashtext(current_schema()))";

// A connection that LISTENs on one of those channels (pg_listen.cpp); thread-safe.
class PgListener {
 public:
  // `channel_sql`: kQueueChannel or kChangeChannel.
  PgListener(const std::string& url, const std::string& display, const char* channel_sql);
  // true when a notification arrived before `at_most` passed, or when something may have
  // been missed: a new connection (the first call, and the first after a lost one). false
  // when the time passed quietly, also while the server cannot be reached (after sleeping
  // `at_most`: the caller's timed reads go on and report the outage).
  bool wait(std::chrono::milliseconds at_most);

 private:
  std::mutex mu_;
  PgConn conn_;
};

class PgStore : public Store {
 public:
  PgStore(const std::string& url, const std::string& key_path, DbLock lock);
  base::Status init();

  // pg_store.cpp
  base::Result<PackageRecord> put_package(const PackageRecord& rec,
                                          const std::string& bytes) override;
  base::Result<PackageRecord> get_package(std::string_view id) override;
  base::Result<std::string> package_bytes(std::string_view id) override;
  base::Result<std::vector<PackageRecord>> list_packages() override;
  base::Status update_package(const PackageRecord& rec, const std::string* bytes,
                              std::string_view expect_state) override;
  base::Status delete_package(std::string_view id) override;
  base::Status create_instance(const InstanceRecord& rec) override;
  base::Result<InstanceRecord> get_instance(std::string_view id) override;
  base::Result<std::vector<InstanceRecord>> list_instances() override;
  base::Status delete_instance(std::string_view id) override;
  base::Status put_machine(const std::string& digest, const std::string& body) override;
  base::Result<std::string> get_machine(std::string_view digest) override;
  base::Status put_vim(const VimRecord& rec) override;
  base::Result<VimRecord> get_vim(std::string_view id, bool with_secrets) override;
  base::Result<std::vector<VimRecord>> list_vims() override;
  base::Status delete_vim(std::string_view id) override;
  base::Status rotate_key() override;
  std::vector<std::string> private_files() const override;

  // pg_ops.cpp
  base::Status apply(const std::vector<const Batch*>& batches) override;
  base::Status create_op(const OpRecord& rec) override;
  base::Result<OpRecord> get_op(std::string_view id) override;
  base::Result<std::vector<OpRecord>> list_ops(const OpFilter& f) override;
  base::Result<std::vector<OpCount>> count_ops() override;
  base::Result<OpRecord> transition(std::string_view id, const std::vector<OpState>& from,
                                    OpState to, const std::optional<std::string>& error) override;
  base::Status request_cancel(std::string_view id) override;
  base::Result<std::vector<OpRecord>> runnable(bool all) override;
  base::Result<std::vector<std::string>> cancel_requests() override;
  base::Result<json::object> outputs(std::string_view op_id) override;
  base::Result<std::vector<EventRecord>> history(std::string_view op_id) override;
  base::Result<Lease> register_daemon(const std::string& name, int64_t ttl_ms) override;
  base::Status renew(const Lease& lease) override;
  void release(const Lease& lease) override;
  base::Result<std::vector<OpRecord>> claim(const Lease& lease, bool first, size_t limit) override;
  // pg_notices.cpp
  base::Status put_subscription(const SubscriptionRecord& rec) override;
  base::Result<SubscriptionRecord> get_subscription(std::string_view id,
                                                    bool with_secrets) override;
  base::Result<std::vector<SubscriptionRecord>> list_subscriptions(bool with_secrets) override;
  base::Status delete_subscription(std::string_view id) override;
  base::Status record_delivery(const SubscriptionRecord& rec) override;
  base::Result<std::vector<NoticeRecord>> notices_after(const NoticeCursor& after,
                                                        size_t limit) override;
  base::Result<int64_t> prune_notices() override;
  base::Result<std::vector<std::string>> due_subscriptions(int64_t now) override;
  base::Result<bool> claim_subscription(std::string_view id, const std::string& owner,
                                        int64_t ttl_ms) override;

  // pg_listen.cpp: LISTEN/NOTIFY instead of polling.
  void wait_for_change(std::chrono::milliseconds at_most) override;
  WorkSignal wait_for_work(std::chrono::milliseconds at_most) override;

 private:
  // Runs `f` on `conn` (connected first), turning libpq's failures into a Status: a lost
  // connection, a serialization failure or a deadlock is kUnavailable (try again).
  template <typename F>
  base::Status guard(PgConn& conn, F&& f) {
    try {
      conn.ensure();
      return f();
    } catch (const PgError& e) {
      if (e.sqlstate == kRefused)
        return base::Status::FailedPrecondition(e.what());
      if (e.connection_lost || e.sqlstate == "40001" || e.sqlstate == "40P01" ||
          e.sqlstate.starts_with("08") || e.sqlstate.starts_with("57P"))
        return base::Status::Unavailable(std::string("database unavailable: ") + e.what());
      // The statement timeout (kStatementTimeoutMs) or a lock timeout: busy, try again.
      if (e.sqlstate == "57014" || e.sqlstate == "55P03")
        return base::Status::Unavailable(std::string("database busy: ") + e.what());
      return base::Status::Internal(std::string("database: ") + e.what());
    } catch (const std::exception& e) {
      return base::Status::Internal(std::string("database: ") + e.what());
    }
  }
  // Runs `f` inside BEGIN ... COMMIT on `conn`; rolled back when `f` returns an error or
  // throws.
  template <typename F>
  base::Status transaction(PgConn& conn, F&& f) {
    return guard(conn, [&] {
      conn.exec("BEGIN");
      try {
        base::Status s = f();
        if (!s.ok()) {
          conn.rollback_quietly();
          return s;
        }
        conn.exec("COMMIT");
        return s;
      } catch (...) {
        conn.rollback_quietly();
        throw;
      }
    });
  }

  // pg_store.cpp
  base::Status init_schema();
  // Takes the database's lock (lock_: shared for a daemon, alone for a key rotation) in
  // `c`'s session, asking for up to 2 s; throws PgError (kRefused) when it is not given.
  void take_lock(PgConn& c);
  // Sets kStatementTimeoutMs on a new session whose statement_timeout nothing set.
  static void bound_statements(PgConn& c);
  base::Status settle_key();
  bool has_sealed_data();
  // pg_ops.cpp
  base::Result<OpRecord> get_op_on(PgConn& conn, std::string_view id);
  // `slot`'s connection, made at its first use: its statements give up after `limit_ms`
  // (100 at least), and with `with_lock` its session holds a daemon's shared lock as the
  // writer's does. Under the caller's mutex for `slot`.
  PgConn& side_conn(std::unique_ptr<PgConn>& slot, int64_t limit_ms, bool with_lock);
  // apply, one statement per row (a group that writes an operation twice, or one write, or
  // creates one).
  base::Status apply_rows(const std::vector<const Batch*>& batches);
  // In the writer's open transaction: inserts `rec`, or returns why not (no such instance:
  // kNotFound; its operation that is not final: kFailedPrecondition), writing nothing.
  // create_op and apply's Batch::create.
  base::Status insert_op(const OpRecord& rec);

  std::string display_;  // the URL without its password
  std::string daemon_;   // the registered daemon's name (events.owner), under wmu_
  Sealer sealer_;
  DbLock lock_ = DbLock::kNone;  // what the writer's (and the claims') session holds
  base::FairMutex wmu_;          // writers in turn: a commit never starves an API request
  std::mutex rmu_;
  PgConn w_, r_;
  std::string url_;
  // Made at their first wait (a CLI command that never waits opens no third connection),
  // by listener() under lmu_.
  PgListener& listener(std::unique_ptr<PgListener>& slot, const char* channel_sql);
  std::mutex lmu_;
  std::unique_ptr<PgListener> change_listener_, work_listener_;
  // The lease's own connection (made at the first renew): a renewal never waits behind the
  // commits and API writes queued on w_, and gives up after a sixth of the lease's TTL
  // (statement_timeout), so that a retry still fits in the lease.
  std::mutex lease_mu_;
  std::unique_ptr<PgConn> lease_conn_;
  // Claims' own connection (made at the first claim): a poll for new work never waits
  // behind a group commit in flight on w_ (its SKIP LOCKED passes the rows that group
  // holds), and gives up after a third of the lease's TTL (statement_timeout).
  std::mutex claim_mu_;
  std::unique_ptr<PgConn> claim_conn_;
};

}  // namespace engine::internal
