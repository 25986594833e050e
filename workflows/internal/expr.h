// workflows::Expr: the `${...}` expression language (docs/workflow-language.md,
// "Expressions"): literals, paths into the scope, [] indexing, ! - * / + (numbers, and
// + for strings), comparisons, && || and a few functions. Parsed once; type-checked at
// compile time against a TypeScope; evaluated at run time against a Scope.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "workflows/workflows.h"

namespace workflows {

class Expr {
 public:
  enum class Op : uint8_t {
    kLiteral,  // value
    kRoot,     // name
    kField,    // kids[0].name
    kIndex,    // kids[0][kids[1]]
    kCall,     // name(kids...)
    kNot,
    kNeg,
    kBinary,  // kids[0] name kids[1]; name is the operator
    kList,    // [kids...]
    kMap,     // {k: v, ...}: kids are key (a string literal), value, key, value ...
  };
  Op op = Op::kLiteral;
  std::string name;
  json::value value;
  std::vector<std::shared_ptr<const Expr>> kids;
  uint32_t offset = 0;  // in the source text, for located diagnostics
  uint32_t depth = 1;   // levels of the tree from this node down (a leaf is 1)

  // The deepest expression parse() accepts. Each bracket, call, unary operator, binary
  // operator of a chain (`a + b + c` is two) and postfix (`.f`, `[i]`) is one level. Every
  // walk over an expression (type check, evaluation, the destructor) recurses once per
  // level, so this bounds their stack; real expressions stay under ten.
  static constexpr uint32_t kMaxDepth = 100;
  // The codes of parse() failures (docs/diagnostics.md).
  static constexpr const char* kSyntaxErrorCode = "W0020";
  static constexpr const char* kTooDeepCode = "W0023";

  // Parses `text` (without ${ }); on failure returns the message and sets *error_offset,
  // and *code (when given) to kSyntaxErrorCode or kTooDeepCode.
  static std::shared_ptr<const Expr> parse(std::string_view text, std::string* error,
                                           uint32_t* error_offset, std::string* code = nullptr);

  base::Result<json::value> evaluate(const Scope& scope) const;
};

// What one evaluation may build: the strings and lists made by functions and operators
// (join, +, string, json, range, concat, a template's interpolation, ...) add up to at
// most kMaxEvalBytes, so neither a package's expressions (join(range(10000), ...) nested)
// nor a request's values can make the engine allocate without bound: past it the
// evaluation fails (the state with class invalid). A scope opened by Template::evaluate
// and Expr::evaluate; nested scopes share the outermost one's budget. Per thread.
class EvalBudget {
 public:
  static constexpr size_t kMaxEvalBytes = 16u << 20;
  EvalBudget();
  ~EvalBudget();
  EvalBudget(const EvalBudget&) = delete;
  EvalBudget& operator=(const EvalBudget&) = delete;
  // Counts `bytes` more; false once the evaluation is over its budget.
  static bool charge(size_t bytes);
  // `v`'s size, roughly (string bytes plus 16 per value), counted up to `cap`.
  static size_t size_of(const json::value& v, size_t cap = kMaxEvalBytes + 1);
};

// What the type checker knows about names.
struct TypeScope {
  TypeRef request, instance, vnfd, op;
  // The action states of the current state's file, by short name: their index and output
  // type. Shared by the scopes of every state of the file (building a map per state made
  // the check quadratic in the number of states).
  struct StateOutput {
    int index;
    TypeRef type;
  };
  const std::map<std::string, StateOutput>* states = nullptr;
  // Whether state `index` always ran (and succeeded) before the current one: its outputs
  // can be read. Other states of the file "may not have run"; the current one is unknown.
  std::function<bool(int index)> ran_before;
  int self_index = -1;
  std::string item_name;  // fan-out variable, "" outside a fan-out
  TypeRef item;
  TypeRef self;    // in a compensation
  TypeRef inputs;  // in a called workflow: its declared inputs (an object)
  // Set where `states` may not be read, with the reason (a compensation in a called file).
  std::string states_note;
  // The fan-out list is read from the request, so each item is a request value.
  bool item_from_request = false;
  // Names map() and filter() bind to the element at hand, innermost last, with their types
  // and whether the list they range over carries request text.
  struct Bound {
    std::string name;
    TypeRef type;
    bool from_request = false;
  };
  std::vector<Bound> bound;
  const Bound* find_bound(std::string_view n) const {
    for (auto it = bound.rbegin(); it != bound.rend(); ++it)
      if (it->name == n)
        return &*it;
    return nullptr;
  }
};

struct TypeError {
  std::string message;
  uint32_t offset = 0;
  std::string code;  // W0021 undefined reference, W0013 type mismatch
};

// Whether `n` is a name the scope itself gives (request, instance, vnfd, op, states, self,
// index): a fan-out's `as:` and a map()/filter() element may not take it, so that a path
// means the same everywhere.
bool is_scope_name(std::string_view n);

// Type-checks `e`; returns its type, appends problems to `errors`.
TypeRef check_expr(const Expr& e, const TypeScope& scope, std::vector<TypeError>& errors);

// True when `e`'s value may carry text of the request (a string read from `request`
// directly, or through the fan-out item of a list read from it) not made safe by
// shellquote(), pathsafe() or a conversion to a number or a boolean. For W0043.
bool carries_request_text(const Expr& e, const TypeScope& scope);

// Splits a string into literal text and `${...}` parts. Returns false (with *error and
// *error_offset) for an unterminated `${`.
struct StringPart {
  bool is_expr = false;
  std::string text;     // literal text, or expression source
  uint32_t offset = 0;  // of the text / expression inside the string
};
bool split_template_string(std::string_view s, std::vector<StringPart>& parts, std::string* error,
                           uint32_t* error_offset);

// shellquote() is base::shell_quote.
// pathsafe(): one file name a path cannot escape from: 1 to 255 bytes of [A-Za-z0-9._-],
// not "." or "..", not starting with "-" (an option to the command that gets it).
bool is_safe_path_component(std::string_view s);

// Renders a JSON value for string interpolation (strings as they are, others as JSON).
std::string interpolate(const json::value& v);

TypeRef make_type(Type::Kind k, TypeRef elem = nullptr);
// Parses "list(string)", "map(any)", "integer" ...; named types through `lookup`.
TypeRef parse_type_name(std::string_view s, const std::function<TypeRef(std::string_view)>& lookup);
// The static type of a literal JSON value.
TypeRef type_of_literal(const json::value& v);

}  // namespace workflows
