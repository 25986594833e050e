// libFuzzer target: SOL013 query strings as the REST API takes them (api/internal/sol013.h):
// the query parsed and percent-decoded, its filter parsed and evaluated against a VNF
// instance and an op occurrence document, its selectors parsed and applied, the next-page
// link written. Never a crash, a sanitizer report or a hang; every refusal has a reason.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json.hpp>

#include "api/internal/sol013.h"

namespace {

namespace json = boost::json;
using namespace api::internal;

const json::value& doc() {
  static const json::value kDoc = json::parse(R"({
    "id": "i-1", "vnfInstanceName": "a,b", "instantiationState": "INSTANTIATED",
    "operation": "SCALE", "attempt": 3, "ratio": 2.5, "ok": true, "none": null,
    "instantiatedVnfInfo": {"flavourId": "simple", "scaleStatus": [
      {"aspectId": "x", "scaleLevel": 1}, {"aspectId": "y", "scaleLevel": 2}]},
    "list": [[{"a": [1, 2, {"b": "c"}]}], {"a": "d"}],
    "metadata": {"k/1": "v", "k~": "w", "k,": "x", "k@": "y"}
  })");
  return kDoc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto q = parse_query(text);
  if (!q.ok()) {
    if (q.status().message().empty())
      std::abort();
    return 0;
  }
  if (const auto* f = q.value().find("filter"); f != nullptr && f->has_value()) {
    auto parsed = parse_filter(**f);
    if (parsed.ok())
      (void)matches(parsed.value(), doc());
    else if (parsed.status().message().empty())
      std::abort();
  }
  // The text itself as a filter, too (most inputs are not query strings).
  auto direct = parse_filter(text);
  if (direct.ok())
    (void)matches(direct.value(), doc());
  auto sel = parse_selector(q.value());
  if (sel.ok()) {
    DefaultExclusion d{{"instantiatedVnfInfo", "metadata"}, true};
    (void)apply_selector(sel.value(), d, doc().as_object());
  }
  (void)next_link("http://h:1", "/vnflcm/v1/vnf_instances", q.value(), "i-1");
  return 0;
}
