// The executor in-process, on real SQLite files: commit-failure sweep, retries, operator
// retry / rollback / fail / cancel, one operation per instance, replay.
#include "engine/engine.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <unistd.h>

#include "engine/internal/vim_actions.h"

#include "tests/fakes/store_wrapper.h"
#include "tests/unit/engine/replay_check.h"
#include "tests/unit/engine/store_param.h"

namespace fs = std::filesystem;
namespace json = boost::json;
using engine::OpState;

namespace {

std::string source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return r != nullptr ? r : ".";
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-engine-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Stands in for local.exec: applies an effect once per idempotency key, reading back
// first (a re-dispatch with the same key finds it applied), and fails on demand.
struct Effects {
  std::mutex mu;
  std::map<std::string, int> applied;                 // key -> times the effect was applied
  std::map<std::string, std::set<std::string>> keys;  // "op/state[item]" -> keys applied
  std::map<std::string, int> calls;                   // state -> calls
  std::map<std::string, int> fail_first;              // state -> failures to return first
  base::ErrorClass fail_class = base::ErrorClass::kTransient;
  std::string fail_message;             // instead of "fake failure of STATE"
  std::string stdout_text;              // instead of "ok\n"
  std::vector<std::string> order;       // states in call order
  std::map<std::string, int> sleep_ms;  // state -> how long its calls take
};

class FakeExec : public actions::Action {
 public:
  explicit FakeExec(std::shared_ptr<Effects> e) : e_(std::move(e)) {}
  actions::Outcome run(const json::object&, const actions::Context& ctx) const override {
    int nap = 0;
    {
      std::lock_guard<std::mutex> l(e_->mu);
      auto it = e_->sleep_ms.find(ctx.state);
      nap = it != e_->sleep_ms.end() ? it->second : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(nap));
    std::lock_guard<std::mutex> l(e_->mu);
    e_->calls[ctx.state]++;
    e_->order.push_back(ctx.state);
    auto f = e_->fail_first.find(ctx.state);
    if (f != e_->fail_first.end() && f->second > 0) {
      f->second--;
      return actions::Outcome::failure(e_->fail_class, e_->fail_message.empty()
                                                           ? "fake failure of " + ctx.state
                                                           : e_->fail_message);
    }
    std::string unit = ctx.key.substr(0, ctx.key.rfind('/'));
    if (e_->applied[ctx.key]++ == 0)
      e_->keys[unit].insert(ctx.key);
    std::string out = ctx.state == "instantiate_end.count" ? "3\n"
                      : e_->stdout_text.empty()            ? "ok\n"
                                                           : e_->stdout_text;
    return actions::Outcome::success(json::object{{"exit_code", 0},
                                                  {"stdout", out},
                                                  {"stderr", ""},
                                                  {"truncated", false},
                                                  {"duration_ms", 0}});
  }

 private:
  std::shared_ptr<Effects> e_;
};

// Fails the Nth apply() (counting from 1) once; everything else goes to the real store.
class FaultyStore : public vnflow_test::StoreWrapper {
 public:
  FaultyStore(engine::Store& s, int fail_at) : StoreWrapper(s), fail_at_(fail_at) {}
  int applies = 0;
  base::Status apply(const std::vector<const engine::Batch*>& b) override {
    if (++applies == fail_at_)
      return base::Status::Unavailable("injected commit failure");
    return StoreWrapper::apply(b);
  }

 private:
  int fail_at_;
};

struct Fixture {
  TempDir dir;
  vnflow_test::TestDb db = vnflow_test::new_test_db(dir.path);
  std::unique_ptr<engine::Store> store;
  std::shared_ptr<Effects> effects = std::make_shared<Effects>();
  std::string package_id, instance_id;

  explicit Fixture(const std::string& package = source_root() + "/csar-samples/local-demo") {
    auto s = db.open();
    REQUIRE(s.ok());
    store = std::move(s).value();
    base::Diagnostics diags;
    auto p = engine::onboard_package(*store, package, diags);
    INFO(p.status().to_string());
    REQUIRE(p.ok());
    package_id = p.value().id;
    auto i = engine::create_instance(*store, package_id, "test", "");
    REQUIRE(i.ok());
    instance_id = i.value().id;
  }
  ~Fixture() {
    if (store != nullptr)
      vnflow_test::check_every_history_replays(*store);
  }

  json::value instantiate_request() {
    return json::parse(R"({"flavourId": "simple", "additionalParams":
        {"work_dir": ")" +
                       (dir.path / "work").string() + R"(", "nodes": ["a", "b", "c"]}})");
  }

  std::string request(const std::string& op, const json::value& body) {
    base::Diagnostics diags;
    auto r = engine::request_operation(*store, instance_id, op, body, diags);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    return r.value().id;
  }

  actions::Registry registry() {
    actions::Registry r = actions::Registry::standard();
    r.add("local.exec", std::make_shared<FakeExec>(effects));
    return r;
  }

  engine::EngineOptions options() {
    engine::EngineOptions o;
    o.workers = 2;
    o.work_root = (dir.path / "work").string();
    o.poll = std::chrono::milliseconds(5);
    return o;
  }

  void run(engine::Store& s) {
    engine::Engine e(s, registry(), options());
    e.run_until_idle();
  }
  void run() { run(*store); }

  OpState state(const std::string& op) {
    auto r = store->get_op(op);
    REQUIRE(r.ok());
    return r.value().state;
  }
  std::vector<std::string> kinds(const std::string& op, const std::string& kind) {
    std::vector<std::string> out;
    for (const auto& e : store->history(op).value()) {
      if (e.kind == kind)
        out.push_back(e.state + (e.item >= 0 ? "[" + std::to_string(e.item) + "]" : ""));
    }
    return out;
  }
};

const std::vector<std::string> kSideEffectUnits = {
    "instantiate_end.prepare", "instantiate_end.configure[0]", "instantiate_end.configure[1]",
    "instantiate_end.configure[2]", "instantiate_end.count"};

void check_exactly_once(Fixture& f, const std::string& op) {
  for (const auto& unit : kSideEffectUnits) {
    INFO(unit);
    auto it = f.effects->keys.find(op + "/" + unit);
    REQUIRE(it != f.effects->keys.end());
    CHECK(it->second.size() == 1);  // one key per state and item: never two attempts applied
  }
  for (const auto& [key, n] : f.effects->applied) {
    INFO(key);
    CHECK(n >= 1);
  }
}

}  // namespace

TEST_CASE("an instantiate runs the built-in steps and the hook, each effect once") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  CHECK(f.state(op) == OpState::kStarting);
  f.run();
  CHECK(f.state(op) == OpState::kCompleted);
  check_exactly_once(f, op);
  auto inst = f.store->get_instance(f.instance_id).value();
  CHECK(inst.instantiation_state == "INSTANTIATED");
  CHECK(inst.record.at("flavour_id") == "simple");
  CHECK(inst.record.at("scale_status").at("node_aspect") == 0);
  // Dispatches are recorded with their keys before results.
  auto hist = f.store->history(op).value();
  std::map<std::string, int64_t> dispatched;
  for (const auto& e : hist) {
    std::string unit = e.state + (e.item >= 0 ? "[" + std::to_string(e.item) + "]" : "");
    if (e.kind == "dispatched") {
      CHECK(!e.key.empty());
      dispatched[unit] = e.seq;
    }
    if (e.kind == "succeeded") {
      REQUIRE(dispatched.count(unit));
      CHECK(dispatched[unit] < e.seq);
    }
  }
}

namespace {

// Counts the commits of an instantiate of `package`, then fails each of them in turn: every
// run goes on after the failure, ends COMPLETED, and passes `check`.
void commit_failure_sweep(const std::string& package, int at_least,
                          const std::function<void(Fixture&, const std::string&)>& check) {
  int total = 0;
  {
    Fixture f(package);
    std::string op = f.request("instantiate", f.instantiate_request());
    FaultyStore counting(*f.store, -1);
    f.run(counting);
    REQUIRE(f.state(op) == OpState::kCompleted);
    total = counting.applies;
  }
  REQUIRE(total >= at_least);
  for (int n = 1; n <= total; ++n) {
    DYNAMIC_SECTION("commit " << n << " of " << total << " fails") {
      Fixture f(package);
      std::string op = f.request("instantiate", f.instantiate_request());
      FaultyStore faulty(*f.store, n);
      f.run(faulty);
      CHECK(faulty.applies > n);  // it went on after the failure
      CHECK(f.state(op) == OpState::kCompleted);
      check(f, op);
    }
  }
}

}  // namespace

TEST_CASE(
    "commit-failure sweep: failing the Nth commit still ends COMPLETED with each effect once") {
  commit_failure_sweep(
      source_root() + "/csar-samples/local-demo", 4, [](Fixture& f, const std::string& op) {
        check_exactly_once(f, op);
        CHECK(f.store->get_instance(f.instance_id).value().instantiation_state == "INSTANTIATED");
      });
}

namespace {

// The store cannot serve a load now (a lock held by another session, a lost connection):
// the first `busy` reads of an instance, a machine and an operation's outputs each answer
// kUnavailable; the second commit fails, so the operation is loaded again from its cursor
// (which reads its outputs).
class BusyLoads : public FaultyStore {
 public:
  BusyLoads(engine::Store& s, int busy) : FaultyStore(s, 2), busy_(busy) {}
  int instance_busy = 0, machine_busy = 0, outputs_busy = 0;
  base::Result<engine::InstanceRecord> get_instance(std::string_view id) override {
    return busy_now(instance_busy) ? busy() : FaultyStore::get_instance(id);
  }
  base::Result<std::string> get_machine(std::string_view digest) override {
    return busy_now(machine_busy) ? busy() : FaultyStore::get_machine(digest);
  }
  base::Result<json::object> outputs(std::string_view op_id) override {
    return busy_now(outputs_busy) ? busy() : FaultyStore::outputs(op_id);
  }

 private:
  bool busy_now(int& n) const { return n < busy_ && ++n > 0; }
  static base::Status busy() { return base::Status::Unavailable("database busy: injected"); }
  int busy_;
};

}  // namespace

TEST_CASE("a load the store cannot serve now is tried again at a later poll, never failed") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  BusyLoads busy(*f.store, 2);
  f.run(busy);
  CHECK(busy.machine_busy == 2);
  CHECK(busy.instance_busy == 2);
  CHECK(busy.outputs_busy == 2);  // the reload after the failed commit read its outputs
  CHECK(f.state(op) == OpState::kCompleted);
  check_exactly_once(f, op);
}

namespace {

// Fails (or throws from) the first apply() of a group of 8 batches or more: one the
// executor commits on its committer thread.
class LargeGroupFault : public vnflow_test::StoreWrapper {
 public:
  LargeGroupFault(engine::Store& s, bool throws) : StoreWrapper(s), throws_(throws) {}
  std::atomic<int> faults{0};
  base::Status apply(const std::vector<const engine::Batch*>& b) override {
    if (b.size() >= 8 && faults++ == 0) {
      if (throws_)
        throw std::runtime_error("injected exception");
      return base::Status::Unavailable("injected commit failure");
    }
    return StoreWrapper::apply(b);
  }

 private:
  bool throws_;
};

}  // namespace

TEST_CASE("a large group's commit fails or throws on the committer thread: all reload, once") {
  for (bool throws : {false, true}) {
    DYNAMIC_SECTION((throws ? "throws" : "fails")) {
      Fixture f;
      std::vector<std::string> ops{f.request("instantiate", f.instantiate_request())};
      for (int i = 0; i < 11; ++i) {
        auto inst = engine::create_instance(*f.store, f.package_id, "t" + std::to_string(i), "");
        REQUIRE(inst.ok());
        base::Diagnostics diags;
        auto r = engine::request_operation(*f.store, inst.value().id, "instantiate",
                                           f.instantiate_request(), diags);
        REQUIRE(r.ok());
        ops.push_back(r.value().id);
      }
      LargeGroupFault faulty(*f.store, throws);
      f.run(faulty);  // a throw that escaped the committer thread would end the process
      CHECK(faulty.faults >= 1);
      for (const auto& op : ops) {
        INFO(op);
        CHECK(f.state(op) == OpState::kCompleted);
        check_exactly_once(f, op);
      }
    }
  }
}

TEST_CASE("retries follow the policy, then FAILED_TEMP; retry resumes at the failed state") {
  Fixture f;
  // configure has 3 attempts on transient/timeout/failed: 2 failures are absorbed.
  f.effects->fail_first["instantiate_end.configure"] = 2;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  CHECK(f.state(op) == OpState::kCompleted);
  CHECK(f.kinds(op, "retry_scheduled").size() == 2);

  Fixture g;
  g.effects->fail_first["instantiate_end.count"] = 1;  // count has no retry policy
  std::string op2 = g.request("instantiate", g.instantiate_request());
  g.run();
  REQUIRE(g.state(op2) == OpState::kFailedTemp);
  auto rec = g.store->get_op(op2).value();
  CHECK(rec.error.at("state") == "instantiate_end.count");
  CHECK(rec.error.at("class") == "transient");
  int prepare_calls = g.effects->calls["instantiate_end.prepare"];
  // A new operation on the instance is refused while this one is FAILED_TEMP.
  base::Diagnostics diags;
  auto other =
      engine::request_operation(*g.store, g.instance_id, "modify_info", json::object(), diags);
  CHECK(other.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(other.status().message().find(op2) != std::string::npos);

  REQUIRE(engine::retry_operation(*g.store, op2).ok());
  g.run();
  CHECK(g.state(op2) == OpState::kCompleted);
  CHECK(g.effects->calls["instantiate_end.prepare"] == prepare_calls);  // not run again
  CHECK(g.effects->calls["instantiate_end.count"] == 2);
  // The retry used a new attempt number, so a new key.
  auto keys = g.effects->keys[op2 + "/instantiate_end.count"];
  CHECK(keys.size() == 1);
  CHECK(keys.begin()->substr(keys.begin()->size() - 2) == "/2");
}

TEST_CASE("rollback runs compensations of finished states in reverse") {
  Fixture f;
  f.effects->fail_first["instantiate_end.count"] = 1;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kFailedTemp);
  REQUIRE(engine::rollback_operation(*f.store, op).ok());
  f.run();
  CHECK(f.state(op) == OpState::kRolledBack);
  auto comp = f.kinds(op, "compensated");
  // configure's 3 items, the one that finished last first (they run in parallel: in the
  // order of their results, not of their indexes), then the built-in record step.
  std::vector<std::string> configured;
  for (const auto& unit : f.kinds(op, "succeeded")) {
    if (unit.starts_with("instantiate_end.configure["))
      configured.insert(configured.begin(), unit);
  }
  REQUIRE(configured.size() == 3);
  REQUIRE(comp.size() == 4);
  CHECK(std::vector<std::string>(comp.begin(), comp.begin() + 3) == configured);
  CHECK(comp[3] == "instantiate.record");
  CHECK(f.store->get_instance(f.instance_id).value().instantiation_state == "NOT_INSTANTIATED");
  // A final operation refuses the control commands with the reason.
  auto again = engine::rollback_operation(*f.store, op);
  CHECK(again.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(again.status().message().find("ROLLED_BACK") != std::string::npos);
}

TEST_CASE("fail makes FAILED_TEMP final") {
  Fixture f;
  f.effects->fail_first["instantiate_end.prepare"] = 1;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kFailedTemp);
  REQUIRE(engine::fail_operation(*f.store, op).ok());
  CHECK(f.state(op) == OpState::kFailed);
  CHECK(!engine::retry_operation(*f.store, op).ok());
}

TEST_CASE("requests are checked before anything is queued") {
  Fixture f;
  base::Diagnostics diags;
  auto bad = engine::request_operation(*f.store, f.instance_id, "instantiate",
                                       json::parse(R"({"flavourId": 3})"), diags);
  CHECK(bad.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("flavourId: expected a string") != std::string::npos);
  auto unknown =
      engine::request_operation(*f.store, f.instance_id, "instantiate",
                                json::parse(R"({"flavourId": "simple", "flavorId": "x"})"), diags);
  CHECK(unknown.status().message().find("did you mean \"flavourId\"") != std::string::npos);
  auto scale =
      engine::request_operation(*f.store, f.instance_id, "scale",
                                json::parse(R"({"type": "SCALE_OUT", "aspectId": "x"})"), diags);
  CHECK(scale.status().code() == base::StatusCode::kFailedPrecondition);  // not instantiated
  CHECK(f.store->list_ops({}).value().empty());
}

TEST_CASE("metrics: what the engine committed and the store's counts by operation and state") {
  Fixture f;
  base::Metrics m;
  engine::declare_engine_metrics(m);
  std::string op = f.request("instantiate", f.instantiate_request());
  engine::collect_store_metrics(m, *f.store);
  CHECK(m.value("vnflow_operations", {"instantiate", "STARTING"}) == 1);
  CHECK(m.value("vnflow_queue_depth", {}) == 1);
  engine::EngineOptions o = f.options();
  o.metrics = &m;
  {
    engine::Engine e(*f.store, f.registry(), o);
    e.run_until_idle();
  }
  REQUIRE(f.state(op) == OpState::kCompleted);
  engine::collect_store_metrics(m, *f.store);
  CHECK(m.value("vnflow_operations", {"instantiate", "STARTING"}) == 0);  // gone, not stale
  CHECK(m.value("vnflow_operations", {"instantiate", "COMPLETED"}) == 1);
  CHECK(m.value("vnflow_queue_depth", {}) == 0);
  CHECK(m.value("vnflow_operations_settled_total", {"instantiate", "COMPLETED"}) == 1);
  CHECK(m.value("vnflow_operation_duration_seconds", {"instantiate", "COMPLETED"}) == 1);
  CHECK(m.value("vnflow_actions_total", {"local.exec", "ok"}) >= 1);
  double committed = m.value("vnflow_transitions_committed_total", {});
  CHECK(committed >= 3);
  CHECK(m.value("vnflow_commit_batch_size", {}) == m.value("vnflow_commits_total", {}));
  auto hist = f.store->history(op);
  REQUIRE(hist.ok());
  CHECK(committed <= static_cast<double>(hist.value().size()));  // each commit wrote events
}

TEST_CASE("a URL's password a hook makes up is redacted in the history and the error") {
  // No secret was given to the operation: the password appears first in a hook's output
  // and in its failure message (a proxy setting it printed).
  Fixture f;
  f.effects->stdout_text = "proxy=http://ops:HiddenPw77@proxy.example:3128\n";
  f.effects->fail_first["instantiate_end.count"] = 1;  // count has no retry policy
  f.effects->fail_message = "proxy refused: https://ops:HiddenPw88@proxy.example:3128/x";
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kFailedTemp);
  auto rec = f.store->get_op(op).value();
  std::string error = json::serialize(rec.error);
  CHECK(error.find("HiddenPw88") == std::string::npos);
  CHECK(error.find("https://ops:***@proxy.example:3128/x") != std::string::npos);
  std::string history;
  for (const auto& e : f.store->history(op).value())
    history += json::serialize(e.data) + "\n";
  CHECK(history.find("http://ops:***@proxy.example:3128") != std::string::npos);
  CHECK(history.find("HiddenPw77") == std::string::npos);
  CHECK(history.find("HiddenPw88") == std::string::npos);
}

TEST_CASE("scale moves the aspect level within its bounds") {
  Fixture f;
  f.request("instantiate", f.instantiate_request());
  f.run();
  auto out = json::parse(R"({"type": "SCALE_OUT", "aspectId": "node_aspect", "numberOfSteps": 2,
                            "additionalParams": {"work_dir": "/nonexistent"}})");
  std::string op = f.request("scale", out);
  f.run();
  CHECK(f.state(op) == OpState::kCompleted);
  CHECK(f.store->get_instance(f.instance_id).value().record.at("scale_status").at("node_aspect") ==
        2);
  // 2 + 2 > max_scale_level 3: refused when asked, nothing queued (it used to be accepted
  // and fail in the middle of the operation).
  base::Diagnostics diags;
  auto op2 = engine::request_operation(*f.store, f.instance_id, "scale", out, diags);
  REQUIRE(!op2.ok());
  CHECK(op2.status().message().find("max_scale_level") != std::string::npos);
  auto in = json::parse(R"({"type": "SCALE_IN", "aspectId": "node_aspect", "numberOfSteps": 3})");
  auto op3 = engine::request_operation(*f.store, f.instance_id, "scale", in, diags);
  REQUIRE(!op3.ok());
  CHECK(op3.status().message().find("at scale level 2") != std::string::npos);
  // Tacker's is_reverse: a value the scale-in cannot read is refused with the request.
  auto odd = json::parse(R"({"type": "SCALE_IN", "aspectId": "node_aspect",
                            "additionalParams": {"is_reverse": "yes"}})");
  auto op4 = engine::request_operation(*f.store, f.instance_id, "scale", odd, diags);
  REQUIRE(!op4.ok());
  CHECK(op4.status().message() ==
        "additionalParams.is_reverse must be true, false, \"True\" or \"False\"");
  // Tacker's user-data classes are refused, not ignored.
  auto ud = json::parse(R"({"type": "SCALE_IN", "aspectId": "node_aspect",
                           "additionalParams": {"lcm-operation-user-data": "./UserData/x.py"}})");
  auto op5 = engine::request_operation(*f.store, f.instance_id, "scale", ud, diags);
  REQUIRE(!op5.ok());
  CHECK(op5.status().message().find(
            "additionalParams.lcm-operation-user-data: vnflow does not run") != std::string::npos);
  CHECK(f.store->list_ops({f.instance_id, std::nullopt, 10}).value().size() == 2);
  auto rev = json::parse(R"({"type": "SCALE_IN", "aspectId": "node_aspect",
                            "additionalParams": {"is_reverse": "True", "work_dir": "/nonexistent"}})");
  std::string op6 = f.request("scale", rev);
  f.run();
  CHECK(f.state(op6) == OpState::kCompleted);
}

TEST_CASE("replay: the recording reproduces; a changed machine diverges") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  auto rec = f.store->get_op(op).value();
  auto m = engine::operation_machine(*f.store, rec);
  REQUIRE(m.ok());
  auto rep = engine::replay_dry_run(*f.store, rec, *m.value());
  REQUIRE(rep.ok());
  CHECK_FALSE(rep.value().diverged);
  CHECK(rep.value().steps.back() == "instantiate_end.done -> COMPLETED");

  // The same machine with the count step's action changed.
  workflows::Machine changed = *m.value();
  int i = changed.find("instantiate_end.count");
  REQUIRE(i >= 0);
  changed.states[static_cast<size_t>(i)].action = "instance.check";
  auto rep2 = engine::replay_dry_run(*f.store, rec, changed);
  REQUIRE(rep2.ok());
  CHECK(rep2.value().diverged);
  CHECK(rep2.value().divergence.find("instantiate_end.count") != std::string::npos);

  // replay --from starts a new occurrence at a checkpoint.
  auto n = engine::replay_from(*f.store, op, "instantiate_end.count");
  REQUIRE(n.ok());
  f.run();
  CHECK(f.state(n.value().id) == OpState::kCompleted);
  CHECK(f.effects->calls["instantiate_end.prepare"] == 1);
}

TEST_CASE("the store refuses a second open operation on an instance") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  base::Diagnostics diags;
  auto second = engine::request_operation(*f.store, f.instance_id, "instantiate",
                                          f.instantiate_request(), diags);
  CHECK(second.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(second.status().message().find(op) != std::string::npos);
}

namespace {

// Counts what reaches the store: the batches that create an operation, and create_op calls.
class CreateSpy : public vnflow_test::StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  std::mutex mu;
  std::vector<engine::Batch> creating;  // copies of the batches with a create
  int create_ops = 0;
  base::Status apply(const std::vector<const engine::Batch*>& b) override {
    {
      std::lock_guard<std::mutex> l(mu);
      for (const engine::Batch* x : b)
        if (x->create)
          creating.push_back(*x);
    }
    return StoreWrapper::apply(b);
  }
  base::Status create_op(const engine::OpRecord& rec) override {
    {
      std::lock_guard<std::mutex> l(mu);
      ++create_ops;
    }
    return StoreWrapper::create_op(rec);
  }
};

// Waits (at most 30 s) until `op` is final or FAILED_TEMP; its state.
OpState wait_settled(engine::Store& s, const std::string& op) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    auto r = s.get_op(op);
    if (r.ok() && !engine::is_active(r.value().state))
      return r.value().state;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return s.get_op(op).value().state;
}

// Until run() takes operations (at most 10 s; a shared store's engine never does).
void wait_until_running(engine::Engine& e) {
  if (vnflow_test::on_postgres())
    return;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!e.takes_starts() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(e.takes_starts());
}

// An Engine running on `store` in a thread of its own, and requests that go through its
// start(), as the REST API's do beside a daemon.
struct RunningEngine {
  engine::Engine e;
  std::thread t;
  RunningEngine(engine::Store& store, Fixture& f) : e(store, f.registry(), f.options()) {
    t = std::thread([this] { e.run(); });
    wait_until_running(e);
  }
  ~RunningEngine() { stop(); }
  void stop() {
    if (t.joinable()) {
      e.stop();
      t.join();
    }
  }
  base::Result<engine::OpRecord> request(engine::Store& store, Fixture& f) {
    base::Diagnostics diags;
    return engine::request_operation(store, f.instance_id, "instantiate", f.instantiate_request(),
                                     diags,
                                     [this](const engine::OpRecord& op) { return e.start(op); });
  }
};

}  // namespace

TEST_CASE("Engine::start: the request's operation and its first transition are one commit") {
  Fixture f;
  f.effects->fail_first["instantiate_end.count"] = 1;  // no retry policy: it stays open
  CreateSpy spy(*f.store);
  RunningEngine run(spy, f);
  engine::Engine& e = run.e;
  auto r = run.request(spy, f);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const std::string id = r.value().id;
  if (vnflow_test::on_postgres()) {
    // A shared store's operations are claimed under a lease: start is create_op, and the
    // engine's poll starts the operation.
    CHECK(spy.create_ops == 1);
    CHECK(spy.creating.empty());
  } else {
    // When the request returns, the operation is stored past STARTING, claimed, and its
    // history begins: nothing went through create_op and a poll.
    auto stored = f.store->get_op(id);
    REQUIRE(stored.ok());
    CHECK(stored.value().state != OpState::kStarting);
    auto hist = f.store->history(id);
    REQUIRE(hist.ok());
    REQUIRE_FALSE(hist.value().empty());
    CHECK(hist.value()[0].kind == "op_processing");
    {
      std::lock_guard<std::mutex> l(spy.mu);
      CHECK(spy.create_ops == 0);
      REQUIRE(spy.creating.size() == 1);
      const engine::Batch& b = spy.creating[0];
      CHECK(b.create->id == id);
      REQUIRE(b.ops.size() == 1);
      CHECK(b.ops[0].op_id == id);
      CHECK(b.ops[0].state == OpState::kProcessing);
      REQUIRE_FALSE(b.events.empty());
      CHECK(b.events[0].kind == "op_processing");
    }
  }
  // Another operation for the instance, past request_operation's own check: the commit
  // refuses it, naming the open one, and writes nothing of it.
  REQUIRE(wait_settled(*f.store, id) == OpState::kFailedTemp);
  engine::OpRecord other = r.value();
  other.id = engine::new_id();
  other.state = OpState::kStarting;
  auto refused = e.start(other);
  CHECK(refused.code() == base::StatusCode::kFailedPrecondition);
  CHECK(refused.message().find(id) != std::string::npos);
  CHECK(f.store->get_op(other.id).status().code() == base::StatusCode::kNotFound);
  CHECK(f.store->history(other.id).value().empty());
  REQUIRE(engine::retry_operation(*f.store, id).ok());
  e.wake();
  CHECK(wait_settled(*f.store, id) == OpState::kCompleted);
  check_exactly_once(f, id);
  run.stop();
  // An engine that is not running takes no operation: it is create_op, left STARTING for
  // the next daemon.
  other.id = engine::new_id();
  REQUIRE(e.start(other).ok());
  CHECK(f.state(other.id) == OpState::kStarting);
  CHECK(spy.create_ops == (vnflow_test::on_postgres() ? 3 : 1));
}

TEST_CASE("Store::apply: a batch that creates an operation, or is refused and writes nothing") {
  Fixture f;
  auto i2 = engine::create_instance(*f.store, f.package_id, "second", "");
  REQUIRE(i2.ok());
  // Two operations requested the usual way give a real machine digest and request.
  std::string queued = f.request("instantiate", f.instantiate_request());
  engine::OpRecord proto = f.store->get_op(queued).value();
  auto make = [&](const std::string& instance) {
    engine::OpRecord op = proto;
    op.id = engine::new_id();
    op.instance_id = instance;
    op.state = OpState::kStarting;
    op.cursor = nullptr;
    op.created_ms = engine::now_ms();
    engine::Batch b;
    b.create = op;
    engine::Batch::OpWrite w;
    w.op_id = op.id;
    w.state = OpState::kProcessing;
    w.owner = "test-daemon";
    w.cursor = "{}";
    b.ops.push_back(w);
    engine::EventRecord e;
    e.op_id = op.id;
    e.seq = 1;
    e.at_ms = op.created_ms;
    e.kind = "op_processing";
    b.events.push_back(e);
    return b;
  };
  engine::Batch refused = make(f.instance_id);  // `queued` is open there
  engine::Batch created = make(i2.value().id);
  engine::Batch second = make(i2.value().id);     // the one before, in the same group, is open
  engine::Batch gone = make("no-such-instance");  // deleted since its request was checked
  REQUIRE(f.store->apply({&refused, &created, &second, &gone}).ok());
  CHECK(refused.fenced);
  CHECK(refused.refused.code() == base::StatusCode::kFailedPrecondition);
  CHECK(refused.refused.message().find(queued) != std::string::npos);
  CHECK(second.fenced);
  CHECK(second.refused.code() == base::StatusCode::kFailedPrecondition);
  CHECK(second.refused.message().find(created.create->id) != std::string::npos);
  CHECK(gone.fenced);
  CHECK(gone.refused.code() == base::StatusCode::kNotFound);
  for (const engine::Batch* b : {&refused, &second, &gone}) {
    CHECK(f.store->get_op(b->create->id).status().code() == base::StatusCode::kNotFound);
    CHECK(f.store->history(b->create->id).value().empty());
  }
  CHECK_FALSE(created.fenced);
  CHECK(created.refused.ok());
  auto got = f.store->get_op(created.create->id);
  REQUIRE(got.ok());
  CHECK(got.value().state == OpState::kProcessing);
  CHECK(got.value().owner == "test-daemon");
  auto hist = f.store->history(created.create->id);
  REQUIRE(hist.ok());
  REQUIRE(hist.value().size() == 1);
  CHECK(hist.value()[0].kind == "op_processing");
  f.store.reset();  // a history made by hand, not by a run of the engine: not replayed
}

namespace {

// Holds every commit that creates an operation for `hold` before it goes to the store.
class SlowCreate : public vnflow_test::StoreWrapper {
 public:
  SlowCreate(engine::Store& s, std::chrono::milliseconds hold) : StoreWrapper(s), hold_(hold) {}
  base::Status apply(const std::vector<const engine::Batch*>& b) override {
    for (const engine::Batch* x : b)
      if (x->create)
        std::this_thread::sleep_for(hold_);
    return StoreWrapper::apply(b);
  }

 private:
  std::chrono::milliseconds hold_;
};

}  // namespace

TEST_CASE("Engine::start: an engine running until idle waits for a start it is committing") {
  if (vnflow_test::on_postgres())
    return;  // a shared store's engine takes no start
  Fixture f;
  auto i2 = engine::create_instance(*f.store, f.package_id, "second", "");
  REQUIRE(i2.ok());
  // Operation A keeps the engine busy for a while; B is requested through start() meanwhile,
  // and its creating commit outlasts A: the engine has no run left while B's row is written.
  std::string a = f.request("instantiate", f.instantiate_request());
  f.effects->sleep_ms["instantiate_end.prepare"] = 300;
  SlowCreate slow(*f.store, std::chrono::milliseconds(700));
  engine::Engine e(slow, f.registry(), f.options());
  std::thread t([&] { e.run_until_idle(); });
  wait_until_running(e);
  base::Diagnostics diags;
  auto b =
      engine::request_operation(slow, i2.value().id, "instantiate", f.instantiate_request(), diags,
                                [&](const engine::OpRecord& op) { return e.start(op); });
  INFO(b.status().to_string());
  REQUIRE(b.ok());
  t.join();
  // The engine went idle only once B was run, not between its commit and its adoption.
  CHECK(f.state(a) == OpState::kCompleted);
  CHECK(f.state(b.value().id) == OpState::kCompleted);
  check_exactly_once(f, b.value().id);
}

TEST_CASE("Store::create_op: a creation that failed does not fail the next one") {
  Fixture f;
  auto i2 = engine::create_instance(*f.store, f.package_id, "second", "");
  REQUIRE(i2.ok());
  std::string queued = f.request("instantiate", f.instantiate_request());
  engine::OpRecord op = f.store->get_op(queued).value();
  op.id = engine::new_id();
  op.instance_id = i2.value().id;
  op.state = OpState::kStarting;
  op.owner.clear();
  op.cursor = nullptr;
  op.machine_digest = "no-such-machine";  // its foreign key fails the INSERT itself
  base::Status bad = f.store->create_op(op);
  CHECK_FALSE(bad.ok());
  CHECK(f.store->get_op(op.id).status().code() == base::StatusCode::kNotFound);
  // The statements the store keeps prepared carry no error of that one into this one.
  op.id = engine::new_id();
  op.machine_digest = f.store->get_op(queued).value().machine_digest;
  base::Status good = f.store->create_op(op);
  INFO(good.to_string());
  CHECK(good.ok());
  CHECK(f.store->get_op(op.id).ok());
  f.store.reset();  // made by hand, not by a run of the engine: not replayed
}

TEST_CASE("Engine::start: a failed commit answers the error and leaves no operation") {
  if (vnflow_test::on_postgres())
    return;  // a shared store's engine takes no start: create_op (the test above)
  Fixture f;
  FaultyStore faulty(*f.store, 1);  // the first commit is the operation's creation
  RunningEngine run(faulty, f);
  auto r = run.request(faulty, f);
  CHECK(r.status().code() == base::StatusCode::kUnavailable);
  CHECK(r.status().message().find("injected commit failure") != std::string::npos);
  auto ops = f.store->list_ops({f.instance_id, std::nullopt, 10});
  REQUIRE(ops.ok());
  CHECK(ops.value().empty());
  // The engine goes on: the same request again is created, started and completed.
  auto again = run.request(faulty, f);
  INFO(again.status().to_string());
  REQUIRE(again.ok());
  CHECK(wait_settled(*f.store, again.value().id) == OpState::kCompleted);
  run.stop();
  CHECK(faulty.applies >= 2);
}

TEST_CASE("a cancel requested before the daemon runs the operation stops it before any step") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  REQUIRE(engine::cancel_operation(*f.store, op).ok());
  f.run();
  CHECK(f.state(op) == OpState::kFailedTemp);
  CHECK(f.store->get_op(op).value().error.at("class") == "cancelled");
  CHECK(f.effects->calls.empty());
  CHECK(f.store->get_instance(f.instance_id).value().instantiation_state == "NOT_INSTANTIATED");
  // A final operation cannot be cancelled; the reason says which states can.
  REQUIRE(engine::fail_operation(*f.store, op).ok());
  auto again = engine::cancel_operation(*f.store, op);
  CHECK(again.message().find("only a STARTING or PROCESSING operation") != std::string::npos);
}

TEST_CASE("vim.register / vim.deregister: one row per (instance, name), sealed, owned") {
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto s = db.open();
  REQUIRE(s.ok());
  engine::Store& store = *s.value();
  json::value record = json::parse(R"({"id": "inst-1", "vim_connection_info":
      [{"id": "default", "vimId": "os-1", "vimType": "ETSINFV.OPENSTACK_KEYSTONE.V_3"}]})");
  json::object in = json::parse(R"({"name": "k8s-inst-1", "type": "kubernetes",
      "access": {"server": "https://10.10.0.1:6443", "bearer_token": "s3cr3t-t0ken",
                 "ssl_ca_cert": "-----BEGIN CERTIFICATE-----"}})")
                        .as_object();
  auto first = engine::run_vim_action(&store, "vim.register", in, record);
  REQUIRE(first.ok);
  std::string id(first.outputs.at("vim_id").as_string());
  CHECK(first.outputs.at("replaced") == false);
  // The instance keeps its OpenStack entry first and gains the Kubernetes one.
  auto& vci = record.at("vim_connection_info").as_array();
  REQUIRE(vci.size() == 2);
  CHECK(vci[0].at("vimId") == "os-1");
  CHECK(vci[1].at("vimId").as_string() == id);
  CHECK(vci[1].at("vimType") == "ETSINFV.KUBERNETES.V_1");
  // A re-run (a re-dispatch after a crash, a heal) writes the same row, not a second one.
  auto again = engine::run_vim_action(&store, "vim.register", in, record);
  REQUIRE(again.ok);
  CHECK(again.outputs.at("vim_id").as_string() == id);
  CHECK(again.outputs.at("replaced") == true);
  CHECK(record.at("vim_connection_info").as_array().size() == 2);
  REQUIRE(store.list_vims().value().size() == 1);
  auto shown = store.get_vim(id, false).value();
  CHECK(shown.summary.at("bearer_token") == "***");
  CHECK(store.get_vim(id, true).value().access.at("bearer_token") == "s3cr3t-t0ken");
  // The token is sealed in the database, not stored in clear.
  CHECK(vnflow_test::at_rest(db).find("s3cr3t-t0ken") == std::string::npos);
  // Bad access is refused with the reason and without the secret.
  json::object bad = in;
  bad["access"].as_object().erase("server");
  auto refused = engine::run_vim_action(&store, "vim.register", bad, record);
  CHECK_FALSE(refused.ok);
  CHECK(refused.error_class == base::ErrorClass::kInvalid);
  CHECK(refused.message.find("server") != std::string::npos);
  CHECK(refused.message.find("s3cr3t") == std::string::npos);
  // Another instance may neither take the name nor deregister the VIM.
  json::value other = json::parse(R"({"id": "inst-2"})");
  auto taken = engine::run_vim_action(&store, "vim.register", in, other);
  CHECK_FALSE(taken.ok);
  CHECK(taken.message.find("exists already") != std::string::npos);
  auto foreign =
      engine::run_vim_action(&store, "vim.deregister", json::object{{"name", "k8s-inst-1"}}, other);
  CHECK_FALSE(foreign.ok);
  CHECK(store.get_vim(id, false).ok());
  // The owner deregisters; the entry leaves the record; a second deregister is done already.
  auto gone = engine::run_vim_action(&store, "vim.deregister", json::object{{"name", "k8s-inst-1"}},
                                     record);
  REQUIRE(gone.ok);
  CHECK(gone.outputs.at("removed") == true);
  CHECK(store.get_vim(id, false).status().code() == base::StatusCode::kNotFound);
  REQUIRE(record.at("vim_connection_info").as_array().size() == 1);
  CHECK(record.at("vim_connection_info").as_array()[0].at("vimId") == "os-1");
  auto twice =
      engine::run_vim_action(&store, "vim.deregister", json::object{{"vim_id", id}}, record);
  REQUIRE(twice.ok);
  CHECK(twice.outputs.at("removed") == false);
}

TEST_CASE("secret fields of requests, records and outputs are sealed at rest, plain in use") {
  Fixture f;
  json::value body = f.instantiate_request();
  body.as_object()["additionalParams"].as_object()["ssh_password"] = "pw-Secret-4711";
  body.as_object()["additionalParams"].as_object()["nested"] =
      json::object{{"bearer_token", "tok-Secret-4711"}};
  std::string op = f.request("instantiate", body);
  f.run();
  REQUIRE(f.state(op) == OpState::kCompleted);
  // In use: the request reads back as it was given.
  auto rec = f.store->get_op(op).value();
  CHECK(rec.request.at("additionalParams").at("ssh_password") == "pw-Secret-4711");
  CHECK(rec.request.at("additionalParams").at("nested").at("bearer_token") == "tok-Secret-4711");
  // At rest (SQLite: neither the file nor its WAL) the database does not hold them.
  std::string bytes = vnflow_test::at_rest(f.db);
  CHECK(bytes.find(op) != std::string::npos);  // the rows were read
  CHECK(bytes.find("Secret-4711") == std::string::npos);
}

TEST_CASE("a reader waiting for a change wakes at the next commit, not at its timeout") {
  // SQLite: a watch on the write-ahead log; PostgreSQL: LISTEN on the schema's change
  // channel, which a new operation's commit notifies.
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto reader = db.open();
  auto writer = db.open();  // another connection, as another process would have
  REQUIRE(reader.ok());
  REQUIRE(writer.ok());
  vnflow_test::queue_ops(*writer.value(), 1);                     // the tables, a package
  reader.value()->wait_for_change(std::chrono::milliseconds(0));  // arms the watch
  // Nothing committed: the whole timeout passes.
  auto t0 = std::chrono::steady_clock::now();
  reader.value()->wait_for_change(std::chrono::milliseconds(300));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(250));
  // A new operation committed 200 ms in: the reader is back well before its 10 s timeout.
  std::thread w([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    vnflow_test::queue_ops(*writer.value(), 1, 1);
  });
  t0 = std::chrono::steady_clock::now();
  reader.value()->wait_for_change(std::chrono::milliseconds(10000));
  auto waited = std::chrono::steady_clock::now() - t0;
  w.join();
  CHECK(waited >= std::chrono::milliseconds(150));
  CHECK(waited < std::chrono::seconds(5));

  // And what woke it is there to read: a reader woken while the commit was still being
  // written (SQLite: its first write to the log) read the state before it, and slept
  // until its timeout although the operation had moved (op wait: 100 ms late).
  std::vector<std::string> instances;
  for (int i = 0; i < 8; ++i) {
    auto inst = engine::create_instance(*writer.value(), "pkg-1", "w" + std::to_string(i), "");
    REQUIRE(inst.ok());
    instances.push_back(inst.value().id);
  }
  reader.value()->wait_for_change(std::chrono::milliseconds(0));
  int seen = 0;
  for (size_t i = 0; i < instances.size(); ++i) {
    engine::OpRecord op = vnflow_test::test_op(instances[i], 2000 + static_cast<int>(i));
    bool created = false;
    std::thread one([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      created = writer.value()->create_op(op).ok();  // one commit
    });
    auto began = std::chrono::steady_clock::now();
    reader.value()->wait_for_change(std::chrono::milliseconds(10000));
    bool there = reader.value()->get_op(op.id).ok();  // before the writer's thread is joined
    auto woke_after = std::chrono::steady_clock::now() - began;
    one.join();
    CHECK(created);
    CHECK(woke_after < std::chrono::seconds(2));  // at the commit, not at the timeout
    seen += there ? 1 : 0;
  }
  CHECK(seen == static_cast<int>(instances.size()));
}

TEST_CASE("a daemon's store tells it of queued work at the commit (PostgreSQL's NOTIFY)") {
  TempDir dir;
  auto db = vnflow_test::new_test_db(dir.path);
  auto daemon = db.open();
  auto cli = db.open();  // the process that queues: a CLI, another daemon's API
  REQUIRE(daemon.ok());
  REQUIRE(cli.ok());
  using engine::Store;
  auto first = daemon.value()->wait_for_work(std::chrono::milliseconds(0));  // arms it
  if (!vnflow_test::on_postgres()) {
    // SQLite's daemon is woken through the socket beside the file (engine_cli_test.sh).
    CHECK(first == Store::WorkSignal::kUnsupported);
    return;
  }
  REQUIRE(first != Store::WorkSignal::kUnsupported);
  auto quiet = [&](int ms) {
    return daemon.value()->wait_for_work(std::chrono::milliseconds(ms)) ==
           Store::WorkSignal::kQuiet;
  };
  int settle = 0;  // what the tables' creation notified is heard first
  while (!quiet(50) && ++settle < 100) {
  }
  REQUIRE(settle < 100);
  auto ids = vnflow_test::queue_ops(*cli.value(), 1);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(daemon.value()->wait_for_work(std::chrono::milliseconds(10000)) ==
        Store::WorkSignal::kQueued);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(quiet(300));  // heard once
  // A claim is the daemon's own work: no signal.
  auto lease = daemon.value()->register_daemon("d1", 5000);
  REQUIRE(lease.ok());
  REQUIRE(daemon.value()->claim(lease.value(), true, 10).value().size() == 1);
  CHECK(quiet(300));
  // An operator's command (cancel, retry) and a daemon letting its operations go are work.
  REQUIRE(cli.value()->request_cancel(ids[0]).ok());
  CHECK_FALSE(quiet(10000));
  daemon.value()->release(lease.value());
  CHECK_FALSE(quiet(10000));
  CHECK(quiet(300));
}

// A history event for op_timing's tests.
static engine::EventRecord ev(int64_t at, std::string kind, std::string state, int item = -1,
                              int64_t started = 0, json::value data = nullptr) {
  engine::EventRecord e;
  e.at_ms = at;
  e.kind = std::move(kind);
  e.state = std::move(state);
  e.item = item;
  e.started_ms = started;
  e.data = std::move(data);
  return e;
}

TEST_CASE("op timing splits an operation's time from its history") {
  engine::OpRecord op;
  op.id = "op";
  op.state = OpState::kCompleted;
  op.created_ms = 1000;
  std::vector<engine::EventRecord> h = {
      ev(1100, "op_processing", ""),                                                // 100 ms queued
      ev(1110, "dispatched", "a"),                                                  //
      ev(1300, "retry_scheduled", "a", -1, 1120, json::object{{"delay_s", 0.05}}),  // 180 ms call
      ev(1360, "dispatched", "a"),           // after the 50 ms backoff
      ev(1400, "failed", "a", -1, 1370),     // 30 ms call
      ev(1405, "op_failed_temp", "a"),       //
      ev(5405, "op_processing", ""),         // 4 s paused
      ev(5410, "dispatched", "b"),           // a fan-out of two
      ev(5410, "dispatched", "b"),           //
      ev(5600, "succeeded", "b", -1, 5420),  // 180 ms
      ev(5650, "succeeded", "b", -1, 5500),  // 150 ms, overlapping
      ev(5660, "op_completed", "b"),
  };
  engine::OpTiming t = engine::op_timing(op, h, 999999);
  CHECK(t.wall_ms == 4660);
  CHECK(t.queue_ms == 100);
  CHECK(t.paused_ms == 4000);
  CHECK(t.timers_ms == 50);
  CHECK(t.actions_ms == 180 + 30 + 230);  // b's two calls overlap: 5420..5650
  CHECK(t.own_ms == 4660 - 100 - 4000 - 50 - 440);
  REQUIRE(t.states.size() == 2);
  CHECK(t.states[0].state == "a");
  CHECK(t.states[0].calls == 2);
  CHECK(t.states[0].action_ms == 210);
  CHECK(t.states[0].span_ms == 1400 - 1110);
  CHECK(t.states[1].calls == 2);
  CHECK(t.states[1].action_ms == 330);
  CHECK(t.states[1].span_ms == 5650 - 5410);
  // Still running: the wall runs to now.
  op.state = OpState::kProcessing;
  CHECK(engine::op_timing(op, h, 10000).wall_ms == 9000);
}

TEST_CASE("op timing counts overlapping parts once and the parts add up") {
  auto sum = [](const engine::OpTiming& t) {
    return t.queue_ms + t.paused_ms + t.timers_ms + t.actions_ms + t.own_ms;
  };
  engine::OpRecord op;
  op.created_ms = 0;
  op.state = OpState::kCompleted;
  json::object backoff{{"delay_s", 10}};
  // Three items back off 10 s at once; a wait of 60 s is cut short by the next event.
  std::vector<engine::EventRecord> h = {
      ev(0, "op_processing", ""),
      ev(0, "dispatched", "fan", 0),
      ev(0, "dispatched", "fan", 1),
      ev(0, "dispatched", "fan", 2),
      ev(1000, "retry_scheduled", "fan", 0, 500, backoff),
      ev(1000, "retry_scheduled", "fan", 1, 500, backoff),
      ev(1000, "retry_scheduled", "fan", 2, 500, backoff),
      ev(11000, "dispatched", "fan", 0),
      ev(11000, "dispatched", "fan", 1),
      ev(11000, "dispatched", "fan", 2),
      ev(12000, "succeeded", "fan", 0, 11000),
      ev(12000, "succeeded", "fan", 1, 11000),
      ev(12000, "succeeded", "fan", 2, 11000),
      ev(12000, "waiting", "pause", -1, 0, json::object{{"seconds", 60}}),
      ev(14000, "op_completed", "pause"),
  };
  engine::OpTiming t = engine::op_timing(op, h, 0);
  CHECK(t.wall_ms == 14000);
  CHECK(t.actions_ms == 500 + 1000);
  CHECK(t.timers_ms == 10000 + 2000);  // once, not three times; the wait until it ended
  CHECK(t.own_ms == 14000 - 1500 - 12000);
  CHECK(sum(t) == t.wall_ms);
  REQUIRE(t.states.size() == 1);  // a wait has no calls
  CHECK(t.states[0].calls == 6);

  // Never picked up: all of it is queue. Requested, failed, rolled back: the compensation
  // is a state of its own, the wait for the operator's rollback is paused.
  engine::OpRecord starting;
  starting.created_ms = 0;
  starting.state = OpState::kStarting;
  engine::OpTiming q = engine::op_timing(starting, {}, 5000);
  CHECK(q.queue_ms == 5000);
  CHECK(sum(q) == 5000);
  std::vector<engine::EventRecord> rb = {
      ev(100, "op_processing", ""),           ev(100, "dispatched", "a"),
      ev(300, "succeeded", "a", -1, 100),     ev(300, "dispatched", "b"),
      ev(400, "failed", "b", -1, 300),        ev(400, "op_failed_temp", "b"),
      ev(2400, "rollback_resumed", ""),       ev(2400, "compensating", "a"),
      ev(2600, "compensated", "a", -1, 2400), ev(2600, "op_rolled_back", ""),
  };
  op.state = OpState::kRolledBack;
  engine::OpTiming r = engine::op_timing(op, rb, 0);
  CHECK(r.queue_ms == 100);
  CHECK(r.paused_ms == 2000);
  CHECK(r.actions_ms == 200 + 100 + 200);
  CHECK(sum(r) == r.wall_ms);
  REQUIRE(r.states.size() == 3);
  CHECK(r.states[2].state == "a (rollback)");
  CHECK(r.states[2].calls == 1);
  CHECK(r.states[0].span_ms == 200);  // a's own span, not stretched to its compensation
}

TEST_CASE("the history records when each action call started") {
  Fixture f;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kCompleted);
  auto h = f.store->history(op);
  REQUIRE(h.ok());
  int results = 0, hooks = 0, configured = 0;
  for (const auto& e : h.value()) {
    results += e.kind == "succeeded" ? 1 : 0;
    if (e.kind == "succeeded" && e.state.starts_with("instantiate_end.")) {
      ++hooks;  // local.exec calls on the pool (the built-in steps run inline: no start)
      CHECK(e.started_ms > 0);
      CHECK(e.started_ms <= e.at_ms);
    }
    if (e.kind == "dispatched")
      CHECK(e.started_ms == 0);
    if (e.kind == "dispatched" && e.state == "instantiate_end.configure") {
      // The demo passes each node's position (`index`) to its hook.
      ++configured;
      CHECK(e.data.at("inputs").at("env").at("INDEX") == json::value(std::to_string(e.item)));
    }
  }
  CHECK(hooks >= 1);
  CHECK(configured == 3);
  auto rec = f.store->get_op(op).value();
  engine::OpTiming t = engine::op_timing(rec, h.value(), engine::now_ms());
  CHECK(t.wall_ms >= t.actions_ms);
  int calls = 0;
  for (const auto& st : t.states)
    calls += st.calls;
  CHECK(calls == results);  // every result is a call, timed or not (the fakes take no time)
  // Replay ignores the timing, as it ignores the stamps.
  auto m = engine::operation_machine(*f.store, rec);
  REQUIRE(m.ok());
  auto rep = engine::replay_dry_run(*f.store, rec, *m.value());
  REQUIRE(rep.ok());
  CHECK_FALSE(rep.value().diverged);
}

namespace {

// local-demo with an instantiate_end that calls Workflows/node.yaml once per node, one after
// the other: each call writes (compensated) and checks; what each returned is read after.
struct CallPackage {
  TempDir dir;
  std::string path;
  CallPackage() {
    path = (dir.path / "call-demo").string();
    fs::copy(source_root() + "/csar-samples/local-demo", path, fs::copy_options::recursive);
    std::ofstream(path + "/Workflows/instantiate_end.yaml") << R"(start: prepare
states:
  prepare:
    action: local.exec
    with: {command: [mkdir, -p, "${request.additionalParams.work_dir}"]}
    timeout: 10s
    next: nodes
  nodes:
    call: node.yaml
    for_each: ${request.additionalParams.nodes}
    as: node
    with: {name: "${node}"}
    next: report
  report:
    action: local.exec
    with: {command: [echo, "${join(map(states.nodes, n, n.written), ',')}"]}
    timeout: 10s
    next: done
  done:
    succeed: true
)";
    std::ofstream(path + "/Workflows/node.yaml") << R"(inputs:
  name: {type: string}
outputs:
  written: ${inputs.name + ':' + trim(states.write.stdout)}
start: write
states:
  write:
    action: local.exec
    with: {command: [echo, "${inputs.name}"]}
    timeout: 10s
    compensate: {action: local.exec, with: {command: [echo, undo, "${inputs.name}"]}, timeout: 10s}
    next: check
  check:
    action: local.exec
    with: {command: [echo, "${states.write.stdout}"]}
    timeout: 10s
    next: done
  done:
    succeed: true
)";
    std::string cmd = "bash '" + source_root() + "/tools/csar-manifest.sh' '" + path +
                      "' local-demo.mf vnflow 'Local demo' 1.0 >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
};

// Each side effect of the call package applied once: one key per state, item and visit.
void check_calls_once(Fixture& f, const std::string& op) {
  const std::vector<std::string> units = {
      "instantiate_end.prepare",       "instantiate_end.nodes.write",
      "instantiate_end.nodes.check",   "instantiate_end.nodes.write@2",
      "instantiate_end.nodes.check@2", "instantiate_end.nodes.write@3",
      "instantiate_end.nodes.check@3", "instantiate_end.report"};
  for (const auto& unit : units) {
    INFO(unit);
    auto it = f.effects->keys.find(op + "/" + unit);
    REQUIRE(it != f.effects->keys.end());
    CHECK(it->second.size() == 1);
  }
}

}  // namespace

TEST_CASE("calls: a workflow per node, in turn, each effect once; its outputs read after") {
  CallPackage pkg;
  Fixture f(pkg.path);
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kCompleted);
  check_calls_once(f, op);
  // One node after the other: write and check of a node before the next node's write.
  std::vector<std::string> hook;
  for (const auto& s : f.effects->order)
    if (s.starts_with("instantiate_end."))
      hook.push_back(s);
  CHECK(hook ==
        std::vector<std::string>{"instantiate_end.prepare", "instantiate_end.nodes.write",
                                 "instantiate_end.nodes.check", "instantiate_end.nodes.write",
                                 "instantiate_end.nodes.check", "instantiate_end.nodes.write",
                                 "instantiate_end.nodes.check", "instantiate_end.report"});
  CHECK(f.kinds(op, "called") == std::vector<std::string>{"instantiate_end.nodes[0]",
                                                          "instantiate_end.nodes[1]",
                                                          "instantiate_end.nodes[2]"});
  auto outs = f.store->outputs(op).value();
  CHECK(outs.at("instantiate_end.nodes") ==
        json::parse(R"([{"written":"a:ok"},{"written":"b:ok"},{"written":"c:ok"}])"));
}

TEST_CASE("calls: commit-failure sweep, then a rollback undoes every node, newest first") {
  CallPackage pkg;
  commit_failure_sweep(pkg.path, 8, check_calls_once);
  Fixture f(pkg.path);
  f.effects->fail_first["instantiate_end.report"] = 1;
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kFailedTemp);
  REQUIRE(engine::rollback_operation(*f.store, op).ok());
  f.run();
  CHECK(f.state(op) == OpState::kRolledBack);
  CHECK(f.kinds(op, "compensated") ==
        std::vector<std::string>{"instantiate_end.nodes.write", "instantiate_end.nodes.write",
                                 "instantiate_end.nodes.write", "instantiate.record"});
  // Each compensation with the inputs of its own call: c, then b, then a.
  std::vector<std::string> undone;
  for (const auto& e : f.store->history(op).value())
    if (e.kind == "compensating" && e.state == "instantiate_end.nodes.write")
      undone.push_back(json::serialize(e.data.at("command")));
  CHECK(undone == std::vector<std::string>{R"(["echo","undo","c"])", R"(["echo","undo","b"])",
                                           R"(["echo","undo","a"])"});
}

TEST_CASE("calls: replay --from a called workflow's state is refused, naming its call") {
  CallPackage pkg;
  Fixture f(pkg.path);
  std::string op = f.request("instantiate", f.instantiate_request());
  f.run();
  REQUIRE(f.state(op) == OpState::kCompleted);
  auto inner = engine::replay_from(*f.store, op, "instantiate_end.nodes.check");
  REQUIRE_FALSE(inner.ok());
  CHECK(inner.status().message().find("replay --from instantiate_end.nodes") != std::string::npos);
  auto outer = engine::replay_from(*f.store, op, "instantiate_end.nodes");
  REQUIRE(outer.ok());
  f.run();
  CHECK(f.state(outer.value().id) == OpState::kCompleted);
}
