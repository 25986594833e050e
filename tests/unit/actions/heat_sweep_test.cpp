// A Heat stack create (the instantiate path: Keystone token, create the stack, poll until
// CREATE_COMPLETE, read its outputs) against a scripted Keystone + Heat, with a fault in
// the 1st, 2nd, ... Nth HTTP call in turn (Beast's fail_count sweep): the connection
// refused, a 503, a timeout after the server did the work, a garbled answer. Time is a
// ManualClock, so the backoffs, polls and token renewals take no real time.
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <string>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "actions/actions.h"
#include "actions/internal/openstack.h"

#include "tests/unit/actions/scripted_transport.h"

namespace json = boost::json;

namespace {

constexpr const char* kKeystone = "http://keystone.test/v3";
constexpr const char* kHeat = "http://heat.test/v1/p1";
constexpr int64_t kTokenLifeMs = 8'000;  // short, so the runs renew tokens on the way
constexpr int64_t kBuildMs = 10'000;     // how long the stack takes to create

std::string iso(int64_t wall_ms) {
  std::time_t t = static_cast<std::time_t>(wall_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S.000000Z", &tm);
  return buf;
}

std::string header(const test::http::Request& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name)
      return v;
  }
  return {};
}

// Keystone and Heat as far as a stack create goes, over a ScriptedTransport.
struct FakeCloud {
  base::ManualClock& clock;
  std::map<std::string, int64_t> tokens;  // token -> expiry (wall ms)
  struct Stack {
    std::string name, id;
    int64_t created_ms = 0;
  };
  std::optional<Stack> stack;
  int creates = 0;

  FakeCloud(base::ManualClock& c, test::ScriptedTransport& net) : clock(c) {
    using test::response;
    net.on("POST", std::string(kKeystone) + "/auth/tokens", [this](const test::http::Request& r) {
      if (r.body.find("\"password\":\"s3cret-pw\"") == std::string::npos)
        return base::Result<test::http::Response>(response(
            401,
            R"({"error":{"message":"The request you have made requires authentication.","code":401}})"));
      std::string tok = "tok-" + std::to_string(tokens.size() + 1);
      int64_t now = clock.wall_ms();
      tokens[tok] = now + kTokenLifeMs;
      json::object t{
          {"issued_at", iso(now)},
          {"expires_at", iso(now + kTokenLifeMs)},
          {"project", json::object{{"id", "p1"}, {"name", "demo"}}},
          {"catalog", json::array{json::object{
                          {"type", "orchestration"},
                          {"endpoints", json::array{json::object{{"interface", "public"},
                                                                 {"region_id", "RegionOne"},
                                                                 {"url", kHeat}}}}}}}};
      return base::Result<test::http::Response>(
          response(201, json::serialize(json::object{{"token", t}}), {{"x-subject-token", tok}}));
    });
    net.on("POST", std::string(kHeat) + "/stacks", [this](const test::http::Request& r) {
      if (auto denied = check_token(r))
        return *denied;
      if (stack)
        return base::Result<test::http::Response>(response(
            409,
            R"({"error":{"message":"The Stack (vnf-1) already exists.","type":"StackExists"}})"));
      creates++;
      stack = Stack{"vnf-1", "id-" + std::to_string(creates), clock.wall_ms()};
      return base::Result<test::http::Response>(
          response(201, json::serialize(json::object{{"stack", json::object{{"id", stack->id}}}})));
    });
    net.on("GET", std::string(kHeat) + "/stacks/", [this](const test::http::Request& r) {
      if (auto denied = check_token(r))
        return *denied;
      std::string ref = r.url.substr(std::string(kHeat).size() + 8);
      if (!stack || ref.rfind(stack->name, 0) != 0)
        return base::Result<test::http::Response>(
            response(404, R"({"error":{"message":"not found"}})"));
      if (ref == stack->name)
        return base::Result<test::http::Response>(response(
            302, "",
            {{"location", std::string(kHeat) + "/stacks/" + stack->name + "/" + stack->id}}));
      bool done = clock.wall_ms() - stack->created_ms >= kBuildMs;
      json::object s{{"id", stack->id},
                     {"stack_name", stack->name},
                     {"stack_status", done ? "CREATE_COMPLETE" : "CREATE_IN_PROGRESS"},
                     {"stack_status_reason", done ? "Stack CREATE completed successfully" : ""},
                     {"creation_time", iso(stack->created_ms)}};
      if (done)
        s["outputs"] =
            json::array{json::object{{"output_key", "mgmt_ip"}, {"output_value", "10.0.0.5"}}};
      return base::Result<test::http::Response>(
          response(200, json::serialize(json::object{{"stack", s}})));
    });
  }

  std::optional<base::Result<test::http::Response>> check_token(const test::http::Request& r) {
    auto it = tokens.find(header(r, "X-Auth-Token"));
    if (it == tokens.end() || it->second <= clock.wall_ms())
      return base::Result<test::http::Response>(test::response(
          401, R"({"error":{"message":"The request you have made requires authentication."}})"));
    return std::nullopt;
  }
};

// The VIM the states name: a password user of project "demo".
base::Result<json::object> vim_record(std::string_view) {
  return json::object{{"id", "vim-1"},
                      {"type", "openstack"},
                      {"access", json::object{{"auth_url", kKeystone},
                                              {"username", "admin"},
                                              {"password", "s3cret-pw"},
                                              {"project_name", "demo"}}},
                      {"extra", json::object{}}};
}

enum class Fault { kRefused, kServerError, kTimeout, kGarbled };

const char* name(Fault f) {
  switch (f) {
    case Fault::kRefused:
      return "connection refused";
    case Fault::kServerError:
      return "HTTP 503";
    case Fault::kTimeout:
      return "timeout";
    case Fault::kGarbled:
      return "garbled answer";
  }
  return "?";
}

// Puts `f` on a call: refused and 503 before the server sees the request; a timeout and a
// garbled answer after it did the work.
void inject(test::ScriptedTransport& net, Fault f, std::function<bool(int)> faulty) {
  using R = base::Result<test::http::Response>;
  net.before = [f, faulty](int n, const test::http::Request& r) -> std::optional<R> {
    if (!faulty(n))
      return std::nullopt;
    if (f == Fault::kRefused)
      return R(base::Status::Unavailable(r.method + " " + r.url + ": connect: Connection refused"));
    if (f == Fault::kServerError)
      return R(test::response(503, "<html><body>503 Service Unavailable</body></html>"));
    return std::nullopt;
  };
  net.after = [f, faulty](int n, const test::http::Request& r,
                          const R& answered) -> std::optional<R> {
    if (!faulty(n))
      return std::nullopt;
    if (f == Fault::kTimeout)
      return R(base::Status(base::StatusCode::kDeadlineExceeded,
                            r.method + " " + r.url + ": read: timed out"));
    if (f == Fault::kGarbled && answered.ok()) {
      auto garbled = answered.value();
      garbled.body = "{\"stack\": [\"<html>";
      return R(garbled);
    }
    return std::nullopt;
  };
}

struct Result {
  actions::Outcome out;
  std::string state;  // the state that ended the run
  int calls = 0;
  int creates = 0;
  int tokens = 0;        // Keystone authentications
  bool adopted = false;  // the create found the stack an earlier attempt made
  double seconds = 0;
};

// The instantiate states, run as the executor runs them: a poll answer waits (on the clock)
// and calls again until the state's timeout; a failure of a class in the retry policy's
// `on` is retried after the backoff (instantiate.yaml's policies).
Result instantiate(Fault f, std::function<bool(int)> faulty) {
  auto start = std::chrono::steady_clock::now();
  base::ManualClock clock;
  test::ScriptedTransport net;
  FakeCloud cloud(clock, net);
  inject(net, f, std::move(faulty));
  actions::Services services;
  services.transport = &net;
  services.clock = &clock;
  auto registry = actions::Registry::standard(services);
  actions::Context ctx;
  ctx.vim = vim_record;

  struct Policy {
    int attempts;
    int64_t backoff_ms, max_delay_ms, timeout_ms;
    double factor;
  };
  auto run_state = [&](const char* action, const json::object& in, Policy p) {
    const actions::Kind* kind = registry.find(action);
    REQUIRE(kind != nullptr);
    actions::Outcome out;
    for (int attempt = 1; attempt <= p.attempts; ++attempt) {
      ctx.attempt = attempt;
      int64_t until = clock.wall_ms() + p.timeout_ms;
      ctx.deadline = clock.steady() + std::chrono::milliseconds(p.timeout_ms);
      for (int polls = 0;; ++polls) {
        REQUIRE(polls < 100'000);  // a poll loop that never ends would be a hang
        out = kind->run(in, ctx);
        if (out.ok || out.poll_after_ms <= 0)
          break;
        if (clock.wall_ms() + out.poll_after_ms > until) {
          out = actions::Outcome::failure(
              actions::ErrorClass::kTimeout,
              std::string(action) + ": no result within the state's timeout");
          break;
        }
        clock.advance(std::chrono::milliseconds(out.poll_after_ms));
      }
      if (out.ok || attempt == p.attempts ||
          (out.error_class != base::ErrorClass::kTransient &&
           out.error_class != base::ErrorClass::kTimeout))
        break;
      double d = static_cast<double>(p.backoff_ms);
      for (int i = 1; i < attempt; ++i)
        d *= p.factor;
      clock.advance(std::chrono::milliseconds(std::min(static_cast<int64_t>(d), p.max_delay_ms)));
    }
    return out;
  };
  Result res;
  auto finish = [&](const char* state, actions::Outcome out) {
    res.out = std::move(out);
    res.state = state;
    res.calls = static_cast<int>(net.requests.size());
    res.creates = cloud.creates;
    res.tokens = static_cast<int>(cloud.tokens.size());
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return res;
  };
  auto created = run_state("heat.stack.create",
                           json::object{{"vim_id", "vim-1"},
                                        {"name", "vnf-1"},
                                        {"template", "heat_template_version: 2018-08-31"}},
                           {5, 2000, 30'000, 120'000, 2});
  if (!created.ok)
    return finish("create_stack", created);
  res.adopted = created.outputs.at("adopted").as_bool();
  std::string stack(created.outputs.at("stack").as_string());
  auto waited =
      run_state("heat.stack.wait",
                json::object{{"vim_id", "vim-1"}, {"stack", stack}, {"until", "CREATE_COMPLETE"}},
                {3, 5000, 5000, 1'800'000, 1});
  if (!waited.ok)
    return finish("wait_create", waited);
  return finish("read_outputs",
                run_state("heat.stack.outputs", json::object{{"vim_id", "vim-1"}, {"stack", stack}},
                          {5, 2000, 30'000, 120'000, 2}));
}

}  // namespace

TEST_CASE("heat create: one failed call anywhere is retried to the same single stack") {
  for (Fault f : {Fault::kRefused, Fault::kServerError, Fault::kTimeout, Fault::kGarbled}) {
    auto clean = instantiate(f, [](int) { return false; });
    REQUIRE(clean.out.ok);
    CHECK(clean.calls >= 6);   // token, GET, POST, polls, outputs
    CHECK(clean.tokens >= 2);  // the token expired on the way and was renewed
    int adopted = 0;
    for (int n = 1;; ++n) {
      auto r = instantiate(f, [n](int call) { return call == n; });
      INFO(name(f) << " on call " << n << " of " << r.calls << ": " << r.state << ": "
                   << base::to_string(r.out.error_class) << " " << r.out.message);
      CHECK(r.out.ok);
      CHECK(r.creates == 1);
      if (r.out.ok) {
        CHECK(r.state == "read_outputs");
        CHECK(r.out.outputs.at("status") == "CREATE_COMPLETE");
        CHECK(r.out.outputs.at("outputs").at("mgmt_ip") == "10.0.0.5");
      }
      CHECK(r.seconds < 5);
      adopted += r.adopted ? 1 : 0;
      if (n > r.calls)
        break;  // the fault fell after the last call: the sweep is through
    }
    // A create whose answer was lost (the stack made all the same) is found on the retry.
    if (f == Fault::kTimeout || f == Fault::kGarbled)
      CHECK(adopted >= 1);
    else
      CHECK(adopted == 0);
  }
}

TEST_CASE("heat create: calls failing from the Nth on end in one failure that names the call") {
  for (Fault f : {Fault::kRefused, Fault::kServerError, Fault::kTimeout, Fault::kGarbled}) {
    int clean_calls = instantiate(f, [](int) { return false; }).calls;
    for (int n = 1; n <= clean_calls; ++n) {
      auto r = instantiate(f, [n](int call) { return call >= n; });
      INFO(name(f) << " from call " << n << ": " << r.state << ": "
                   << base::to_string(r.out.error_class) << " " << r.out.message);
      CHECK(r.creates <= 1);
      CHECK(r.seconds < 5);
      REQUIRE_FALSE(r.out.ok);
      // The wait state keeps polling through transient errors until its own timeout.
      base::ErrorClass cls = f == Fault::kTimeout || r.state == "wait_create"
                                 ? base::ErrorClass::kTimeout
                                 : base::ErrorClass::kTransient;
      CHECK(r.out.error_class == cls);
      const char* action = r.state == "create_stack"  ? "heat.stack.create"
                           : r.state == "wait_create" ? "heat.stack.wait"
                                                      : "heat.stack.outputs";
      CHECK(r.out.message.rfind(action, 0) == 0);
      bool names_call = false;
      for (const char* call : {"Keystone authentication", "POST /stacks", "GET /stacks/",
                               "no result within the state's timeout"})
        names_call = names_call || r.out.message.find(call) != std::string::npos;
      CHECK(names_call);
      CHECK(r.out.message.find("s3cret-pw") == std::string::npos);  // never the password
    }
  }
}

TEST_CASE("heat: hostile answers end in a located failure, without the password") {
  base::ManualClock clock;
  test::ScriptedTransport net;
  // A Keystone that quotes the request back in its error.
  net.on("POST", std::string(kKeystone) + "/auth/tokens",
         test::response(400, R"({"error":{"message":"bad request: password s3cret-pw"}})"));
  actions::Services services{&net, &clock, {}};
  auto registry = actions::Registry::standard(services);
  actions::Context ctx;
  ctx.vim = vim_record;

  auto out = registry.find("heat.stack.outputs")
                 ->run(json::object{{"vim_id", "vim-1"}, {"stack", "vnf-1/id-1"}}, ctx);
  REQUIRE_FALSE(out.ok);
  CHECK(out.error_class == base::ErrorClass::kInvalid);
  CHECK(out.message.find("Keystone authentication at http://keystone.test/v3") !=
        std::string::npos);
  CHECK(out.message.find("password ***") != std::string::npos);
  CHECK(out.message.find("s3cret-pw") == std::string::npos);
  // Heat's clock far in the future (a year past what a time point holds) is no time at all.
  CHECK(actions::openstack::parse_iso_time("2523-01-01T00:00:00Z").time_since_epoch().count() == 0);
  CHECK(actions::openstack::parse_iso_time("2026-11-23T08:41:37Z").time_since_epoch().count() != 0);
}

TEST_CASE("heat: a stack with no progress for heat_stall_secs is resumed, on the clock") {
  base::ManualClock clock;
  test::ScriptedTransport net;
  FakeCloud cloud(clock, net);
  cloud.stack = FakeCloud::Stack{"vnf-1", "id-1", clock.wall_ms()};
  std::string status = "CREATE_IN_PROGRESS";
  int64_t last_event = clock.wall_ms();
  int patches = 0;
  // Heat's own view of this stack: its engine died, so nothing moves until a PATCH.
  std::string stack_url = std::string(kHeat) + "/stacks/vnf-1/id-1";
  net.on("GET", stack_url, [&](const test::http::Request&) {
    return base::Result<test::http::Response>(test::response(
        200, json::serialize(json::object{
                 {"stack", json::object{{"id", "id-1"},
                                        {"stack_name", "vnf-1"},
                                        {"stack_status", status},
                                        {"creation_time", iso(cloud.stack->created_ms)}}}})));
  });
  net.on("GET", stack_url + "/events", [&](const test::http::Request&) {
    return base::Result<test::http::Response>(test::response(
        200, json::serialize(json::object{
                 {"events", json::array{json::object{{"event_time", iso(last_event)}}}}})));
  });
  net.on("PATCH", stack_url, [&](const test::http::Request& r) {
    patches++;
    CHECK(r.body == "{}");  // an update that changes nothing
    status = "UPDATE_IN_PROGRESS";
    return base::Result<test::http::Response>(test::response(202, ""));
  });
  actions::Services services{&net, &clock, {}};
  auto registry = actions::Registry::standard(services);
  actions::Context ctx;
  ctx.vim = [](std::string_view id) {
    auto v = vim_record(id);
    v.value()["extra"] = json::object{{"heat_stall_secs", 300}};
    return v;
  };
  const actions::Kind* wait = registry.find("heat.stack.wait");
  json::object in{{"vim_id", "vim-1"}, {"stack", "vnf-1/id-1"}, {"until", "CREATE_COMPLETE"}};
  auto start = std::chrono::steady_clock::now();
  // Within heat_stall_secs: it only polls.
  for (int i = 0; i < 290; ++i) {
    auto out = wait->run(in, ctx);
    REQUIRE(out.poll_after_ms == 1000);
    clock.advance(std::chrono::milliseconds(out.poll_after_ms));
  }
  CHECK(patches == 0);
  // A minute of events keeps it alive; then silence past the limit resumes it, once.
  last_event = clock.wall_ms();
  clock.advance(std::chrono::seconds(299));
  CHECK(wait->run(in, ctx).outputs.as_object().if_contains("resumed") == nullptr);
  clock.advance(std::chrono::seconds(2));
  auto resumed = wait->run(in, ctx);
  CHECK(resumed.poll_after_ms > 0);
  CHECK(resumed.outputs.at("resumed") == true);
  CHECK(patches == 1);
  status = "UPDATE_COMPLETE";
  auto done = wait->run(in, ctx);
  REQUIRE(done.ok);
  CHECK(done.outputs.at("status") == "UPDATE_COMPLETE");
  // Ten simulated minutes, in (much) less than a second of real time.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}
