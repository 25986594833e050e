// The stepper (engine/internal/stepper.h): the executor's decisions on explicit time, with
// no clock, no sleep and no store; and replay through the same stepper.
#include "engine/internal/stepper.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "engine/engine.h"
#include "workflows/workflows.h"

namespace json = boost::json;
using engine::ItemStatus;
using engine::OpState;
using engine::Run;
using engine::Stepper;

namespace {

// `reader`: the files the workflow's calls name.
std::shared_ptr<const workflows::Machine> machine(const std::string& yaml,
                                                  const workflows::FileReader& reader = nullptr) {
  base::Diagnostics diags;
  auto m =
      workflows::compile_file("wf.yaml", yaml, "instantiate", "instantiate_end", diags, reader);
  std::string problems;
  for (const auto& d : diags.sorted())
    problems += base::to_string(d) + "\n";
  INFO(problems);
  REQUIRE(m != nullptr);
  return m;
}

const actions::Registry& kinds() {
  static const actions::Registry r = actions::Registry::standard();
  return r;
}

Stepper stepper() {
  return Stepper(kinds(), 3);
}

Run run_of(std::shared_ptr<const workflows::Machine> m) {
  Run r;
  r.id = "op-1";
  r.instance_id = "inst-1";
  r.operation = "instantiate";
  r.request = json::object{{"flavourId", "simple"}};
  r.instance = json::object{{"id", "inst-1"}};
  r.opv = json::object{{"id", "op-1"}, {"attempt", 1}};
  r.state = OpState::kStarting;
  r.c.cur = m->start;
  r.cyclic = engine::cyclic_states(*m);
  r.m = std::move(m);
  return r;
}

// The kinds of the events decided since the last call, as "kind state".
std::vector<std::string> take(Run& r) {
  std::vector<std::string> out;
  for (const auto& e : r.pending.events)
    out.push_back(e.kind + (e.state.empty() ? "" : " " + e.state));
  r.pending = engine::Batch{};
  if (r.new_state && !r.final_)
    r.state = *r.new_state;
  r.new_state.reset();
  return out;
}

const char* kRetryThenWait = R"(
start: call
states:
  call:
    action: local.exec
    with: {command: ["true"]}
    timeout: 1m
    retry: {attempts: 3, backoff: 10s, factor: 2, on: [failed]}
    next: pause
  pause:
    wait: 30
    next: done
  done:
    succeed: true
)";

}  // namespace

TEST_CASE("stepper: retry backoff and a durable wait run on the time given, not a clock") {
  auto m = machine(kRetryThenWait);
  Stepper st = stepper();
  Run r = run_of(m);
  const int64_t t0 = 1'000'000;
  st.resume(r, OpState::kStarting, t0, false);
  CHECK(take(r) == std::vector<std::string>{"op_processing", "dispatched instantiate_end.call"});
  REQUIRE(r.to_start == std::vector<int>{0});
  r.to_start.clear();
  std::string key = Stepper::key_for(r, m->states[static_cast<size_t>(r.c.cur)], 0, 1, false, 1);
  CHECK(key == "op-1/instantiate_end.call/1");

  // A failure: the policy waits 10 s, then 20 s. The wake-up asked for is exactly that.
  st.result(r, r.c.cur, 0, actions::Outcome::failure(base::ErrorClass::kFailed, "exit 1"), t0 + 5);
  CHECK(take(r) == std::vector<std::string>{"retry_scheduled instantiate_end.call"});
  st.advance(r, t0 + 5, false);
  CHECK(r.timer_at == t0 + 5 + 10'000);
  CHECK(take(r).empty());
  // Woken early (a spurious timer): nothing happens.
  st.advance(r, t0 + 9'000, false);
  CHECK(take(r).empty());
  st.advance(r, t0 + 10'005, false);
  CHECK(take(r) == std::vector<std::string>{"dispatched instantiate_end.call"});
  CHECK(r.c.items[0].attempt == 2);
  st.result(r, r.c.cur, 0, actions::Outcome::failure(base::ErrorClass::kFailed, "exit 1"),
            t0 + 10'010);
  st.advance(r, t0 + 10'010, false);
  take(r);
  CHECK(r.timer_at == t0 + 10'010 + 20'000);

  // The third try succeeds; the durable wait of 30 s is a wake-up time in the cursor.
  st.advance(r, t0 + 30'010, false);
  take(r);
  st.result(r, r.c.cur, 0, actions::Outcome::success(json::object{{"exit_code", 0}}), t0 + 30'020);
  st.advance(r, t0 + 30'020, false);
  CHECK(take(r) == std::vector<std::string>{"succeeded instantiate_end.call",
                                            "waiting instantiate_end.pause"});
  CHECK(r.c.items[0].status == ItemStatus::kWaiting);
  CHECK(r.c.items[0].wake_ms == t0 + 30'020 + 30'000);
  CHECK(r.timer_at == r.c.items[0].wake_ms);
  // The cursor round-trips through JSON (a restart): the wait goes on where it was.
  auto c = engine::Cursor::from_json(r.c.to_json());
  REQUIRE(c.ok());
  CHECK(c.value().items[0].wake_ms == r.c.items[0].wake_ms);
  st.advance(r, t0 + 60'019, false);
  CHECK(take(r).empty());
  CHECK_FALSE(r.final_);
  st.advance(r, t0 + 60'020, false);
  CHECK(take(r) == std::vector<std::string>{"op_completed instantiate_end.done"});
  CHECK(r.final_);
  CHECK(r.final_state == OpState::kCompleted);
}

TEST_CASE("stepper: the same inputs give the same decisions (no hidden state, no clock)") {
  auto m = machine(kRetryThenWait);
  auto drive = [&] {
    Stepper st = stepper();
    Run r = run_of(m);
    std::vector<std::string> log;
    auto keep = [&] {
      for (const auto& e : r.pending.events)
        log.push_back(std::to_string(e.at_ms) + " " + e.kind + " " + e.key + " " +
                      json::serialize(e.data));
      take(r);
    };
    st.resume(r, OpState::kStarting, 100, false);
    keep();
    st.result(r, r.c.cur, 0, actions::Outcome::failure(base::ErrorClass::kFailed, "no"), 200);
    st.advance(r, 200, false);
    keep();
    st.advance(r, 10'200, false);
    keep();
    log.push_back("wake " + std::to_string(r.timer_at));
    return log;
  };
  auto a = drive();
  auto b = drive();
  CHECK(a == b);
  CHECK(a.size() >= 4);
}

TEST_CASE("stepper: a draining daemon starts no new call; a resume re-dispatches with the key") {
  auto m = machine(kRetryThenWait);
  Stepper st = stepper();
  Run r = run_of(m);
  st.resume(r, OpState::kStarting, 1, true);  // stopping
  CHECK(take(r) == std::vector<std::string>{"op_processing"});
  CHECK(r.to_start.empty());
  st.advance(r, 2, false);
  CHECK(take(r) == std::vector<std::string>{"dispatched instantiate_end.call"});
  r.to_start.clear();
  // The daemon dies while the call runs; the next one reads the cursor and resumes.
  Run again = run_of(m);
  auto c = engine::Cursor::from_json(r.c.to_json());
  REQUIRE(c.ok());
  again.c = std::move(c).value();
  again.state = OpState::kProcessing;
  st.resume(again, OpState::kProcessing, 3, false);
  auto ev = again.pending.events;
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].kind == "resumed");
  CHECK(ev[1].kind == "redispatched");
  CHECK(ev[1].key == "op-1/instantiate_end.call/1");
  CHECK(again.to_start == std::vector<int>{0});
  // Past max_redispatch (3) the step is not dispatched again: FAILED_TEMP with the reason.
  for (int i = 0; i < 3; ++i) {
    Run next = run_of(m);
    next.c = engine::Cursor::from_json(again.c.to_json()).value();
    next.state = OpState::kProcessing;
    st.resume(next, OpState::kProcessing, 4 + i, false);
    again = std::move(next);
  }
  CHECK(again.final_);
  CHECK(again.final_state == OpState::kFailedTemp);
  CHECK(again.error_json.find("re-dispatched") != std::string::npos);
}

TEST_CASE("stepper: history values are cut once (for_history is idempotent)") {
  std::string big(10000, 'x');
  json::value once = engine::for_history(json::object{{"out", big}, {"password", "p"}});
  json::value twice = engine::for_history(once);
  CHECK(once == twice);
  CHECK(once.at("password") == "***");
  CHECK(once.at("out").as_string().ends_with("...(10000 bytes)"));
}

TEST_CASE("stepper: a settled operation's resource changes: VNFCs added, removed, moved") {
  // The instance starts with c1 (on r1) and c2; the operation leaves c1 on another resource,
  // drops c2 and adds c3.
  auto m = machine(R"(
start: set
states:
  set:
    action: instance.update
    with:
      set:
        vnfcs:
          - {id: c1, vdu: VDU1, resource_id: r9}
          - {id: c3, vdu: VDU2}
    next: done
  done:
    succeed: true
)");
  Stepper st = stepper();
  Run r = run_of(m);
  r.instance = json::parse(R"({"id": "inst-1", "vnfcs": [
      {"id": "c1", "vdu": "VDU1", "resource_id": "r1"}, {"id": "c2", "vdu": "VDU1"}]})");
  st.resume(r, OpState::kStarting, 1000, false);
  st.advance(r, 1000, false);
  take(r);
  REQUIRE(r.final_);
  REQUIRE(r.final_state == OpState::kCompleted);
  auto c = engine::Cursor::from_json(r.c.to_json());  // as stored
  REQUIRE(c.ok());
  CHECK(c.value().has_vnfcs0);  // what it began with survives a restart
  CHECK(c.value().vnfcs0 == r.c.vnfcs0);
  CHECK(c.value().vnfcs0.size() == 2);
  CHECK(json::value(c.value().changes) == json::parse(R"({"affectedVnfcs": [
      {"id": "c1", "vduId": "VDU1", "computeResource": {"resourceId": "r9"},
       "changeType": "MODIFIED"},
      {"id": "c3", "vduId": "VDU2", "computeResource": {"resourceId": "c3"},
       "changeType": "ADDED"},
      {"id": "c2", "vduId": "VDU1", "computeResource": {"resourceId": "c2"},
       "changeType": "REMOVED"}]})"));
  // What the operation occurrence shows (SOL003 VnfLcmOpOcc.resourceChanges).
  engine::OpRecord op;
  op.id = r.id;
  op.operation = "instantiate";
  op.state = OpState::kCompleted;
  op.cursor = r.c.to_json();
  CHECK(engine::op_view(op).at("resourceChanges") == json::value(c.value().changes));

  // An operation that changes no VNFC has none.
  Run same = run_of(machine(R"(
start: done
states:
  done:
    succeed: true
)"));
  same.instance = r.instance;
  st.resume(same, OpState::kStarting, 1000, false);
  st.advance(same, 1000, false);
  REQUIRE(same.final_);
  CHECK(same.c.changes.empty());
  op.cursor = same.c.to_json();
  CHECK_FALSE(engine::op_view(op).contains("resourceChanges"));
}

namespace {

// A hook that calls region.yaml once per region, one after the other, then reads what each
// returned. The called file creates something (compensated), then checks its inputs.
const char* kCaller = R"(
start: regions
states:
  regions:
    call: region.yaml
    for_each: ${request.additionalParams.regions}
    as: region
    with:
      name: ${region}
      position: ${index}
    next: record
    on_failure: cleanup
  record:
    action: local.exec
    with: {command: [echo, "${join(map(states.regions, r, r.id + '@' + r.zone), ',')}"]}
    timeout: 1m
    next: done
  cleanup:
    fail: a region failed
  done:
    succeed: true
)";

const char* kRegion = R"(
inputs:
  name: {type: string}
  position: {type: integer}
  zone: {type: string, default: z1}
outputs:
  id: ${states.create.stdout}
  zone: ${inputs.zone}
start: create
states:
  create:
    action: local.exec
    with: {command: [mk, "${inputs.name}"]}
    timeout: 1m
    compensate:
      action: local.exec
      with: {command: [rm, "${inputs.name}", "${self.stdout}"]}
      timeout: 1m
    next: check
  check:
    choice:
      - when: ${inputs.position > 1}
        next: too_far
    default: ok
  too_far:
    fail: too far
  ok:
    succeed: true
)";

std::shared_ptr<const workflows::Machine> call_machine() {
  return machine(kCaller, [](const std::string& path) -> base::Result<std::string> {
    if (path == "region.yaml")
      return std::string(kRegion);
    return base::Status::NotFound("no " + path);
  });
}

// Answers the dispatched call of the current state with `stdout`.
void answer(Stepper& st, Run& r, const std::string& stdout_text, int64_t now) {
  REQUIRE(r.to_start.size() == 1);
  r.to_start.clear();
  st.result(r, r.c.cur, 0,
            actions::Outcome::success(json::object{{"exit_code", 0}, {"stdout", stdout_text}}),
            now);
  st.advance(r, now, false);
}

// Regions a, b and c, the first two returned; c's `create` is dispatched.
Run three_regions(Stepper& st, std::shared_ptr<const workflows::Machine> m) {
  Run r = run_of(std::move(m));
  r.request = json::object{{"flavourId", "simple"},
                           {"additionalParams", {{"regions", json::array{"a", "b", "c"}}}}};
  st.resume(r, OpState::kStarting, 1000, false);
  take(r);
  answer(st, r, "id-a", 1010);
  answer(st, r, "id-b", 1020);
  take(r);
  return r;
}

}  // namespace

TEST_CASE("stepper: a call runs its workflow once per item, in turn, and returns its outputs") {
  auto m = call_machine();
  Stepper st = stepper();
  Run r = run_of(m);
  r.request = json::object{{"flavourId", "simple"},
                           {"additionalParams", {{"regions", json::array{"a", "b"}}}}};
  st.resume(r, OpState::kStarting, 1000, false);
  CHECK(take(r) == std::vector<std::string>{"op_processing", "called instantiate_end.regions",
                                            "dispatched instantiate_end.regions.create"});
  CHECK(r.c.items[0].inputs.at("command") == json::array{"mk", "a"});
  CHECK(Stepper::key_for(r, m->states[static_cast<size_t>(r.c.cur)], 0, 1, false, r.visit()) ==
        "op-1/instantiate_end.regions.create/1");

  // The call in progress survives the cursor's round trip (a daemon's restart).
  auto back = engine::Cursor::from_json(r.c.to_json());
  REQUIRE(back.ok());
  REQUIRE(back.value().frames.size() == 1);
  CHECK(back.value().frames[0].index == 0);
  CHECK(back.value().frames[0].running);
  CHECK(back.value().frames[0].inputs.at("name") == "a");
  CHECK(back.value().frames[0].inputs.at("zone") == "z1");  // the declared default

  answer(st, r, "id-a", 1010);
  CHECK(take(r) == std::vector<std::string>{"succeeded instantiate_end.regions.create",
                                            "choice instantiate_end.regions.check",
                                            "returned instantiate_end.regions",
                                            "called instantiate_end.regions",
                                            "dispatched instantiate_end.regions.create"});
  CHECK(r.c.items[0].inputs.at("command") == json::array{"mk", "b"});
  // The second item's states are a new visit: keys of their own.
  CHECK(Stepper::key_for(r, m->states[static_cast<size_t>(r.c.cur)], 0, 1, false, r.visit()) ==
        "op-1/instantiate_end.regions.create@2/1");

  answer(st, r, "id-b", 1020);
  CHECK(take(r).back() == "dispatched instantiate_end.record");
  CHECK(r.c.items[0].inputs.at("command") == json::array{"echo", "id-a@z1,id-b@z1"});
  CHECK(r.c.frames.empty());
  CHECK(r.c.outputs.at("instantiate_end.regions") ==
        json::parse(R"([{"id":"id-a","zone":"z1"},{"id":"id-b","zone":"z1"}])"));

  // Rolled back: each item's compensation, newest first, with the inputs of its own call.
  r.to_start.clear();
  r.state = OpState::kRollingBack;
  st.advance(r, 1030, false);
  REQUIRE(r.c.rb_item.status == ItemStatus::kDispatched);
  CHECK(r.c.rb_item.inputs.at("command") == json::array{"rm", "b", "id-b"});
  r.to_start.clear();
  st.result(r, 0, engine::kRollbackItem, actions::Outcome::success(json::object{}), 1040);
  st.advance(r, 1040, false);
  REQUIRE(r.c.rb_item.status == ItemStatus::kDispatched);
  CHECK(r.c.rb_item.inputs.at("command") == json::array{"rm", "a", "id-a"});
}

TEST_CASE("stepper: a failure inside a called workflow goes to the call's on_failure") {
  auto m = call_machine();
  Stepper st = stepper();
  Run r = three_regions(st, m);
  // The third item's `create` fails: the called file has no on_failure of its own.
  REQUIRE(r.to_start.size() == 1);
  r.to_start.clear();
  st.result(r, r.c.cur, 0, actions::Outcome::failure(base::ErrorClass::kFailed, "exit 3"), 1030);
  st.advance(r, 1030, false);
  CHECK(take(r) == std::vector<std::string>{"failed instantiate_end.regions.create",
                                            "on_failure instantiate_end.regions.create",
                                            "op_failed_temp instantiate_end.cleanup"});
  CHECK(r.c.frames.empty());  // left the call

  // The called file's own `fail` (the position check) stops the operation there instead.
  Run r2 = three_regions(st, m);
  answer(st, r2, "id-c", 1030);
  auto evs = take(r2);
  CHECK(evs.back() == "op_failed_temp instantiate_end.regions.too_far");
  REQUIRE(r2.c.frames.size() == 1);
  CHECK(r2.c.frames[0].index == 2);
}

TEST_CASE("stepper: a secret passed to a call under a secret name stays *** after a restart") {
  // The request's field has no secret name; the called file's input does (password).
  auto m = machine(R"(
start: login
states:
  login:
    call: login.yaml
    with: {password: "${request.additionalParams.pw}"}
    next: done
  done:
    succeed: true
)",
                   [](const std::string&) -> base::Result<std::string> {
                     return std::string(R"(
inputs:
  password: {type: string}
start: pause
states:
  pause:
    wait: 5s
    next: use
  use:
    action: local.exec
    with: {command: [login], env: {P: "${inputs.password}"}}
    timeout: 1m
    next: ok
  ok:
    succeed: true
)");
                   });
  Stepper st = stepper();
  Run r = run_of(m);
  r.request = json::object{{"flavourId", "simple"}, {"additionalParams", {{"pw", "S3cret-42"}}}};
  st.resume(r, OpState::kStarting, 1000, false);
  take(r);
  // The daemon stops during the wait; another reads the cursor and goes on.
  auto cursor = engine::Cursor::from_json(r.c.to_json());
  REQUIRE(cursor.ok());
  Run again = run_of(m);
  again.request = r.request;
  again.c = std::move(cursor).value();
  again.state = OpState::kProcessing;
  st.resume(again, OpState::kProcessing, 7000, false);
  REQUIRE(again.to_start.size() == 1);
  again.to_start.clear();
  st.result(again, again.c.cur, 0,
            actions::Outcome::failure(base::ErrorClass::kFailed, "login failed with S3cret-42"),
            7010);
  st.advance(again, 7010, false);
  std::string all;
  for (const auto& e : again.pending.events)
    all += json::serialize(e.data) + "\n";
  CHECK(all.find("S3cret-42") == std::string::npos);
  CHECK(all.find("login failed with ***") != std::string::npos);
  CHECK(again.error_json.find("S3cret-42") == std::string::npos);
}

TEST_CASE("stepper: a loop through an empty call, with no side effect, ends at the step guard") {
  auto m = machine(R"(
start: again
states:
  again:
    call: one.yaml
    for_each: ${request.additionalParams.items}
    next: more
  more:
    choice:
      - when: ${len(request.additionalParams.items) > 0}
        next: done
    default: again
  done:
    succeed: true
)",
                   [](const std::string&) -> base::Result<std::string> {
                     return std::string("start: ok\nstates:\n  ok:\n    succeed: true\n");
                   });
  Stepper st = stepper();
  Run r = run_of(m);
  r.request =
      json::object{{"flavourId", "simple"}, {"additionalParams", {{"items", json::array{}}}}};
  st.resume(r, OpState::kStarting, 1000, false);
  // No side effect ever: the step guard ends it, instead of spinning.
  CHECK(r.final_);
  CHECK(r.error_json.find("more than 10000 steps") != std::string::npos);
}
