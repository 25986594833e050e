// engine: runs compiled machines durably.
//
//   Store     where packages, instances, machines, operations and their histories live.
//             An interface: SQLite (WAL, synchronous=FULL) today, PostgreSQL later.
//   Engine    the executor. One thread owns every operation's state (Boost.Asio); actions
//             run on a worker pool; the same thread commits. Every transition is committed
//             before the side effect it allows starts (the dispatch, with its idempotency
//             key op/state[item]/attempt), and every result is committed before the next
//             step. Concurrent operations share transactions (group commit): a
//             transition is acknowledged only after its commit.
//   Commands  what the CLI (and later the REST API) asks: onboard a package, create an
//             instance, request an LCM operation, retry / rollback / fail / cancel, replay,
//             register a VIM; and the views of the records they show (secrets as "***").
//   Daemon    one process running an Engine on a database: the checks of the database's
//             files, the single-daemon lock, signals and drain.
//
// SOL003 operation states: STARTING -> PROCESSING -> COMPLETED; a failure with no retry
// left -> FAILED_TEMP; from there retry (-> PROCESSING, at the failed state), rollback
// (-> ROLLING_BACK -> ROLLED_BACK, compensations of finished states in reverse) or fail
// (-> FAILED). A restart resumes STARTING, PROCESSING and ROLLING_BACK operations by itself.
//
// Not here: the workflow language (workflows/), what actions do (actions/), the command
// line and the terminal (cli/).
// Threading: a Store is safe to share between threads; an Engine is driven by run() on one
// thread, stop() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/json/value.hpp>

#include "actions/actions.h"
#include "base/base.h"
#include "workflows/workflows.h"

namespace engine {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------
// Records

enum class OpState : uint8_t {
  kStarting,
  kProcessing,
  kCompleted,
  kFailedTemp,
  kFailed,
  kRollingBack,
  kRolledBack,
};
std::string_view to_string(OpState s);
std::optional<OpState> parse_op_state(std::string_view s);
bool is_final(OpState s);   // COMPLETED, FAILED, ROLLED_BACK
bool is_active(OpState s);  // STARTING, PROCESSING, ROLLING_BACK: the daemon runs it

// A VNF package. SOL005 states: onboarding CREATED -> PROCESSING -> ONBOARDED (a failed
// onboarding returns to CREATED with `failure` set: the package may be uploaded again),
// operational ENABLED | DISABLED. `vnflow package onboard` stores ONBOARDED and ENABLED at
// once. Until onboarded, `digest` is "" and the VNF fields are empty.
struct PackageRecord {
  std::string id, digest, name, provider, product, version, vnfd_id;
  std::string vnfd_version;  // the VNFD's own version ("" if stored before schema 4)
  int64_t onboarded_ms = 0;  // creation time until onboarded
  std::string onboarding_state = "ONBOARDED";
  std::string operational_state = "ENABLED";
  std::string user_data = "{}";  // SOL005 userDefinedData: a JSON object's text
  std::string failure;           // why the last onboarding failed ("" when it did not)
};

struct InstanceRecord {
  std::string id, package_id, name;
  std::string instantiation_state;  // NOT_INSTANTIATED | INSTANTIATED
  json::value record;               // the full instance record (workflows "instance" type)
  int64_t created_ms = 0;
};

// A registered VIM (SOL003 vimConnectionInfo target; Tacker's /v1.0/vims). `access` holds
// the secrets: the store keeps it sealed (AES-256-GCM, key file beside the database) and
// only get_vim(..., with_secrets=true) opens it. `summary` is `access` with every secret
// replaced by "***", for display.
struct VimRecord {
  std::string id, name;
  std::string type;      // openstack | kubernetes
  json::object access;   // auth_url, username, password, project_name, ... (secrets)
  json::object summary;  // the same, redacted
  json::object extra;    // e.g. heat_environment + heat_files for this cloud
  bool is_default = false;
  int64_t created_ms = 0;
};

struct OpRecord {
  std::string id, instance_id, operation;
  OpState state = OpState::kStarting;
  std::string machine_digest, package_digest;
  json::value request;
  json::value error;   // null, or {state, class, message}
  json::value cursor;  // the executor's position (opaque outside engine/)
  std::string owner;   // the daemon running it; "" when none has claimed it
  int64_t epoch = 0;   // fencing epoch of the owner's claim (0: a store without leases)
  bool cancel_requested = false;
  int64_t wake_at_ms = 0;
  int64_t created_ms = 0, updated_ms = 0;
};

struct EventRecord {
  std::string op_id;
  int64_t seq = 0;
  int64_t at_ms = 0;
  std::string kind;   // op_processing, dispatched, succeeded, failed, retry_scheduled, ...
  std::string state;  // full state name, "" for op-level events
  int item = -1;      // fan-out item, -1 when none
  int attempt = 0;
  std::string key;   // idempotency key of a dispatch
  json::value data;  // inputs (secrets redacted), outputs, error
  // An action's result (succeeded, failed, retry_scheduled, compensated): when the call
  // started; at_ms is when its result reached the engine. 0: not recorded (a result written
  // before schema 5, or not a call's). Timing only: replay ignores it, as it does at_ms.
  int64_t started_ms = 0;
};

// One transaction's worth of executor writes.
struct Batch {
  struct OpWrite {
    std::string op_id;
    std::optional<OpState> state;
    std::optional<std::string> cursor;  // JSON text
    bool set_error = false;
    std::string error;  // JSON text, "" for NULL
    std::optional<int64_t> wake_at_ms;
    std::optional<std::string> owner;
    // Fencing: the write (and the whole batch) is taken only while the operation is still
    // held under this claim epoch (OpRecord::epoch). 0: not checked (no leases).
    int64_t epoch = 0;
  };
  struct InstanceWrite {
    std::string instance_id;
    std::string instantiation_state;
    std::string record;  // JSON text
  };
  struct OutputWrite {                // a finished state's outputs, written once
    std::string op_id, state, value;  // value: JSON text
    bool secret = false;              // sealed whole at rest (an action's secret_output)
  };
  // An operation this batch creates (Engine::start): inserted first, as Store::create_op
  // would (STARTING), so that the batch's OpWrite of it is its first transition, in the
  // same transaction. Refused as create_op refuses (the instance is gone: kNotFound; it has
  // an operation that is not final: kFailedPrecondition): then nothing of the batch is
  // written, `fenced` is set and `refused` says why.
  std::optional<OpRecord> create;
  std::vector<OpWrite> ops;
  std::vector<EventRecord> events;
  std::vector<InstanceWrite> instances;
  std::vector<OutputWrite> outputs;
  // Set by Store::apply: the batch's operation was no longer active (forced to FAILED by an
  // operator) or no longer held under the batch's epoch (another daemon took it over), or its
  // `create` was refused, so nothing of the batch was written; the rest of the group was.
  // The executor sets it too on a create whose failed commit did not write it.
  mutable bool fenced = false;
  mutable base::Status refused;  // why `create` was refused (Ok when it was not)
  bool empty() const {
    return !create && ops.empty() && events.empty() && instances.empty() && outputs.empty();
  }
};

// ---------------------------------------------------------------------------------------
// Notifications (docs/notifications.md)

// Where a subscription's delivery stands in the notices, in commit order: (xid, seq)
// compared as a pair. SQLite's xid is always 0 (its writers are serialised, so seq is commit
// order); PostgreSQL's is the writing transaction's id, and a store hands out only notices
// of transactions older than every one still running, so none can appear behind a cursor.
struct NoticeCursor {
  int64_t xid = 0, seq = 0;
  bool operator<(const NoticeCursor& o) const { return xid != o.xid ? xid < o.xid : seq < o.seq; }
};

// A change a subscriber may be told of, written by the store in the same transaction as the
// change itself (never before, never after): an operation entering a state, an instance
// created or deleted, a package onboarded, its operational state changed or it deleted.
// Written only while a subscription exists.
struct NoticeRecord {
  NoticeCursor at;
  std::string id;  // unique; a notification's id derives from it and the subscription's
  int64_t at_ms = 0;
  // op | instance_created | instance_deleted | package_onboarded | package_changed |
  // package_deleted
  std::string kind;
  std::string op_id, instance_id, package_id;
  std::string operation;  // vnflow's name (instantiate, ...)
  std::string state;      // the operation's new state; a package's operational state
  json::value error;      // the operation's error, null when none
  // What filters match on, as it was at the change: instance_name, vnfd_id, provider,
  // product, software_version, vnfd_version.
  json::object subject;
};

// A subscription (SOL003 LccnSubscription, SOL005 PkgmSubscription) and where its delivery
// stands. `auth` (SubscriptionAuthentication, with its secrets) is sealed at rest and only
// read back with_secrets.
struct SubscriptionRecord {
  std::string id;
  std::string api;  // vnflcm/v1 | vnflcm/v2 | vnfpkgm/v1: its bodies' form and links
  std::string callback_uri;
  json::object filter;
  json::object auth;
  std::string verbosity;  // FULL | SHORT (vnflcm/v2), "" otherwise
  int64_t created_ms = 0;
  // Delivery: the notices up to `cursor` were delivered (or did not match).
  NoticeCursor cursor;
  int attempts = 0;              // failed attempts at the notice after the cursor
  int64_t failing_since_ms = 0;  // the first of them; 0 when none failed
  int64_t next_attempt_ms = 0;
  bool failing = false;  // it kept failing for the retry window (the operator's to see)
  std::string last_error;
  int64_t delivered = 0, last_delivered_ms = 0;
  int64_t backlog = 0;  // notices after the cursor (read, not written)
};

// How many operations are in one state (Store::count_ops).
struct OpCount {
  std::string operation;
  OpState state = OpState::kStarting;
  int64_t n = 0;
};

struct OpFilter {
  std::string instance_id;  // "" for every instance
  std::optional<OpState> state;
  size_t limit = 100;
};

// ---------------------------------------------------------------------------------------
// Store

// Reads that never wait: what the REST API answers on its I/O threads, where a wait would
// stall every connection of the thread. While a NoWaitReads is alive on a thread, a read of
// a Store whose reads_never_wait() is true answers without waiting (for a read connection,
// a writer, the network) or gives up at once: it throws WouldWait and the scope remembers
// it (declined()), whatever caught the exception on the way; the caller then asks again
// where waiting is fine. For reads only: nothing is written in such a scope.
class WouldWait : public std::exception {
 public:
  const char* what() const noexcept override { return "the read would wait"; }

 private:
  friend class NoWaitReads;
  WouldWait() = default;  // thrown by NoWaitReads::decline() alone: the scope is marked
};
class NoWaitReads {
 public:
  NoWaitReads();
  ~NoWaitReads();
  NoWaitReads(const NoWaitReads&) = delete;
  NoWaitReads& operator=(const NoWaitReads&) = delete;
  // In such a scope on this thread.
  static bool active();
  // For a store, in such a scope (check active() first): marks it declined, then throws
  // WouldWait. Out of any scope it is a mistake: std::logic_error.
  [[noreturn]] static void decline();
  // Marks the scope declined without throwing (a wait refused deep inside a library, whose
  // error then travels up as it does); false out of any scope.
  static bool mark_declined();
  bool declined() const;

 private:
  NoWaitReads* outer_;
  bool declined_ = false;
};

class Store {
 public:
  virtual ~Store() = default;

  // True when this store honours NoWaitReads (SQLite in WAL mode: a read takes a free read
  // connection or declines; readers never wait on the writer). False: never asked to.
  virtual bool reads_never_wait() const { return false; }

  // Applies `batches` in ONE transaction: all or nothing.
  virtual base::Status apply(const std::vector<const Batch*>& batches) = 0;

  // A package with the same digest is stored once: its record comes back. A record without
  // digest (a package created before its content) is always inserted.
  virtual base::Result<PackageRecord> put_package(const PackageRecord& rec,
                                                  const std::string& bytes) = 0;
  // Replaces the record of `rec.id` (and its content, when `bytes` is given) if its
  // onboarding state is still `expect_state`: kFailedPrecondition naming the state
  // otherwise, kAlreadyExists when `rec.digest` is another package's.
  virtual base::Status update_package(const PackageRecord& rec, const std::string* bytes,
                                      std::string_view expect_state) = 0;
  // Deletes a package: kFailedPrecondition while an instance refers to it.
  virtual base::Status delete_package(std::string_view id) = 0;
  virtual base::Result<PackageRecord> get_package(std::string_view id) = 0;
  virtual base::Result<std::string> package_bytes(std::string_view id) = 0;
  virtual base::Result<std::vector<PackageRecord>> list_packages() = 0;

  virtual base::Status create_instance(const InstanceRecord& rec) = 0;
  virtual base::Result<InstanceRecord> get_instance(std::string_view id) = 0;
  virtual base::Result<std::vector<InstanceRecord>> list_instances() = 0;
  // Only when no operation of the instance is active or FAILED_TEMP.
  virtual base::Status delete_instance(std::string_view id) = 0;

  virtual base::Status put_machine(const std::string& digest, const std::string& body) = 0;
  virtual base::Result<std::string> get_machine(std::string_view digest) = 0;

  // Creates `rec` (STARTING). Refused with kFailedPrecondition, naming the other
  // operation, while the instance has one that is not final.
  virtual base::Status create_op(const OpRecord& rec) = 0;
  virtual base::Result<OpRecord> get_op(std::string_view id) = 0;
  virtual base::Result<std::vector<OpRecord>> list_ops(const OpFilter& f) = 0;
  // The number of operations by operation and state (the metrics' gauges).
  virtual base::Result<std::vector<OpCount>> count_ops() = 0;
  // Moves an operation from one of `from` to `to` (clears the owner, sets the error when
  // given); kFailedPrecondition naming the current state otherwise.
  virtual base::Result<OpRecord> transition(std::string_view id, const std::vector<OpState>& from,
                                            OpState to,
                                            const std::optional<std::string>& error) = 0;
  virtual base::Status request_cancel(std::string_view id) = 0;

  // Operations the daemon should run: active, and (unless `all`) not claimed yet.
  virtual base::Result<std::vector<OpRecord>> runnable(bool all) = 0;

  // Leases (docs/persistence.md, "Many daemons"). A store several daemons share (PostgreSQL)
  // hands operations out under leases: a daemon registers under its name, renews its lease,
  // and claims operations; each claim gets a new fencing epoch, which every commit of the
  // operation checks (Batch::OpWrite::epoch). The defaults are the single-daemon stores'
  // (SQLite: the database's file lock already excludes a second daemon).
  struct Lease {
    std::string name;         // the daemon's name, written as the operations' owner
    int64_t incarnation = 0;  // which start of that name
    int64_t ttl_ms = 0;       // 0: no expiry (single-daemon store)
  };
  // Refused (kFailedPrecondition) while a daemon of the same name holds a live lease. The
  // operations a previous start of the same name held go back to the pool.
  virtual base::Result<Lease> register_daemon(const std::string& name, int64_t ttl_ms) {
    (void)ttl_ms;
    return Lease{name, 1, 0};
  }
  // Extends the lease by its TTL. kAborted when it was lost (it ran out, or another start of
  // the name replaced it): every operation the daemon held may be another's by now.
  virtual base::Status renew(const Lease& lease) {
    (void)lease;
    return base::Status::Ok();
  }
  // A clean stop: the lease ends now and the daemon's active operations go back to the pool.
  virtual void release(const Lease& lease) { (void)lease; }
  // Claims up to `limit` operations for `lease`: active ones no live daemon holds (none
  // claimed them, or their daemon's lease ran out), each under a new epoch. Concurrent
  // claimers never get the same operation. `first`: the daemon's first claim (single-daemon
  // stores then resume every active operation, their previous daemon being gone).
  virtual base::Result<std::vector<OpRecord>> claim(const Lease& lease, bool first, size_t limit) {
    (void)lease;
    (void)limit;
    return runnable(first);
  }
  // Active operations whose cancellation was requested.
  virtual base::Result<std::vector<std::string>> cancel_requests() = 0;
  virtual base::Result<std::vector<EventRecord>> history(std::string_view op_id) = 0;
  // The outputs of an operation's finished states, by full state name.
  virtual base::Result<json::object> outputs(std::string_view op_id) = 0;

  // VIM registry. put_vim inserts or replaces by id (names are unique); a default VIM
  // clears the flag of the others. get_vim takes an id or a name.
  virtual base::Status put_vim(const VimRecord& rec) = 0;
  virtual base::Result<VimRecord> get_vim(std::string_view id_or_name, bool with_secrets) = 0;
  virtual base::Result<std::vector<VimRecord>> list_vims() = 0;
  virtual base::Status delete_vim(std::string_view id) = 0;

  // Subscriptions. put_subscription inserts `rec` with its cursor at the newest notice (a
  // subscription hears of what is committed after it); `auth` is sealed.
  virtual base::Status put_subscription(const SubscriptionRecord& rec) = 0;
  virtual base::Result<SubscriptionRecord> get_subscription(std::string_view id,
                                                            bool with_secrets) = 0;
  // Oldest first, with their backlogs.
  virtual base::Result<std::vector<SubscriptionRecord>> list_subscriptions(bool with_secrets) = 0;
  virtual base::Status delete_subscription(std::string_view id) = 0;
  // Writes a subscription's delivery fields (cursor, attempts, failing, ...); the cursor never
  // moves back. kNotFound once it was deleted.
  virtual base::Status record_delivery(const SubscriptionRecord& rec) = 0;
  // The subscriptions a sender should serve now: their next attempt is due and a notice
  // waits after their cursor (a cheap query: the scheduler asks it often).
  virtual base::Result<std::vector<std::string>> due_subscriptions(int64_t now) = 0;
  // Whether `owner` may deliver subscription `id` for the next `ttl_ms`: a store several
  // daemons share hands each subscription to one sender at a time (a claim that runs out);
  // the default is the single-daemon stores' (yes).
  virtual base::Result<bool> claim_subscription(std::string_view id, const std::string& owner,
                                                int64_t ttl_ms) {
    (void)id;
    (void)owner;
    (void)ttl_ms;
    return true;
  }
  // Up to `limit` notices after `after`, in commit order.
  virtual base::Result<std::vector<NoticeRecord>> notices_after(const NoticeCursor& after,
                                                                size_t limit) = 0;
  // Deletes the notices every subscription is past (all of them when there is none);
  // returns how many went.
  virtual base::Result<int64_t> prune_notices() = 0;

  // Files no hook may read (the database, its journal, its key file): local.exec hides them.
  virtual std::vector<std::string> private_files() const { return {}; }
  // A long-running writer (the daemon, at its start) asks for the store's log to be made
  // ready for a stream of small commits, so that a commit does not also grow a file (SQLite:
  // its write-ahead log written out to the checkpoint threshold once; PostgreSQL recycles
  // its WAL segments itself). Best effort: a store that cannot says why and works as before.
  virtual base::Status reserve_log() { return base::Status::Ok(); }
  // Returns when something may have been committed to the database since the last call (by
  // any process), or after `at_most`, whichever comes first: what a reader waiting for an
  // operation's next transition sleeps on. The default sleeps `at_most`.
  virtual void wait_for_change(std::chrono::milliseconds at_most);
  // Returns when work may have been queued for a daemon since the last call, by any process
  // (a request, an operator's command, operations another daemon let go: kQueued), or after
  // `at_most` (kQuiet): what a daemon's wake thread sleeps on, so a request starts at once
  // instead of at the next poll. kUnsupported (the default, at once): this store has no such
  // signal (SQLite's daemon has its wake socket beside the file). The first call may return
  // kQueued at once (the signal was just armed; anything before it was not seen).
  enum class WorkSignal { kUnsupported, kQuiet, kQueued };
  virtual WorkSignal wait_for_work(std::chrono::milliseconds at_most) {
    (void)at_most;
    return WorkSignal::kUnsupported;
  }
  // Re-seals every sealed value with a new key and replaces the key file (docs/security.md).
  // Crash-safe: the new key is written beside the old one first, and an interrupted rotation
  // is finished (or forgotten) the next time the database is opened.
  virtual base::Status rotate_key() {
    return base::Status::FailedPrecondition("this store cannot rotate its key");
  }
};

// Opens (creating if needed) the SQLite database at `path` (WAL, synchronous=FULL).
base::Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);
// Which of a PostgreSQL database's advisory locks a store holds while open: none (a
// command), the daemons' shared one (any number of daemons at once), or the exclusive one
// (a key rotation: refused while a daemon runs, and no daemon starts meanwhile).
enum class DbLock { kNone, kDaemon, kAlone };
// Opens (creating the schema if needed) the PostgreSQL database at `url` (postgresql://...
// or postgres://..., libpq's URL; its search_path chooses the schema). Secrets are sealed
// with the key file at `key_path` (created when the database has sealed nothing yet), which
// every process sharing the database must be given. `lock`: refused (kFailedPrecondition)
// when it cannot be had.
base::Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url,
                                                         const std::string& key_path,
                                                         DbLock lock = DbLock::kNone);
bool is_postgres_url(std::string_view db);
// A database as it may be shown or logged: a path as is, a URL without its password.
std::string display_db(std::string_view db);

// ---------------------------------------------------------------------------------------
// Engine (the executor)

struct EngineOptions {
  int workers = 8;                             // threads running actions
  std::string work_root = "/tmp/vnflow-work";  // local.exec runs in <root>/<instance>
  std::chrono::milliseconds poll{50};          // how often new requests are read
  size_t max_group = 1024;                     // batches per group commit
  std::string owner = "daemon";                // the daemon's name, written into claimed operations
  // A shared store's lease (Store::register_daemon): how long it lasts unrenewed. It is
  // renewed every third of it; another daemon takes the operations over once it ran out.
  std::chrono::milliseconds lease_ttl{10000};
  size_t claim_batch = 256;  // operations claimed per read of the queue
  // Hooks (local.exec) run as this user when the daemon runs as root ("" = the daemon's
  // own user). docs/security.md.
  std::string hook_user;
  // A step that was re-dispatched this many times after daemon deaths while it ran is not
  // dispatched again: the operation goes to FAILED_TEMP naming it (a poison step that kills
  // the daemon must not crash-loop it).
  int max_redispatch = 3;
  // Where time comes from: timers, durable waits, retry backoff, record stamps. Tests give
  // a base::ManualClock. Not owned; outlives the Engine.
  base::Clock* clock = &base::Clock::real();
  // Where the engine counts commits, transitions, actions and settled operations
  // (declare_engine_metrics); nullptr: nowhere. Not owned; outlives the Engine.
  base::Metrics* metrics = nullptr;
  // Called after each group commit the store took (on the committing thread; it must be
  // quick): the daemon's notification sender looks at once.
  std::function<void()> on_commit;
};

// Declares the engine's metric families in `m` (docs/operations.md lists them).
void declare_engine_metrics(base::Metrics& m);
// Sets the gauges read from the store (operations by operation and state, the queue's
// depth): a collector a daemon registers (base::Metrics::on_collect).
void collect_store_metrics(base::Metrics& m, Store& store);

struct EngineStats {
  uint64_t commits = 0;  // transactions
  uint64_t batches = 0;  // transitions committed (one per operation per commit)
  uint64_t actions = 0;  // actions dispatched
  uint64_t commit_failures = 0;
  size_t running_ops = 0;
};

class Engine {
 public:
  Engine(Store& store, actions::Registry registry, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Creates the work root and waits (up to 30 s) until no hook of a previous daemon is
  // still running (actions::claim_hook_lock). run() calls it when it was not called; a
  // daemon calls it first to report a failure.
  base::Status prepare();
  // Resumes every active operation, then runs new ones as they are queued, until stop().
  void run();
  // Same, but returns once no operation is active or queued (tests, benchmarks).
  void run_until_idle();
  // Stops: with `drain`, running actions finish and their results are committed; no new
  // step starts. Active operations stay resumable either way. Any thread.
  void stop(bool drain = true);
  // Something was queued (a request, a retry, a cancel): read the queue now rather than at
  // the next poll. Any thread; wakes that arrive while one is on its way are one read.
  void wake();
  // Creates operation `op` (STARTING, no cursor, as request_operation builds it) and starts
  // it: on the calling thread, the row and its first transition (PROCESSING, claimed here,
  // the op_processing event) are committed together, then the engine thread takes the run
  // and launches its calls. A request waits for one commit, not for a commit, a poll and
  // another commit, and for no hand-off to the engine thread and back.
  // Refused as Store::create_op refuses, writing nothing. When this engine does not take new
  // operations (not running, draining, a shared store, whose operations are claimed under a
  // lease), it is Store::create_op followed by wake(). Any thread but the engine's.
  base::Status start(const OpRecord& op);
  // Whether start() takes operations now (run() is on, not draining, the store not shared).
  bool takes_starts() const;
  EngineStats stats() const;
  // Called after every commit with the operations that reached a final or FAILED_TEMP
  // state (engine thread). For tests and `op wait` in-process.
  void on_settled(std::function<void(const std::string& op_id, OpState)> cb);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------
// Commands (what users ask; no terminal, no CLI syntax)

std::string new_id();  // a random UUID
int64_t now_ms();      // wall clock, milliseconds since the epoch

// A request body (SOL003 JSON) is at most this many bytes: it is stored with the operation.
constexpr size_t kMaxRequestBytes = 1 << 20;

// How a package is checked, by onboarding and by `csar validate`.
struct PackageCheckOptions {
  tosca::LoadOptions load;
  tosca::SignatureOptions signatures;  // SOL004: trust store, signatures required or not
};

// What onboarding checks after the loader: every LCM operation of every flavour compiles
// and every package file a workflow names (ssh.put `source`) is present. `csar validate`
// runs it too, so a broken hook fails validation, not onboarding.
void check_package_workflows(const tosca::Package& pkg, base::Diagnostics& diags);

// Loads (signatures checked), checks (check_package_workflows) and stores a package.
// Diagnostics of an invalid package go to `diags` and nothing is stored. A SOL004 option-2
// zip stores the CSAR it holds.
base::Result<PackageRecord> onboard_package(Store& store, const std::string& path,
                                            base::Diagnostics& diags,
                                            const PackageCheckOptions& options = {});

// SOL005 package management (the REST API's /vnfpkgm/v1): a package created empty, then
// given its content, which is onboarded exactly as onboard_package does.
constexpr size_t kMaxPackageBytes = 64 << 20;
// CREATED, DISABLED; `user_data` (userDefinedData) at most 64 KiB of JSON.
base::Result<PackageRecord> create_package(Store& store, json::object user_data);
// Onboards zip `bytes` into package `id`: the loader (signatures checked) and
// check_package_workflows, as onboard_package. Refused, changing nothing, unless the
// package is CREATED (kFailedPrecondition) and `bytes` is a zip archive (kInvalidArgument).
// Otherwise the package is ONBOARDED and ENABLED, or back to CREATED with `failure` (the
// located diagnostics, also in `diags`), which the returned record shows.
base::Result<PackageRecord> upload_package(Store& store, std::string_view id, std::string bytes,
                                           base::Diagnostics& diags,
                                           const PackageCheckOptions& options = {});
// The content of a package to upload from `uri`: file:///PATH (a regular file), http:// or
// https:// (HTTPS verified against the system's CAs; basic credentials when `user` is not
// empty), at most kMaxPackageBytes, within `timeout`. Other schemes: kInvalidArgument.
base::Result<std::string> fetch_package(std::string_view uri, std::string_view user,
                                        std::string_view password, std::chrono::seconds timeout);
// SOL005 VnfPkgInfoModifications: `operationalState` (ENABLED | DISABLED) and/or
// `userDefinedData` (merged: a null value removes the key). Only ONBOARDED packages; a
// request that changes nothing is refused (kFailedPrecondition). Returns what changed.
base::Result<json::object> modify_package(Store& store, std::string_view id,
                                          const json::object& changes);
// Refused while the package is ENABLED or an instance refers to it.
base::Status delete_package(Store& store, std::string_view id);
// The package a new instance of VNFD `vnfd_id` comes from: the newest ONBOARDED and
// ENABLED one (kNotFound when there is none).
base::Result<PackageRecord> package_for_vnfd(Store& store, std::string_view vnfd_id);
// The VNFD identity of packages (id, vnfd_id, provider, product, version, vnfd_version; the
// other fields empty), kept in memory once a package is ONBOARDED: from then on no request
// changes it (modify_package changes the operational state and user data only, and a
// package id is never reused), so it is read from the store once, not for every view of an
// instance. Thread-safe; at most `capacity` packages (then it starts over).
class PackageIdentities {
 public:
  explicit PackageIdentities(size_t capacity = 4096) : capacity_(capacity) {}
  // The store's error (kNotFound ...) when the package cannot be read.
  base::Result<PackageRecord> get(Store& store, const std::string& id);

 private:
  size_t capacity_;
  std::mutex mu_;
  std::unordered_map<std::string, PackageRecord> known_;
};

// An ONBOARDED package loaded from the store, to read its files (VNFD, artifacts):
// kFailedPrecondition while it is not ONBOARDED.
base::Result<std::shared_ptr<const tosca::Package>> open_package(Store& store, std::string_view id);
// The files of its VNFD: the entry definitions' folder's YAML files (sorted).
std::vector<std::string> vnfd_files(const tosca::Package& pkg);

base::Result<InstanceRecord> create_instance(Store& store, std::string_view package_id,
                                             std::string name, std::string description);
// Checks the request (SOL003 body), compiles the operation's machine from the instance's
// package and queues the operation (STARTING). Compile problems go to `diags`.
// A request's vimConnectionInfo made storable: entries with accessInfo are registered as
// VIMs (secrets sealed) and replaced by {id, vimId, vimType}; vimIds must be registered
// (names are resolved to ids). With `required`, a request without one gets the default VIM.
// A request may name any registered VIM, and may bring a new one (owned by `instance_id`),
// but never changes a VIM it does not own: accessInfo for the vimId of an operator's VIM or
// another instance's is refused.
base::Status normalize_vim_connections(Store& store, json::value& request, bool required,
                                       std::string_view instance_id);

// Refused with a reason, as for an operation in progress or an instance that is not
// NOT_INSTANTIATED (Store::delete_instance).
base::Status delete_instance(Store& store, std::string_view instance_id);

// How a checked request's operation is committed: Store::create_op, or a running engine's
// Engine::start (the operation's first transition in the same commit).
using OpCreator = std::function<base::Status(const OpRecord&)>;
base::Result<OpRecord> request_operation(Store& store, std::string_view instance_id,
                                         std::string_view operation, const json::value& request,
                                         base::Diagnostics& diags, const OpCreator& create = {});
base::Result<OpRecord> retry_operation(Store& store, std::string_view op_id);
base::Result<OpRecord> rollback_operation(Store& store, std::string_view op_id);
// FAILED_TEMP -> FAILED; with `force`, any non-final state -> FAILED (an operation that keeps
// failing the daemon, or one whose daemon is gone). A daemon still running it drops it at its
// next commit: the store refuses writes to an operation that is no longer active.
base::Result<OpRecord> fail_operation(Store& store, std::string_view op_id, bool force = false);
base::Status cancel_operation(Store& store, std::string_view op_id);
// Operations, newest first: at most `f.limit` (1 or more), and whether there were more.
struct OpPage {
  std::vector<OpRecord> ops;
  bool more = false;
};
base::Result<OpPage> list_operations(Store& store, OpFilter f);

// The compiled machine an operation runs (pinned when it was requested).
base::Result<std::shared_ptr<const workflows::Machine>> operation_machine(Store& store,
                                                                          const OpRecord& op);

// Replay. Re-drives `machine` (the operation's own, or one compiled from a new package)
// against the recorded results of `op` without running anything, and reports the first
// divergence: a state the recording does not have, a different action, a transition the
// recording did not take. Empty `divergence` means the machine reproduces the recording.
struct ReplayReport {
  bool diverged = false;
  std::string divergence;          // one line
  std::vector<std::string> steps;  // "state -> next" lines, as re-driven
};
// Drives the executor's own stepper with the recorded results; `max_redispatch` is the
// daemon's (EngineOptions); -1: read from the recording (a step its poison guard stopped).
base::Result<ReplayReport> replay_dry_run(Store& store, const OpRecord& op,
                                          const workflows::Machine& machine,
                                          int max_redispatch = -1);
// The same for operation `op_id` against its own machine, or (with `package_path`) the
// machine of the same operation and flavour compiled from that package, whose problems go
// to `diags`.
base::Result<ReplayReport> replay_dry_run(Store& store, std::string_view op_id,
                                          const std::string& package_path,
                                          base::Diagnostics& diags);
// Starts a new operation occurrence that begins at `state` with the outputs and instance
// record the original had there. The original must be final.
base::Result<OpRecord> replay_from(Store& store, std::string_view op_id, std::string_view state);

// ---------------------------------------------------------------------------------------
// VIMs: one set of rules for `vim register`, a request's vimConnectionInfo and the
// vim.register action.

// "openstack" or "kubernetes" for a type named as a record, a SOL003 vimType or Tacker
// does: openstack, ETSINFV.OPENSTACK_KEYSTONE.V_3; kubernetes, ETSINFV.KUBERNETES.V_1,
// ETSINFV.HELM.V_3 (Helm on a Kubernetes cluster: Tacker v2 gives a Kubernetes VIM that
// type when it has Helm). "" for any other type.
std::string vim_type(std::string_view type);
// The SOL003 vimType of a record's type ("openstack" or "kubernetes").
std::string_view etsi_vim_type(std::string_view type);
// What a VIM of `type` (as vim_type) needs to be reached: OpenStack, Keystone v3 access
// (actions::check_openstack_access); Kubernetes, an http(s) "server" and a "bearer_token"
// or "username" and "password".
base::Status check_vim_access(std::string_view type, const json::object& access);

// Registers `v` (inserts, or replaces the record of the same id). Its type is made
// canonical (vim_type), its name checked as instance names are, its access checked
// (check_vim_access) and redacted into `summary`; `created_ms` of a replaced record is kept.
// Without an id, the VIM of that name (else a new id); without a name, the replaced
// record's (else "inline-<id>"). `owner_instance` "" is an operator, who may replace any
// VIM; an instance may replace only the VIMs it registered (recorded as
// extra.registered_by_instance). `replaced` tells whether the id was registered already.
base::Result<VimRecord> register_vim(Store& store, VimRecord v, std::string_view owner_instance,
                                     bool* replaced = nullptr);
// By id or name; deleting returns what was deleted.
base::Result<VimRecord> show_vim(Store& store, std::string_view id_or_name);
base::Result<VimRecord> delete_vim(Store& store, std::string_view id_or_name);

// ---------------------------------------------------------------------------------------
// Subscriptions and notifications (docs/notifications.md): one set of rules for the REST
// API's subscriptions, `vnflow subscription` and the daemon's sender.

// SOL003's name of an LCM operation (instantiate -> INSTANTIATE, modify_info ->
// MODIFY_INFO); another name upper-cased.
std::string sol_operation(std::string_view operation);

struct NotifyOptions {
  // SOL003/SOL005: a new subscription's callback is tested with a GET (its authentication
  // included) that must answer 204; a failed test refuses the subscription.
  bool test_callback = true;
  std::chrono::milliseconds timeout{10000};  // one HTTP exchange with a callback or token endpoint
  // A notification that cannot be delivered is tried again with a backoff from backoff_min,
  // doubling up to backoff_max, without end; after retry_for the subscription is marked
  // failing (shown, counted) until a delivery succeeds.
  std::chrono::milliseconds retry_for{3600 * 1000};
  std::chrono::milliseconds backoff_min{1000}, backoff_max{60000};
  std::string base_url;  // the REST API's URL, where a notification's _links point
  std::string ca_file;   // an https callback's CA ("" the system's)
  // Where callbacks and token endpoints may be (--notify-allow): empty, anywhere; else a
  // host resolving outside these networks is not contacted (its test fails, its deliveries
  // fail), so a subscriber cannot make the daemon reach the rest of its network.
  std::vector<actions::Network> allow;
  int senders = 4;  // subscriptions delivered to at once (a slow one holds one sender)
  std::chrono::milliseconds poll{100};  // how often commits of other processes are looked for
  // Who sends (the daemon's name): on a shared store each subscription is claimed by one
  // sender at a time (Store::claim_subscription).
  std::string owner = "daemon";
};

// A LccnSubscriptionRequest (api vnflcm/v1, vnflcm/v2) or PkgmSubscriptionRequest
// (vnfpkgm/v1) checked (every member known and of its type: kInvalidArgument naming it), its
// callback tested (kFailedPrecondition with the reason; kUnavailable while 4 tests run), and
// stored. At most 1000 subscriptions (kFailedPrecondition).
base::Result<SubscriptionRecord> create_subscription(Store& store, std::string_view api,
                                                     const json::object& request,
                                                     const NotifyOptions& options);
// By id; deleting returns what was deleted.
base::Result<SubscriptionRecord> delete_subscription(Store& store, std::string_view id);
// SOL's view: id, filter, callbackUri (and verbosity on vnflcm/v2), never the
// authentication; without _links (the REST API's).
json::object subscription_view(const SubscriptionRecord& s);
// An operator's view (vnflow subscription show): the same, the authentication's type with
// its secrets "***", and the delivery's state.
json::object subscription_status_view(const SubscriptionRecord& s);
// Whether notice `n` is for subscription `s`: its API's kind of notification, and every
// member of its filter matching (SOL003 5.5.3.12, SOL005 9.5.3.2).
bool subscription_matches(const SubscriptionRecord& s, const NoticeRecord& n);
// The notification of `n` for `s` (VnfLcmOperationOccurrenceNotification, ...), its links
// under `base_url`. Its id is the same every time it is built: receivers deduplicate on it.
// `op`, the operation of a result (COMPLETED, FAILED_TEMP, FAILED, ROLLED_BACK) as stored
// now, adds its affectedVnfcs and changedInfo (op_results) unless the verbosity is SHORT.
json::object notification_body(const SubscriptionRecord& s, const NoticeRecord& n,
                               std::string_view base_url, const OpRecord* op = nullptr);

// The daemon's sender. Each subscription's notices go out in commit order, one at a time
// (POST, 2xx expected), its progress recorded in the store after each run of deliveries; a
// failed delivery is tried again (NotifyOptions), never skipped. At least once: a
// notification may come again after a restart, with the same id. Up to `senders`
// subscriptions are served at once, so a slow or dead receiver delays only its own.
class Notifier {
 public:
  Notifier(Store& store, NotifyOptions options, base::Metrics* metrics = nullptr,
           base::Clock* clock = &base::Clock::real());
  ~Notifier();  // stop()
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  void start();
  void stop();  // finishes the exchanges under way
  void poke();  // something was committed: look now rather than at the next poll; any thread

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Declares the sender's metric families in `m` (docs/operations.md).
void declare_notify_metrics(base::Metrics& m);
// Sets its gauges read from the store (the subscriptions failing, the backlog): called by a
// daemon's collector, as collect_store_metrics.
void collect_notify_metrics(base::Metrics& m, Store& store);

// ---------------------------------------------------------------------------------------
// Views: the records as users see them (JSON), every secret as "***".

std::string iso_time(int64_t ms);  // 2026-01-02T03:04:05.678Z
json::object package_view(const PackageRecord& p);
json::value instance_view(const InstanceRecord& i);  // the record, redacted
json::object vim_view(const VimRecord& v);           // auth_cred: the summary
// SOL003 VnfLcmOpOcc field names where they exist; operationParams redacted.
json::object op_view(const OpRecord& op);
// SOL003 VnfInstance (SOL003 2.6.1, /vnflcm/v1) of an instance of package `pkg` (its
// provider, product, versions), redacted, without _links (the REST API's URLs).
json::object vnf_instance_view(const InstanceRecord& i, const PackageRecord& pkg);
// SOL005 VnfPkgInfo of a stored package, without _links; `in_use`: an instance refers to
// it. The VNF fields only once ONBOARDED; a failed onboarding's reason as
// onboardingFailureDetails (a ProblemDetails, SOL005 2.7's name).
json::object vnf_package_view(const PackageRecord& p, bool in_use);
json::object event_view(const EventRecord& e);

// Where an operation's time went (vnflow op show --timing), from its history: `wall` from
// the request to its settled state (or to `now_ms` while it runs), split into
//   queue    the request to the first PROCESSING (waiting for a daemon),
//   paused   FAILED_TEMP until a daemon resumes it (the operator's retry or rollback),
//   actions  the action calls (their intervals' union: a fan-out's items overlap),
//   timers   retry backoff and wait states, until they ended,
//   own      the rest: vnflow's stepping, commits and hand-offs (and time no daemon held it).
// Each instant counts once, in that order, so the parts add up to `wall`. Per state: its
// calls, their summed time, and its span (first dispatch to last result); a rollback's
// compensations are "<state> (rollback)". Results recorded before schema 5 carry no start:
// their calls are counted, their time is own time. docs/operations.md.
struct OpTiming {
  int64_t wall_ms = 0, queue_ms = 0, paused_ms = 0, timers_ms = 0, actions_ms = 0, own_ms = 0;
  struct StateTime {
    std::string state;
    int calls = 0;
    int64_t action_ms = 0, span_ms = 0;
  };
  std::vector<StateTime> states;  // in the order first dispatched
};
OpTiming op_timing(const OpRecord& op, const std::vector<EventRecord>& history, int64_t now_ms);
json::object timing_view(const OpTiming& t);
// The name of the state an operation is at ("" when none or unknown).
std::string op_position(Store& store, const OpRecord& op);

// ---------------------------------------------------------------------------------------
// Daemon

// Checks the database's folder (creating it 0700 when missing), the file and its key file
// before anything opens them: refused when another user could read or swap them (the
// folder writable by others, files of another owner, a key file readable by others), and
// for hard links (each name would get a WAL of its own) and empty files.
base::Status check_database(const std::string& path);
// check_database, then open_sqlite_store.
base::Result<std::unique_ptr<Store>> open_database(const std::string& path);

// Hooks run as `user` (EngineOptions::hook_user): it must exist and not be root, and the
// daemon must run as root. Messages start with `subject` ("--hook-user", "the hook user").
base::Status check_hook_user(std::string_view user, std::string_view subject = "the hook user");
// A daemon's name (DaemonOptions::name).
base::Status check_daemon_name(std::string_view name);

struct DaemonOptions {
  std::string db_path;
  std::string work_dir;  // hooks' work root; "" = the folder "work" beside the database
  // On a shared database (PostgreSQL), this daemon's name among those running on it:
  // letters, digits, '.', '_', '-' (1 to 64). Default: the host's name. Two daemons of one
  // name are refused; a restart keeps its name. On SQLite the owner is daemon-<pid>.
  std::string name;
  EngineOptions engine;  // its work_root and owner are set by the daemon
  NotifyOptions notify;  // the notification sender's (Notifier)
  actions::Registry registry = actions::Registry::standard();
  // Called on SIGHUP (on the signal thread): what the daemon's owner can read again (the
  // REST API's credentials file and TLS files). Operations go on meanwhile.
  std::function<void()> on_reload;
};

// One daemon on one database, for the CLI and a REST API alike. start(): not dumpable
// (hooks running as the daemon's user cannot read its memory: the key, VIM secrets), the
// hook user checked, SIGTERM and SIGINT caught (the first drains: running steps finish and
// are recorded, no new step starts; a second stops at once), SIGHUP caught (on_reload), the
// database checked, locked (flock on its inode, tried again for 3 s: a forked child of a daemon
// killed a moment ago may hold it) and opened, the Engine prepared. run() runs until a
// signal or stop(). Signals are caught from start() to the destructor.
class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  base::Status start();
  EngineStats run();
  void stop(bool drain);  // any thread
  void wake();            // Engine::wake, when running; any thread
  // Engine::start, or Store::create_op before start() succeeded (any thread).
  base::Status start_op(const OpRecord& op);
  // After a successful start(): the open database, shared with a REST API beside the
  // engine (a Store is thread-safe). nullptr before.
  Store* store();
  // The daemon's metrics (base::Metrics): the engine's, and the store's counts read at each
  // rendering once start() succeeded. A REST API beside the engine adds its own.
  base::Metrics& metrics();
  const DaemonOptions& options() const;  // with the work root and owner filled in

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Tells the daemon running on the database at `db` (if any) that work was queued: a
// datagram to its wake socket (`<db>.wake`, beside the file, 0600), so the operation starts
// at once instead of at the daemon's next poll. Best effort and silent: without a daemon the
// poll reads the request. On PostgreSQL it does nothing: the store's commit that queued the
// work notifies every daemon (Store::wait_for_work).
void wake_daemon(const std::string& db);

// Tells systemd (sd_notify(3), for a Type=notify unit) `message`: "READY=1" once the daemon
// and its API serve, "STOPPING=1" when it drains, "STATUS=..." lines. $NOTIFY_SOCKET is read
// at the first call (Daemon::start makes one) and removed from the environment, so hooks
// cannot speak for the daemon. Does nothing when not started by systemd.
void notify_service(std::string_view message);

// Re-seals every secret of the database at `path` with a new key (Store::rotate_key),
// holding the daemon's lock meanwhile: refused while a daemon runs on it (the daemon keeps
// the key in memory and would go on sealing with the old one).
base::Status rotate_database_key(const std::string& path);

}  // namespace engine
