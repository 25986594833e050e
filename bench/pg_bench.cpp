// pg_bench.cpp: the PostgreSQL Store's group commit beside raw PostgreSQL commits, in the
// same run, on the same cluster (synchronous_commit=on, the server's fsync setting as it
// is). See docs/persistence.md, "PostgreSQL".
//
//   (a) raw single-row commits: INSERT one ~300-byte row per transaction (autocommit):
//       commits/s, p50 and p99 latency.
//   (b) raw batched rows: B such rows a commit, as B INSERTs in BEGIN ... COMMIT and as one
//       multi-row INSERT (the faster: PostgreSQL's batched-rows limit, the peer of (c), (f)).
//   (c) Store::apply on P operations: each round one group commit of P batches (a cursor
//       write and one event each, as the executor's transitions are): durable
//       transitions/s, and its ratio to (b).
//   (d) claims (Store::claim, issue 18's leasing): C queued operations claimed by D
//       daemons at once (a thread and a store each, claiming `--claim-batch` at a time):
//       claims/s, and how many operations two daemons got (must be 0).
//   (e) takeover: a daemon with a 1 s lease claims 100 operations and stops renewing (as a
//       SIGKILLed one does); another daemon, reading its queue every 20 ms as the executor
//       does, has them all after this long (floor: the TTL + 1 s).
//   (f) the executor: P operations, chains of M no-op local.exec states (engine_bench's
//       scenario (c)), run by 1, 2 and 4 daemons at once (an Engine and a store each, in
//       threads of this process): durable transitions/s, and its ratio to (b) (floor for
//       one daemon: 0.5x).
//
// Usage: pg_bench --url postgresql://... [--n N] [--batch B] [--ops P] [--rounds R]
//                 [--claims C] [--daemons D] [--claim-batch K] [--op-states M]
// A schema of its own is made (bench_<pid>) and dropped. Prints `name: value unit` lines.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <libpq-fe.h>
#include <unistd.h>

#include "engine/engine.h"

#include "bench/bench_util.h"

namespace {

using bench::Clock;
using bench::die;
using bench::must;
using bench::secs_since;

void exec(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    die(sql.substr(0, 40) + ": " + PQresultErrorMessage(r));
  PQclear(r);
}

void insert(PGconn* c, long i, const std::string& payload) {
  std::string op = "op-" + std::to_string(i % 50), seq = std::to_string(i);
  const char* v[] = {op.c_str(), seq.c_str(), payload.c_str()};
  PGresult* r = PQexecPrepared(c, "ins", 3, v, nullptr, nullptr, 0);
  if (PQresultStatus(r) != PGRES_COMMAND_OK)
    die(std::string("insert: ") + PQresultErrorMessage(r));
  PQclear(r);
}

std::string with_schema(const std::string& url, const std::string& schema) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" +
         schema;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  if (const char* e = std::getenv("VNFLOW_DB"); e != nullptr)
    url = e;
  long n = 2000, batch = 200, ops = 200, rounds = 50, claims = 20000, daemons = 4,
       claim_batch = 256, op_states = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--url")
      url = argv[i + 1];
    else if (a == "--n")
      n = std::atol(argv[i + 1]);
    else if (a == "--batch")
      batch = std::atol(argv[i + 1]);
    else if (a == "--ops")
      ops = std::atol(argv[i + 1]);
    else if (a == "--rounds")
      rounds = std::atol(argv[i + 1]);
    else if (a == "--claims")
      claims = std::atol(argv[i + 1]);
    else if (a == "--daemons")
      daemons = std::atol(argv[i + 1]);
    else if (a == "--claim-batch")
      claim_batch = std::atol(argv[i + 1]);
    else if (a == "--op-states")
      op_states = std::atol(argv[i + 1]);
    else
      die("unknown option " + a);
  }
  if (!engine::is_postgres_url(url) || n < 1 || batch < 1 || ops < 1 || rounds < 1 || claims < 1 ||
      daemons < 2 || daemons > 64 || claim_batch < 1)
    die("usage: pg_bench --url postgresql://... [--n N] [--batch B] [--ops P] [--rounds R]"
        " [--claims C] [--daemons D] [--claim-batch K] [--op-states M]");
  std::string schema = "bench_" + std::to_string(::getpid());
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK)
    die(std::string("connect to ") + engine::display_db(url) + ": " + PQerrorMessage(c));
  exec(c, "SET client_min_messages = warning");
  exec(c, "CREATE SCHEMA " + schema);
  exec(c, "SET search_path = " + schema);
  exec(c, "SET synchronous_commit = on");
  exec(c,
       "CREATE TABLE checkpoint(id BIGSERIAL PRIMARY KEY, op_id TEXT NOT NULL, seq BIGINT NOT "
       "NULL, payload TEXT NOT NULL, UNIQUE(op_id, seq))");
  PQclear(PQprepare(c, "ins", "INSERT INTO checkpoint(op_id, seq, payload) VALUES($1, $2, $3)", 3,
                    nullptr));
  std::string payload(300, 'x');

  // (a) single-row commits
  std::vector<double> lat;
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    auto c0 = Clock::now();
    insert(c, i, payload);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
  }
  double single = static_cast<double>(n) / secs_since(t0);
  std::sort(lat.begin(), lat.end());
  std::printf("raw_pg_single_commits: %.0f commits/s\n", single);
  std::printf("raw_pg_single_p50: %.0f us\n", lat[lat.size() / 2]);
  std::printf("raw_pg_single_p99: %.0f us\n", lat[lat.size() * 99 / 100]);

  // (b) batched rows
  long rows = 0;
  t0 = Clock::now();
  for (long r = 0; r < rounds; ++r) {
    exec(c, "BEGIN");
    for (long i = 0; i < batch; ++i)
      insert(c, n + r * batch + i, payload);
    exec(c, "COMMIT");
    rows += batch;
  }
  double batched_rows = static_cast<double>(rows) / secs_since(t0);
  std::printf("raw_pg_batched_rows_one_by_one: %.0f rows/s (batch %ld, an INSERT per row)\n",
              batched_rows, batch);
  // The same rows, each transaction's batch in one multi-row INSERT (the arrays unnested):
  // PostgreSQL's batched-rows limit on this machine, the peer of (c) and (f).
  PQclear(PQprepare(c, "ins_many",
                    "INSERT INTO checkpoint(op_id, seq, payload) SELECT * FROM"
                    " unnest($1::text[], $2::bigint[], $3::text[])",
                    3, nullptr));
  rows = 0;
  t0 = Clock::now();
  for (long r = 0; r < rounds; ++r) {
    std::string ops_a = "{", seqs_a = "{", payloads_a = "{";
    for (long i = 0; i < batch; ++i) {
      long k = n + (rounds + r) * batch + i;
      const char* sep = i > 0 ? "," : "";
      ops_a += sep + std::string("\"op-") + std::to_string(k % 50) + "\"";
      seqs_a += sep + std::to_string(k);
      payloads_a += sep + std::string("\"") + payload + "\"";
    }
    ops_a += "}";
    seqs_a += "}";
    payloads_a += "}";
    const char* v[] = {ops_a.c_str(), seqs_a.c_str(), payloads_a.c_str()};
    PGresult* res = PQexecPrepared(c, "ins_many", 3, v, nullptr, nullptr, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
      die(std::string("insert many: ") + PQresultErrorMessage(res));
    PQclear(res);
    rows += batch;
  }
  double batched = static_cast<double>(rows) / secs_since(t0);
  std::printf("raw_pg_batched_rows: %.0f rows/s (batch %ld, one multi-row INSERT a commit)\n",
              batched, batch);

  // (c) the Store's group commit
  std::string key = "/tmp/" + schema + ".key";
  {
    auto store = must(engine::open_postgres_store(with_schema(url, schema), key), "open store");
    engine::PackageRecord p;
    p.id = "pkg";
    p.digest = "d";
    p.onboarded_ms = engine::now_ms();
    must(store->put_package(p, "bytes"), "package");
    must(store->put_machine("m", "{}"), "machine");
    std::vector<std::string> ids;
    for (long i = 0; i < ops; ++i) {
      engine::InstanceRecord in;
      in.id = "inst-" + std::to_string(i);
      in.package_id = "pkg";
      in.instantiation_state = "NOT_INSTANTIATED";
      in.record = boost::json::object{{"id", in.id}};
      must(store->create_instance(in), "instance");
      engine::OpRecord op;
      op.id = "op-" + std::to_string(i);
      op.instance_id = in.id;
      op.operation = "instantiate";
      op.state = engine::OpState::kProcessing;
      op.machine_digest = "m";
      op.package_digest = "d";
      op.request = boost::json::object{{"flavourId", "simple"}};
      op.created_ms = engine::now_ms();
      must(store->create_op(op), "op");
      ids.push_back(op.id);
    }
    std::vector<engine::Batch> batches(static_cast<size_t>(ops));
    std::vector<const engine::Batch*> group;
    for (auto& b : batches)
      group.push_back(&b);
    t0 = Clock::now();
    for (long r = 0; r < rounds; ++r) {
      for (long i = 0; i < ops; ++i) {
        auto& b = batches[static_cast<size_t>(i)];
        b.ops.assign(1, {});
        b.ops[0].op_id = ids[static_cast<size_t>(i)];
        b.ops[0].cursor = "{\"done\":[\"s" + std::to_string(r) + "\"],\"pad\":\"" +
                          payload.substr(0, 200) + "\"}";
        b.events.assign(1, {});
        auto& e = b.events[0];
        e.op_id = b.ops[0].op_id;
        e.seq = r + 1;
        e.at_ms = engine::now_ms();
        e.kind = "succeeded";
        e.state = "s" + std::to_string(r);
        e.attempt = 1;
        e.key = e.op_id + "/" + e.state + "/1";
        e.data = boost::json::object{{"exit_code", 0}, {"stdout", "ok\n"}};
      }
      must(store->apply(group), "apply");
    }
    double transitions = static_cast<double>(ops * rounds) / secs_since(t0);
    std::printf("store_group_commit_transitions: %.0f transitions/s (%ld per commit)\n",
                transitions, ops);
    std::printf("store_vs_raw_batched: %.2f x\n", transitions / batched);

    // (c)'s operations are done with (they are not runnable machines).
    exec(c, "UPDATE ops SET state = 'COMPLETED' WHERE id LIKE 'op-%'");

    // The queues of (d), (e) and (f): `count` instances <prefix>i<k>, each with an operation
    // <prefix>o<k> in `state` on `machine`, written in two statements (create_op one by one
    // would take longer than what is measured); the rows are what create_op writes, requests
    // unsealed. The prefix is the operations' id prefix for the UPDATEs that retire them.
    auto queue = [&](const std::string& prefix, long count, const char* state,
                     const std::string& machine) {
      std::string series = " FROM generate_series(1, " + std::to_string(count) + ") g";
      exec(c,
           "INSERT INTO instances(id, package_id, name, instantiation_state, record, created_ms)"
           " SELECT '" +
               prefix + "i' || g, 'pkg', NULL, 'NOT_INSTANTIATED', '{}', g" + series);
      exec(c,
           "INSERT INTO ops(id, instance_id, operation, state, machine, package_digest, request,"
           " created_ms, updated_ms) SELECT '" +
               prefix + "o' || g, '" + prefix + "i' || g, 'instantiate', '" + state + "', '" +
               machine + "', 'd', '{}', g, g" + series);
    };

    // (d) claims.
    queue("c-", claims, "STARTING", "m");
    std::vector<std::unique_ptr<engine::Store>> stores;
    std::vector<engine::Store::Lease> leases;
    for (long d = 0; d < daemons; ++d) {
      stores.push_back(
          must(engine::open_postgres_store(with_schema(url, schema), key, engine::DbLock::kDaemon),
               "open daemon store"));
      leases.push_back(
          must(stores.back()->register_daemon("bench-d" + std::to_string(d), 60000), "register"));
    }
    std::mutex mu;
    std::map<std::string, int> got;
    std::atomic<long> failures{0};
    std::vector<std::thread> threads;
    t0 = Clock::now();
    for (long d = 0; d < daemons; ++d) {
      threads.emplace_back([&, d] {
        auto i = static_cast<size_t>(d);
        for (;;) {
          auto r = stores[i]->claim(leases[i], false, static_cast<size_t>(claim_batch));
          if (!r.ok()) {
            failures++;
            return;
          }
          if (r.value().empty())
            return;
          std::lock_guard<std::mutex> l(mu);
          for (const auto& op : r.value())
            got[op.id]++;
        }
      });
    }
    for (auto& t : threads)
      t.join();
    double claim_rate = static_cast<double>(got.size()) / secs_since(t0);
    long doubles = 0;
    for (const auto& [id, k] : got)
      doubles += k > 1 ? 1 : 0;
    std::printf("claims: %.0f claims/s (%ld daemons, %ld at a time, %zu of %ld claimed)\n",
                claim_rate, daemons, claim_batch, got.size(), claims);
    std::printf("claims_double: %ld operations (claim failures: %ld)\n", doubles, failures.load());

    // (e) takeover
    exec(c, "UPDATE ops SET state = 'COMPLETED' WHERE id LIKE 'c-o%'");
    queue("t-", 100, "PROCESSING", "m");
    const int64_t ttl = 1000;
    auto dead = must(stores[0]->register_daemon("bench-dying", ttl), "register");
    auto held = must(stores[0]->claim(dead, false, 1000), "claim");
    auto last_renewal = Clock::now();  // the registration was its last renewal
    size_t taken = 0;
    double took = -1;
    while (secs_since(last_renewal) < 10) {
      auto r = must(stores[1]->claim(leases[1], false, 1000), "claim");
      taken += r.size();
      if (taken >= held.size()) {
        took = secs_since(last_renewal);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (took < 0)
      die("takeover: only " + std::to_string(taken) + " of " + std::to_string(held.size()) +
          " operations taken over in 10 s");
    std::printf(
        "takeover: %zu operations of a dead daemon claimed again %.3f s after its last "
        "renewal (lease TTL %.1f s; floor TTL + 1 s: %s)\n",
        held.size(), took, ttl / 1000.0, took <= ttl / 1000.0 + 1 ? "PASS" : "FAIL");
    for (size_t d = 0; d < stores.size(); ++d)
      stores[d]->release(leases[d]);
    stores.clear();

    // (f) the executor on D daemons
    exec(c, "UPDATE ops SET state = 'COMPLETED' WHERE id LIKE 't-o%'");
    bench::Compiled chain =
        bench::compile_machine("chain.yaml", bench::chain_yaml(static_cast<int>(op_states)));
    must(store->put_machine(chain.m->digest, boost::json::serialize(chain.m->to_json())),
         "machine");
    for (long n_daemons : {1L, 2L, 4L}) {
      std::string tag = "x" + std::to_string(n_daemons) + "-";
      queue(tag, ops, "STARTING", chain.m->digest);
      std::atomic<uint64_t> calls{0};
      std::vector<std::unique_ptr<engine::Store>> ds;
      std::vector<std::unique_ptr<engine::Engine>> engines;
      for (long d = 0; d < n_daemons; ++d) {
        ds.push_back(must(
            engine::open_postgres_store(with_schema(url, schema), key, engine::DbLock::kDaemon),
            "open daemon store"));
        engine::EngineOptions eo;
        eo.owner = "bench-e" + std::to_string(d);
        eo.work_root = "/tmp/" + schema + "-work-" + std::to_string(d);
        eo.poll = std::chrono::milliseconds(20);
        engines.push_back(
            std::make_unique<engine::Engine>(*ds.back(), bench::noop_registry(&calls), eo));
        must(engines.back()->prepare(), "prepare");
      }
      std::vector<std::thread> runners;
      t0 = Clock::now();
      for (auto& e : engines)
        runners.emplace_back([&e] { e->run(); });
      // Until every operation of this round completed (bounded: 120 s).
      for (;;) {
        auto q = PQexec(
            c, ("SELECT count(*) FROM ops WHERE id LIKE '" + tag + "%' AND state <> 'COMPLETED'")
                   .c_str());
        long left = std::atol(PQgetvalue(q, 0, 0));
        PQclear(q);
        if (left == 0)
          break;
        if (secs_since(t0) > 120)
          die("executor on " + std::to_string(n_daemons) + " daemons: " + std::to_string(left) +
              " operations not COMPLETED after 120 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      double wall = secs_since(t0);
      uint64_t committed = 0;
      for (auto& e : engines) {
        committed += e->stats().batches;
        e->stop(true);
      }
      for (auto& t : runners)
        t.join();
      double tps = static_cast<double>(committed) / wall;
      std::printf(
          "executor_%ld_daemons: %.0f transitions/s (%ld ops x %ld states, %.2f s, %.2f x "
          "raw batched)%s\n",
          n_daemons, tps, ops, op_states, wall, tps / batched,
          n_daemons == 1 ? (tps / batched >= 0.5 ? "; floor 0.5 x: PASS" : "; floor 0.5 x: FAIL")
                         : "");
      engines.clear();
      ds.clear();
      exec(c, "UPDATE ops SET state = 'COMPLETED' WHERE id LIKE '" + tag + "%'");
    }
  }
  ::unlink(key.c_str());
  exec(c, "DROP SCHEMA " + schema + " CASCADE");
  PQfinish(c);
  return 0;
}
