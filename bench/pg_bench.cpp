// pg_bench.cpp: the PostgreSQL Store's group commit beside raw PostgreSQL commits, in the
// same run, on the same cluster (synchronous_commit=on, the server's fsync setting as it
// is). See docs/persistence.md, "PostgreSQL".
//
//   (a) raw single-row commits: INSERT one ~300-byte row per transaction (autocommit):
//       commits/s, p50 and p99 latency.
//   (b) raw batched rows: BEGIN; B such INSERTs; COMMIT: rows/s, the peer of (c).
//   (c) Store::apply on P operations: each round one group commit of P batches (a cursor
//       write and one event each, as the executor's transitions are): durable
//       transitions/s, and its ratio to (b).
//
// Not here yet: the executor on PostgreSQL (engine_bench's scenarios with --db), several
// daemons, claims and takeover (leasing is not built yet).
//
// Usage: pg_bench --url postgresql://... [--n N] [--batch B] [--ops P] [--rounds R]
// A schema of its own is made (bench_<pid>) and dropped. Prints `name: value unit` lines.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <libpq-fe.h>
#include <unistd.h>

#include "engine/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "pg_bench: %s\n", msg.c_str());
  std::exit(1);
}

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

template <typename T>
T must(base::Result<T> r, const char* what) {
  if (!r.ok())
    die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

void must(const base::Status& s, const char* what) {
  if (!s.ok())
    die(std::string(what) + ": " + s.to_string());
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  if (const char* e = std::getenv("VNFLOW_DB"); e != nullptr)
    url = e;
  long n = 2000, batch = 200, ops = 200, rounds = 50;
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
    else
      die("unknown option " + a);
  }
  if (!engine::is_postgres_url(url) || n < 1 || batch < 1 || ops < 1 || rounds < 1)
    die("usage: pg_bench --url postgresql://... [--n N] [--batch B] [--ops P] [--rounds R]");
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
  double batched = static_cast<double>(rows) / secs_since(t0);
  std::printf("raw_pg_batched_rows: %.0f rows/s (batch %ld)\n", batched, batch);

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
  }
  ::unlink(key.c_str());
  exec(c, "DROP SCHEMA " + schema + " CASCADE");
  PQfinish(c);
  return 0;
}
