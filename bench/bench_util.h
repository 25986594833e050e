// What the bench programs share (engine_bench, pg_bench): timing, dying with a message,
// unwrapping results, and the executor's test bed: a no-op `local.exec` and a chain machine
// compiled against the real catalog. Header-only; bench programs only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <boost/json.hpp>
#include <errno.h>

#include "actions/actions.h"
#include "base/base.h"
#include "workflows/workflows.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] inline void die(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, msg.c_str());
  std::exit(1);
}

template <typename T>
T must(base::Result<T> r, const char* what) {
  if (!r.ok())
    die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

inline void must(const base::Status& s, const char* what) {
  if (!s.ok())
    die(std::string(what) + ": " + s.to_string());
}

// Stands in for local.exec: no process, outputs shaped as the catalog says (or {} with
// `empty_outputs`, for diagnosis).
class NoopExec : public actions::Action {
 public:
  NoopExec(std::atomic<uint64_t>* calls, bool empty_outputs = false)
      : calls_(calls), empty_(empty_outputs) {}
  actions::Outcome run(const boost::json::object&, const actions::Context&) const override {
    calls_->fetch_add(1, std::memory_order_relaxed);
    if (empty_)
      return actions::Outcome::success(boost::json::object{});
    return actions::Outcome::success(boost::json::object{{"exit_code", 0},
                                                         {"stdout", ""},
                                                         {"stderr", ""},
                                                         {"truncated", false},
                                                         {"duration_ms", 0}});
  }

 private:
  std::atomic<uint64_t>* calls_;
  bool empty_;
};

// The standard registry with local.exec replaced by NoopExec.
inline actions::Registry noop_registry(std::atomic<uint64_t>* calls, bool empty_outputs = false) {
  actions::Registry r = actions::Registry::standard();
  r.add("local.exec", std::make_shared<NoopExec>(calls, empty_outputs));
  return r;
}

// A chain of `k` local.exec states, then succeed.
inline std::string chain_yaml(int k) {
  std::string y = "description: bench chain\nstart: s0\nstates:\n";
  for (int i = 0; i < k; ++i) {
    y += "  s" + std::to_string(i) + ":\n";
    y += "    action: local.exec\n";
    y += "    with:\n      command: [\"true\", \"" + std::to_string(i) + "\"]\n";
    y += "    timeout: 10s\n";
    y += "    next: " + (i + 1 < k ? "s" + std::to_string(i + 1) : std::string("done")) + "\n";
  }
  y += "  done:\n    succeed: true\n";
  return y;
}

struct Compiled {
  std::shared_ptr<const workflows::Machine> m;
  double compile_s = 0;
};

// `text` compiled as an instantiate_end hook (dies on a diagnostic).
inline Compiled compile_machine(const std::string& name, const std::string& text) {
  base::Diagnostics diags;
  auto t0 = Clock::now();
  auto m = workflows::compile_file(name, text, "instantiate", "instantiate_end", diags);
  double t = secs_since(t0);
  if (m == nullptr) {
    std::string all;
    for (const auto& d : diags.items())
      all += "\n  " + base::to_string(d);
    die("workflow " + name + " does not compile:" + all);
  }
  return {m, t};
}

}  // namespace bench
