// The type registry (every kind, with derived_from chains) and the checker of values
// against property definitions, data types and constraints.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/base.h"
#include "tosca/internal/document.h"
#include "tosca/tosca.h"

namespace tosca::internal {

enum class TypeKind : uint8_t {
  kData,
  kArtifact,
  kCapability,
  kInterface,
  kRelationship,
  kNode,
  kGroup,
  kPolicy,
};
constexpr size_t kTypeKindCount = 8;
std::string_view to_string(TypeKind k);     // "node type"
std::string_view section_name(TypeKind k);  // "node_types"

struct TypeDef {
  TypeKind kind;
  std::string name;
  Node def;  // the type's definition map
  const Document* doc = nullptr;
  const TypeDef* parent = nullptr;
  uint8_t state = 0;  // 0 unresolved, 1 resolving, 2 resolved
};

using NamedNodes = std::vector<std::pair<std::string, Node>>;

class Types {
 public:
  // Adds the definitions of one `<kind>_types` section. Duplicates from another document
  // are reported (T0032) unless both definitions are identical text.
  void add_section(TypeKind kind, Node section, const Document* doc, bool normative,
                   base::Diagnostics& diags);
  // Moves package types that sit in the wrong section (a data type under node_types:, found
  // by a derived_from chain that ends in a data type) to the kind they derive from, with one
  // T0033 per misplaced section naming them, instead of a cascade of unknown types. Call
  // after every add_section and before resolve().
  void relocate_misplaced(base::Diagnostics& diags);
  // Resolves every derived_from (T0030 unknown parent, T0031 cycle).
  void resolve(base::Diagnostics& diags);

  const TypeDef* find(TypeKind kind, std::string_view name) const;
  std::vector<std::string> names(TypeKind kind) const;
  // True when `t` is `ancestor` or derives from it.
  static bool derives(const TypeDef* t, std::string_view ancestor);
  // The union of one map section (properties, capabilities, interfaces, artifacts,
  // attributes) along the chain; the most derived definition wins.
  NamedNodes merged(const TypeDef* t, std::string_view section) const;
  // Requirement definitions along the chain (lists of single-key maps), most derived first.
  NamedNodes requirements(const TypeDef* t) const;

 private:
  std::array<std::unordered_map<std::string, std::unique_ptr<TypeDef>>, kTypeKindCount> maps_;
  std::array<std::unordered_map<std::string, std::string>, kTypeKindCount> aliases_;
};

bool is_primitive_type(std::string_view name);

// A valid_values list parsed once: a value is looked up instead of compared with every
// entry (and its numbers parsed again) each time.
struct ValueSet {
  std::unordered_set<double> numbers;          // unquoted numbers
  std::unordered_set<double> units;            // scalar-units, in base units
  std::unordered_set<std::string_view> texts;  // every scalar's text
  std::unordered_set<std::string> flows;       // every entry as flow YAML
};

// The ValueSets of one load, by list node; lives as long as the documents.
using ValueSets = std::map<std::pair<const Document*, uint32_t>, ValueSet>;

// Where values are checked: the types, the sink, and the inputs get_input may name.
struct ValueContext {
  const Types& types;
  base::Diagnostics& diags;
  Node inputs;                // topology_template.inputs of the template holding the value
  ValueSets* sets = nullptr;  // valid_values lists parsed so far; none: compared one by one
};

// Checks `value` against a property (or parameter) definition map: type, entry_schema,
// constraints. Function calls (get_input, ...) are checked for their arguments only.
void check_value(Node value, Node definition, std::string_view what, ValueContext& ctx);

// Checks a map of assigned properties against definitions: unknown names (T0040),
// missing required ones (T0041, when `check_required`), each value.
// `missing_code` / `missing_severity` say how a missing required property is reported.
void check_properties(Node assigned, const NamedNodes& defs, Node owner, std::string_view what,
                      bool check_required, ValueContext& ctx, const char* missing_code = "T0041",
                      base::Severity missing_severity = base::Severity::kError);

// True when `n` is a TOSCA function call ({get_input: x}, {concat: [...]}, ...).
bool is_function(Node n);

// Parses a scalar-unit or number into base units; false when it is neither.
bool numeric_value(Node n, double& out);

}  // namespace tosca::internal
