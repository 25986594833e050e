// libFuzzer target: the workflow compiler and the expression language on arbitrary text.
// Never a crash, never an abort: every input ends in a machine or in diagnostics.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/workflows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  base::Diagnostics diags;
  // A call to a.yaml or b.yaml inlines the input itself: calls, their declarations and
  // their limits (self-calls, depth, size) run on fuzzed text too.
  auto m = workflows::compile_file("fuzz.yaml", text, "instantiate", "instantiate_end", diags,
                                   [text](const std::string& path) -> base::Result<std::string> {
                                     if (path == "a.yaml" || path == "b.yaml")
                                       return std::string(text);
                                     return base::Status::NotFound("no " + path);
                                   });
  if (m != nullptr) {
    // A compiled machine round-trips and renders.
    auto back = workflows::Machine::from_json(m->to_json());
    if (!back.ok() || back.value()->states.size() != m->states.size())
      __builtin_trap();
    for (auto f : {workflows::Format::kText, workflows::Format::kDot, workflows::Format::kMermaid,
                   workflows::Format::kSeqdiag, workflows::Format::kPlantuml})
      (void)workflows::render(*m, f);
  }
  // The same bytes as one expression: parse, type-check, evaluate on a small scope.
  std::string err;
  uint32_t off = 0;
  auto e = workflows::Expr::parse(text.substr(0, 512), &err, &off);
  if (e) {
    workflows::TypeScope ts;
    ts.request = workflows::request_type("instantiate");
    std::vector<workflows::TypeError> errors;
    workflows::check_expr(*e, ts, errors);
    boost::json::value req =
        boost::json::parse(R"({"flavourId": "x", "additionalParams": {"a": [1, "b"]}})");
    workflows::Scope s;
    s.request = &req;
    (void)e->evaluate(s);
  } else if (off > text.size()) {
    __builtin_trap();
  }
  return 0;
}
