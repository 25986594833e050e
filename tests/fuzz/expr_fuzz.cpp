// libFuzzer target: the `${...}` expression language on its own. The bytes are parsed as
// one expression, type-checked against every operation's request type, walked for W0043
// and evaluated on a scope where every root has a value; then the same bytes as a template
// string (text with ${...} parts) are split, parsed and interpolated. Never a crash, a
// sanitizer report or a hang; a failed parse is located inside the text and coded W0020 or
// W0023; a parsed tree is never deeper than the budget.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string_view>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/workflows.h"

namespace {

namespace json = boost::json;

uint32_t tree_depth(const workflows::Expr& e) {
  uint32_t d = 0;
  for (const auto& k : e.kids)
    d = std::max(d, tree_depth(*k));
  return d + 1;
}

struct Fixture {
  json::value request = json::parse(R"({
    "flavourId": "simple", "instantiationLevelId": "l1", "numberOfSteps": 2,
    "type": "SCALE_OUT", "aspectId": "worker", "vnfcInstanceId": ["c1", "c2"],
    "gracefulTerminationTimeout": 9223372036854775807, "big": 18446744073709551615,
    "neg": -9223372036854775808, "half": 0.5, "nan_text": "NaN",
    "additionalParams": {"nodes": ["a", "b"], "port": 8080, "name": "x; rm -rf ~",
                         "nested": {"l": [[1, 2], {"k": null}]}, "empty": {}}})");
  json::value instance = json::parse(R"({"id": "i-1", "instantiation_state": "INSTANTIATED",
    "vnfcs": [{"id": "c1", "vdu": "VDU1"}, {"id": "c2", "vdu": "VDU2"}],
    "flavour_id": "simple", "metadata": {}})");
  json::value vnfd = json::parse(R"({"vdus": {"VDU1": {"name": "vdu1"}}, "flavour_id": "simple"})");
  json::value op = json::parse(R"({"id": "op-1", "operation": "scale", "attempt": 1})");
  json::object outputs =
      json::parse(R"({"hook.first": {"stdout": "ok", "exit_code": 0}})").as_object();
  json::value item = json::value("a");
  json::value self = json::parse(R"({"stdout": "", "exit_code": 1})");
  workflows::Scope scope;
  std::vector<workflows::TypeScope> types;
  // states.first ran before; states.later exists but may not have run.
  std::map<std::string, workflows::TypeScope::StateOutput> states{
      {"first", {0, workflows::make_type(workflows::Type::Kind::kAny)}},
      {"later", {1, workflows::make_type(workflows::Type::Kind::kAny)}}};

  Fixture() {
    scope.request = &request;
    scope.instance = &instance;
    scope.vnfd = &vnfd;
    scope.op = &op;
    scope.outputs = &outputs;
    scope.segment = "hook";
    scope.item = &item;
    scope.item_name = "item";
    scope.self = &self;
    for (const auto& o : workflows::operations()) {
      workflows::TypeScope ts;
      ts.request = workflows::request_type(o.name);
      ts.instance = workflows::ActionCatalog::builtin().type("instance");
      ts.item_name = "item";
      ts.item = workflows::make_type(workflows::Type::Kind::kString);
      ts.item_from_request = true;
      ts.states = &states;
      ts.ran_before = [](int k) { return k == 0; };
      types.push_back(std::move(ts));
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  std::string err, code;
  uint32_t off = 0;
  auto e = workflows::Expr::parse(text, &err, &off, &code);
  if (e == nullptr) {
    if (off > text.size() || err.empty() ||
        (code != workflows::Expr::kSyntaxErrorCode && code != workflows::Expr::kTooDeepCode))
      __builtin_trap();
  } else {
    if (e->depth > workflows::Expr::kMaxDepth || tree_depth(*e) != e->depth)
      __builtin_trap();
    for (const auto& ts : fx.types) {
      std::vector<workflows::TypeError> errors;
      (void)workflows::check_expr(*e, ts, errors);
      for (const auto& te : errors) {
        if (te.offset > text.size() || te.code.size() != 5 || te.code[0] != 'W')
          __builtin_trap();
      }
      (void)workflows::carries_request_text(*e, ts);
    }
    auto v = e->evaluate(fx.scope);
    if (v.ok())
      (void)workflows::interpolate(v.value());
  }

  // The same bytes as a value of a `with:` (a string with ${...} parts).
  auto t = workflows::Template::parse(json::value(json::string(text)));
  if (t.ok())
    (void)t.value().evaluate(fx.scope);
  return 0;
}
