// workflows: the vnflow workflow language and its compiler.
//
// A VNFD implements a Vnflcm hook (instantiate_end, heal_start, ...) with an artifact of
// type vnflow.artifacts.Workflow: a YAML file of states (docs/workflow-language.md). For
// one LCM operation (instantiate, terminate, heal, scale, change_ext_conn, modify_info)
// the compiler joins `<op>_start`, the built-in steps shipped in workflows/builtin/ and
// `<op>_end` into ONE Machine, and checks it before anything runs:
//   - every action exists in the action catalog, every input is known, required inputs
//     are given, literal and expression types match the signatures;
//   - every expression parses and every reference resolves (request, instance, vnfd, op,
//     the outputs of states that always ran before, the fan-out item);
//   - every state is reachable and can reach a terminal; fan-out runs over a list; every
//     state with side effects has a timeout.
// Problems are located diagnostics with W-codes (docs/diagnostics.md).
//
// A Machine is plain data: it serializes to JSON (stored with each operation so that a
// new package never changes an operation in flight) and renders as text, Graphviz dot,
// Mermaid, a sequence diagram, or JSON.
//
// Not here: running anything (engine/), the actions themselves (actions/).
// Threading: a Machine is immutable once built and may be shared between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "base/base.h"
#include "tosca/tosca.h"

namespace workflows {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------
// Static types of values (action signatures, request bodies, expressions)

struct Type;
using TypeRef = std::shared_ptr<const Type>;

struct Field {
  Field() = default;
  Field(std::string n, TypeRef t, bool r, std::string d = {})
      : name(std::move(n)), type(std::move(t)), required(r), doc(std::move(d)) {}
  std::string name;
  TypeRef type;
  bool required = false;
  std::string doc;  // the catalog's comment on the field's line ("" none)
};

struct Type {
  enum class Kind : uint8_t { kAny, kNull, kBool, kInt, kNumber, kString, kList, kMap, kObject };
  Kind kind = Kind::kAny;
  TypeRef elem;               // kList, kMap: the element type
  std::vector<Field> fields;  // kObject: the known fields (closed)
  std::string name;           // named object types ("vnfc"), for messages

  const Field* field(std::string_view n) const;
};

TypeRef any_type();
// "string", "list(string)", "map(any)", "vnfc" ...
std::string to_string(const Type& t);
// True when a value of type `from` may be used where `to` is expected (any matches all,
// integer widens to number).
bool assignable(const Type& from, const Type& to);

// ---------------------------------------------------------------------------------------
// The action catalog: names and signatures the compiler checks against. Data
// (workflows/builtin/actions.yaml); the implementations live in actions/.

struct ActionSpec {
  std::string name;          // "local.exec"
  std::string description;   // one line
  std::string participant;   // who the action talks to: vnflow, Heat, VMs, VIM
  bool side_effects = true;  // needs a timeout; dispatch is checkpointed before it runs
  std::string redispatch;    // what a call dispatched again after a crash does
  std::vector<Field> inputs;
  std::vector<std::vector<std::string>> one_of;  // exactly one of each group is required
  // Inputs a shell runs as script text: a string, or an argv list whose shell script is
  // the item after "-c" when argv[0] is a shell. Request values there must be quoted
  // (W0043).
  std::vector<std::string> shell_text;
  std::vector<Field> outputs;
  TypeRef output_type;  // object of `outputs`
};

class ActionCatalog {
 public:
  // The catalog vnflow ships.
  static const ActionCatalog& builtin();
  const ActionSpec* find(std::string_view name) const;
  std::vector<std::string> names() const;
  // A named type of the catalog ("vnfc", "request.instantiate", ...); nullptr if none.
  TypeRef type(std::string_view name) const;

  struct Data;
  std::shared_ptr<const Data> data;
};

// ---------------------------------------------------------------------------------------
// Expressions and value templates

class Expr;  // a parsed `${...}` expression (workflows/internal/expr.h)

// Where expressions find their values at run time. Every member is a JSON object.
// A name bound by map() or filter() to the element at hand; bindings chain outwards.
struct Binding {
  std::string_view name;
  const json::value* value = nullptr;
  const Binding* outer = nullptr;
};

struct Scope {
  const json::value* request = nullptr;
  const json::value* instance = nullptr;
  const json::value* vnfd = nullptr;
  const json::value* op = nullptr;
  const json::object* outputs = nullptr;  // full state name -> outputs
  std::string_view segment;               // prefix of the current state ("instantiate_end")
  const json::value* item = nullptr;      // the fan-out item
  std::string_view item_name;             // its name in expressions ("item" or `as:`)
  int64_t item_index = 0;                 // its position in the list (`index`)
  const json::value* self = nullptr;      // in a compensation: the state's own outputs
  const json::value* inputs = nullptr;    // in a called workflow: the inputs of its call
  const Binding* bound = nullptr;         // map()/filter() element names, innermost first
};

// Evaluates a parsed expression (a choice's condition, a for_each list).
base::Result<json::value> evaluate(const Expr& e, const Scope& scope);

// A value that may hold `${...}` expressions anywhere in its strings. A string that is
// exactly one `${...}` keeps the expression's type; other strings interpolate.
class Template {
 public:
  Template() = default;
  // Parses every expression of `source`; problems are returned, not thrown.
  static base::Result<Template> parse(json::value source);
  const json::value& source() const { return source_; }
  bool empty() const { return source_.is_null(); }
  base::Result<json::value> evaluate(const Scope& scope) const;

  struct Part;

 private:
  json::value source_;
  std::shared_ptr<const Part> root_;
};

// ---------------------------------------------------------------------------------------
// Compiled machines

enum class StateKind : uint8_t { kAction, kChoice, kWait, kSucceed, kFail, kCall };
std::string_view to_string(StateKind k);

// Error classes an action failure carries; the retry policy says which ones it retries.
//   transient  the server or connection failed; trying again may work
//   timeout    the state's timeout elapsed
//   failed     the action ran and reported failure (non-zero exit, *_FAILED)
//   invalid    the inputs are wrong; trying again cannot work (never retried)
const std::vector<std::string>& error_classes();

struct RetryPolicy {
  int attempts = 1;  // total tries, >= 1
  double backoff_s = 1;
  double factor = 2;
  double max_delay_s = 300;
  std::vector<std::string> on = {"transient", "timeout"};
  // Delay before try number `attempt + 1` (attempt counts from 1).
  double delay_after(int attempt) const;
};

struct Compensation {
  std::string action;
  Template with;
  double timeout_s = 0;
};

struct Choice {
  std::string condition;  // expression source
  std::shared_ptr<const Expr> expr;
  int next = -1;
};

struct State {
  std::string name;     // "instantiate_end.install": segment + "." + state
  std::string segment;  // "instantiate_start", "instantiate" (built-in), "instantiate_end"
  StateKind kind = StateKind::kAction;
  std::string description;
  // kAction
  std::string action;
  Template with;
  std::string for_each;  // expression source; empty when not a fan-out
  std::shared_ptr<const Expr> for_each_expr;
  std::string as = "item";
  int parallelism = 0;  // 0: all items at once
  double timeout_s = 0;
  RetryPolicy retry;
  std::optional<Compensation> compensate;
  // kChoice
  std::vector<Choice> choices;
  // kWait
  Template wait_seconds;
  // kFail
  Template message;
  // kCall: runs another workflow file of the package, inlined after the caller's states
  // (once per item of `for_each`, one item after the other). `with` gives the callee's
  // inputs (defaults already merged in); `body` is the callee's start; `returns` are the
  // callee's declared outputs, evaluated in its scope at each of its succeed states. The
  // call's outputs: that object, or the list of them with for_each.
  std::string call;  // the callee's path in the package
  int body = -1;
  Template returns;
  // Every state inlined by a call: the index of that call state (-1: a hook's or a built-in
  // state). A called workflow's succeed state goes back to its call (`next` is the call).
  int owner = -1;
  // Transitions (indexes into Machine::states; -1 none). kSucceed with next >= 0 ends a
  // hook and continues with the next segment.
  int next = -1;
  int on_failure = -1;
  base::SourceLocation where;
};

struct Machine {
  std::string operation;  // instantiate, terminate, heal, scale, change_ext_conn, modify_info
  std::string flavour;
  std::string package_digest;
  std::string compiler_version;
  std::vector<State> states;
  int start = 0;
  json::value vnfd;    // the VNFD facts expressions read (pinned with the machine)
  std::string digest;  // SHA-256 of to_json(), for sharing machines between operations

  int find(std::string_view name) const;  // -1 when absent
  json::value to_json() const;
  static base::Result<std::shared_ptr<const Machine>> from_json(const json::value& v);
};

// The LCM operations vnflow compiles, with their Vnflcm hook prefix.
struct OperationInfo {
  std::string name;  // "change_ext_conn"
  std::string hook;  // "change_external_connectivity"
};
const std::vector<OperationInfo>& operations();
const OperationInfo* find_operation(std::string_view name);

// Reads a workflow file that a `call` names, by its path in the package
// ("Workflows/region.yaml", already resolved against the caller's folder and kept inside
// the package). compile() reads the package's files; compile_file()'s callers may give one.
using FileReader = std::function<base::Result<std::string>(const std::string& path)>;

struct CompileOptions {
  std::string operation;
  std::string flavour;  // empty: the only flavour of the package
};

// Compiles one LCM operation of one flavour. nullptr when there are errors (in `diags`).
std::shared_ptr<const Machine> compile(const tosca::Package& pkg, const CompileOptions& options,
                                       base::Diagnostics& diags);

// Compiles a single workflow file against an empty VNFD, for tests and `workflow check`.
// `segment` is the hook name the file stands for (e.g. "instantiate_end"). The files its
// calls name are read with `reader`, by paths relative to `display`'s folder; without a
// reader a call is an error (W0046).
std::shared_ptr<const Machine> compile_file(std::string display, std::string_view text,
                                            std::string_view operation, std::string_view segment,
                                            base::Diagnostics& diags,
                                            const FileReader& reader = nullptr);

// The built-in workflow of an operation (workflows/builtin/<op>.yaml), as shipped.
std::string_view builtin_source(std::string_view operation);

// The request body type of an operation (SOL003 InstantiateVnfRequest, ...), and a check of
// a request against it: every problem as "field: reason".
TypeRef request_type(std::string_view operation);
std::vector<std::string> check_request(std::string_view operation, const json::value& request);

// Checks a value against a type; problems as "path: reason".
void check_value(const json::value& v, const Type& t, const std::string& path,
                 std::vector<std::string>& problems);

// The action reference, from the catalog (vnflow action list|show, docs/actions.md): one
// line an action; one action in words or as JSON; the whole reference as Markdown.
std::string action_list_text(const ActionCatalog& c);
std::string action_text(const ActionSpec& a);
json::value action_json(const ActionSpec& a);
std::string action_reference_markdown(const ActionCatalog& c);

enum class Format { kText, kDot, kMermaid, kSeqdiag, kPlantuml, kJson };
std::optional<Format> parse_format(std::string_view s);
std::string render(const Machine& m, Format f);

}  // namespace workflows
