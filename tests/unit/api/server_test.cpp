// The server on a real socket (127.0.0.1, a free port below 32768): a slow request is cut at
// the request timeout, connections over the cap get 503, options are checked before binding,
// the credentials file is parsed and refused when others may read it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"

#include "tests/fakes/store_wrapper.h"

#include "api/api.h"

namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct TempDir {
  fs::path dir;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-api-server-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Everything the server sends until it closes (or 10 s pass).
std::string read_all(tcp::socket& s) {
  std::string out;
  char buf[4096];
  boost::system::error_code ec;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    size_t n = s.read_some(net::buffer(buf), ec);
    if (ec)
      break;
    out.append(buf, n);
  }
  return out;
}

// One answer on a kept-alive connection: the head, then Content-Length bytes of body.
std::string read_response(tcp::socket& s) {
  std::string out;
  char buf[4096];
  boost::system::error_code ec;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    size_t head = out.find("\r\n\r\n");
    if (head != std::string::npos) {
      size_t cl = out.find("Content-Length: ");
      size_t len = cl != std::string::npos && cl < head ? std::stoul(out.substr(cl + 16)) : 0;
      if (out.size() >= head + 4 + len)
        return out;
    }
    size_t n = s.read_some(net::buffer(buf), ec);
    if (ec)
      break;
    out.append(buf, n);
  }
  return out;
}

// Started on a free port below 32768 (test servers stay out of the kernel's ephemeral
// range, 32768 and up), or nullptr.
std::unique_ptr<api::Server> start_server(engine::Store& store, api::ServerOptions o) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 50; ++attempt) {
    o.port = static_cast<uint16_t>(20000 + rng() % 12000);
    auto s = std::make_unique<api::Server>(store, o);
    if (s->start().ok())
      return s;
  }
  return nullptr;
}

TEST_CASE("a request not read within the timeout is cut; connections over the cap get 503",
          "[api][server]") {
  TempDir t;
  auto store = engine::open_database((t.dir / "vnflow.db").string());
  REQUIRE(store.ok());
  api::ServerOptions o;
  o.auth = api::AuthMode::kNone;
  o.request_timeout = std::chrono::seconds(1);
  o.max_connections = 2;
  auto server = start_server(*store.value(), o);
  REQUIRE(server != nullptr);
  REQUIRE(server->port() < 32768);
  net::io_context io;
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server->port());

  // Half a request line, then silence: closed after about a second, nothing answered.
  tcp::socket slow(io);
  slow.connect(ep);
  net::write(slow, net::buffer(std::string("GET /vnflcm/v1/api_ver")));
  auto t0 = std::chrono::steady_clock::now();
  std::string got = read_all(slow);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(got.empty());
  CHECK(secs >= 0.5);
  CHECK(secs < 5);

  // Two kept-alive connections fill the cap; the third is answered 503 and closed. Each of
  // the two is answered once first, so the server has surely counted both (on a loaded
  // machine its accept may lag any fixed sleep).
  tcp::socket a(io), b(io), c(io);
  for (tcp::socket* s : {&a, &b}) {
    std::string r;
    // The slow connection may be counted a moment after it was cut: a 503 then is tried
    // again.
    for (int attempt = 0; attempt < 50; ++attempt) {
      s->connect(ep);
      net::write(
          *s, net::buffer(std::string("GET /vnflcm/v1/api_versions HTTP/1.1\r\nHost: x\r\n\r\n")));
      r = read_response(*s);
      if (r.rfind("HTTP/1.1 200", 0) == 0)
        break;
      s->close();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
  }
  c.connect(ep);
  std::string third = read_all(c);
  CHECK(third.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(third.find("application/problem+json") != std::string::npos);
  a.close();
  b.close();

  // A well-formed request on a fresh connection is served.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  tcp::socket d(io);
  d.connect(ep);
  net::write(d,
             net::buffer(std::string(
                 "GET /vnflcm/v1/api_versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::string ok = read_all(d);
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ok.find("\"uriPrefix\":\"/vnflcm/v1\"") != std::string::npos);

  // A Content-Length over every limit: 413 from the header alone.
  tcp::socket e(io);
  e.connect(ep);
  net::write(e,
             net::buffer(std::string("PUT /vnfpkgm/v1/vnf_packages/x/package_content HTTP/1.1\r\n"
                                     "Host: x\r\nContent-Length: 100000000\r\n\r\n")));
  CHECK(read_all(e).rfind("HTTP/1.1 413", 0) == 0);
  server->stop();
}

TEST_CASE("an answer to HEAD has no body, so a kept-alive connection stays in step",
          "[api][server]") {
  // RFC 9110 9.3.2: the answer to HEAD carries the header fields of GET's, never content. A
  // 405 to HEAD with its ProblemDetails body made a client read that body as the start of
  // the next answer on the connection.
  TempDir t;
  auto store = engine::open_database((t.dir / "vnflow.db").string());
  REQUIRE(store.ok());
  api::ServerOptions o;
  o.auth = api::AuthMode::kNone;
  auto server = start_server(*store.value(), o);
  REQUIRE(server != nullptr);
  net::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
  for (const char* target : {"/vnflcm/v1/vnf_instances", "/vnflcm/v1/api_versions"}) {
    net::write(s, net::buffer("HEAD " + std::string(target) +
                              " HTTP/1.1\r\nHost: x\r\n\r\nGET /vnflcm/v1/api_versions "
                              "HTTP/1.1\r\nHost: x\r\n\r\n"));
    // Both answers: the HEAD's head alone, then the GET's head and body.
    std::string got;
    char buf[4096];
    boost::system::error_code ec;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline &&
           got.find("apiVersions") == std::string::npos) {
      size_t n = s.read_some(net::buffer(buf), ec);
      if (ec)
        break;
      got.append(buf, n);
    }
    INFO(target << ": " << got);
    size_t head_end = got.find("\r\n\r\n");
    REQUIRE(head_end != std::string::npos);
    // Right after the HEAD's head comes the GET's status line.
    CHECK(got.compare(head_end + 4, 9, "HTTP/1.1 ") == 0);
    CHECK(got.find("apiVersions") != std::string::npos);
  }
}

TEST_CASE("options are checked before anything listens", "[api][server]") {
  api::ServerOptions o;
  CHECK(api::parse_listen("127.0.0.1:9890", o).ok());
  CHECK(o.address == "127.0.0.1");
  CHECK(o.port == 9890);
  CHECK(api::parse_listen("19890", o).ok());
  CHECK(o.port == 19890);
  CHECK(api::parse_listen("[::1]:8080", o).ok());
  CHECK(o.address == "::1");
  for (const char* bad : {"", ":", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "host:80",
                          "127.0.0.1:8o", "1.2.3.4.5:80", "127.0.0.1:123456"}) {
    INFO(bad);
    CHECK_FALSE(api::parse_listen(bad, o).ok());
  }
  api::ServerOptions none;
  none.auth = api::AuthMode::kNone;
  none.address = "0.0.0.0";
  CHECK_FALSE(api::check_options(none).ok());
  none.address = "127.0.0.2";
  CHECK(api::check_options(none).ok());
  api::ServerOptions no_creds;
  CHECK_FALSE(api::check_options(no_creds).ok());
  CHECK(api::is_loopback("::1"));
  CHECK_FALSE(api::is_loopback("10.0.0.1"));
}

TEST_CASE("the credentials file", "[api][server]") {
  TempDir t;
  auto write = [&](const std::string& text, mode_t mode) {
    std::string p = (t.dir / "auth").string();
    std::ofstream(p, std::ios::trunc) << text;
    ::chmod(p.c_str(), mode);
    return p;
  };
  auto c = api::load_auth_file(write("# c\n\ntoken abc\nbasic u:p:w\n  token  spaced\n", 0600));
  REQUIRE(c.ok());
  CHECK(c.value().tokens == std::vector<std::string>{"abc", " spaced"});
  REQUIRE(c.value().basic.size() == 1);
  CHECK(c.value().basic[0] == std::pair<std::string, std::string>{"u", "p:w"});
  auto open = api::load_auth_file(write("token abc\n", 0640));
  REQUIRE_FALSE(open.ok());
  CHECK(open.status().message().find("chmod 600") != std::string::npos);
  auto bad = api::load_auth_file(write("token abc\nsecret x\n", 0600));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find(":2: ") != std::string::npos);
  CHECK_FALSE(api::load_auth_file(write("# nothing\n", 0600)).ok());
  CHECK_FALSE(api::load_auth_file(write("basic nocolon\n", 0600)).ok());
  CHECK_FALSE(api::load_auth_file((t.dir / "missing").string()).ok());
}

}  // namespace

namespace {

// A store whose get_instance waits until released: a request stuck on the database (a
// commit holding its write lock, a slow disk, every read connection busy). Asked in a
// NoWaitReads scope (the server's I/O threads), it declines, as SQLite's store does when
// every read connection is taken.
class StuckStore : public vnflow_test::StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  base::Result<engine::InstanceRecord> get_instance(std::string_view id) override {
    if (engine::NoWaitReads::active()) {
      ++declined_;
      engine::NoWaitReads::decline();
    }
    std::unique_lock<std::mutex> l(mu_);
    ++stuck_;
    cv_.notify_all();
    cv_.wait(l, [this] { return released_; });
    l.unlock();
    return StoreWrapper::get_instance(id);
  }
  void wait_stuck(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(10), [&] { return stuck_ >= n; });
  }
  int stuck() {
    std::lock_guard<std::mutex> l(mu_);
    return stuck_;
  }
  int declined() const { return declined_; }
  void unstick() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int stuck_ = 0;
  bool released_ = false;
  std::atomic<int> declined_{0};
};

// Records, per read, whether it was asked in a NoWaitReads scope (on an I/O thread); the
// first `decline` reads of one record in such a scope decline (every read connection busy).
class ScopeSpy : public vnflow_test::StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  std::atomic<int> decline{0};
  std::atomic<int> in_scope{0}, out_of_scope{0}, list_in_scope{0};
  base::Result<engine::InstanceRecord> get_instance(std::string_view id) override {
    note();
    return StoreWrapper::get_instance(id);
  }
  base::Result<engine::OpRecord> get_op(std::string_view id) override {
    note();
    return StoreWrapper::get_op(id);
  }
  base::Result<engine::PackageRecord> get_package(std::string_view id) override {
    note();
    return StoreWrapper::get_package(id);
  }
  base::Result<std::vector<engine::InstanceRecord>> list_instances() override {
    if (engine::NoWaitReads::active())
      ++list_in_scope;
    return StoreWrapper::list_instances();
  }

 private:
  void note() {
    if (!engine::NoWaitReads::active()) {
      ++out_of_scope;
      return;
    }
    ++in_scope;
    if (decline > 0) {
      --decline;
      engine::NoWaitReads::decline();
    }
  }
};

// Whatever fails in a test, the stuck requests end (the server's stop waits for them).
struct Unstick {
  StuckStore& s;
  ~Unstick() { s.unstick(); }
};

// Sends GET `target` on a new connection that closes after the answer.
void get_closing(tcp::socket& s, const tcp::endpoint& ep, const std::string& target) {
  s.connect(ep);
  net::write(s, net::buffer("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
}

}  // namespace

TEST_CASE("requests stuck on the database hold up no other request", "[api][server]") {
  TempDir t;
  auto db = engine::open_database((t.dir / "vnflow.db").string());
  REQUIRE(db.ok());
  StuckStore store(*db.value());
  Unstick unstick{store};
  api::ServerOptions o;
  o.auth = api::AuthMode::kNone;
  auto server = start_server(store, o);
  REQUIRE(server != nullptr);
  net::io_context io;
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server->port());
  auto ask = [&ep](tcp::socket& s, const std::string& target) { get_closing(s, ep, target); };
  // More requests stuck than the server has I/O threads.
  std::vector<std::unique_ptr<tcp::socket>> stuck;
  for (int k = 0; k < o.threads + 1; ++k) {
    stuck.push_back(std::make_unique<tcp::socket>(io));
    ask(*stuck.back(),
        "/vnflcm/v1/vnf_instances/00000000-0000-4000-8000-00000000000" + std::to_string(k));
  }
  store.wait_stuck(o.threads + 1);
  CHECK(store.stuck() == o.threads + 1);
  // The API's versions, a list of instances: answered at once all the same.
  for (std::string target : {"/vnflcm/v1/api_versions", "/vnflcm/v1/vnf_instances"}) {
    INFO(target);
    tcp::socket s(io);
    auto t0 = std::chrono::steady_clock::now();
    ask(s, target);
    std::string r = read_all(s);
    CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }
  // Each was first tried on its I/O thread, declined there, and handed off.
  CHECK(store.declined() == o.threads + 1);
  // Released, the stuck ones are answered (no such instance).
  store.unstick();
  for (auto& s : stuck)
    CHECK(read_all(*s).rfind("HTTP/1.1 404", 0) == 0);
  server->stop();
}

TEST_CASE("a GET of one record is read on the I/O thread without waiting, or handed off",
          "[api][server]") {
  TempDir t;
  auto db = engine::open_database((t.dir / "vnflow.db").string());
  REQUIRE(db.ok());
  ScopeSpy store(*db.value());
  api::ServerOptions o;
  o.auth = api::AuthMode::kNone;
  auto server = start_server(store, o);
  REQUIRE(server != nullptr);
  net::io_context io;
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server->port());
  auto get = [&](const std::string& target) {
    tcp::socket s(io);
    get_closing(s, ep, target);
    return read_all(s);
  };
  const std::string inst = "/vnflcm/v1/vnf_instances/00000000-0000-4000-8000-000000000001";
  const std::string op = "/vnflcm/v1/vnf_lcm_op_occs/00000000-0000-4000-8000-000000000002";
  SECTION("a read that need not wait: on the I/O thread, once") {
    CHECK(get(inst).rfind("HTTP/1.1 404", 0) == 0);
    CHECK(get(op).rfind("HTTP/1.1 404", 0) == 0);
    CHECK(store.in_scope == 2);
    CHECK(store.out_of_scope == 0);
  }
  SECTION("a read that would wait: declined, then answered on a handler thread") {
    store.decline = 2;
    std::string r1 = get(inst), r2 = get(op);
    CHECK(r1.rfind("HTTP/1.1 404", 0) == 0);
    CHECK(r1.find("\"status\":404") != std::string::npos);
    CHECK(r2.rfind("HTTP/1.1 404", 0) == 0);
    CHECK(store.in_scope == 2);
    CHECK(store.out_of_scope == 2);
  }
  SECTION("lists and packages are never read there") {
    CHECK(get("/vnflcm/v1/vnf_instances").rfind("HTTP/1.1 200", 0) == 0);
    // A package's GET asks whether any instance uses it: not a read of one record.
    CHECK(get("/vnfpkgm/v1/vnf_packages/00000000-0000-4000-8000-000000000003")
              .rfind("HTTP/1.1 404", 0) == 0);
    CHECK(store.list_in_scope == 0);
    CHECK(store.in_scope == 0);
    CHECK(store.out_of_scope == 1);
  }
  server->stop();
}

TEST_CASE("a /metrics scrape stuck on the database holds up no I/O thread", "[api][server]") {
  TempDir t;
  auto db = engine::open_database((t.dir / "vnflow.db").string());
  REQUIRE(db.ok());
  StuckStore store(*db.value());
  Unstick unstick{store};
  // The daemon's collector reads the store at every scrape (it counts operations).
  base::Metrics metrics;
  metrics.on_collect([&store](base::Metrics&) { (void)store.get_instance("x"); });
  api::ServerOptions o;
  o.auth = api::AuthMode::kNone;
  o.metrics = &metrics;
  auto server = start_server(store, o);
  REQUIRE(server != nullptr);
  net::io_context io;
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server->port());
  auto ask = [&ep](tcp::socket& s, const std::string& target) { get_closing(s, ep, target); };
  std::vector<std::unique_ptr<tcp::socket>> scrapes;
  for (int k = 0; k < o.threads + 1; ++k) {
    scrapes.push_back(std::make_unique<tcp::socket>(io));
    ask(*scrapes.back(), "/metrics");
  }
  // One collector runs at a time: one scrape is in the store, the others wait for it.
  store.wait_stuck(1);
  REQUIRE(store.stuck() >= 1);
  tcp::socket s(io);
  auto t0 = std::chrono::steady_clock::now();
  ask(s, "/vnflcm/v1/api_versions");
  CHECK(read_all(s).rfind("HTTP/1.1 200", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  store.unstick();
  for (auto& sc : scrapes)
    CHECK(read_all(*sc).rfind("HTTP/1.1 200", 0) == 0);
  server->stop();
}
