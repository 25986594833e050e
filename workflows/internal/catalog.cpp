#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/internal/yaml_json.h"
#include "workflows/workflows.h"

namespace workflows_embedded {
struct EmbeddedFile {
  std::string_view name, text;
};
extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kEmbeddedFileCount;
}  // namespace workflows_embedded

namespace workflows {

namespace internal {

std::string_view embedded_file(std::string_view name) {
  for (size_t i = 0; i < workflows_embedded::kEmbeddedFileCount; ++i) {
    if (workflows_embedded::kEmbeddedFiles[i].name == name)
      return workflows_embedded::kEmbeddedFiles[i].text;
  }
  return {};
}

json::value yaml_to_json(tosca::Node n) {
  switch (n.kind()) {
    case tosca::Node::Kind::kNone:
    case tosca::Node::Kind::kNull:
      return nullptr;
    case tosca::Node::Kind::kSequence: {
      json::array a;
      a.reserve(n.size());
      for (size_t i = 0; i < n.size(); ++i)
        a.push_back(yaml_to_json(n.item(i)));
      return a;
    }
    case tosca::Node::Kind::kMap: {
      json::object o;
      for (size_t i = 0; i < n.size(); ++i)
        o[n.key(i).scalar()] = yaml_to_json(n.value(i));
      return o;
    }
    case tosca::Node::Kind::kScalar:
      break;
  }
  std::string_view s = n.scalar();
  if (n.quoted())
    return json::string(s);
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL")
    return nullptr;
  if (s == "true" || s == "True" || s == "TRUE")
    return true;
  if (s == "false" || s == "False" || s == "FALSE")
    return false;
  std::string t(s);
  char* end = nullptr;
  bool digits = (std::isdigit(static_cast<unsigned char>(t[0])) ||
                 ((t[0] == '-' || t[0] == '+') && t.size() > 1));
  if (digits) {
    errno = 0;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (errno == 0 && end != nullptr && *end == '\0')
      return static_cast<int64_t>(v);
    errno = 0;
    double d = std::strtod(t.c_str(), &end);
    if (errno == 0 && end != nullptr && *end == '\0' && t.find_first_of("xX") == std::string::npos)
      return d;
  }
  return json::string(s);
}

}  // namespace internal

struct ActionCatalog::Data {
  std::map<std::string, ActionSpec, std::less<>> actions;
  std::map<std::string, TypeRef, std::less<>> types;
};

namespace {

// The comment ending line `line` (1-based) of `text`, trimmed ("" when none). The catalog is
// vnflow's own file: a '#' in a value would be a mistake of ours, caught by the tests.
std::string line_comment(std::string_view text, uint32_t line) {
  size_t at = 0;
  for (uint32_t l = 1; l < line && at != std::string_view::npos; ++l) {
    at = text.find('\n', at);
    if (at != std::string_view::npos)
      ++at;
  }
  if (at == std::string_view::npos || line == 0)
    return {};
  std::string_view row = text.substr(at, text.find('\n', at) - at);
  size_t hash = row.find(" #");
  if (hash == std::string_view::npos)
    return {};
  std::string_view c = row.substr(hash + 2);
  while (!c.empty() && c.front() == ' ')
    c.remove_prefix(1);
  while (!c.empty() && (c.back() == ' ' || c.back() == '\r'))
    c.remove_suffix(1);
  return std::string(c);
}

std::vector<Field> parse_fields(tosca::Node m,
                                const std::function<TypeRef(std::string_view)>& lookup,
                                std::string_view text) {
  std::vector<Field> out;
  for (size_t i = 0; i < m.size(); ++i) {
    std::string name(m.key(i).scalar());
    Field f;
    f.required = true;
    if (!name.empty() && name.back() == '?') {
      name.pop_back();
      f.required = false;
    }
    f.name = name;
    f.type = parse_type_name(m.value(i).scalar(), lookup);
    BASE_CHECK(f.type != nullptr);  // the shipped catalog is checked by the unit tests
    f.doc = line_comment(text, m.key(i).location().line);
    out.push_back(std::move(f));
  }
  return out;
}

std::shared_ptr<const ActionCatalog::Data> load_builtin() {
  auto data = std::make_shared<ActionCatalog::Data>();
  base::Diagnostics diags;
  std::string_view text = internal::embedded_file("actions.yaml");
  auto file =
      tosca::parse_yaml_file("workflows/builtin/actions.yaml", text, tosca::Limits{}, diags);
  BASE_CHECK(file != nullptr && !diags.has_errors());
  tosca::Node root = file->root();
  auto lookup = [&](std::string_view n) -> TypeRef {
    auto it = data->types.find(n);
    return it == data->types.end() ? nullptr : it->second;
  };
  tosca::Node types = root.get("types");
  for (size_t i = 0; i < types.size(); ++i) {
    auto t = std::make_shared<Type>();
    t->kind = Type::Kind::kObject;
    t->name = std::string(types.key(i).scalar());
    t->fields = parse_fields(types.value(i), lookup, text);
    data->types[t->name] = t;
  }
  tosca::Node actions = root.get("actions");
  for (size_t i = 0; i < actions.size(); ++i) {
    tosca::Node a = actions.value(i);
    ActionSpec spec;
    spec.name = std::string(actions.key(i).scalar());
    spec.description = std::string(a.get("description").scalar());
    spec.participant = std::string(a.get("participant").scalar());
    spec.side_effects = a.get("side_effects").scalar() == "true";
    spec.redispatch = std::string(a.get("redispatch").scalar());
    BASE_CHECK(spec.side_effects == !spec.redispatch.empty());  // each says what it does
    if (a.get("inputs"))
      spec.inputs = parse_fields(a.get("inputs"), lookup, text);
    if (a.get("outputs"))
      spec.outputs = parse_fields(a.get("outputs"), lookup, text);
    tosca::Node one_of = a.get("one_of");
    for (size_t g = 0; one_of && g < one_of.size(); ++g) {
      std::vector<std::string> group;
      for (size_t k = 0; k < one_of.item(g).size(); ++k)
        group.emplace_back(one_of.item(g).item(k).scalar());
      spec.one_of.push_back(std::move(group));
    }
    tosca::Node shell_text = a.get("shell_text");
    for (size_t k = 0; shell_text && k < shell_text.size(); ++k)
      spec.shell_text.emplace_back(shell_text.item(k).scalar());
    auto out = std::make_shared<Type>();
    out->kind = Type::Kind::kObject;
    out->name = spec.name + " outputs";
    out->fields = spec.outputs;
    spec.output_type = out;
    data->actions[spec.name] = std::move(spec);
  }
  return data;
}

}  // namespace

const ActionCatalog& ActionCatalog::builtin() {
  static const ActionCatalog* kCatalog = [] {
    auto* c = new ActionCatalog();
    c->data = load_builtin();
    return c;
  }();
  return *kCatalog;
}

const ActionSpec* ActionCatalog::find(std::string_view name) const {
  auto it = data->actions.find(name);
  return it == data->actions.end() ? nullptr : &it->second;
}

std::vector<std::string> ActionCatalog::names() const {
  std::vector<std::string> out;
  for (const auto& kv : data->actions)
    out.push_back(kv.first);
  return out;
}

TypeRef ActionCatalog::type(std::string_view name) const {
  auto it = data->types.find(name);
  return it == data->types.end() ? nullptr : it->second;
}

TypeRef request_type(std::string_view operation) {
  return ActionCatalog::builtin().type("request." + std::string(operation));
}

void check_value(const json::value& v, const Type& t, const std::string& path,
                 std::vector<std::string>& problems) {
  using K = Type::Kind;
  auto bad = [&](const char* want) {
    problems.push_back(path + ": expected " + want + ", found " +
                       (v.is_null() ? "null" : json::serialize(v).substr(0, 40)));
  };
  switch (t.kind) {
    case K::kAny:
      return;
    case K::kNull:
      if (!v.is_null())
        bad("null");
      return;
    case K::kBool:
      if (!v.is_bool())
        bad("a boolean");
      return;
    case K::kInt:
      // 2^63 and more parse as uint64: out of the range every integer here is used in.
      if (!v.is_int64())
        bad(v.is_uint64() ? "an integer below 2^63" : "an integer");
      return;
    case K::kNumber:
      if (!v.is_number())
        bad("a number");
      return;
    case K::kString:
      if (!v.is_string())
        bad("a string");
      return;
    case K::kList:
      if (!v.is_array()) {
        bad("a list");
        return;
      }
      for (size_t i = 0; i < v.get_array().size(); ++i)
        check_value(v.get_array()[i], *t.elem, path + "[" + std::to_string(i) + "]", problems);
      return;
    case K::kMap:
      if (!v.is_object()) {
        bad("a map");
        return;
      }
      for (const auto& kv : v.get_object())
        check_value(kv.value(), *t.elem, path + "." + std::string(kv.key()), problems);
      return;
    case K::kObject: {
      if (!v.is_object()) {
        bad("an object");
        return;
      }
      const auto& o = v.get_object();
      for (const auto& f : t.fields) {
        const json::value* fv = o.if_contains(f.name);
        if (fv == nullptr) {
          if (f.required)
            problems.push_back(path + (path.empty() ? "" : ".") + f.name + ": required");
          continue;
        }
        check_value(*fv, *f.type, path + (path.empty() ? "" : ".") + f.name, problems);
      }
      for (const auto& kv : o) {
        if (t.field(kv.key()) == nullptr) {
          std::vector<std::string> names;
          for (const auto& f : t.fields)
            names.push_back(f.name);
          std::string msg =
              path + (path.empty() ? "" : ".") + std::string(kv.key()) + ": unknown field";
          std::string hint = base::closest_match(kv.key(), names);
          if (!hint.empty())
            msg += "; did you mean \"" + hint + "\"?";
          problems.push_back(msg);
        }
      }
      return;
    }
  }
}

namespace {

constexpr std::string_view kSealedPrefix = "vnflow-sealed:";

// Sealed values (the store's "vnflow-sealed:..." strings) are opened when read: one coming
// in a request would be opened with the database key, as if vnflow had sealed it.
void find_sealed(const json::value& v, const std::string& path,
                 std::vector<std::string>& problems) {
  auto sealed = [](std::string_view s) {
    return s.substr(0, kSealedPrefix.size()) == kSealedPrefix;
  };
  if (v.is_string()) {
    if (sealed(v.get_string()))
      problems.push_back((path.empty() ? "request" : path) +
                         ": sealed values are not accepted in requests");
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.get_array().size(); ++i)
      find_sealed(v.get_array()[i], path + "[" + std::to_string(i) + "]", problems);
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      std::string sub = path + (path.empty() ? "" : ".") + std::string(kv.key());
      if (sealed(kv.key()))
        problems.push_back(sub + ": sealed values are not accepted in requests");
      find_sealed(kv.value(), sub, problems);
    }
  }
}

// Integer fields of the request bodies and their ranges.
struct IntBound {
  std::string_view operation, field;
  int64_t min, max;
  std::string_view unit;
};
constexpr IntBound kIntBounds[] = {
    {"terminate", "gracefulTerminationTimeout", 0, 86400, " seconds"},
    {"scale", "numberOfSteps", 1, 1000, ""},
};

// Fields that only take SOL003's values.
struct EnumField {
  std::string_view operation, field;
  std::vector<std::string_view> values;
};
const std::vector<EnumField>& enum_fields() {
  static const std::vector<EnumField> kEnums = {
      {"terminate", "terminationType", {"FORCEFUL", "GRACEFUL"}},
      {"scale", "type", {"SCALE_OUT", "SCALE_IN"}},
  };
  return kEnums;
}

// Free-text fields; every other string field of a request body is an id or a name.
constexpr size_t kMaxIdBytes = 255;
constexpr size_t kMaxTextBytes = 4096;
bool is_text_field(std::string_view f) {
  return f == "vnfInstanceDescription" || f == "cause" || f == "healScript";
}

void check_string(const json::value& v, const std::string& path, bool text,
                  std::vector<std::string>& problems) {
  if (!v.is_string())
    return;  // check_value said so
  std::string_view s = v.get_string();
  size_t max = text ? kMaxTextBytes : kMaxIdBytes;
  if (s.size() > max) {
    problems.push_back(path + ": longer than " + std::to_string(max) + " bytes (" +
                       std::to_string(s.size()) + ")");
    return;
  }
  bool control = std::any_of(s.begin(), s.end(), [&](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && !(text && (c == '\n' || c == '\t' || c == '\r'))) || u == 0x7f;
  });
  if (control)
    problems.push_back(path + ": contains control characters");
}

}  // namespace

std::vector<std::string> check_request(std::string_view operation, const json::value& request) {
  std::vector<std::string> problems;
  TypeRef t = request_type(operation);
  if (t == nullptr) {
    problems.push_back("unknown operation \"" + std::string(operation) + "\"");
    return problems;
  }
  if (!request.is_object()) {
    problems.push_back("the request body must be a JSON object");
    return problems;
  }
  check_value(request, *t, "", problems);
  const json::object& o = request.get_object();
  // Strings the request body declares (ids, names, SOL003 enums, a description): bounded.
  // Inside additionalParams, extensions and the like only the whole request is bounded
  // (by the engine).
  for (const auto& f : t->fields) {
    const json::value* v = o.if_contains(f.name);
    if (v == nullptr)
      continue;
    if (f.type->kind == Type::Kind::kString) {
      check_string(*v, f.name, is_text_field(f.name), problems);
    } else if (f.type->kind == Type::Kind::kList && f.type->elem->kind == Type::Kind::kString &&
               v->is_array()) {
      if (v->get_array().size() > 1000)
        problems.push_back(f.name + ": more than 1000 items");
      for (size_t i = 0; i < v->get_array().size() && i < 1000; ++i)
        check_string(v->get_array()[i], f.name + "[" + std::to_string(i) + "]", false, problems);
    }
  }
  for (const auto& b : kIntBounds) {
    if (b.operation != operation)
      continue;
    const json::value* v = o.if_contains(b.field);
    if (v == nullptr || !v->is_int64())
      continue;  // absent, or check_value said what is wrong
    int64_t n = v->get_int64();
    if (n < b.min || n > b.max)
      problems.push_back(std::string(b.field) + ": must be an integer from " +
                         std::to_string(b.min) + " to " + std::to_string(b.max) +
                         std::string(b.unit) + ", not " + std::to_string(n));
  }
  for (const auto& e : enum_fields()) {
    if (e.operation != operation)
      continue;
    const json::value* v = o.if_contains(e.field);
    if (v == nullptr || !v->is_string())
      continue;
    if (std::find(e.values.begin(), e.values.end(), std::string_view(v->get_string())) ==
        e.values.end()) {
      std::string list;
      for (auto x : e.values)
        list += (list.empty() ? "" : " or ") + std::string(x);
      problems.push_back(std::string(e.field) + ": must be " + list + ", not " +
                         json::serialize(*v).substr(0, 40));
    }
  }
  // Tacker's user-data classes (Python run by the VNFM) compute a Heat stack's parameters;
  // vnflow computes them itself (heat.parameters). Refused rather than ignored.
  if (const json::value* ap = o.if_contains("additionalParams"); ap != nullptr && ap->is_object()) {
    for (std::string_view k : {"lcm-operation-user-data", "lcm-operation-user-data-class"}) {
      if (!ap->get_object().contains(k))
        continue;
      problems.push_back("additionalParams." + std::string(k) +
                         ": vnflow does not run Tacker's Python user-data classes; it derives "
                         "the Heat stack's parameters from the VNFD itself (heat.parameters, "
                         "overridable by additionalParams.nfv): remove lcm-operation-user-data "
                         "and lcm-operation-user-data-class");
      break;
    }
  }
  find_sealed(request, "", problems);
  return problems;
}

const std::vector<OperationInfo>& operations() {
  static const std::vector<OperationInfo> kOps = {
      {"instantiate", "instantiate"},
      {"terminate", "terminate"},
      {"heal", "heal"},
      {"scale", "scale"},
      {"change_ext_conn", "change_external_connectivity"},
      {"modify_info", "modify_information"},
  };
  return kOps;
}

const OperationInfo* find_operation(std::string_view name) {
  for (const auto& o : operations()) {
    if (o.name == name)
      return &o;
  }
  return nullptr;
}

std::string_view builtin_source(std::string_view operation) {
  return internal::embedded_file(std::string(operation) + ".yaml");
}

const std::vector<std::string>& error_classes() {
  static const std::vector<std::string> kClasses = [] {
    std::vector<std::string> out;
    for (base::ErrorClass c : base::kErrorClasses)
      out.emplace_back(base::to_string(c));
    return out;
  }();
  return kClasses;
}

double RetryPolicy::delay_after(int attempt) const {
  double d = backoff_s;
  for (int i = 1; i < attempt && d < max_delay_s; ++i)
    d *= factor;
  return d < max_delay_s ? d : max_delay_s;
}

std::string_view to_string(StateKind k) {
  switch (k) {
    case StateKind::kAction:
      return "action";
    case StateKind::kChoice:
      return "choice";
    case StateKind::kWait:
      return "wait";
    case StateKind::kSucceed:
      return "succeed";
    case StateKind::kFail:
      return "fail";
    case StateKind::kCall:
      return "call";
  }
  return "?";
}

}  // namespace workflows
