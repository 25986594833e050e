#include "base/base.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

TEST_CASE("diagnostics print as file:line:col: severity: message [code]", "[base]") {
  // Field by field: the brace-initialised form trips g++ 12's false -Wmaybe-uninitialized
  // at -O3.
  base::Diagnostic d;
  d.code = "T0030";
  d.where = {"pkg.csar!Definitions/vnfd.yaml", 42, 13};
  d.message = "unknown node type \"X\"";
  d.notes = {"first defined here"};
  CHECK(base::to_string(d) ==
        "pkg.csar!Definitions/vnfd.yaml:42:13: error: unknown node type \"X\" [T0030]\n"
        "  note: first defined here");
}

TEST_CASE("diagnostics sort by location and drop exact duplicates", "[base]") {
  base::Diagnostics diags;
  diags.error("T2", {"b.yaml", 3, 1}, "second");
  diags.error("T1", {"a.yaml", 9, 1}, "first");
  diags.error("T2", {"b.yaml", 3, 1}, "second");
  diags.warning("T3", {"a.yaml", 1, 1}, "zeroth");
  auto sorted = diags.sorted();
  REQUIRE(sorted.size() == 3);
  CHECK(sorted[0].message == "zeroth");
  CHECK(sorted[1].message == "first");
  CHECK(sorted[2].message == "second");
  CHECK(diags.error_count() == 3);
  CHECK(diags.has_errors());
}

TEST_CASE("SHA-2 digests match the published test vectors", "[base][digest]") {
  using base::DigestAlgorithm;
  CHECK(base::digest_hex(DigestAlgorithm::kSha256, "abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(base::digest_hex(DigestAlgorithm::kSha224, "abc") ==
        "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7");
  CHECK(base::digest_hex(DigestAlgorithm::kSha384, "abc").substr(0, 16) == "cb00753f45a35e8b");
  CHECK(base::digest_hex(DigestAlgorithm::kSha512, "abc").substr(0, 16) == "ddaf35a193617aba");
  base::Hasher h(DigestAlgorithm::kSha256);
  h.update("a");
  h.update("bc");
  CHECK(h.hex_final() == base::digest_hex(DigestAlgorithm::kSha256, "abc"));
}

TEST_CASE("digest algorithm names are read as SOL004 and Tacker write them", "[base][digest]") {
  CHECK(base::parse_digest_algorithm("SHA-256") == base::DigestAlgorithm::kSha256);
  CHECK(base::parse_digest_algorithm("sha-512") == base::DigestAlgorithm::kSha512);
  CHECK(base::parse_digest_algorithm("SHA224") == base::DigestAlgorithm::kSha224);
  CHECK_FALSE(base::parse_digest_algorithm("MD5").has_value());
}

TEST_CASE("UTF-8 validation rejects overlongs, surrogates and truncation", "[base]") {
  CHECK(base::is_valid_utf8("plain ascii"));
  CHECK(base::is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  CHECK_FALSE(base::is_valid_utf8("\xC0\xAF"));      // overlong '/'
  CHECK_FALSE(base::is_valid_utf8("\xED\xA0\x80"));  // surrogate
  CHECK_FALSE(base::is_valid_utf8("\xE2\x82"));      // truncated
  CHECK_FALSE(base::is_valid_utf8("\xFF"));
}

TEST_CASE("UTF-8 validation finds a bad byte anywhere in long ASCII text", "[base]") {
  // ASCII is checked a word at a time: a bad or multi-byte sequence at every offset from a
  // word's start, at the end of the text, and split across a word boundary.
  for (size_t before = 0; before < 20; ++before) {
    for (size_t after = 0; after < 10; ++after) {
      std::string pad_a(before, 'a'), pad_b(after, 'b');
      INFO("before " << before << " after " << after);
      CHECK(base::is_valid_utf8(pad_a + pad_b));
      CHECK(base::is_valid_utf8(pad_a + "\xE2\x82\xAC" + pad_b));
      CHECK(base::is_valid_utf8(pad_a + "\xF0\x9F\x98\x80" + pad_b));
      CHECK_FALSE(base::is_valid_utf8(pad_a + "\xFF" + pad_b));
      CHECK_FALSE(base::is_valid_utf8(pad_a + "\x80" + pad_b));
      CHECK_FALSE(base::is_valid_utf8(pad_a + "\xED\xA0\x80" + pad_b));
      CHECK_FALSE(base::is_valid_utf8(pad_a + "\xE2\x82" + pad_b));
    }
  }
}

TEST_CASE("is_loopback_host: localhost, 127.0.0.0/8 and ::1 only", "[base]") {
  for (const char* h : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "::1%lo"})
    CHECK(base::is_loopback_host(h));
  for (const char* h : {"10.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "example.com",
                        "127.0.0.1.example.com", "127.0.0.1%lo", "", "[127.0.0.1"})
    CHECK_FALSE(base::is_loopback_host(h));
}

TEST_CASE("closest_match suggests only near misses", "[base]") {
  std::vector<std::string> c = {"properties", "requirements", "interfaces"};
  CHECK(base::closest_match("propertis", c) == "properties");
  CHECK(base::closest_match("zzz", c).empty());
}

TEST_CASE("Result carries a value or the status", "[base]") {
  base::Result<int> ok(7);
  REQUIRE(ok.ok());
  CHECK(ok.value() == 7);
  base::Result<int> bad(base::Status::NotFound("no such thing"));
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().to_string() == "not_found: no such thing");
}

TEST_CASE("metrics render in Prometheus' text format", "[base][metrics]") {
  base::Metrics m;
  m.declare("vnflow_things_total", base::Metrics::Type::kCounter, "Things done.\nTwo lines",
            {"kind", "result"});
  m.declare("vnflow_depth", base::Metrics::Type::kGauge, "How deep.", {});
  m.declare("vnflow_wait_seconds", base::Metrics::Type::kHistogram, "Waits.", {"kind"},
            {0.01, 0.1, 1});
  m.add("vnflow_things_total", {"ssh.exec", "ok"});
  m.add("vnflow_things_total", {"ssh.exec", "ok"}, 2);
  m.add("vnflow_things_total", {"a\"b\\c\nd", "timeout"});
  m.set("vnflow_depth", {}, 7);
  m.observe("vnflow_wait_seconds", {"x"}, 0.005);
  m.observe("vnflow_wait_seconds", {"x"}, 0.1);  // a bound is inclusive (le)
  m.observe("vnflow_wait_seconds", {"x"}, 5);
  CHECK(m.value("vnflow_things_total", {"ssh.exec", "ok"}) == 3);
  CHECK(m.value("vnflow_wait_seconds", {"x"}) == 3);
  CHECK(m.value("vnflow_wait_seconds", {"y"}) == 0);
  CHECK(m.text() ==
        "# HELP vnflow_things_total Things done.\\nTwo lines\n"
        "# TYPE vnflow_things_total counter\n"
        "vnflow_things_total{kind=\"a\\\"b\\\\c\\nd\",result=\"timeout\"} 1\n"
        "vnflow_things_total{kind=\"ssh.exec\",result=\"ok\"} 3\n"
        "# HELP vnflow_depth How deep.\n"
        "# TYPE vnflow_depth gauge\n"
        "vnflow_depth 7\n"
        "# HELP vnflow_wait_seconds Waits.\n"
        "# TYPE vnflow_wait_seconds histogram\n"
        "vnflow_wait_seconds_bucket{kind=\"x\",le=\"0.01\"} 1\n"
        "vnflow_wait_seconds_bucket{kind=\"x\",le=\"0.1\"} 2\n"
        "vnflow_wait_seconds_bucket{kind=\"x\",le=\"1\"} 2\n"
        "vnflow_wait_seconds_bucket{kind=\"x\",le=\"+Inf\"} 3\n"
        "vnflow_wait_seconds_sum{kind=\"x\"} 5.105\n"
        "vnflow_wait_seconds_count{kind=\"x\"} 3\n");
}

TEST_CASE("metrics collectors refresh gauges at each rendering", "[base][metrics]") {
  base::Metrics m;
  m.declare("vnflow_ops", base::Metrics::Type::kGauge, "Ops.", {"state"});
  int calls = 0;
  m.on_collect([&calls](base::Metrics& mm) {
    mm.clear("vnflow_ops");
    if (++calls == 1)
      mm.set("vnflow_ops", {"STARTING"}, 2);
    else
      mm.set("vnflow_ops", {"COMPLETED"}, 1);
  });
  CHECK(m.text().find("vnflow_ops{state=\"STARTING\"} 2\n") != std::string::npos);
  std::string second = m.text();
  CHECK(second.find("STARTING") == std::string::npos);  // gone, not left at 2
  CHECK(second.find("vnflow_ops{state=\"COMPLETED\"} 1\n") != std::string::npos);
  // Declaring the same family again is harmless; the series stay.
  m.declare("vnflow_ops", base::Metrics::Type::kGauge, "Ops.", {"state"});
  CHECK(m.value("vnflow_ops", {"COMPLETED"}) == 1);
  CHECK(base::Metrics::exponential_buckets(0.001, 2, 3) ==
        std::vector<double>{0.001, 0.002, 0.004});
}

TEST_CASE("metrics: a family without labels reads 0 before its first event", "[base][metrics]") {
  base::Metrics m;
  m.declare("vnflow_failures_total", base::Metrics::Type::kCounter, "Failures.", {});
  m.declare("vnflow_took_seconds", base::Metrics::Type::kHistogram, "Took.", {}, {1e-7, 0.0001});
  std::string t = m.text();
  CHECK(t.find("\nvnflow_failures_total 0\n") != std::string::npos);
  // Bounds as Prometheus' clients write them: plain decimals where they are short.
  CHECK(t.find("vnflow_took_seconds_bucket{le=\"0.0001\"} 0\n") != std::string::npos);
  CHECK(t.find("vnflow_took_seconds_bucket{le=\"1e-07\"} 0\n") != std::string::npos);
  CHECK(t.find("vnflow_took_seconds_count 0\n") != std::string::npos);
}

TEST_CASE("FairMutex serves its waiters in the order they came, the last holder after them") {
  base::FairMutex m;
  std::mutex om;
  std::vector<int> order;
  auto note = [&](int who) {
    std::lock_guard<std::mutex> l(om);
    order.push_back(who);
  };
  auto wait_for_waiters = [&](uint64_t n) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (m.waiting() < n && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(m.waiting() == n);
  };
  m.lock();
  std::thread a([&] {
    std::lock_guard l(m);
    note(1);
  });
  wait_for_waiters(1);
  std::thread b([&] {
    std::lock_guard l(m);
    note(2);
  });
  wait_for_waiters(2);
  // The holder unlocks and locks again at once (a commit after a commit): it comes after
  // the two that waited. A std::mutex lets it take the lock back first, over and over.
  m.unlock();
  m.lock();
  note(0);
  m.unlock();
  a.join();
  b.join();
  CHECK(order == std::vector<int>{1, 2, 0});
  CHECK(m.waiting() == 0);
}

TEST_CASE("WorkQueue: a burst wakes each sleeping worker once at most, runs every job, FIFO") {
  constexpr int kWorkers = 4, kJobs = 200;
  base::WorkQueue q(kWorkers);
  // Let the workers fall asleep (a worker not yet waiting is not woken, and not counted).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::mutex om;
  std::vector<int> order;
  std::atomic<int> ran{0};
  std::vector<std::function<void()>> burst;
  for (int i = 0; i < kJobs; ++i)
    burst.push_back([&, i] {
      {
        std::lock_guard<std::mutex> l(om);
        order.push_back(i);
      }
      ran++;
    });
  q.push_all(burst);
  CHECK(burst.empty());
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran < kJobs && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(ran == kJobs);
  // A queue that signals per job would have woken a worker for every one of them.
  CHECK(q.wakes() <= static_cast<uint64_t>(kWorkers));
  CHECK(q.wakes() >= 1);
  {
    std::lock_guard<std::mutex> l(om);
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < kJobs; ++i)
      CHECK(sorted[static_cast<size_t>(i)] == i);
  }

  // One worker: the jobs run in the order they were pushed.
  base::WorkQueue one(1);
  std::vector<int> seq;
  for (int i = 0; i < 50; ++i)
    one.push([&seq, i] { seq.push_back(i); });
  // join() runs what is queued; a push after it runs nothing.
  one.join();
  std::vector<int> want(50);
  std::iota(want.begin(), want.end(), 0);
  CHECK(seq == want);
  bool late = false;
  one.push([&late] { late = true; });
  one.join();
  CHECK_FALSE(late);
}
