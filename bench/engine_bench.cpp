// engine_bench.cpp: the durable executor (engine::Engine on the SQLite Store) beside raw
// SQLite commits, in the same run, on the same disk. See bench/README.md, "Engine bench".
//
//   (a) raw SQLite: WAL, synchronous=FULL, BEGIN IMMEDIATE; INSERT one ~300-byte row;
//       COMMIT (the peer of ../shared/research/bench/sqlite_commit.cpp, mode wal_full).
//       Measured twice (before (b) and after (c)); the mean is the baseline.
//   (b) one operation, a chain of K action states: committed transitions per second, from
//       the end of its first commit to the end of its last (as (a) times its loop, not its
//       setup); beside it the rate over the whole run, the engine's start (claim, load, the
//       machine parsed once) and stop included.
//   (c) P concurrent operations, chains of M states: durable transitions per second and
//       the group-commit size (transitions per transaction).
//   (d) resume: R operations left PROCESSING, parked in a started 24h wait (as a crash
//       leaves them); time from Engine construction until every one is resumed and its
//       resumption committed (EngineStats.batches >= R).
//   (f) --notify [--notify-rounds N]: (c) again with one subscription matching every
//       operation, its receiver a bare HTTP/1.1 server in this process on 127.0.0.1
//       (keep-alive, 204), the daemon's Notifier sending beside the Engine. N rounds (3
//       unless set), each a run with the subscription between two plain runs: the median
//       transitions per second with it against the plain runs' median, and the delivery
//       latency from a change's commit (the notification's timeStamp) to its receipt, over
//       the notifications of every round.
//   (e) RSS per in-flight operation: VmRSS before the Engine of (d) exists and once all R
//       operations are resident, divided by R.
//
// Actions: the machines are compiled by workflows::compile_file against the real catalog,
// so their states call `local.exec`; the Registry given to the Engine maps "local.exec"
// to a no-op that returns local.exec-shaped outputs at once. No process is spawned.
//
// Build: a Meson target built only with -Dbench=true (bench/meson.build); bench/engine.sh
// builds it in the release build: ninja -C build-release bench/engine_bench.
// Usage: engine_bench [--dir DIR] [--raw-n N] [--chain K] [--ops P] [--op-states M]
//                     [--resume R] [--sweep K1,K2,...]
// Prints `name: value unit` lines and `floor ...: PASS|FAIL` lines; exit 0 (3 with
// --check-floors when a floor fails).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/json.hpp>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "workflows/workflows.h"

#include "tests/fakes/callback_server.h"
#include "tests/fakes/store_wrapper.h"

#include "bench/bench_util.h"

namespace fs = std::filesystem;
namespace json = boost::json;
using bench::Clock;
using bench::compile_machine;
using bench::Compiled;
using bench::die;
using bench::must;
using bench::secs_since;

namespace {

bool g_empty_outputs = false;  // --empty-outputs: the no-op returns {} (diagnosis only)

std::string fresh_db(const std::string& dir, const std::string& name) {
  std::string path = dir + "/" + name;
  for (const char* suf : {"", "-wal", "-shm", "-journal"})
    ::unlink((path + suf).c_str());
  return path;
}

void remove_db(const std::string& path) {
  for (const char* suf : {"", "-wal", "-shm", "-journal"})
    ::unlink((path + suf).c_str());
}

long vm_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// (a) raw SQLite, the sqlite_commit.cpp wal_full mode

void sql_exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK)
    die(std::string("sqlite: ") + sql + ": " + (err ? err : "?"));
}

std::string uuid4(std::mt19937_64& rng) {
  static const char* hex = "0123456789abcdef";
  std::string s(36, '0');
  for (int i = 0; i < 36; ++i)
    s[static_cast<size_t>(i)] = hex[rng() & 15];
  s[8] = s[13] = s[18] = s[23] = '-';
  s[14] = '4';
  return s;
}

std::string raw_payload(const std::string& op, long seq, const char* state, std::mt19937_64& rng) {
  char buf[512];
  int n = std::snprintf(
      buf, sizeof buf,
      "{\"op_id\":\"%s\",\"seq\":%ld,\"state\":\"%s\",\"step\":\"heal_vdu_%ld\","
      "\"kind\":\"heat.stack_update\",\"stack_id\":\"%s\",\"attempt\":1,"
      "\"target\":{\"host\":\"10.0.0.%ld\",\"port\":22},"
      "\"outputs\":{\"rc\":0,\"stdout_sha256\":\"%016llx%016llx\"},\"retry_after_s\":null}",
      op.c_str(), seq, state, seq % 7, uuid4(rng).c_str(), 1 + seq % 250,
      static_cast<unsigned long long>(rng()), static_cast<unsigned long long>(rng()));
  return std::string(buf, static_cast<size_t>(n));
}

struct RawResult {
  double commits_per_s = 0;
  double p50_us = 0, p99_us = 0;
  size_t payload_bytes = 0;
};

RawResult raw_sqlite(const std::string& dir, long n) {
  std::string path = fresh_db(dir, "raw.db");
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK)
    die("sqlite open " + path);
  sql_exec(db, "PRAGMA journal_mode=WAL");
  sql_exec(db, "PRAGMA synchronous=FULL");
  sql_exec(db,
           "CREATE TABLE checkpoint(id INTEGER PRIMARY KEY, op_id TEXT NOT NULL, "
           "seq INTEGER NOT NULL, state TEXT NOT NULL, payload TEXT NOT NULL, ts TEXT NOT NULL, "
           "UNIQUE(op_id, seq))");
  sqlite3_stmt *ins = nullptr, *begin = nullptr, *commit = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO checkpoint(op_id, seq, state, payload, ts) VALUES(?,?,?,?,?)",
                     -1, &ins, nullptr);
  sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, nullptr);
  sqlite3_prepare_v2(db, "COMMIT", -1, &commit, nullptr);
  std::mt19937_64 rng(1234);
  static const char* states[] = {"PENDING", "RUNNING", "HEAT_CALLED", "SSH_RUNNING", "DONE"};
  std::vector<std::string> ops;
  for (int i = 0; i < 50; ++i)
    ops.push_back(uuid4(rng));
  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(n));
  size_t bytes = 0;
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    auto c0 = Clock::now();
    if (sqlite3_step(begin) != SQLITE_DONE)
      die("begin");
    sqlite3_reset(begin);
    const std::string& op = ops[static_cast<size_t>(i % 50)];
    long seq = i / 50;
    const char* state = states[seq % 5];
    std::string pl = raw_payload(op, seq, state, rng);
    bytes += pl.size();
    char ts[32];
    std::snprintf(ts, sizeof ts, "%lld", static_cast<long long>(engine::now_ms()));
    sqlite3_bind_text(ins, 1, op.c_str(), static_cast<int>(op.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 2, seq);
    sqlite3_bind_text(ins, 3, state, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 4, pl.c_str(), static_cast<int>(pl.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(ins, 5, ts, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(ins) != SQLITE_DONE)
      die("insert");
    sqlite3_reset(ins);
    if (sqlite3_step(commit) != SQLITE_DONE)
      die("commit");
    sqlite3_reset(commit);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
  }
  double wall = secs_since(t0);
  sqlite3_finalize(ins);
  sqlite3_finalize(begin);
  sqlite3_finalize(commit);
  sqlite3_close(db);
  remove_db(path);
  std::sort(lat.begin(), lat.end());
  RawResult r;
  r.commits_per_s = static_cast<double>(n) / wall;
  r.p50_us = lat[lat.size() / 2];
  r.p99_us = lat[static_cast<size_t>(0.99 * static_cast<double>(lat.size() - 1))];
  r.payload_bytes = bytes / static_cast<size_t>(n);
  return r;
}

// ---------------------------------------------------------------------------------------
// The engine side

// An action, then a 24h wait, then succeed: what an operation parked in a wait looks like.
const char* kParkYaml = R"(description: bench park
start: prepare
states:
  prepare:
    action: local.exec
    with:
      command: ["true"]
    timeout: 10s
    next: park
  park:
    wait: 24h
    next: done
  done:
    succeed: true
)";

struct Bed {
  std::string path;
  std::unique_ptr<engine::Store> store;
  std::string package_id;

  explicit Bed(const std::string& dir, const std::string& name) {
    path = fresh_db(dir, name);
    store = must(engine::open_sqlite_store(path), "open store");
    // As the daemon opens it (Daemon::start): its log written out once, so that commits
    // overwrite it in place. The raw peer reuses its own log after its first automatic
    // checkpoint (1,000 pages), i.e. for most of its commits.
    if (base::Status s = store->reserve_log(); !s.ok())
      std::fprintf(stderr, "engine_bench: %s\n", s.message().c_str());
    engine::PackageRecord p;
    p.id = engine::new_id();
    p.digest = "bench-" + p.id;
    p.name = "bench";
    p.provider = "bench";
    p.product = "bench";
    p.version = "1";
    p.vnfd_id = "bench-vnfd";
    p.onboarded_ms = engine::now_ms();
    package_id = must(store->put_package(p, std::string("PK")), "put_package").id;
  }
  ~Bed() {
    store.reset();
    if (std::getenv("BENCH_KEEP_DB") == nullptr)  // BENCH_KEEP_DB=1: kept for inspection
      remove_db(path);
  }

  void put_machine(const workflows::Machine& m) {
    must(store->put_machine(m.digest, json::serialize(m.to_json())), "put_machine");
  }

  std::string instance() {
    engine::InstanceRecord r;
    r.id = engine::new_id();
    r.package_id = package_id;
    r.name = "vnf-" + r.id.substr(0, 8);
    r.instantiation_state = "NOT_INSTANTIATED";
    r.created_ms = engine::now_ms();
    r.record = json::object{{"id", r.id},
                            {"name", r.name},
                            {"package_id", r.package_id},
                            {"vnfd_id", "bench-vnfd"},
                            {"instantiation_state", "NOT_INSTANTIATED"}};
    must(store->create_instance(r), "create_instance");
    return r.id;
  }

  std::string op(const std::string& instance_id, const workflows::Machine& m,
                 engine::OpState state = engine::OpState::kStarting, json::value cursor = nullptr) {
    engine::OpRecord o;
    o.id = engine::new_id();
    o.instance_id = instance_id;
    o.operation = "instantiate";
    o.state = state;
    o.machine_digest = m.digest;
    o.package_digest = m.package_digest;
    o.request = json::object{{"flavourId", "simple"}};
    o.cursor = std::move(cursor);
    o.created_ms = engine::now_ms();
    must(store->create_op(o), "create_op");
    return o.id;
  }

  size_t count_state(engine::OpState s) {
    engine::OpFilter f;
    f.state = s;
    f.limit = 1000000;
    return must(store->list_ops(f), "list_ops").size();
  }
};

engine::EngineOptions options(const std::string& dir) {
  engine::EngineOptions o;
  o.work_root = dir + "/work";
  return o;
}

actions::Registry registry(std::atomic<uint64_t>* calls) {
  return bench::noop_registry(calls, g_empty_outputs);
}

// Passes everything to the real store and times apply() (the writer thread's commits), so
// the report can split a transition's time into "in SQLite" and "in the executor".
class TimedStore : public vnflow_test::StoreWrapper {
 public:
  explicit TimedStore(engine::Store& s) : StoreWrapper(s) {}
  std::atomic<uint64_t> apply_ns{0}, applies{0};
  // Per-transition latency: for each operation, the time from one of its commits to the
  // next (the step, the hand-offs, the action, the queue and the commit itself). Only the
  // engine thread commits, so no lock.
  std::unordered_map<std::string, Clock::time_point> last_commit;
  std::vector<double> latency_us;
  Clock::time_point first_end{}, last_end{};  // the first and the last commit's end
  uint64_t committed = 0;                     // batches in successful commits
  base::Status apply(const std::vector<const engine::Batch*>& b) override {
    auto t0 = Clock::now();
    base::Status st = StoreWrapper::apply(b);
    auto t1 = Clock::now();
    apply_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    applies++;
    if (st.ok()) {
      if (committed == 0)
        first_end = t1;
      last_end = t1;
      committed += b.size();
      for (const engine::Batch* batch : b) {
        for (const auto& o : batch->ops) {
          auto [it, fresh] = last_commit.try_emplace(o.op_id, t1);
          if (!fresh) {
            latency_us.push_back(
                std::chrono::duration<double, std::micro>(t1 - it->second).count());
            it->second = t1;
          }
        }
      }
    }
    return st;
  }
};

// The q-quantile of `v` (sorted in place); 0 when empty.
double quantile(std::vector<double>& v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

struct RunResult {
  double wall_s = 0;
  engine::EngineStats st;
  uint64_t calls = 0;
  double apply_us = 0;            // mean time of one Store::apply (one commit)
  double p50_us = 0, p99_us = 0;  // per-transition latency
  // From the end of the first commit to the end of the last: the transitions after the
  // first, at the rate the raw peer is timed at (its loop, not its setup). wall_s also
  // holds the engine's start (a 2,000-state machine parsed once: 30 ms) and its stop.
  double steady_s = 0;
  uint64_t steady_transitions = 0;
};

RunResult run_until_idle(const std::string& dir, engine::Store& store,
                         std::function<void()> on_commit = {}) {
  std::atomic<uint64_t> calls{0};
  TimedStore timed(store);
  RunResult r;
  auto t0 = Clock::now();
  {
    engine::EngineOptions o = options(dir);
    o.on_commit = std::move(on_commit);
    engine::Engine e(timed, registry(&calls), o);
    e.run_until_idle();
    r.wall_s = secs_since(t0);
    r.st = e.stats();
  }
  r.calls = calls.load();
  if (timed.committed > 1) {
    r.steady_s = std::chrono::duration<double>(timed.last_end - timed.first_end).count();
    // The first commit's batches end at first_end: the rest are timed.
    r.steady_transitions = timed.committed - 1;
  }
  r.p50_us = quantile(timed.latency_us, 0.5);
  r.p99_us = quantile(timed.latency_us, 0.99);
  if (timed.applies > 0)
    r.apply_us = static_cast<double>(timed.apply_ns) / 1000.0 / static_cast<double>(timed.applies);
  return r;
}

// (b) one operation, a chain of k states.
struct ChainResult {
  double tps = 0;             // steady (RunResult::steady_s)
  double tps_with_start = 0;  // over the whole run, the engine's start and stop included
  double wall_s = 0;
  double compile_s = 0;
  engine::EngineStats st;
  size_t cursor_bytes = 0;
  double apply_us = 0;
  double p50_us = 0, p99_us = 0;
};

ChainResult single_chain(const std::string& dir, int k) {
  Bed bed(dir, "chain.db");
  Compiled c = compile_machine("chain.yaml", bench::chain_yaml(k));
  bed.put_machine(*c.m);
  std::string op = bed.op(bed.instance(), *c.m);
  RunResult r = run_until_idle(dir, *bed.store);
  auto rec = must(bed.store->get_op(op), "get_op");
  if (rec.state != engine::OpState::kCompleted)
    die("chain op ended " + std::string(engine::to_string(rec.state)) + ": " +
        json::serialize(rec.error));
  if (r.calls != static_cast<uint64_t>(k))
    die("chain: " + std::to_string(r.calls) + " action calls, expected " + std::to_string(k));
  ChainResult out;
  out.wall_s = r.wall_s;
  out.st = r.st;
  out.tps_with_start = static_cast<double>(r.st.batches) / r.wall_s;
  out.tps =
      r.steady_s > 0 ? static_cast<double>(r.steady_transitions) / r.steady_s : out.tps_with_start;
  out.compile_s = c.compile_s;
  out.cursor_bytes = json::serialize(rec.cursor).size();
  out.apply_us = r.apply_us;
  out.p50_us = r.p50_us;
  out.p99_us = r.p99_us;
  return out;
}

// (c) p concurrent operations, chains of m states.
struct ConcResult {
  double tps = 0;
  double wall_s = 0;
  double setup_s = 0;
  engine::EngineStats st;
  double apply_us = 0;
  double p50_us = 0, p99_us = 0;
};

ConcResult concurrent(const std::string& dir, int p, int m) {
  Bed bed(dir, "concurrent.db");
  Compiled c = compile_machine("chain.yaml", bench::chain_yaml(m));
  bed.put_machine(*c.m);
  auto t0 = Clock::now();
  for (int i = 0; i < p; ++i)
    bed.op(bed.instance(), *c.m);
  double setup = secs_since(t0);
  RunResult r = run_until_idle(dir, *bed.store);
  size_t done = bed.count_state(engine::OpState::kCompleted);
  if (done != static_cast<size_t>(p))
    die("concurrent: " + std::to_string(done) + " of " + std::to_string(p) + " completed");
  if (r.calls != static_cast<uint64_t>(p) * static_cast<uint64_t>(m))
    die("concurrent: " + std::to_string(r.calls) + " action calls");
  ConcResult out;
  out.wall_s = r.wall_s;
  out.st = r.st;
  out.tps = static_cast<double>(r.st.batches) / r.wall_s;
  out.setup_s = setup;
  out.apply_us = r.apply_us;
  out.p50_us = r.p50_us;
  out.p99_us = r.p99_us;
  return out;
}

// (f) The receiver: tests/fakes/callback_server.h. A notification's latency is from its
// timeStamp (the change's commit, ms) to its receipt; a repeat (at least once) has the same id
// and counts once.
std::vector<double> delivery_latencies(
    const std::vector<vnflow_test::CallbackServer::Post>& posts) {
  std::set<std::string> ids;
  std::vector<double> out;
  for (const auto& p : posts) {
    size_t ts = p.body.find("\"timeStamp\":\"");
    size_t idp = p.body.find("\"id\":\"");
    if (ts == std::string::npos || idp == std::string::npos ||
        !ids.insert(p.body.substr(idp + 6, 36)).second)
      continue;
    std::tm tm{};
    int ms = 0;
    if (std::sscanf(p.body.c_str() + ts + 13, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon,
                    &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
      continue;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t at = static_cast<int64_t>(::timegm(&tm)) * 1000 + ms;
    out.push_back(static_cast<double>(p.received_ms - at));
  }
  return out;
}

struct NotifyResult {
  ConcResult c;
  double drain_s = 0;             // after the engine went idle, until the last notification arrived
  std::vector<double> latencies;  // ms, one per notification
};

NotifyResult concurrent_notify(const std::string& dir, int p, int m) {
  Bed bed(dir, "notify.db");
  Compiled c = compile_machine("chain.yaml", bench::chain_yaml(m));
  bed.put_machine(*c.m);
  vnflow_test::CallbackServer rx;
  engine::NotifyOptions no;
  no.test_callback = false;
  no.base_url = "http://127.0.0.1:9890";
  auto t0 = Clock::now();
  for (int i = 0; i < p; ++i)
    bed.op(bed.instance(), *c.m);
  double setup = secs_since(t0);
  // Subscribed once the operations are queued: what it hears of is the run's own changes
  // (a notice from the setup would measure the wait for the run, not the delivery).
  must(engine::create_subscription(*bed.store, "vnflcm/v1", json::object{{"callbackUri", rx.uri()}},
                                   no),
       "create_subscription");
  // PROCESSING and COMPLETED of each operation.
  size_t expected = static_cast<size_t>(p) * 2;
  NotifyResult out;
  engine::Notifier n(*bed.store, no);
  n.start();
  RunResult r = run_until_idle(dir, *bed.store, [&n] { n.poke(); });
  auto idle = Clock::now();
  while (delivery_latencies(rx.answered()).size() < expected && secs_since(idle) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  out.drain_s = secs_since(idle);
  n.stop();
  size_t done = bed.count_state(engine::OpState::kCompleted);
  if (done != static_cast<size_t>(p))
    die("notify: " + std::to_string(done) + " of " + std::to_string(p) + " completed");
  out.latencies = delivery_latencies(rx.answered());
  if (out.latencies.size() != expected)
    die("notify: " + std::to_string(out.latencies.size()) + " notifications received, expected " +
        std::to_string(expected));
  out.c.wall_s = r.wall_s;
  out.c.st = r.st;
  out.c.tps = static_cast<double>(r.st.batches) / r.wall_s;
  out.c.setup_s = setup;
  out.c.apply_us = r.apply_us;
  out.c.p50_us = r.p50_us;
  out.c.p99_us = r.p99_us;
  return out;
}

// (d) + (e) resume of n parked operations, and their resident memory.
struct ResumeResult {
  double setup_s = 0;
  double resume_s = 0;  // Engine construction -> all n resumptions committed
  double first_commit_s = 0;
  double construct_s = 0;
  engine::EngineStats st;
  long rss_before_kib = 0, rss_after_kib = 0;
  long rss_after_trim_kib = 0;
  double idle_cpu_pct = 0;
  double stop_s = 0;
};

ResumeResult resume(const std::string& dir, int n) {
  Bed bed(dir, "resume.db");
  Compiled c = compile_machine("park.yaml", kParkYaml);
  bed.put_machine(*c.m);
  int prepare = c.m->find("instantiate_end.prepare");
  int park = c.m->find("instantiate_end.park");
  if (prepare < 0 || park < 0)
    die("park machine: states not found");
  ResumeResult out;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    // Where a crash leaves an operation parked in its wait: prepare succeeded, the wait
    // started (its durable wake time recorded), seq at the last event written.
    engine::Cursor cur;
    cur.cur = park;
    cur.started = true;
    engine::Item it;
    it.status = engine::ItemStatus::kWaiting;
    it.wake_ms = engine::now_ms() + 24LL * 3600 * 1000;
    cur.items = {it};
    cur.seq = 5;
    cur.outputs["instantiate_end.prepare"] = json::object{
        {"exit_code", 0}, {"stdout", ""}, {"stderr", ""}, {"truncated", false}, {"duration_ms", 3}};
    bed.op(bed.instance(), *c.m, engine::OpState::kProcessing, cur.to_json());
  }
  out.setup_s = secs_since(t0);
  if (bed.count_state(engine::OpState::kProcessing) != static_cast<size_t>(n))
    die("resume: setup did not leave every operation PROCESSING");

  std::atomic<uint64_t> calls{0};
  malloc_trim(0);
  out.rss_before_kib = vm_rss_kib();
  auto start = Clock::now();
  engine::Engine e(*bed.store, registry(&calls), options(dir));
  out.construct_s = secs_since(start);
  std::thread th([&] { e.run(); });
  // Polling stats() from this thread: see the README (stats() reads runs.size() unlocked).
  bool first = false;
  for (;;) {
    engine::EngineStats st = e.stats();
    if (!first && st.batches > 0) {
      first = true;
      out.first_commit_s = secs_since(start);
    }
    if (st.batches >= static_cast<uint64_t>(n))
      break;
    if (secs_since(start) > 120)
      die("resume: only " + std::to_string(st.batches) + " of " + std::to_string(n) +
          " resumptions committed after 120 s");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  out.resume_s = secs_since(start);
  // Let the io thread finish the last on_committed callbacks before reading memory.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  out.st = e.stats();
  out.rss_after_kib = vm_rss_kib();
  malloc_trim(0);
  out.rss_after_trim_kib = vm_rss_kib();
  // Idle cost with every operation parked: the engine still polls (EngineOptions::poll).
  {
    auto cpu = [] {
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    };
    double c0 = cpu();
    auto w0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    out.idle_cpu_pct = 100.0 * (cpu() - c0) / secs_since(w0);
  }
  auto s0 = Clock::now();
  e.stop(true);
  th.join();
  out.stop_s = secs_since(s0);
  if (calls.load() != 0)
    die("resume: an action ran; the parked operations should only wait");
  // Still PROCESSING, claimed by the engine, resumable by the next one.
  if (bed.count_state(engine::OpState::kProcessing) != static_cast<size_t>(n))
    die("resume: operations left PROCESSING after stop");
  return out;
}

// ---------------------------------------------------------------------------------------

std::vector<std::string> lines;
bool all_pass = true;

void line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void line(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::printf("%s\n", buf);
  std::fflush(stdout);
  lines.push_back(buf);
}

void floor_line(const char* what, bool pass) {
  all_pass = all_pass && pass;
  line("floor %s: %s", what, pass ? "PASS" : "FAIL");
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty())
      v.push_back(std::atoi(x.c_str()));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/vnflow-bench";
  long raw_n = 3000;
  int chain = 2000, ops = 200, op_states = 50, resume_n = 10000;
  std::string sweep;
  bool check = false;
  bool notify = false;  // (f)
  int notify_rounds = 3;
  std::string only;  // a, b, c or d: run that part (and (a)) only, for profiling
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dir")
      dir = val();
    else if (a == "--raw-n")
      raw_n = std::atol(val().c_str());
    else if (a == "--chain")
      chain = std::atoi(val().c_str());
    else if (a == "--ops")
      ops = std::atoi(val().c_str());
    else if (a == "--op-states")
      op_states = std::atoi(val().c_str());
    else if (a == "--resume")
      resume_n = std::atoi(val().c_str());
    else if (a == "--sweep")
      sweep = val();
    else if (a == "--empty-outputs")
      g_empty_outputs = true;
    else if (a == "--only")
      only = val();
    else if (a == "--check-floors")
      check = true;
    else if (a == "--notify")
      notify = true;
    else if (a == "--notify-rounds")
      notify_rounds = std::atoi(val().c_str());
    else
      die("unknown argument " + a +
          " (--dir --raw-n --chain --ops --op-states --resume --sweep --check-floors --notify"
          " --notify-rounds)");
  }
  if (raw_n < 100 || chain < 1 || ops < 1 || op_states < 1 || resume_n < 1 || notify_rounds < 1 ||
      notify_rounds > 50)
    die("bad sizes");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    die("cannot create " + dir + ": " + ec.message());
  spdlog::set_level(spdlog::level::warn);

  std::printf(
      "engine_bench: dir %s, sqlite %s, raw N=%ld, chain K=%d, %d ops x %d states, "
      "resume %d\n",
      dir.c_str(), sqlite3_libversion(), raw_n, chain, ops, op_states, resume_n);
  std::fflush(stdout);

  auto want = [&](char part) { return only.empty() || only.find(part) != std::string::npos; };

  // (a)
  RawResult a1 = raw_sqlite(dir, raw_n);
  std::fprintf(stderr, "(a) raw sqlite run 1: %.0f commits/s\n", a1.commits_per_s);

  // (b), and the sweep of K (information only)
  ChainResult b;
  std::vector<std::pair<int, ChainResult>> sw;
  if (want('b')) {
    b = single_chain(dir, chain);
    std::fprintf(stderr, "(b) chain: %.0f transitions/s\n", b.tps);
    for (int k : parse_list(sweep)) {
      sw.emplace_back(k, single_chain(dir, k));
      std::fprintf(stderr, "(b) sweep K=%d: %.0f transitions/s\n", k, sw.back().second.tps);
    }
  }

  // (c)
  ConcResult c;
  if (want('c')) {
    c = concurrent(dir, ops, op_states);
    std::fprintf(stderr, "(c) concurrent: %.0f transitions/s\n", c.tps);
  }

  // (f): rounds of (c) with a subscription, each followed by (c) once more, so that the
  // runs with and without alternate (a machine's drift touches both alike).
  std::vector<NotifyResult> fs;
  std::vector<double> plain_tps{c.tps}, notify_tps, latencies;
  if (notify && want('c')) {
    for (int round = 0; round < notify_rounds; ++round) {
      fs.push_back(concurrent_notify(dir, ops, op_states));
      notify_tps.push_back(fs.back().c.tps);
      latencies.insert(latencies.end(), fs.back().latencies.begin(), fs.back().latencies.end());
      std::fprintf(stderr, "(f) round %d with notifications: %.0f transitions/s\n", round + 1,
                   fs.back().c.tps);
      plain_tps.push_back(concurrent(dir, ops, op_states).tps);
      std::fprintf(stderr, "(c) again: %.0f transitions/s\n", plain_tps.back());
    }
  }

  // (a) again
  RawResult a2 = raw_sqlite(dir, raw_n);
  std::fprintf(stderr, "(a) raw sqlite run 2: %.0f commits/s\n", a2.commits_per_s);
  double raw = (a1.commits_per_s + a2.commits_per_s) / 2;

  // (d), (e)
  ResumeResult d;
  if (want('d')) {
    d = resume(dir, resume_n);
    std::fprintf(stderr, "(d) resume: %.3f s\n", d.resume_s);
  }

  std::printf("\n");
  line("raw_sqlite_wal_full_commits_per_s: %.0f commits/s", raw);
  line("raw_sqlite_run1_commits_per_s: %.0f commits/s", a1.commits_per_s);
  line("raw_sqlite_run2_commits_per_s: %.0f commits/s", a2.commits_per_s);
  line("raw_sqlite_commit_p50: %.0f us", (a1.p50_us + a2.p50_us) / 2);
  line("raw_sqlite_commit_p99: %.0f us", (a1.p99_us + a2.p99_us) / 2);
  line("raw_sqlite_row_payload: %zu bytes", a1.payload_bytes);

  if (want('b')) {
    line("chain_states: %d states", chain);
    line("chain_compile: %.1f ms", b.compile_s * 1000);
    line("chain_wall: %.3f s", b.wall_s);
    line("chain_transitions: %llu transitions", static_cast<unsigned long long>(b.st.batches));
    line("chain_commits: %llu commits", static_cast<unsigned long long>(b.st.commits));
    line("chain_final_cursor: %zu bytes", b.cursor_bytes);
    line("chain_us_per_transition: %.0f us", 1e6 / b.tps);
    line("chain_store_apply_us_per_commit: %.0f us", b.apply_us);
    line("chain_transition_latency_p50: %.0f us", b.p50_us);
    line("chain_transition_latency_p99: %.0f us", b.p99_us);
    line("chain_transitions_per_s: %.0f transitions/s (first commit to last)", b.tps);
    line("chain_ratio_vs_raw: %.2f x", b.tps / raw);
    line("chain_transitions_per_s_with_start: %.0f transitions/s (engine start to stop)",
         b.tps_with_start);
    line("chain_ratio_vs_raw_with_start: %.2f x", b.tps_with_start / raw);
    for (const auto& [k, r] : sw) {
      line("sweep_chain_%d_transitions_per_s: %.0f transitions/s", k, r.tps);
      line("sweep_chain_%d_ratio_vs_raw: %.2f x", k, r.tps / raw);
      line("sweep_chain_%d_final_cursor: %zu bytes", k, r.cursor_bytes);
      line("sweep_chain_%d_us_per_transition: %.0f us", k, 1e6 / r.tps);
      line("sweep_chain_%d_store_apply_us_per_commit: %.0f us", k, r.apply_us);
    }
  }

  if (want('c')) {
    line("concurrent_ops: %d ops", ops);
    line("concurrent_states_per_op: %d states", op_states);
    line("concurrent_setup: %.3f s", c.setup_s);
    line("concurrent_wall: %.3f s", c.wall_s);
    line("concurrent_transitions: %llu transitions", static_cast<unsigned long long>(c.st.batches));
    line("concurrent_commits: %llu commits", static_cast<unsigned long long>(c.st.commits));
    line("concurrent_group_size: %.1f transitions/commit",
         static_cast<double>(c.st.batches) /
             static_cast<double>(std::max<uint64_t>(1, c.st.commits)));
    line("concurrent_commits_per_s: %.0f commits/s", static_cast<double>(c.st.commits) / c.wall_s);
    line("concurrent_store_apply_us_per_commit: %.0f us", c.apply_us);
    line("concurrent_store_apply_share_of_wall: %.0f %%",
         100.0 * c.apply_us * static_cast<double>(c.st.commits) / 1e6 / c.wall_s);
    line("concurrent_transition_latency_p50: %.0f us", c.p50_us);
    line("concurrent_transition_latency_p99: %.0f us (raw single-row commit p99 %.0f us)", c.p99_us,
         (a1.p99_us + a2.p99_us) / 2);
    line("concurrent_transitions_per_s: %.0f transitions/s", c.tps);
    line("concurrent_ratio_vs_raw: %.2f x", c.tps / raw);
    if (notify) {
      auto list = [](const std::vector<double>& v) {
        std::string out;
        for (double x : v)
          out += (out.empty() ? "" : ", ") + std::to_string(static_cast<long>(x + 0.5));
        return out;
      };
      std::string plain_list = list(plain_tps), notify_list = list(notify_tps);
      double plain = quantile(plain_tps, 0.5), with = quantile(notify_tps, 0.5);
      std::vector<double> commit_p99;
      double drain = 0;
      for (const NotifyResult& f : fs) {
        commit_p99.push_back(f.c.p99_us / 1000);
        drain = std::max(drain, f.drain_s);
      }
      line("notify_rounds: %zu (each: a run with the subscription, then a plain run)", fs.size());
      line("notify_plain_runs_transitions_per_s: %s transitions/s", plain_list.c_str());
      line("notify_runs_transitions_per_s: %s transitions/s (one subscription matching every op)",
           notify_list.c_str());
      line("notify_ratio_vs_plain: %.3f x (median %.0f against median %.0f)", with / plain, with,
           plain);
      line("notify_notifications: %zu delivered", latencies.size());
      line("notify_drain_after_idle_max: %.3f s", drain);
      line("notify_delivery_latency_p50: %.1f ms", quantile(latencies, 0.5));
      line("notify_delivery_latency_p99: %.1f ms (commit p99 %.1f ms, median of the rounds)",
           quantile(latencies, 0.99), quantile(commit_p99, 0.5));
      line("notify_delivery_latency_max: %.1f ms",
           latencies.empty() ? 0.0 : *std::max_element(latencies.begin(), latencies.end()));
      floor_line("notify: delivery costs <= 10% of the durable transitions/s", with >= 0.9 * plain);
      floor_line("notify: delivery latency p99 <= 50 ms", quantile(latencies, 0.99) <= 50);
    }
  }

  double per_op = 0;
  if (want('d')) {
    line("resume_ops: %d ops", resume_n);
    line("resume_setup: %.3f s", d.setup_s);
    line("resume_engine_construct: %.1f ms", d.construct_s * 1000);
    line("resume_first_commit: %.1f ms", d.first_commit_s * 1000);
    line("resume_all_committed: %.3f s", d.resume_s);
    line("resume_commits: %llu commits", static_cast<unsigned long long>(d.st.commits));
    line("resume_running_ops: %zu ops", d.st.running_ops);
    line("resume_stop: %.1f ms", d.stop_s * 1000);
    line("idle_cpu_with_ops_parked: %.1f %%", d.idle_cpu_pct);
    per_op = static_cast<double>(d.rss_after_kib - d.rss_before_kib) / resume_n;
    double per_op_trim = static_cast<double>(d.rss_after_trim_kib - d.rss_before_kib) / resume_n;
    line("rss_before: %ld KiB", d.rss_before_kib);
    line("rss_with_ops_resident: %ld KiB", d.rss_after_kib);
    line("rss_with_ops_resident_after_malloc_trim: %ld KiB", d.rss_after_trim_kib);
    line("rss_per_inflight_op: %.2f KiB", per_op);
    line("rss_per_inflight_op_after_malloc_trim: %.2f KiB", per_op_trim);
  }

  fs::remove_all(dir + "/work", ec);  // the work directories launch() creates per instance

  if (want('b'))
    floor_line("chain_ratio_vs_raw >= 0.8", b.tps / raw >= 0.8);
  if (want('c')) {
    floor_line("concurrent_transitions_per_s >= 30000", c.tps >= 30000);
    floor_line("concurrent_transition_latency_p99 <= 5 ms", c.p99_us <= 5000);
  }
  if (want('d')) {
    floor_line("resume_all_committed < 1 s", d.resume_s < 1.0);
    floor_line("rss_per_inflight_op <= 20 KiB", per_op <= 20.0);
  }
  return check && !all_pass ? 3 : 0;
}
