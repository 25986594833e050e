// libFuzzer target: SOL003 request bodies (ETSI GS NFV-SOL 003 §5.5.2) as the engine takes
// them: JSON text, parsed as the CLI parses a --request file, checked against every
// operation's request type (workflows::check_request, what the engine calls before it
// stores a request); a request that passes is then read by the expressions of the
// operation's built-in steps. Never a crash, a sanitizer report or a hang.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string_view>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/workflows.h"

namespace {

namespace json = boost::json;

// The built-in machine of each operation, compiled once.
const std::map<std::string, std::shared_ptr<const workflows::Machine>>& builtins() {
  static const auto kMachines = [] {
    std::map<std::string, std::shared_ptr<const workflows::Machine>> out;
    for (const auto& o : workflows::operations()) {
      base::Diagnostics diags;
      out[o.name] = workflows::compile_file(o.name + ".yaml", workflows::builtin_source(o.name),
                                            o.name, o.name, diags);
    }
    return out;
  }();
  return kMachines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20))
    return 0;  // the CLI and the engine refuse a request over 1 MiB before parsing it
  std::string_view text(reinterpret_cast<const char*>(data), size);
  boost::system::error_code ec;
  json::value request = json::parse(text, ec);
  if (ec)
    return 0;
  static const json::value kInstance = json::parse(
      R"({"id": "i-1", "instantiation_state": "INSTANTIATED", "flavour_id": "simple",
          "vnfcs": [{"id": "c1", "vdu": "VDU1"}], "metadata": {}})");
  static const json::value kVnfd = json::parse(R"({"vdus": {}, "flavour_id": "simple"})");
  static const json::value kOp = json::parse(R"({"id": "op-1", "attempt": 1})");
  for (const auto& o : workflows::operations()) {
    auto problems = workflows::check_request(o.name, request);
    if (!request.is_object() && problems.empty())
      __builtin_trap();  // a body that is not an object never passes
    if (!problems.empty())
      continue;
    auto it = builtins().find(o.name);
    if (it == builtins().end() || it->second == nullptr)
      continue;
    workflows::Scope scope;
    scope.request = &request;
    scope.instance = &kInstance;
    scope.vnfd = &kVnfd;
    scope.op = &kOp;
    for (const auto& s : it->second->states) {
      (void)s.with.evaluate(scope);
      if (s.for_each_expr)
        (void)workflows::evaluate(*s.for_each_expr, scope);
      for (const auto& c : s.choices) {
        if (c.expr)
          (void)workflows::evaluate(*c.expr, scope);
      }
    }
  }
  return 0;
}
