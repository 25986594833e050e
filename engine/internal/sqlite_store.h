// The SQLite Store: one file, WAL, synchronous=FULL. A write connection (the executor's
// writer thread and commands) and a pool of read connections (the API, polls, history).
//
// Engine-internal: open_sqlite_store (engine.h) is the way in. The class is defined in four
// files, the only ones that include SQLiteCpp:
//   sqlite_store.cpp    opening, the schema, packages, instances, machines
//   sqlite_ops.cpp      the executor's commits, operations, outputs and events
//   sqlite_secrets.cpp  the key file, sealed fields and outputs, VIM records, key rotation
//   sqlite_notices.cpp  subscriptions and the notices the triggers write
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>
#include <sqlite3.h>

#include "engine/engine.h"
#include "engine/internal/sealing.h"

namespace engine::internal {

inline constexpr const char* kRunning =
    "(state = 'STARTING' OR state = 'PROCESSING' OR state = 'ROLLING_BACK')";
inline constexpr const char* kOpen =
    "(state = 'STARTING' OR state = 'PROCESSING' OR state = 'FAILED_TEMP' OR state = "
    "'ROLLING_BACK')";

// An operation's number (ops.num): the next in creation order, in the creating transaction.
// create_op gives it; the trigger ops_number gives it to a row inserted without one.
inline constexpr const char* kNextOpNum = "(SELECT COALESCE(MAX(num), 0) + 1 FROM ops)";

// Secret fields at rest: sealing.h (the rules every store shares).

// Checkpoints a database's write-ahead log in a thread and a connection of its own, so that
// no commit waits for a checkpoint (SQLite's automatic checkpoint runs inside the COMMIT that
// crosses its threshold: with 200 running operations that commit took several times longer
// than the others, and the throughput of the group commit fell by a quarter). The writer's
// commits report the log's length (sqlite3_wal_hook); past kBackgroundPages the thread runs
// a PASSIVE checkpoint (it never blocks the writer or readers). Should the log outgrow
// kInlinePages all the same (readers holding old snapshots, the thread not keeping up), the
// writer checkpoints inline, as SQLite would: the log stays bounded.
class Checkpointer {
 public:
  static constexpr int kBackgroundPages = 4000;
  static constexpr int kInlinePages = 64000;

  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // What a commit that left `pages` frames in the log does, the thread's last pass having
  // checkpointed `backfilled` of them (0: none since the log restarted): nothing, a
  // checkpoint here (the log outgrew kInlinePages, or the thread's pass left at most
  // kCatchUpFrames behind), or a pass on the thread.
  enum class Step { kNone, kHere, kThread };
  static Step decide(int pages, int backfilled);
  static constexpr int kCatchUpFrames = 256;

  // Makes this the checkpointer of the writer connection `db` (replaces its automatic
  // checkpoint).
  void attach(sqlite3* db);
  // Stops the thread (the connection's last close still checkpoints).
  void stop();

 private:
  static int on_commit(void* self, sqlite3* db, const char* name, int pages);
  sqlite3* open();
  void run();

  // Frames the thread's last pass checkpointed, while the log has not restarted since (0:
  // none). The writer checkpoints the few frames it committed meanwhile itself (decide):
  // the log restarts only at a transaction that begins with every frame checkpointed, and
  // a busy writer's next transaction began before the thread's pass was over, pass after
  // pass, while the log grew past its reserve (for 500 commits of a chain of 2,000, each
  // of them twice as slow: the growing file's sync).
  std::atomic<int> backfilled_{0};

  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stopping_ = false;
  std::thread thread_;
  sqlite3* attached_ = nullptr;
};

// The prepared statements of one connection, by their SQL: a hot read (an API GET, the
// executor's poll) no longer parses its SQL every time (sqlite3_prepare was 40% of a GET's
// store time). Used under the connection's mutex. A statement is reset when its use ends, so
// no read snapshot outlives the call (it would hold back the WAL's checkpoints). Bounded:
// past kMax distinct texts (filters build SQL) a statement is prepared for one use.
class StatementCache {
 public:
  static constexpr size_t kMax = 64;

  class Use {
   public:
    ~Use() {
      st_->tryReset();
      try {
        st_->clearBindings();  // sqlite3_clear_bindings cannot fail; SQLiteCpp may throw
      } catch (...) {
      }
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    SQLite::Statement& operator*() { return *st_; }
    SQLite::Statement* operator->() { return st_; }

   private:
    friend class StatementCache;
    Use(SQLite::Statement* st, std::unique_ptr<SQLite::Statement> owned)
        : st_(st), owned_(std::move(owned)) {}
    SQLite::Statement* st_;
    std::unique_ptr<SQLite::Statement> owned_;  // set when not cached
  };

  explicit StatementCache(SQLite::Database& db) : db_(db) {}
  Use prepare(const std::string& sql) {
    auto it = map_.find(sql);
    if (it != map_.end())
      return Use(it->second.get(), nullptr);
    auto st = std::make_unique<SQLite::Statement>(db_, sql);
    if (map_.size() >= kMax) {
      SQLite::Statement* raw = st.get();
      return Use(raw, std::move(st));
    }
    SQLite::Statement* raw = st.get();
    map_.emplace(sql, std::move(st));
    return Use(raw, nullptr);
  }

 private:
  SQLite::Database& db_;
  std::map<std::string, std::unique_ptr<SQLite::Statement>, std::less<>> map_;
};

// The read connections: API requests and the executor read at once, each on a connection
// of its own (one shared connection made every GET wait for the one before it). A read takes
// a free connection, else waits for one in turn; one thread at a time uses a connection (its
// mutex), so SQLite takes no mutex of its own on it. Each keeps its prepared statements.
class ReaderPool {
 public:
  struct Reader {
    explicit Reader(const std::string& path)
        : db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_NOMUTEX), q(db) {
      sqlite3_busy_handler(db.getHandle(), &Reader::busy, nullptr);
    }
    // SQLite's busy timeout (10 s) out of a NoWaitReads scope; in one, no wait at all:
    // the scope is marked declined and the read fails busy (WAL recovery after a crashed
    // writer, an exclusive lock).
    static int busy(void*, int count) {
      if (NoWaitReads::mark_declined())
        return 0;
      if (count >= 1010)  // about 10 s: 10 x 1 ms, then 10 ms
        return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(count < 10 ? 1 : 10));
      return 1;
    }
    std::mutex mu;
    SQLite::Database db;
    StatementCache q;
  };
  class Lease {
   public:
    Lease(Reader& r, std::unique_lock<std::mutex> l) : r_(&r), l_(std::move(l)) {}
    Reader* operator->() { return r_; }

   private:
    Reader* r_;
    std::unique_lock<std::mutex> l_;
  };

  ReaderPool(const std::string& path, size_t n) {
    for (size_t i = 0; i < std::max<size_t>(n, 1); ++i)
      readers_.push_back(std::make_unique<Reader>(path));
  }
  // A free connection, else (in a NoWaitReads scope) a decline, else one in turn.
  Lease acquire() {
    for (auto& r : readers_) {
      std::unique_lock<std::mutex> l(r->mu, std::try_to_lock);
      if (l.owns_lock())
        return Lease(*r, std::move(l));
    }
    if (NoWaitReads::active())
      NoWaitReads::decline();
    Reader& r = *readers_[next_.fetch_add(1, std::memory_order_relaxed) % readers_.size()];
    return Lease(r, std::unique_lock<std::mutex>(r.mu));
  }
  // Runs `f` on every connection (settings at open), one at a time.
  template <typename F>
  void each(F&& f) {
    for (auto& r : readers_) {
      std::lock_guard<std::mutex> l(r->mu);
      f(r->db);
    }
  }

 private:
  std::vector<std::unique_ptr<Reader>> readers_;
  std::atomic<size_t> next_{0};
};

// A column's text; empty when NULL.
std::string text(SQLite::Statement& st, int i);

class SqliteStore : public Store {
 public:
  explicit SqliteStore(const std::string& path);
  ~SqliteStore() override;
  base::Status init();
  // WAL: readers never wait on the writer; a reader is free or the read declines. False
  // when the file could not be put in WAL mode.
  bool reads_never_wait() const override { return wal_; }

  // sqlite_store.cpp
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

  // sqlite_ops.cpp
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

  // sqlite_notices.cpp
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

  // sqlite_secrets.cpp
  base::Status put_vim(const VimRecord& rec) override;
  base::Result<VimRecord> get_vim(std::string_view id, bool with_secrets) override;
  base::Result<std::vector<VimRecord>> list_vims() override;
  base::Status delete_vim(std::string_view id) override;
  base::Status rotate_key() override;
  std::vector<std::string> private_files() const override;
  base::Status reserve_log() override;
  // Watches the write-ahead log with inotify: every commit writes it.
  void wait_for_change(std::chrono::milliseconds at_most) override;

 private:
  // Runs `f`, turning SQLite's exceptions into a Status (busy or locked: kUnavailable).
  template <typename F>
  base::Status guard(F&& f) {
    try {
      return f();
    } catch (const WouldWait&) {
      throw;  // to the NoWaitReads scope's owner
    } catch (const SQLite::Exception& e) {
      int code = e.getErrorCode();
      if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return base::Status::Unavailable(std::string("database busy: ") + e.what());
      return base::Status::Internal(std::string("database: ") + e.what());
    } catch (const std::exception& e) {
      return base::Status::Internal(std::string("database: ") + e.what());
    }
  }

  // sqlite_store.cpp
  void rollback_quietly();
  // The database file (its key file is `<db>.key`).
  std::string db_file() const {
    const std::string& key = sealer_.key_path();
    return key.substr(0, key.size() - 4);
  }

  // sqlite_ops.cpp
  static void bind_text_or_null(SQLite::Statement& st, int i, const std::string& s);
  // `cache`: db's statements (a reader's), or null (the writer: prepared for this call).
  base::Result<OpRecord> get_op_locked(SQLite::Database& db, StatementCache* cache,
                                       std::string_view id);
  // In the writer's open transaction: inserts `rec`, or returns why not (no such instance:
  // kNotFound; its operation that is not final: kFailedPrecondition), writing nothing.
  // create_op and apply's Batch::create.
  base::Status insert_op_locked(const OpRecord& rec);

  // sqlite_secrets.cpp
  base::Status check_key();
  bool has_sealed_data();
  base::Status reseal_event_outputs();
  VimRecord read_vim(SQLite::Statement& q);

  // sealing.h
  base::Result<std::string> key() { return sealer_.key(); }
  std::string sealed_text(const std::string& text, const std::string& owner) {
    return sealer_.sealed_text(text, owner);
  }
  std::string sealed_text(const json::value& v, const std::string& owner) {
    return sealer_.sealed_text(v, owner);
  }
  std::string sealed_whole(const std::string& json_text, const std::string& owner) {
    return sealer_.sealed_whole(json_text, owner);
  }
  void open_fields(json::value& v, const std::string& owner) { sealer_.open_fields(v, owner); }
  OpRecord opened(OpRecord r) { return sealer_.opened(std::move(r)); }
  InstanceRecord opened(InstanceRecord r) { return sealer_.opened(std::move(r)); }

  Sealer sealer_;
  base::FairMutex wmu_;  // writers in turn: a commit never starves an API request
  SQLite::Database w_;
  static constexpr size_t kReaders = 3;  // the API's handler threads and the executor
  ReaderPool readers_;
  bool wal_ = false;  // init put the file in WAL mode
  std::unique_ptr<SQLite::Statement> upd_op_, upd_op_plain_, ins_output_, ins_event_, upd_inst_;
  std::unique_ptr<SQLite::Statement> sel_inst_, sel_open_, ins_op_;  // insert_op_locked
  // apply's BEGIN IMMEDIATE and COMMIT, prepared once: sqlite3_exec compiled each of them at
  // every commit (11,000 instructions of a single transition's commit).
  std::unique_ptr<SQLite::Statement> begin_, commit_;
  void run_cached(std::unique_ptr<SQLite::Statement>& st, const char* sql);
  int watch_fd_ = -1;  // change_watch.cpp: the inotify watch on the log (-2: none possible)
  std::unique_ptr<SQLite::Database> watch_db_;  // change_watch.cpp: reads PRAGMA data_version
  int64_t watch_version_ = 0;
  std::chrono::steady_clock::time_point watch_written_;  // when the log was last written
  Checkpointer checkpointer_;  // last: stopped before the connections close
};

}  // namespace engine::internal
