// The workflow language: expressions, templates, the compiler and the machine format.
#include "workflows/workflows.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "tosca/tosca.h"
#include "workflows/internal/expr.h"

namespace json = boost::json;
using workflows::Expr;

namespace {

std::string source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return r != nullptr ? r : ".";
}

json::value eval(const std::string& text, const json::value& request) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  INFO(text << ": " << err);
  REQUIRE(e);
  json::value instance = json::parse(R"({"id": "i-1", "vnfcs": [{"id": "c1", "vdu": "VDU1"}]})");
  workflows::Scope s;
  s.request = &request;
  s.instance = &instance;
  auto v = e->evaluate(s);
  INFO(v.status().to_string());
  REQUIRE(v.ok());
  return v.value();
}

std::vector<std::string> type_errors(const std::string& text) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  REQUIRE(e);
  workflows::TypeScope scope;
  scope.request = workflows::request_type("scale");
  scope.instance = workflows::ActionCatalog::builtin().type("instance");
  std::vector<workflows::TypeError> errors;
  workflows::check_expr(*e, scope, errors);
  std::vector<std::string> out;
  for (const auto& te : errors)
    out.push_back(te.code + " " + te.message);
  return out;
}

}  // namespace

TEST_CASE("expressions evaluate with JSON semantics") {
  json::value req = json::parse(
      R"({"type": "SCALE_OUT", "numberOfSteps": 2, "additionalParams": {"n": [1, 2, 3]}})");
  CHECK(eval("request.numberOfSteps * 3 + 1", req) == 7);
  CHECK(eval("request.type == 'SCALE_OUT' && !(1 > 2)", req) == true);
  CHECK(eval("len(request.additionalParams.n)", req) == 3);
  CHECK(eval("request.additionalParams.n[-1]", req) == 3);
  CHECK(eval("default(request.missing, 'x')", req) == "x");
  CHECK(eval("default(request.additionalParams.n[9], 0)", req) == 0);
  CHECK(eval("contains(instance.vnfcs, 'id', 'c1')", req) == true);
  CHECK(eval("'n=' + request.numberOfSteps", req) == "n=2");
  CHECK(eval("int(trim(' 42\\n'))", req) == 42);
  CHECK(eval("join(['a', 'b'], ',')", req) == "a,b");
  CHECK(eval("merge({}, request.additionalParams)", req).as_object().size() == 1);
}

TEST_CASE("a missing value is an error that names the path") {
  json::value req = json::parse(R"({"additionalParams": {}})");
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse("request.additionalParams.port_no + 1", &err, &off);
  workflows::Scope s;
  s.request = &req;
  auto v = e->evaluate(s);
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().message() == "request.additionalParams.port_no is not set");
}

TEST_CASE("syntax errors carry an offset") {
  std::string err;
  uint32_t off = 0;
  CHECK_FALSE(Expr::parse("request.type == ", &err, &off));
  CHECK(err == "expression ends too early");
  CHECK(off == 16);
  CHECK_FALSE(Expr::parse("a ? b", &err, &off));
  CHECK(off == 2);
}

TEST_CASE("the type checker knows request bodies and the instance record") {
  CHECK(type_errors("request.aspectId").empty());
  CHECK(type_errors("request.aspectid") ==
        std::vector<std::string>{
            "W0021 request has no field \"aspectid\"; did you mean \"aspectId\"?"});
  CHECK(type_errors("request.numberOfSteps + 'a'").empty());  // string concatenation
  CHECK(type_errors("request.numberOfSteps && true") ==
        std::vector<std::string>{"W0013 \"&&\" needs boolean, not integer"});
  CHECK(type_errors("len(request.numberOfSteps)").size() == 1);
  CHECK(type_errors("instance.vnfcs[0].vdu").empty());
  CHECK(type_errors("instance.vnfcs[0].vdux").size() == 1);
  CHECK(type_errors("nope.x") == std::vector<std::string>{"W0021 unknown name \"nope\""});
}

TEST_CASE("templates keep types of whole expressions and interpolate the rest") {
  auto t = workflows::Template::parse(
      json::parse(R"({"a": "${request.n}", "b": "n=${request.n}", "c": [1, "${request.n}"]})"));
  REQUIRE(t.ok());
  json::value req = json::parse(R"({"n": 5})");
  workflows::Scope s;
  s.request = &req;
  auto v = t.value().evaluate(s);
  REQUIRE(v.ok());
  CHECK(v.value() == json::parse(R"({"a": 5, "b": "n=5", "c": [1, 5]})"));
  CHECK_FALSE(workflows::Template::parse(json::value("${unterminated")).ok());
}

TEST_CASE("requests are checked against the SOL003 bodies") {
  CHECK(workflows::check_request("instantiate", json::parse(R"({"flavourId": "simple"})")).empty());
  auto p = workflows::check_request("instantiate", json::parse(R"({"additionalParams": []})"));
  REQUIRE(p.size() == 2);
  CHECK(p[0] == "flavourId: required");
  CHECK(p[1].rfind("additionalParams: expected a map", 0) == 0);
  CHECK(workflows::check_request("scale", json::parse("[]")) ==
        std::vector<std::string>{"the request body must be a JSON object"});
}

TEST_CASE("every operation of the local demo compiles and round-trips through JSON") {
  base::Diagnostics diags;
  auto pkg =
      tosca::load_package(source_root() + "/csar-samples/local-demo", tosca::LoadOptions{}, diags);
  REQUIRE(pkg);
  REQUIRE_FALSE(diags.has_errors());
  for (const auto& op : workflows::operations()) {
    INFO(op.name);
    auto m = workflows::compile(*pkg, {op.name, ""}, diags);
    for (const auto& d : diags.items())
      INFO(base::to_string(d));
    REQUIRE(m);
    auto back = workflows::Machine::from_json(m->to_json());
    REQUIRE(back.ok());
    CHECK(back.value()->digest == m->digest);
    CHECK(back.value()->states.size() == m->states.size());
    CHECK(workflows::render(*back.value(), workflows::Format::kText) ==
          workflows::render(*m, workflows::Format::kText));
    for (auto f :
         {workflows::Format::kDot, workflows::Format::kMermaid, workflows::Format::kSeqdiag})
      CHECK_FALSE(workflows::render(*m, f).empty());
  }
  auto inst = workflows::compile(*pkg, {"instantiate", ""}, diags);
  // One machine: the hook follows the built-in steps.
  CHECK(inst->states[static_cast<size_t>(inst->start)].name == "instantiate.has_stack");
  CHECK(inst->find("instantiate.create_stack") >= 0);
  CHECK(inst->find("instantiate.record") >= 0);
  CHECK(inst->find("instantiate_end.configure") >= 0);
  auto seq = workflows::render(*inst, workflows::Format::kSeqdiag);
  CHECK(seq.find("\"vnflow\" -> \"vnflow host\"") != std::string::npos);
  CHECK(seq.find("\"vnflow\" -> \"VnfInstance (vnflow DB)\"") != std::string::npos);
}

TEST_CASE("a hook that is not a workflow is refused with the reason") {
  base::Diagnostics diags;
  auto pkg = tosca::load_package(source_root() + "/tests/unit/workflows/bash-hook-package",
                                 tosca::LoadOptions{}, diags);
  REQUIRE(pkg);
  auto m = workflows::compile(*pkg, {"instantiate", ""}, diags);
  CHECK(m == nullptr);
  bool found = false;
  for (const auto& d : diags.items())
    found = found ||
            (d.code == "W0040" && d.message.find("which vnflow cannot run") != std::string::npos);
  CHECK(found);
}
