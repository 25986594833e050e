// Leases on a store several daemons share (PostgreSQL; Store::register_daemon, claim, renew,
// release, and the fencing epoch every commit checks). On SQLite one daemon holds the
// database's file lock, and the defaults are checked to keep that behaviour.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/shell.h"

#include "tests/unit/engine/store_param.h"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-lease-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// One transition of `op` as an executor commits it: a cursor and an event, under `epoch`.
engine::Batch step(const engine::OpRecord& op, int64_t seq, int64_t epoch) {
  engine::Batch b;
  engine::Batch::OpWrite w;
  w.op_id = op.id;
  w.cursor = "{}";
  w.epoch = epoch;
  b.ops.push_back(w);
  engine::EventRecord e;
  e.op_id = op.id;
  e.seq = seq;
  e.at_ms = 1;
  e.kind = "op_processing";
  b.events.push_back(e);
  return b;
}

base::Status apply_one(engine::Store& s, const engine::Batch& b) {
  return s.apply({&b});
}

// Two daemons' stores on one new database, each holding the daemons' lock, and `n` queued
// operations.
struct TwoDaemons {
  TempDir dir;
  vnflow_test::TestDb db = vnflow_test::new_test_db(dir.path);
  std::unique_ptr<engine::Store> a = open(), b = open();
  std::vector<std::string> ids;
  explicit TwoDaemons(int n) { ids = vnflow_test::queue_ops(*a, n); }
  std::unique_ptr<engine::Store> open() {
    auto s = engine::open_postgres_store(db.target, db.key, engine::DbLock::kDaemon);
    REQUIRE(s.ok());
    return std::move(s).value();
  }
};

// Daemon alpha (TTL 3 s) on `t`, holding the oldest queued operation, whose next commit is
// stuck: another session holds what `lock_sql` locks, so the commit waits, holding the
// store's writer connection (and its turn), until release(). The test checks `committed`
// (false) once it is made: a check that fails then still ends the commit's thread.
struct StuckCommit {
  TwoDaemons& t;
  engine::Store::Lease lease;
  engine::OpRecord op;
  PGconn* other = nullptr;
  std::atomic<bool> committed{false};
  std::thread commit;
  StuckCommit(TwoDaemons& d, const std::string& lock_sql) : t(d) {
    auto la = t.a->register_daemon("alpha", 3000);
    REQUIRE(la.ok());
    lease = la.value();
    auto got = t.a->claim(lease, true, 1);
    REQUIRE(got.ok());
    REQUIRE(got.value().size() == 1);
    op = got.value()[0];
    other = PQconnectdb(t.db.target.c_str());
    REQUIRE(PQstatus(other) == CONNECTION_OK);
    PQclear(PQexec(other, "BEGIN"));
    std::string sql = lock_sql;
    if (auto at = sql.find("$op"); at != std::string::npos)
      sql.replace(at, 3, "'" + op.id + "'");
    PGresult* locked = PQexec(other, sql.c_str());
    bool ok =
        PQresultStatus(locked) == PGRES_COMMAND_OK || PQresultStatus(locked) == PGRES_TUPLES_OK;
    PQclear(locked);
    REQUIRE(ok);
    commit = std::thread([this] {
      engine::Batch b = step(op, 1, op.epoch);
      CHECK(apply_one(*t.a, b).ok());
      committed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  void release() {
    if (other == nullptr)
      return;
    PQclear(PQexec(other, "ROLLBACK"));
    commit.join();
    CHECK(committed);
    PQfinish(other);
    other = nullptr;
  }
  ~StuckCommit() { release(); }
};

}  // namespace

TEST_CASE("a single-daemon store: every active operation, no expiry, no fencing") {
  if (vnflow_test::on_postgres()) {
    WARN("skipped on PostgreSQL: the leases there are the tests below");
    return;
  }
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto s = db.open();
  REQUIRE(s.ok());
  auto ids = vnflow_test::queue_ops(*s.value(), 3);
  auto lease = s.value()->register_daemon("a", 5000);
  REQUIRE(lease.ok());
  CHECK(lease.value().ttl_ms == 0);
  auto ops = s.value()->claim(lease.value(), true, 1);
  REQUIRE(ops.ok());
  CHECK(ops.value().size() == 3);  // the limit is a shared store's
  CHECK(s.value()->renew(lease.value()).ok());
}

TEST_CASE("leases: one daemon per name, a restart after the lease ran out") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon, held by the file lock");
    return;
  }
  TwoDaemons t(2);
  auto& a = t.a;
  auto& b = t.b;

  auto la = a->register_daemon("alpha", 1000);
  REQUIRE(la.ok());
  CHECK(la.value().incarnation == 1);
  // The same name again, from another process: refused while the lease lasts, naming it.
  auto again = b->register_daemon("alpha", 1000);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(again.status().message().find("a daemon named \"alpha\" is running") != std::string::npos);
  // Another name is welcome.
  auto lb = b->register_daemon("beta", 1000);
  REQUIRE(lb.ok());
  CHECK(b->register_daemon("", 1000).status().code() == base::StatusCode::kInvalidArgument);

  auto got = a->claim(la.value(), true, 10);
  REQUIRE(got.ok());
  REQUIRE(got.value().size() == 2);
  for (const auto& op : got.value()) {
    CHECK(op.owner == "alpha");
    CHECK(op.epoch > 0);
  }
  // beta finds nothing: alpha holds both and is alive.
  CHECK(b->claim(lb.value(), true, 10).value().empty());

  // alpha stops renewing (killed). Once its lease ran out, a restart of alpha registers
  // (a new start) and its operations are back in the pool; the old start's renewal fails.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto la2 = b->register_daemon("alpha", 1000);
  REQUIRE(la2.ok());
  CHECK(la2.value().incarnation == 2);
  base::Status lost = a->renew(la.value());
  CHECK(lost.code() == base::StatusCode::kAborted);
  CHECK(lost.message().find("ran out or was replaced") != std::string::npos);
  CHECK(b->renew(la2.value()).ok());
  for (const auto& id : t.ids) {
    auto op = a->get_op(id);
    REQUIRE(op.ok());
    CHECK(op.value().owner.empty());
  }
}

TEST_CASE("leases: a daemon past its lease cannot commit over the one that took its work") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon, held by the file lock");
    return;
  }
  TwoDaemons t(1);
  auto& a = t.a;
  auto& b = t.b;
  auto la = a->register_daemon("alpha", 1000);
  auto lb = b->register_daemon("beta", 1000);
  REQUIRE(la.ok());
  REQUIRE(lb.ok());
  auto mine = a->claim(la.value(), true, 10);
  REQUIRE(mine.ok());
  REQUIRE(mine.value().size() == 1);
  const engine::OpRecord old = mine.value()[0];
  // alpha commits while it holds the operation.
  engine::Batch first = step(old, 1, old.epoch);
  REQUIRE(apply_one(*a, first).ok());
  CHECK_FALSE(first.fenced);

  // alpha is paused past its lease (SIGSTOP); beta keeps renewing and takes the work over.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    REQUIRE(b->renew(lb.value()).ok());
  }
  auto taken = b->claim(lb.value(), false, 10);
  REQUIRE(taken.ok());
  REQUIRE(taken.value().size() == 1);
  CHECK(taken.value()[0].owner == "beta");
  CHECK(taken.value()[0].epoch > old.epoch);
  engine::Batch theirs = step(taken.value()[0], 2, taken.value()[0].epoch);
  REQUIRE(apply_one(*b, theirs).ok());
  CHECK_FALSE(theirs.fenced);

  // alpha wakes up and commits what it had decided: fenced, nothing of it written.
  engine::Batch stale = step(old, 3, old.epoch);
  REQUIRE(apply_one(*a, stale).ok());
  CHECK(stale.fenced);
  auto h = b->history(old.id);
  REQUIRE(h.ok());
  REQUIRE(h.value().size() == 2);
  CHECK(h.value()[0].seq == 1);
  CHECK(h.value()[1].seq == 2);
  auto now = b->get_op(old.id);
  REQUIRE(now.ok());
  CHECK(now.value().owner == "beta");
  CHECK(now.value().epoch == taken.value()[0].epoch);
  // And alpha learns it: its renewal says the lease is gone.
  CHECK(a->renew(la.value()).code() == base::StatusCode::kAborted);

  // beta stops cleanly: the operation is back in the pool at once, for alpha's next start.
  b->release(lb.value());
  auto la2 = a->register_daemon("alpha", 1000);
  REQUIRE(la2.ok());
  auto back = a->claim(la2.value(), true, 10);
  REQUIRE(back.ok());
  REQUIRE(back.value().size() == 1);
  CHECK(back.value()[0].epoch > taken.value()[0].epoch);
}

TEST_CASE("leases: concurrent claims never hand one operation to two daemons") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon, held by the file lock");
    return;
  }
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto setup = db.open();
  REQUIRE(setup.ok());
  const int kOps = 400;
  auto ids = vnflow_test::queue_ops(*setup.value(), kOps);
  const int kDaemons = 4;
  std::vector<std::unique_ptr<engine::Store>> stores;
  std::vector<engine::Store::Lease> leases;
  for (int d = 0; d < kDaemons; ++d) {
    auto s = engine::open_postgres_store(db.target, db.key, engine::DbLock::kDaemon);
    REQUIRE(s.ok());
    auto l = s.value()->register_daemon("d" + std::to_string(d), 30000);
    REQUIRE(l.ok());
    stores.push_back(std::move(s).value());
    leases.push_back(l.value());
  }
  std::mutex mu;
  std::map<std::string, std::vector<int>> claimed_by;  // op -> daemons that got it
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int d = 0; d < kDaemons; ++d) {
    threads.emplace_back([&, d] {
      for (int round = 0; round < 200; ++round) {
        auto got = stores[static_cast<size_t>(d)]->claim(leases[static_cast<size_t>(d)], false, 7);
        if (!got.ok()) {
          failures++;
          return;
        }
        if (got.value().empty())
          return;
        std::lock_guard<std::mutex> l(mu);
        for (const auto& op : got.value())
          claimed_by[op.id].push_back(d);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(claimed_by.size() == static_cast<size_t>(kOps));
  size_t doubles = 0;
  std::set<int> daemons_that_got_some;
  for (const auto& [id, who] : claimed_by) {
    doubles += who.size() > 1 ? 1 : 0;
    daemons_that_got_some.insert(who.front());
  }
  CHECK(doubles == 0);
  CHECK(daemons_that_got_some.size() >= 2);  // the work is spread, not taken by one
}

TEST_CASE("a group commit writes each batch's text as given, and fences only its own batch") {
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto s = db.open();
  REQUIRE(s.ok());
  auto& store = *s.value();
  auto ids = vnflow_test::queue_ops(store, 3);
  // Text a SQL literal or an array literal could get wrong.
  const std::vector<std::string> nasty = {"NULL",
                                          "{\"a\",\"b\"}",
                                          "back\\slash \"quote\" 'tick' ,comma {brace}",
                                          "line\nbreak",
                                          "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93",
                                          ""};
  std::vector<engine::Batch> batches;
  for (size_t i = 0; i < ids.size(); ++i) {
    engine::OpRecord op;
    op.id = ids[i];
    engine::Batch b = step(op, 1, 0);
    b.ops[0].cursor = json::serialize(json::object{{"n", nasty[i]}, {"m", nasty[i + 3]}});
    b.ops[0].set_error = true;
    b.ops[0].error = json::serialize(json::object{{"message", nasty[i + 1]}});
    b.events[0].key = nasty[i];
    b.events[0].state = nasty[i + 2];
    b.events[0].data = json::object{{"stdout", nasty[i + 3]}};
    b.outputs.push_back({op.id, nasty[i + 1], json::serialize(json::value(nasty[i]))});
    batches.push_back(std::move(b));
  }
  // The second operation was forced out of the running states (op fail --force): its
  // batch is fenced, the other two are written.
  REQUIRE(engine::fail_operation(store, ids[1], true).ok());
  std::vector<const engine::Batch*> group;
  for (const auto& b : batches)
    group.push_back(&b);
  REQUIRE(store.apply(group).ok());
  CHECK_FALSE(batches[0].fenced);
  CHECK(batches[1].fenced);
  CHECK_FALSE(batches[2].fenced);
  for (size_t i : {size_t{0}, size_t{2}}) {
    auto op = store.get_op(ids[i]);
    REQUIRE(op.ok());
    CHECK(op.value().cursor.at("n").as_string() == nasty[i]);
    CHECK(op.value().cursor.at("m").as_string() == nasty[i + 3]);
    CHECK(op.value().error.at("message").as_string() == nasty[i + 1]);
    auto h = store.history(ids[i]);
    REQUIRE(h.ok());
    REQUIRE(h.value().size() == 1);
    CHECK(h.value()[0].key == nasty[i]);
    CHECK(h.value()[0].state == nasty[i + 2]);
    CHECK(h.value()[0].data.at("stdout").as_string() == nasty[i + 3]);
    auto out = store.outputs(ids[i]);
    REQUIRE(out.ok());
    REQUIRE(out.value().contains(nasty[i + 1]));
    CHECK(out.value().at(nasty[i + 1]).as_string() == nasty[i]);
  }
  CHECK(store.history(ids[1]).value().empty());
}

TEST_CASE("leases: a renewal does not wait behind a commit stuck on a lock") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon, no lease to renew");
    return;
  }
  TwoDaemons t(1);
  // Another session holds the operations table.
  StuckCommit stuck(t, "LOCK TABLE ops IN ACCESS EXCLUSIVE MODE");
  REQUIRE_FALSE(stuck.committed);

  // The lease is renewed meanwhile, at once: a renewal queued behind that commit would let
  // the lease run out while the daemon is alive (and its operations go to another daemon).
  auto t0 = std::chrono::steady_clock::now();
  base::Status renewed = t.a->renew(stuck.lease);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(renewed.ok());
  CHECK(took < std::chrono::milliseconds(1000));
  CHECK_FALSE(stuck.committed);
  stuck.release();
}

TEST_CASE("leases: a claim does not wait behind a commit stuck on a row lock") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon claims nothing");
    return;
  }
  TwoDaemons t(2);
  // Another session holds the claimed operation's row.
  StuckCommit stuck(t, "SELECT id FROM ops WHERE id = $op FOR UPDATE");
  REQUIRE_FALSE(stuck.committed);

  // The engine's next poll takes the other queued operation at once: a claim queued behind
  // that commit would stall the daemon's intake for as long as the lock is held.
  auto claim = std::async(std::launch::async, [&] { return t.a->claim(stuck.lease, false, 10); });
  bool answered = claim.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  CHECK(answered);
  stuck.release();
  auto second = claim.get();
  REQUIRE(second.ok());
  REQUIRE(second.value().size() == 1);
  CHECK(second.value()[0].id != stuck.op.id);
}

TEST_CASE("leases: a daemon whose engine makes no progress lets its lease run out") {
  // The renewal has a thread and a connection of its own; without a sign of progress from
  // the engine thread it would keep a wedged daemon's operations for ever.
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: one daemon, no lease to renew");
    return;
  }
  TwoDaemons t(1);
  engine::LeaseKeeper keeper(*t.a, "alpha", std::chrono::milliseconds(1000),
                             std::chrono::milliseconds(50));
  std::atomic<bool> give_up{false};
  REQUIRE(keeper.acquire(give_up, [](const std::string&) {}).ok());
  auto mine = t.a->claim(keeper.lease(), true, 10);
  REQUIRE(mine.ok());
  REQUIRE(mine.value().size() == 1);
  auto lb = t.b->register_daemon("beta", 60000);  // beta stays alive without a renewer
  REQUIRE(lb.ok());

  // Beating: the lease is renewed well past its TTL; beta gets nothing.
  std::atomic<bool> beating{true};
  std::thread engine_thread([&] {
    while (beating) {
      keeper.beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto none = t.b->claim(lb.value(), false, 10);
  REQUIRE(none.ok());
  CHECK(none.value().empty());

  // Wedged (no beat): not renewed; within the TTL and a half (and the renewer's period) the
  // lease has run out and beta takes the operation.
  beating = false;
  engine_thread.join();
  std::vector<engine::OpRecord> taken;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (taken.empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto got = t.b->claim(lb.value(), false, 10);
    REQUIRE(got.ok());
    taken = got.value();
  }
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].id == mine.value()[0].id);
  keeper.stop();
}

namespace {

// Sleeps `ms`, then answers how much of its deadline was left when it started.
class Slow : public actions::Action {
 public:
  explicit Slow(int ms) : ms_(ms) {}
  mutable std::atomic<int> runs{0};
  actions::Outcome run(const json::object&, const actions::Context& ctx) const override {
    ++runs;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    ctx.deadline - std::chrono::steady_clock::now())
                    .count();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return actions::Outcome::success(json::object{{"left_ms", left}});
  }

 private:
  int ms_;
};

// `n` calls of `slow` with `timeout` each, dispatched at once.
void dispatch(engine::Dispatcher& d, const Slow& slow, int n, std::chrono::milliseconds timeout) {
  for (int i = 0; i < n; ++i) {
    engine::Dispatcher::Call c;
    c.action = &slow;
    c.action_name = "test.slow";
    c.inputs = json::object{};
    c.id = "op" + std::to_string(i);
    c.ctx.deadline = std::chrono::steady_clock::now() + timeout;
    d.add(std::move(c));
  }
  d.flush();
}

// Runs `io` (the results' handlers) until `done` or 10 s.
template <typename F>
void run_until(boost::asio::io_context& io, F done) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < give_up) {
    io.restart();
    io.run_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TEST_CASE("the dispatcher: a state's timeout counts from its call's start, not its queueing") {
  // One worker, three calls of 150 ms dispatched at once, each with 300 ms: the third
  // starts about 300 ms after its dispatch, and must still have its 300 ms.
  boost::asio::io_context io;
  std::atomic<bool> stopping{false}, hard_stop{false};
  std::vector<int64_t> left;
  engine::Dispatcher d(io, 1, nullptr, &base::Clock::real(), stopping, hard_stop,
                       [&](std::vector<engine::Dispatcher::Result>& rs) {
                         for (auto& r : rs)
                           left.push_back(r.out.outputs.at("left_ms").as_int64());
                       });
  Slow slow(150);
  dispatch(d, slow, 3, std::chrono::milliseconds(300));
  run_until(io, [&] { return left.size() == 3; });
  d.join();
  REQUIRE(left.size() == 3);
  for (int64_t l : left)
    CHECK(l >= 200);  // without the fix: about 300, 150 and 0
}

TEST_CASE("the dispatcher: a daemon stopping at once starts no call still waiting for a worker") {
  boost::asio::io_context io;
  std::atomic<bool> stopping{false}, hard_stop{false};
  std::vector<int64_t> polls;
  engine::Dispatcher d(io, 1, nullptr, &base::Clock::real(), stopping, hard_stop,
                       [&](std::vector<engine::Dispatcher::Result>& rs) {
                         for (auto& r : rs)
                           polls.push_back(r.out.poll_after_ms);
                       });
  Slow slow(200);
  dispatch(d, slow, 3, std::chrono::seconds(5));
  // The first call runs (its worker started it), the other two wait for the worker.
  auto started_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (slow.runs == 0 && std::chrono::steady_clock::now() < started_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(slow.runs == 1);
  hard_stop = true;
  run_until(io, [&] { return polls.size() == 3; });
  d.join();
  REQUIRE(polls.size() == 3);
  // The running call finished; the two queued ones were left dispatched (a poll), unrun.
  CHECK(slow.runs == 1);
  CHECK(std::count_if(polls.begin(), polls.end(), [](int64_t p) { return p > 0; }) == 2);
}

TEST_CASE("PostgreSQL: a read or a commit stuck on a lock gives up after the statement timeout") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: its readers never wait on the writer; its writer has busy_timeout");
    return;
  }
  TwoDaemons t(1);
  std::string url = t.db.target;
  struct Env {
    explicit Env(const char* v) { ::setenv("VNFLOW_PG_STATEMENT_TIMEOUT_MS", v, 1); }
    ~Env() { ::unsetenv("VNFLOW_PG_STATEMENT_TIMEOUT_MS"); }
  };
  std::optional<Env> env;
  SECTION("vnflow's bound, on a session without one (400 ms by the environment)") {
    env.emplace("400");
  }
  SECTION("the session's own bound wins (the URL's 400 ms over 60 s)") {
    env.emplace("60000");
    REQUIRE(url.find("options=") != std::string::npos);
    url += "%20-cstatement_timeout%3D400";
  }
  auto opened = engine::open_postgres_store(url, t.db.key, engine::DbLock::kDaemon);
  REQUIRE(opened.ok());
  engine::Store& s = *opened.value();
  const std::string id = t.ids[0];
  REQUIRE(s.get_op(id).ok());  // both connections made before the lock
  PGconn* other = PQconnectdb(t.db.target.c_str());
  REQUIRE(PQstatus(other) == CONNECTION_OK);
  // Without a bound the read would wait for ever: the lock's session ends itself after 8 s.
  PQclear(PQexec(other, "SET idle_in_transaction_session_timeout = 8000"));
  PQclear(PQexec(other, "BEGIN"));
  PGresult* locked = PQexec(other, "LOCK TABLE ops IN ACCESS EXCLUSIVE MODE");
  bool ok = PQresultStatus(locked) == PGRES_COMMAND_OK;
  PQclear(locked);
  CHECK(ok);
  auto t0 = std::chrono::steady_clock::now();
  auto r = s.get_op(id);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.status().code() == base::StatusCode::kUnavailable);
  CHECK(r.status().message().find("statement timeout") != std::string::npos);
  CHECK(took >= std::chrono::milliseconds(300));
  CHECK(took < std::chrono::seconds(5));
  t0 = std::chrono::steady_clock::now();
  base::Status st =
      s.transition(id, {engine::OpState::kStarting}, engine::OpState::kFailed, std::nullopt)
          .status();
  CHECK(st.code() == base::StatusCode::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  PQclear(PQexec(other, "ROLLBACK"));
  PQfinish(other);
  // The lock gone, the same store reads again.
  CHECK(s.get_op(id).ok());
}
