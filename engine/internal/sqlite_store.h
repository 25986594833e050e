// The SQLite Store: one file, WAL, synchronous=FULL. A write connection (the executor's
// writer thread and commands) and a read connection (polls, history), each behind a mutex.
//
// Engine-internal: open_sqlite_store (engine.h) is the way in. The class is defined in four
// files, the only ones that include SQLiteCpp:
//   sqlite_store.cpp    opening, the schema, packages, instances, machines
//   sqlite_ops.cpp      the executor's commits, operations, outputs and events
//   sqlite_secrets.cpp  the key file, sealed fields and outputs, VIM records, key rotation
//   sqlite_notices.cpp  subscriptions and the notices the triggers write
#pragma once

#include <condition_variable>
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

  // Makes this the checkpointer of the writer connection `db` (replaces its automatic
  // checkpoint).
  void attach(sqlite3* db);
  // Stops the thread (the connection's last close still checkpoints).
  void stop();

 private:
  static int on_commit(void* self, sqlite3* db, const char* name, int pages);
  sqlite3* open();
  void run();

  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stopping_ = false;
  std::thread thread_;
  sqlite3* attached_ = nullptr;
};

// A column's text; empty when NULL.
std::string text(SQLite::Statement& st, int i);

class SqliteStore : public Store {
 public:
  explicit SqliteStore(const std::string& path);
  ~SqliteStore() override;
  base::Status init();

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
  // Watches the write-ahead log with inotify: every commit writes it.
  void wait_for_change(std::chrono::milliseconds at_most) override;

 private:
  // Runs `f`, turning SQLite's exceptions into a Status (busy or locked: kUnavailable).
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

  // sqlite_store.cpp
  void rollback_quietly();
  // The database file (its key file is `<db>.key`).
  std::string db_file() const {
    const std::string& key = sealer_.key_path();
    return key.substr(0, key.size() - 4);
  }

  // sqlite_ops.cpp
  static void bind_text_or_null(SQLite::Statement& st, int i, const std::string& s);
  base::Result<OpRecord> get_op_locked(SQLite::Database& db, std::string_view id);

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
  std::mutex rmu_;
  SQLite::Database w_;
  SQLite::Database r_;
  std::unique_ptr<SQLite::Statement> upd_op_, upd_op_plain_, ins_output_, ins_event_, upd_inst_;
  int watch_fd_ = -1;          // change_watch.cpp: the inotify watch on the log (-2: none possible)
  Checkpointer checkpointer_;  // last: stopped before the connections close
};

}  // namespace engine::internal
