// The action catalog (workflows/builtin/actions.yaml, what the compiler checks workflows
// against) and the registered code (actions::Registry, what the engine runs) describe the
// same actions: the same names, inputs (name, type, required) and outputs, and an inline
// kind exactly where the catalog says the action has no side effects.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "actions/actions.h"
#include "engine/internal/vim_actions.h"
#include "workflows/workflows.h"

namespace {

// What the engine runs: the actions module's kinds and the engine's own (the VIM registry's,
// registered by the engine the same way).
actions::Registry engine_registry() {
  actions::Registry r = actions::Registry::standard();
  engine::add_vim_actions(r, nullptr);
  return r;
}

std::string describe(const std::string& name, const std::string& type, bool required) {
  return name + (required ? "" : "?") + ": " + type;
}

void compare_fields(const std::string& where, const std::vector<workflows::Field>& catalog,
                    const std::vector<actions::Field>& code, std::vector<std::string>& out) {
  std::map<std::string, std::string> want, have;
  for (const auto& f : catalog)
    want[f.name] = describe(f.name, workflows::to_string(*f.type), f.required);
  for (const auto& f : code) {
    if (!have.emplace(f.name, describe(f.name, f.type, f.required)).second)
      out.push_back(where + ": the code registers \"" + f.name + "\" twice");
  }
  for (const auto& [name, spelled] : want) {
    auto it = have.find(name);
    if (it == have.end())
      out.push_back(where + ": the catalog has \"" + spelled + "\", the code has no " + name);
    else if (it->second != spelled)
      out.push_back(where + ": the catalog has \"" + spelled + "\", the code \"" + it->second +
                    "\"");
  }
  for (const auto& [name, spelled] : have) {
    if (!want.count(name))
      out.push_back(where + ": the code has \"" + spelled + "\", the catalog has no " + name);
  }
}

// Every way the two disagree, one line each.
std::vector<std::string> disagreements(const workflows::ActionCatalog& catalog,
                                       const actions::Registry& registry) {
  std::vector<std::string> out;
  for (const actions::Kind* k : registry.kinds()) {
    const workflows::ActionSpec* spec = catalog.find(k->name());
    if (spec == nullptr) {
      out.push_back(k->name() + ": registered, but not in the catalog");
      continue;
    }
    compare_fields(k->name() + " inputs", spec->inputs, k->signature().inputs, out);
    compare_fields(k->name() + " outputs", spec->outputs, k->signature().outputs, out);
    if (k->runs_inline() == spec->side_effects)
      out.push_back(
          k->name() + ": " + (k->runs_inline() ? "runs inline" : "runs on a worker") +
          ", but the catalog says side_effects: " + (spec->side_effects ? "true" : "false"));
  }
  for (const std::string& name : catalog.names()) {
    if (registry.find(name) == nullptr)
      out.push_back(name + ": in the catalog, but no code registers it");
  }
  return out;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v)
    s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("the action catalog and the registered actions agree") {
  auto problems = disagreements(workflows::ActionCatalog::builtin(), engine_registry());
  INFO(lines(problems));
  CHECK(problems.empty());
}

TEST_CASE("a disagreement between the catalog and the code is reported") {
  const auto& catalog = workflows::ActionCatalog::builtin();
  auto base = engine_registry();
  REQUIRE(disagreements(catalog, base).empty());
  auto sig = base.find("heat.stack.outputs")->signature();

  // An input the catalog does not have; a required flag flipped; a type changed.
  auto extra = base;
  auto s1 = sig;
  s1.inputs.push_back({"region", "string", false});
  extra.add("heat.stack.outputs", s1, nullptr);
  CHECK(lines(disagreements(catalog, extra)).find("the catalog has no region") !=
        std::string::npos);

  auto flipped = base;
  auto s2 = sig;
  s2.inputs[1].required = false;
  flipped.add("heat.stack.outputs", s2, nullptr);
  CHECK(lines(disagreements(catalog, flipped))
            .find("the catalog has \"stack: string\", the code \"stack?: string\"") !=
        std::string::npos);

  auto retyped = base;
  auto s3 = sig;
  s3.outputs[0].type = "integer";
  retyped.add("heat.stack.outputs", s3, nullptr);
  CHECK_FALSE(disagreements(catalog, retyped).empty());

  // An action only the code has; an action only the catalog has.
  auto more = base;
  more.add("heat.stack.abandon", sig, nullptr);
  CHECK(lines(disagreements(catalog, more)).find("heat.stack.abandon: registered, but not") !=
        std::string::npos);
  actions::Registry fewer;
  for (const actions::Kind* k : base.kinds()) {
    if (k->name() != "ssh.get")
      fewer.add(k->name(), k->signature(), nullptr);
  }
  auto missing = lines(disagreements(catalog, fewer));
  CHECK(missing.find("ssh.get: in the catalog, but no code registers it") != std::string::npos);

  // An inline kind where the catalog says the action has side effects.
  auto inlined = base;
  inlined.add_inline("local.exec", base.find("local.exec")->signature(),
                     [](const boost::json::object&, boost::json::value&) {
                       return actions::Outcome::success(boost::json::object{});
                     });
  CHECK(lines(disagreements(catalog, inlined)).find("local.exec: runs inline") !=
        std::string::npos);
}

TEST_CASE("every registered kind runs the way it is registered") {
  auto r = actions::Registry::standard();
  const actions::Kind* scale = r.find("instance.scale");
  REQUIRE(scale != nullptr);
  CHECK(scale->runs_inline());
  boost::json::value record = boost::json::object{};
  auto out = scale->run_inline(boost::json::object{{"aspect", "a"}, {"steps", 2}}, record);
  REQUIRE(out.ok);
  CHECK(record.at("scale_status").at("a").as_int64() == 2);
  // On a worker an inline kind refuses, naming itself.
  actions::Context ctx;
  auto refused = scale->run(boost::json::object{}, ctx);
  CHECK(refused.error_class == base::ErrorClass::kInvalid);
  CHECK(refused.message.find("instance.scale runs inline") != std::string::npos);
  // A fake over a standard registry keeps the catalog signature.
  const actions::Kind* exec = r.find("local.exec");
  REQUIRE(exec != nullptr);
  CHECK_FALSE(exec->runs_inline());
  auto sig_inputs = exec->signature().inputs.size();
  r.add("local.exec", std::shared_ptr<const actions::Action>());
  CHECK(r.find("local.exec")->signature().inputs.size() == sig_inputs);
  CHECK(r.find("no.such") == nullptr);
}

TEST_CASE("error classes: one spelling each, and the catalog's retry vocabulary is it") {
  std::vector<std::string> spelled;
  for (base::ErrorClass c : base::kErrorClasses) {
    spelled.emplace_back(base::to_string(c));
    CHECK(base::parse_error_class(base::to_string(c)) == c);
  }
  CHECK(spelled == workflows::error_classes());
  CHECK_FALSE(base::parse_error_class("Transient").has_value());
  CHECK_FALSE(base::parse_error_class("").has_value());
  // "cancelled" is the class of an operation an operator cancelled: spelled and read back
  // like the others, but no action answers it and no workflow may retry on it.
  CHECK(base::parse_error_class("cancelled") == base::ErrorClass::kCancelled);
  CHECK(std::find(spelled.begin(), spelled.end(), "cancelled") == spelled.end());
}
