// libFuzzer target: the OpenStack client's readers of Keystone and Heat answers. The input
// is a script of HTTP answers, one per request the heat.* actions make, separated by a
// line "=====": a status line ("201"), header lines ("location: ..."), an empty line, the
// body. Each input runs a create, a wait, outputs, resources, an update, a mark-unhealthy
// and a delete against them (a fresh registry, so no token is cached across inputs); the
// answers run out into "connection refused". Every call must end in an outcome: a success,
// a poll, or a failure with a known class and a message without the password.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "actions/actions.h"

#include "tests/unit/actions/scripted_transport.h"

namespace json = boost::json;

namespace {

constexpr size_t kMaxAnswers = 64;

std::vector<test::http::Response> parse_script(std::string_view in) {
  std::vector<test::http::Response> out;
  while (!in.empty() && out.size() < kMaxAnswers) {
    size_t end = in.find("\n=====\n");
    std::string_view chunk = in.substr(0, end);
    in = end == std::string_view::npos ? std::string_view() : in.substr(end + 7);
    test::http::Response r;
    size_t nl = chunk.find('\n');
    r.status = std::atoi(std::string(chunk.substr(0, std::min<size_t>(nl, 4))).c_str());
    chunk = nl == std::string_view::npos ? std::string_view() : chunk.substr(nl + 1);
    while (!chunk.empty() && chunk.front() != '\n') {
      nl = chunk.find('\n');
      std::string_view line = chunk.substr(0, nl);
      size_t colon = line.find(": ");
      if (colon != std::string_view::npos)
        r.headers.emplace_back(std::string(line.substr(0, colon)),
                               std::string(line.substr(colon + 2)));
      chunk = nl == std::string_view::npos ? std::string_view() : chunk.substr(nl + 1);
    }
    if (!chunk.empty())
      r.body = std::string(chunk.substr(1));
    out.push_back(std::move(r));
  }
  return out;
}

void check(const actions::Outcome& o) {
  if (o.poll_after_ms > 0 && json::serialize(o.outputs).find("s3cret-pw") != std::string::npos)
    std::abort();
  if (o.ok || o.poll_after_ms > 0)
    return;
  // An action answers one of the four classes a workflow may retry on, never "cancelled".
  bool known = std::find(std::begin(base::kErrorClasses), std::end(base::kErrorClasses),
                         o.error_class) != std::end(base::kErrorClasses);
  if (!known || o.message.empty() || o.message.find("s3cret-pw") != std::string::npos) {
    std::fprintf(stderr, "a failure of class \"%s\": %s\n",
                 std::string(base::to_string(o.error_class)).c_str(), o.message.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto answers = parse_script(std::string_view(reinterpret_cast<const char*>(data), size));
  size_t next = 0;
  test::ScriptedTransport net;
  net.before =
      [&](int, const test::http::Request& r) -> std::optional<base::Result<test::http::Response>> {
    if (next < answers.size())
      return base::Result<test::http::Response>(answers[next++]);
    return base::Result<test::http::Response>(
        base::Status::Unavailable(r.method + " " + r.url + ": connect: Connection refused"));
  };
  base::ManualClock clock;
  actions::Services services;
  services.transport = &net;
  services.clock = &clock;
  auto registry = actions::Registry::standard(services);
  actions::Context ctx;
  ctx.deadline = clock.steady() + std::chrono::minutes(1);
  ctx.vim = [](std::string_view) -> base::Result<json::object> {
    return json::object{{"id", "vim-1"},
                        {"type", "openstack"},
                        {"access", json::object{{"auth_url", "http://keystone.test:5000"},
                                                {"username", "admin"},
                                                {"password", "s3cret-pw"},
                                                {"project_name", "demo"}}},
                        {"extra", json::object{{"heat_stall_secs", 1}}}};
  };
  auto run = [&](const char* action, json::object in) {
    in["vim_id"] = "vim-1";
    check(registry.find(action)->run(in, ctx));
  };
  run("heat.stack.create", {{"name", "vnf-1"}, {"template", "heat_template_version: 2018-08-31"}});
  for (int i = 0; i < 3 && next < answers.size(); ++i) {
    run("heat.stack.wait", {{"stack", "vnf-1/id-1"}, {"until", "CREATE_COMPLETE"}});
    clock.advance(std::chrono::seconds(2));
  }
  run("heat.stack.outputs", {{"stack", "vnf-1/id-1"}});
  run("heat.resources", {{"stack", "vnf-1/id-1"},
                         {"vdus", json::object{{"VDU1", json::object{}}}},
                         {"cps", json::object{{"CP1", json::object{{"vdu", "VDU1"}}}}},
                         {"previous", json::array{json::object{{"id", "old"}, {"vdu", "VDU1"}}}},
                         {"healed", json::array{"old"}}});
  run("heat.stack.update", {{"stack", "vnf-1/id-1"}, {"parameters", json::object{}}});
  run("heat.resource.mark_unhealthy", {{"stack", "vnf-1/id-1"}, {"resource", "VDU1"}});
  run("heat.stack.delete", {{"stack", "vnf-1/id-1"}});
  return 0;
}
