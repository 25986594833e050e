// api_bench.cpp: the REST API (api::Server beside an engine::Daemon on a temporary SQLite
// database, the local demo onboarded) beside a minimal Beast server answering a fixed body,
// in the same run, with the same client. See bench/README.md, "API bench".
//
//   (a) GET /vnflcm/v1/vnf_instances/{id}: C keep-alive clients (threads, sync Beast) for
//       S seconds against the minimal server (the HTTP limit on this machine: the same
//       body, the same number of server threads), then against vnflow, then the minimal
//       server again; requests per second and p50/p99 latency; the ratio of vnflow's
//       throughput to the mean of the two minimal runs (floor >= 0.5).
//   (b) POST .../instantiate to the operation's first committed transition (the Store
//       shows it past STARTING): N instances one at a time, p50/p99 (floors p50 <= 2 ms,
//       p99 <= 10 ms); then the peer, N more through an API that commits each request
//       with Store::create_op and wakes the engine (no Engine::start), and the ratio.
//
// Build: a Meson target built only with -Dbench=true (bench/meson.build); bench/api.sh
// builds it in the release build.
// Usage: api_bench --root SOURCE_ROOT [--dir DIR] [--clients C] [--secs S] [--ops N]
//                  [--threads T] [--check-floors]
// Prints `name: value unit` lines and `floor ...: PASS|FAIL` lines; exit 3 with
// --check-floors when a floor fails.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "engine/engine.h"

#include "api/api.h"

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------------------------------
// The minimal server: every request answered 200 with the same body, keep-alive.

class FixedSession : public std::enable_shared_from_this<FixedSession> {
 public:
  FixedSession(tcp::socket s, const std::string& body) : stream_(std::move(s)), body_(body) {}
  void read() {
    req_ = {};
    http::async_read(
        stream_, buf_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
          if (ec)
            return;
          auto res = std::make_shared<http::response<http::string_body>>(http::status::ok, 11);
          res->set(http::field::server, "fixed");
          res->set(http::field::content_type, "application/json");
          res->body() = self->body_;
          res->keep_alive(self->req_.keep_alive());
          res->prepare_payload();
          http::async_write(self->stream_, *res, [self, res](beast::error_code e, size_t) {
            if (!e && res->keep_alive())
              self->read();
          });
        });
  }

 private:
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  http::request<http::string_body> req_;
  const std::string& body_;
};

class FixedServer {
 public:
  FixedServer(std::string body, int threads) : body_(std::move(body)), ioc_(threads), acc_(ioc_) {
    tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
    acc_.open(ep.protocol());
    acc_.set_option(net::socket_base::reuse_address(true));
    acc_.bind(ep);
    acc_.listen();
    accept();
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] { ioc_.run(); });
  }
  ~FixedServer() {
    ioc_.stop();
    for (auto& t : threads_)
      t.join();
  }
  uint16_t port() const { return acc_.local_endpoint().port(); }

 private:
  void accept() {
    acc_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket s) {
      if (!ec)
        std::make_shared<FixedSession>(std::move(s), body_)->read();
      if (acc_.is_open())
        accept();
    });
  }
  std::string body_;
  net::io_context ioc_;
  tcp::acceptor acc_;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------
// The client

struct Load {
  double rps = 0, p50_ms = 0, p99_ms = 0;
  size_t errors = 0;
};

double pct(std::vector<double>& xs, double p) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(xs.size() * p / 100.0))];
}

// One request on a keep-alive connection: the status, or 0 on a failure (reconnects).
struct Client {
  net::io_context io;
  std::optional<beast::tcp_stream> s;
  uint16_t port;
  explicit Client(uint16_t p) : port(p) {}
  unsigned call(http::verb verb, const std::string& target, const std::string& body,
                std::string* location = nullptr) {
    beast::error_code ec;
    if (!s) {
      s.emplace(io);
      s->connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
      if (ec) {
        s.reset();
        return 0;
      }
    }
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
    req.set(http::field::accept, "application/json");
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(*s, req, ec);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    if (!ec)
      http::read(*s, buf, res, ec);
    if (ec) {
      s.reset();
      return 0;
    }
    if (location != nullptr)
      *location = std::string(res[http::field::location]);
    return res.result_int();
  }
};

Load hammer(uint16_t port, const std::string& target, int clients, double secs) {
  std::vector<std::vector<double>> lat(clients);
  std::atomic<size_t> errors{0};
  auto end = Clock::now() + std::chrono::duration<double>(secs);
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      Client cl(port);
      while (Clock::now() < end) {
        auto t0 = Clock::now();
        if (cl.call(http::verb::get, target, "") != 200)
          ++errors;
        lat[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& t : ts)
    t.join();
  std::vector<double> all;
  for (auto& l : lat)
    all.insert(all.end(), l.begin(), l.end());
  Load r;
  r.rps = static_cast<double>(all.size()) / secs;
  r.errors = errors;
  r.p50_ms = pct(all, 50);
  r.p99_ms = pct(all, 99);
  return r;
}

void print_load(const char* name, const Load& l) {
  std::printf("%s_rps: %.0f req/s\n%s_p50: %.3f ms\n%s_p99: %.3f ms\n%s_errors: %zu\n", name, l.rps,
              name, l.p50_ms, name, l.p99_ms, name, l.errors);
}

std::string loadavg() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  char buf[128] = {0};
  if (f != nullptr) {
    if (std::fgets(buf, sizeof buf, f) == nullptr)
      buf[0] = 0;
    std::fclose(f);
  }
  std::string s(buf);
  size_t n = 0, at = 0;
  while (n < 3 && (at = s.find(' ', at + 1)) != std::string::npos)
    ++n;
  return s.substr(0, at);
}

}  // namespace

int main(int argc, char** argv) {
  std::string root, dir = "/tmp/vnflow-api-bench";
  int clients = 16, threads = 2, ops = 200;
  double secs = 5;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--root")
      root = next();
    else if (a == "--dir")
      dir = next();
    else if (a == "--clients")
      clients = std::max(1, std::atoi(next().c_str()));
    else if (a == "--secs")
      secs = std::max(0.5, std::atof(next().c_str()));
    else if (a == "--ops")
      ops = std::max(1, std::atoi(next().c_str()));
    else if (a == "--threads")
      threads = std::max(1, std::atoi(next().c_str()));
    else if (a == "--check-floors")
      check = true;
    else {
      std::fprintf(stderr,
                   "usage: api_bench --root SOURCE_ROOT [--dir DIR] [--clients C] "
                   "[--secs S] [--ops N] [--threads T] [--check-floors]\n");
      return 2;
    }
  }
  if (root.empty()) {
    std::fprintf(stderr, "api_bench: --root SOURCE_ROOT is needed (csar-samples/local-demo)\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  fs::remove_all(dir);
  fs::create_directories(dir + "/db");
  fs::permissions(dir + "/db", fs::perms::owner_all);
  engine::DaemonOptions d;
  d.db_path = dir + "/db/vnflow.db";
  d.work_dir = dir + "/work";
  engine::Daemon daemon(std::move(d));
  if (auto s = daemon.start(); !s.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", s.message().c_str());
    return 1;
  }
  engine::Store& store = *daemon.store();
  base::Diagnostics diags;
  auto pkg = engine::onboard_package(store, root + "/csar-samples/local-demo", diags);
  if (!pkg.ok()) {
    std::fprintf(stderr, "api_bench: onboard: %s\n", pkg.status().message().c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 2 * ops + 1; ++i) {
    auto inst = engine::create_instance(store, pkg.value().id, "bench-" + std::to_string(i), "");
    if (!inst.ok()) {
      std::fprintf(stderr, "api_bench: create: %s\n", inst.status().message().c_str());
      return 1;
    }
    ids.push_back(inst.value().id);
  }
  api::ServerOptions so;
  so.port = 0;
  so.auth = api::AuthMode::kNone;
  so.threads = threads;
  so.on_queued = [&daemon] { daemon.wake(); };
  so.create_op = [&daemon](const engine::OpRecord& op) { return daemon.start_op(op); };
  api::Server server(store, so);
  if (auto s = server.start(); !s.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", s.message().c_str());
    return 1;
  }
  std::thread engine_thread([&daemon] { daemon.run(); });

  std::printf("api bench: %d clients, %d server threads, %.1f s a run, load average %s\n", clients,
              threads, secs, loadavg().c_str());
  // (a) the same body from both servers
  std::string target = "/vnflcm/v1/vnf_instances/" + ids[0];
  std::string body;
  {
    net::io_context io;
    beast::tcp_stream s(io);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server.port()));
    http::request<http::string_body> req(http::verb::get, target, 11);
    req.set(http::field::host, "127.0.0.1");
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    body = res.body();
  }
  FixedServer fixed(body, threads);
  // The same API answering on its I/O threads (--api-threads 0): what the hand-off to the
  // handler threads costs, in the same run.
  api::ServerOptions so0 = so;
  so0.handler_threads = 0;
  api::Server inline_server(store, so0);
  if (auto s = inline_server.start(); !s.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("body: %zu bytes\n", body.size());
  Load f1 = hammer(fixed.port(), target, clients, secs);
  Load v = hammer(server.port(), target, clients, secs);
  Load v0 = hammer(inline_server.port(), target, clients, secs);
  Load f2 = hammer(fixed.port(), target, clients, secs);
  inline_server.stop();
  print_load("fixed_before", f1);
  print_load("vnflow", v);
  print_load("vnflow_api_threads_0", v0);
  print_load("fixed_after", f2);
  double ratio = v.rps / ((f1.rps + f2.rps) / 2);
  std::printf("ratio_rps: %.2f (vnflow / minimal Beast server)\n", ratio);
  std::printf("ratio_rps_api_threads_0: %.2f (vnflow answering on its I/O threads / minimal)\n",
              v0.rps / ((f1.rps + f2.rps) / 2));
  bool ok_a = ratio >= 0.5 && v.errors == 0;
  std::printf("floor get_instance_ratio >= 0.5: %s\n", ok_a ? "PASS" : "FAIL");

  // (b) instantiate -> first committed transition; beside it, the peer: raw SQLite
  // single-row commits (WAL, synchronous=FULL, a file of its own in the same folder) under
  // the same load (the operations' hooks writing their files), one every 2 ms: what one
  // durable commit costs on this disk meanwhile, whatever the engine does.
  std::atomic<bool> raw_stop{false};
  std::vector<double> raw_lat;
  std::thread raw_thread([&] {
    sqlite3* db = nullptr;
    std::string path = dir + "/raw-peer.db";
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK)
      return;
    sqlite3_exec(db,
                 "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                 "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)",
                 nullptr, nullptr, nullptr);
    sqlite3_stmt* ins = nullptr;
    sqlite3_prepare_v2(db, "INSERT INTO t(v) VALUES(?)", -1, &ins, nullptr);
    std::string row(300, 'x');
    for (int k = 0; k < 100000 && !raw_stop; ++k) {
      auto t0 = Clock::now();
      sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
      sqlite3_bind_text(ins, 1, row.data(), static_cast<int>(row.size()), SQLITE_STATIC);
      sqlite3_step(ins);
      sqlite3_reset(ins);
      sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
      raw_lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    sqlite3_finalize(ins);
    sqlite3_close(db);
  });
  std::string inst_body = R"({"flavourId": "simple", "additionalParams": {"work_dir": ")" + dir +
                          R"(/vnfs", "nodes": ["n1"]}})";
  // The same requests to an API that commits each operation with Store::create_op and
  // wakes the engine (how the API ran before Engine::start, and how a CLI request still
  // runs), on instances of its own: the peer of the engine's start in the same run.
  api::ServerOptions so_queued = so;
  so_queued.create_op = nullptr;
  api::Server queued_server(store, so_queued);
  if (auto s = queued_server.start(); !s.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", s.message().c_str());
    return 1;
  }
  // POSTs instantiates of ids[first .. first+ops) one at a time; `lat` to the first
  // committed transition, `post_lat` to the 202.
  size_t failed = 0;
  auto measure = [&](uint16_t port, int first, std::vector<double>& lat,
                     std::vector<double>& post_lat) {
    Client c(port);
    for (int i = first; i < first + ops; ++i) {
      std::string loc;
      auto t0 = Clock::now();
      unsigned st = c.call(http::verb::post, "/vnflcm/v1/vnf_instances/" + ids[i] + "/instantiate",
                           inst_body, &loc);
      if (st != 202) {
        ++failed;
        continue;
      }
      post_lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (std::getenv("API_BENCH_TRACE"))
        std::fprintf(stderr, "post %d: %.3f ms\n", i, post_lat.back());
      std::string op = loc.substr(loc.rfind('/') + 1);
      auto give_up = t0 + std::chrono::seconds(10);
      while (Clock::now() < give_up) {
        auto r = store.get_op(op);
        if (r.ok() && r.value().state != engine::OpState::kStarting)
          break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  };
  std::vector<double> lat, post_lat, qlat, qpost_lat;
  measure(server.port(), 1, lat, post_lat);
  measure(queued_server.port(), 1 + ops, qlat, qpost_lat);
  queued_server.stop();
  raw_stop = true;
  raw_thread.join();
  double p50 = pct(lat, 50), p99 = pct(lat, 99);
  std::printf(
      "instantiate_to_first_transition_p50: %.3f ms\ninstantiate_to_first_transition_p99: "
      "%.3f ms\ninstantiate_failed: %zu of %d\n",
      p50, p99, failed, 2 * ops);
  std::printf("instantiate_post_p50: %.3f ms (the 202 alone)\ninstantiate_post_p99: %.3f ms\n",
              pct(post_lat, 50), pct(post_lat, 99));
  std::printf(
      "queued_instantiate_to_first_transition_p50: %.3f ms (the peer: create_op, wake, claim, "
      "then the first transition's commit)\nqueued_instantiate_to_first_transition_p99: %.3f "
      "ms\nratio_first_transition_p99: %.2f (engine start / queued)\n",
      pct(qlat, 50), pct(qlat, 99), pct(lat, 99) / pct(qlat, 99));
  if (!raw_lat.empty())
    std::printf(
        "raw_sqlite_commit_meanwhile_p50: %.3f ms (the peer: one row, WAL+FULL, same disk, same "
        "load)\nraw_sqlite_commit_meanwhile_p99: %.3f ms (%zu commits)\n",
        pct(raw_lat, 50), pct(raw_lat, 99), raw_lat.size());
  bool ok_b = p99 <= 10 && p50 <= 2 && failed == 0;
  std::printf("floor instantiate_first_transition p50 <= 2 ms, p99 <= 10 ms: %s\n",
              ok_b ? "PASS" : "FAIL");
  std::printf("load average after: %s\n", loadavg().c_str());
  server.stop();
  daemon.stop(false);
  engine_thread.join();
  return check && !(ok_a && ok_b) ? 3 : 0;
}
