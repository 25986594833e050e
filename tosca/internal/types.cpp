// TOSCA-Simple-Profile-YAML-v1.2 §3.6 (type definitions), §3.5.8 (property definition),
// §3.5.2 (constraint clause), §3.3 (primitive and scalar-unit types), §4 (functions).
#include "tosca/internal/types.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <unordered_set>

namespace tosca::internal {

std::string_view to_string(TypeKind k) {
  switch (k) {
    case TypeKind::kData:
      return "data type";
    case TypeKind::kArtifact:
      return "artifact type";
    case TypeKind::kCapability:
      return "capability type";
    case TypeKind::kInterface:
      return "interface type";
    case TypeKind::kRelationship:
      return "relationship type";
    case TypeKind::kNode:
      return "node type";
    case TypeKind::kGroup:
      return "group type";
    case TypeKind::kPolicy:
      return "policy type";
  }
  return "type";
}

std::string_view section_name(TypeKind k) {
  switch (k) {
    case TypeKind::kData:
      return "data_types";
    case TypeKind::kArtifact:
      return "artifact_types";
    case TypeKind::kCapability:
      return "capability_types";
    case TypeKind::kInterface:
      return "interface_types";
    case TypeKind::kRelationship:
      return "relationship_types";
    case TypeKind::kNode:
      return "node_types";
    case TypeKind::kGroup:
      return "group_types";
    case TypeKind::kPolicy:
      return "policy_types";
  }
  return "";
}

namespace {

const std::unordered_set<std::string_view>& primitives() {
  static const std::unordered_set<std::string_view> kPrimitives = {"string",
                                                                   "integer",
                                                                   "float",
                                                                   "boolean",
                                                                   "timestamp",
                                                                   "null",
                                                                   "version",
                                                                   "range",
                                                                   "list",
                                                                   "map",
                                                                   "scalar-unit.size",
                                                                   "scalar-unit.time",
                                                                   "scalar-unit.frequency",
                                                                   "scalar-unit.bitrate",
                                                                   "any"};
  return kPrimitives;
}

// Prefix of normative type names per kind, for the spec's short names ("Compute",
// "tosca:Compute" for tosca.nodes.Compute).
std::string_view kind_prefix(TypeKind k) {
  switch (k) {
    case TypeKind::kData:
      return "tosca.datatypes.";
    case TypeKind::kArtifact:
      return "tosca.artifacts.";
    case TypeKind::kCapability:
      return "tosca.capabilities.";
    case TypeKind::kInterface:
      return "tosca.interfaces.";
    case TypeKind::kRelationship:
      return "tosca.relationships.";
    case TypeKind::kNode:
      return "tosca.nodes.";
    case TypeKind::kGroup:
      return "tosca.groups.";
    case TypeKind::kPolicy:
      return "tosca.policies.";
  }
  return "";
}

}  // namespace

bool is_primitive_type(std::string_view name) {
  return primitives().count(name) > 0;
}

void Types::add_section(TypeKind kind, Node section, const Document* doc, bool normative,
                        base::Diagnostics& diags) {
  if (!section.valid() || section.is_null()) {
    return;
  }
  if (!section.is_map()) {
    diags.error("T0021", section.location(),
                std::string(section_name(kind)) + " must be a map of type definitions");
    return;
  }
  auto& map = maps_[static_cast<size_t>(kind)];
  for (size_t i = 0; i < section.size(); ++i) {
    Node k = section.key(i);
    Node def = section.value(i);
    std::string name(k.scalar());
    if (!k.is_scalar() || name.empty()) {
      diags.error("T0021", k.location(), "type name must be a string");
      continue;
    }
    if (!def.is_map() && !def.is_null()) {
      diags.error("T0021", def.location(),
                  std::string(to_string(kind)) + " \"" + name + "\" must be a map");
      continue;
    }
    auto it = map.find(name);
    if (it != map.end()) {
      const TypeDef& first = *it->second;
      if (first.doc == doc || to_yaml_flow(first.def) == to_yaml_flow(def)) {
        continue;  // the same definition seen again (same file, or an identical copy)
      }
      base::Diagnostic d{base::Severity::kError,
                         "T0032",
                         k.location(),
                         std::string(to_string(kind)) + " \"" + name + "\" is defined twice",
                         {}};
      auto loc =
          first.def.valid() ? first.def.location() : base::SourceLocation{first.doc->display, 0, 0};
      d.notes.push_back("first defined at " + loc.file + ":" + std::to_string(loc.line));
      diags.add(std::move(d));
      continue;
    }
    auto t = std::make_unique<TypeDef>();
    t->kind = kind;
    t->name = name;
    t->def = def;
    t->doc = doc;
    map.emplace(name, std::move(t));
    std::string_view prefix = kind_prefix(kind);
    if (normative && name.rfind(prefix, 0) == 0) {
      std::string short_name = name.substr(prefix.size());
      aliases_[static_cast<size_t>(kind)].emplace(short_name, name);
      aliases_[static_cast<size_t>(kind)].emplace("tosca:" + short_name, name);
    }
  }
}

const TypeDef* Types::find(TypeKind kind, std::string_view name) const {
  const auto& map = maps_[static_cast<size_t>(kind)];
  auto it = map.find(std::string(name));
  if (it != map.end()) {
    return it->second.get();
  }
  const auto& al = aliases_[static_cast<size_t>(kind)];
  auto a = al.find(std::string(name));
  if (a != al.end()) {
    return map.at(a->second).get();
  }
  return nullptr;
}

std::vector<std::string> Types::names(TypeKind kind) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : maps_[static_cast<size_t>(kind)]) {
    out.push_back(k);
  }
  return out;
}

void Types::relocate_misplaced(base::Diagnostics& diags) {
  struct Move {
    TypeKind from, to;
    std::string name;
  };
  std::vector<Move> moves;
  for (size_t k = 0; k < kTypeKindCount; ++k) {
    auto kind = static_cast<TypeKind>(k);
    for (const auto& [name, t] : maps_[k]) {
      if (t->doc == nullptr || t->doc->from_catalog)
        continue;
      // Up the chain inside this section; where it leaves the section, the kind that
      // knows the parent is where the type belongs.
      const TypeDef* cur = t.get();
      for (int guard = 0; guard < 64; ++guard) {
        Node df = cur->def.get("derived_from");
        if (!df.is_scalar())
          break;
        const TypeDef* up = find(kind, df.scalar());
        if (up != nullptr) {
          if (up->doc == nullptr || up->doc->from_catalog)
            break;  // reaches a shipped type of this kind: in its place
          cur = up;
          continue;
        }
        for (size_t o = 0; o < kTypeKindCount; ++o) {
          if (o != k && find(static_cast<TypeKind>(o), df.scalar()) != nullptr) {
            moves.push_back({kind, static_cast<TypeKind>(o), name});
            break;
          }
        }
        break;
      }
    }
  }
  // One finding per document and section, the types sorted by name.
  std::map<std::pair<const Document*, TypeKind>, std::vector<const Move*>> by_section;
  std::sort(moves.begin(), moves.end(),
            [](const Move& a, const Move& b) { return a.name < b.name; });
  for (const Move& m : moves) {
    const TypeDef* t = maps_[static_cast<size_t>(m.from)].at(m.name).get();
    by_section[{t->doc, m.from}].push_back(&m);
  }
  for (const auto& [where, list] : by_section) {
    auto [doc, from] = where;
    Node section = doc->root().get(section_name(from));
    std::string names;
    std::set<std::string> targets;
    for (size_t i = 0; i < list.size(); ++i) {
      if (i < 5)
        names += std::string(i ? ", " : "") + "\"" + list[i]->name + "\" (a " +
                 std::string(to_string(list[i]->to)) + ")";
      targets.insert(std::string(section_name(list[i]->to)) + ":");
    }
    if (list.size() > 5)
      names += " and " + std::to_string(list.size() - 5) + " more";
    std::string under;
    for (const auto& t : targets)
      under += (under.empty() ? "" : " and ") + t;
    base::Diagnostic d;
    d.code = "T0033";
    d.where = section.valid() ? section.location() : doc->start();
    d.message = std::string(section_name(from)) + " holds " + std::to_string(list.size()) +
                (list.size() == 1 ? " type that is not a " : " types that are not a ") +
                std::string(to_string(from)) + ": " + names;
    d.notes.push_back("each derives from a type of another kind; move " +
                      std::string(list.size() == 1 ? "it" : "them") + " under " + under);
    diags.add(std::move(d));
  }
  for (const Move& m : moves) {
    auto& from = maps_[static_cast<size_t>(m.from)];
    auto node = from.extract(m.name);
    auto& to = maps_[static_cast<size_t>(m.to)];
    if (to.count(m.name))
      continue;  // also defined where it belongs; the copy here is dropped
    node.mapped()->kind = m.to;
    to.insert(std::move(node));
  }
}

void Types::resolve(base::Diagnostics& diags) {
  for (size_t k = 0; k < kTypeKindCount; ++k) {
    for (auto& [name, t] : maps_[k]) {
      // Walk up iteratively; mark the path as resolving to detect cycles.
      std::vector<TypeDef*> path;
      TypeDef* cur = t.get();
      while (cur != nullptr && cur->state == 0) {
        cur->state = 1;
        path.push_back(cur);
        Node df = cur->def.get("derived_from");
        if (!df.valid() || df.is_null()) {
          break;
        }
        std::string parent(df.scalar());
        if (!df.is_scalar()) {
          diags.error("T0021", df.location(), "derived_from must name a type");
          break;
        }
        if (cur->kind == TypeKind::kData && is_primitive_type(parent)) {
          break;  // a data type refining a primitive (tosca.datatypes.network.PortDef)
        }
        const TypeDef* p = find(cur->kind, parent);
        if (p == nullptr) {
          std::string msg = std::string(to_string(cur->kind)) + " \"" + cur->name +
                            "\" derives from unknown " + std::string(to_string(cur->kind)) + " \"" +
                            parent + "\"";
          std::string hint = base::closest_match(parent, names(cur->kind));
          if (!hint.empty())
            msg += "; did you mean \"" + hint + "\"?";
          diags.error("T0030", df.location(), msg);
          break;
        }
        if (p->state == 1) {
          diags.error("T0031", df.location(),
                      std::string(to_string(cur->kind)) + " \"" + cur->name +
                          "\" is part of a derived_from cycle through \"" + parent + "\"");
          break;
        }
        cur->parent = p;
        cur = const_cast<TypeDef*>(p);
      }
      for (TypeDef* p : path) {
        p->state = 2;
      }
    }
  }
}

bool Types::derives(const TypeDef* t, std::string_view ancestor) {
  for (int guard = 0; t != nullptr && guard < 256; t = t->parent, ++guard) {
    if (t->name == ancestor) {
      return true;
    }
  }
  return false;
}

NamedNodes Types::merged(const TypeDef* t, std::string_view section) const {
  NamedNodes out;
  std::unordered_set<std::string> seen;
  for (int guard = 0; t != nullptr && guard < 256; t = t->parent, ++guard) {
    Node s = t->def.get(section);
    if (!s.is_map()) {
      continue;
    }
    for (size_t i = 0; i < s.size(); ++i) {
      std::string name(s.key(i).scalar());
      if (seen.insert(name).second) {
        out.emplace_back(name, s.value(i));
      }
    }
  }
  return out;
}

NamedNodes Types::requirements(const TypeDef* t) const {
  NamedNodes out;
  std::unordered_set<std::string> seen;
  for (int guard = 0; t != nullptr && guard < 256; t = t->parent, ++guard) {
    Node s = t->def.get("requirements");
    if (!s.is_seq()) {
      continue;
    }
    for (size_t i = 0; i < s.size(); ++i) {
      Node item = s.item(i);
      if (!item.is_map() || item.size() != 1) {
        continue;
      }
      std::string name(item.key(0).scalar());
      if (seen.insert(name).second) {
        out.emplace_back(name, item.value(0));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Values

namespace {

const std::unordered_set<std::string_view>& function_names() {
  static const std::unordered_set<std::string_view> kFunctions = {"get_input",
                                                                  "get_property",
                                                                  "get_attribute",
                                                                  "get_operation_output",
                                                                  "get_nodes_of_type",
                                                                  "get_artifact",
                                                                  "concat",
                                                                  "join",
                                                                  "token"};
  return kFunctions;
}

bool is_int_text(std::string_view s) {
  if (s.empty())
    return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (s.size() > i + 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'o')) {
    bool hex = s[i + 1] == 'x';
    for (size_t k = i + 2; k < s.size(); ++k) {
      char c = s[k];
      if (hex ? !std::isxdigit(static_cast<unsigned char>(c)) : (c < '0' || c > '7')) {
        return false;
      }
    }
    return true;
  }
  if (i == s.size())
    return false;
  for (size_t k = i; k < s.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(s[k])))
      return false;
  }
  return true;
}

bool parse_number(std::string_view s, double& out) {
  if (s.empty())
    return false;
  if (is_int_text(s)) {
    size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (s.size() > i + 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'o')) {
      std::string digits(s.substr(i + 2));
      double v =
          static_cast<double>(std::strtoull(digits.c_str(), nullptr, s[i + 1] == 'x' ? 16 : 8));
      out = s[0] == '-' ? -v : v;
      return true;
    }
  }
  std::string t(s);
  if (t == ".inf" || t == "+.inf" || t == ".Inf") {
    out = HUGE_VAL;
    return true;
  }
  if (t == "-.inf" || t == "-.Inf") {
    out = -HUGE_VAL;
    return true;
  }
  // [-+]? digits [. digits] [e [-+] digits] or [-+]? . digits
  size_t i = 0;
  if (i < t.size() && (t[i] == '-' || t[i] == '+'))
    ++i;
  size_t digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])))
    ++i, ++digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])))
      ++i, ++digits;
  }
  if (digits == 0)
    return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '-' || t[i] == '+'))
      ++i;
    size_t ed = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])))
      ++i, ++ed;
    if (ed == 0)
      return false;
  }
  if (i != t.size())
    return false;
  out = std::strtod(t.c_str(), nullptr);
  return true;
}

bool is_bool_text(std::string_view s) {
  return s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE";
}

struct Unit {
  std::string_view name;
  double factor;
};

// TOSCA-Simple-Profile-YAML-v1.2 §3.3.6: units are case-insensitive.
const std::vector<Unit>* units_for(std::string_view type) {
  static const std::vector<Unit> kSize = {{"b", 1},
                                          {"kb", 1e3},
                                          {"kib", 1024.0},
                                          {"mb", 1e6},
                                          {"mib", 1048576.0},
                                          {"gb", 1e9},
                                          {"gib", 1073741824.0},
                                          {"tb", 1e12},
                                          {"tib", 1099511627776.0}};
  static const std::vector<Unit> kTime = {{"d", 86400}, {"h", 3600},  {"m", 60},   {"s", 1},
                                          {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  static const std::vector<Unit> kFreq = {{"hz", 1}, {"khz", 1e3}, {"mhz", 1e6}, {"ghz", 1e9}};
  static const std::vector<Unit> kBitrate = {{"bps", 1},
                                             {"kbps", 1e3},
                                             {"kibps", 1024.0},
                                             {"mbps", 1e6},
                                             {"mibps", 1048576.0},
                                             {"gbps", 1e9},
                                             {"gibps", 1073741824.0},
                                             {"tbps", 1e12},
                                             {"tibps", 1099511627776.0},
                                             {"bps", 1}};
  if (type == "scalar-unit.size")
    return &kSize;
  if (type == "scalar-unit.time")
    return &kTime;
  if (type == "scalar-unit.frequency")
    return &kFreq;
  if (type == "scalar-unit.bitrate")
    return &kBitrate;
  return nullptr;
}

bool parse_scalar_unit(std::string_view s, const std::vector<Unit>& units, double& out) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                          s[i] == '-' || s[i] == '+' || s[i] == 'e' || s[i] == 'E')) {
    ++i;
  }
  // "e" may be the start of a unit only in no unit list here, so this split is safe.
  std::string_view num = s.substr(0, i);
  std::string_view rest = s.substr(i);
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  double v;
  if (!parse_number(num, v) || rest.empty())
    return false;
  std::string unit;
  for (char c : rest)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Unit& u : units) {
    if (u.name == unit) {
      out = v * u.factor;
      return true;
    }
  }
  return false;
}

bool any_scalar_unit(std::string_view s, double& out) {
  for (const char* t :
       {"scalar-unit.size", "scalar-unit.time", "scalar-unit.frequency", "scalar-unit.bitrate"}) {
    if (parse_scalar_unit(s, *units_for(t), out))
      return true;
  }
  return false;
}

bool is_version_text(std::string_view s) {
  // <major>[.<minor>[.<fix>[.<qualifier>[-<build>]]]] (§3.3.2), and the plain integers
  // and floats YAML produces for "1" and "1.0".
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

std::string describe(Node v) {
  switch (v.kind()) {
    case Node::Kind::kNone:
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kSequence:
      return "a list";
    case Node::Kind::kMap:
      return "a map";
    case Node::Kind::kScalar: {
      std::string s(v.scalar());
      if (s.size() > 40)
        s = s.substr(0, 37) + "...";
      return "\"" + s + "\"";
    }
  }
  return "a value";
}

void mismatch(Node v, std::string_view expected, std::string_view what, ValueContext& ctx) {
  ctx.diags.error(
      "T0042", v.location(),
      std::string(what) + ": expected " + std::string(expected) + ", found " + describe(v));
}

bool values_equal(Node a, Node b) {
  if (a.is_scalar() && b.is_scalar()) {
    double x, y;
    if (!a.quoted() && !b.quoted() && parse_number(a.scalar(), x) && parse_number(b.scalar(), y)) {
      return x == y;
    }
    if (a.scalar() == b.scalar())
      return true;
    if (any_scalar_unit(a.scalar(), x) && any_scalar_unit(b.scalar(), y))
      return x == y;
    return false;
  }
  return to_yaml_flow(a) == to_yaml_flow(b);
}

// The ValueSet of a valid_values list, built on first use. Holds what values_equal()
// compares: a scalar equals an entry when both are unquoted numbers of the same value, or
// have the same text, or are scalar-units of the same value; anything else by flow YAML.
const ValueSet& value_set(Node list, ValueSets& sets) {
  auto [it, added] = sets.try_emplace({list.document(), list.index()});
  ValueSet& s = it->second;
  if (!added)
    return s;
  for (size_t k = 0; k < list.size(); ++k) {
    Node e = list.item(k);
    if (!e.is_scalar()) {
      s.flows.insert(to_yaml_flow(e));
      continue;
    }
    double x;
    if (!e.quoted() && parse_number(e.scalar(), x))
      s.numbers.insert(x);
    s.texts.insert(e.scalar());
    if (any_scalar_unit(e.scalar(), x))
      s.units.insert(x);
  }
  return s;
}

bool in_value_set(Node v, const ValueSet& s) {
  if (!v.is_scalar())
    return s.flows.count(to_yaml_flow(v)) > 0;
  double x;
  if (!v.quoted() && parse_number(v.scalar(), x) && s.numbers.count(x))
    return true;
  if (s.texts.count(v.scalar()))
    return true;
  return any_scalar_unit(v.scalar(), x) && s.units.count(x);
}

// A value for a message: flow YAML cut after about 80 characters, so that a list of
// thousands of entries neither floods the screen nor is copied whole into every message.
std::string brief_flow(Node n) {
  auto cut = [](std::string s) { return s.size() > 80 ? s.substr(0, 77) + "..." : s; };
  if (!n.is_seq())
    return cut(to_yaml_flow(n));
  std::string out = "[";
  for (size_t k = 0; k < n.size(); ++k) {
    if (out.size() > 60) {
      out += "... (" + std::to_string(n.size()) + " entries)";
      break;
    }
    if (k > 0)
      out += ", ";
    out += cut(to_yaml_flow(n.item(k)));
  }
  out += "]";
  return out;
}

void check_function(Node v, std::string_view what, ValueContext& ctx) {
  std::string fn(v.key(0).scalar());
  Node arg = v.value(0);
  if (fn == "get_input") {
    Node name = arg.is_seq() && arg.size() > 0 ? arg.item(0) : arg;
    if (!name.is_scalar()) {
      ctx.diags.error("T0051", v.location(), "get_input takes the name of an input");
      return;
    }
    std::string input(name.scalar());
    if (!ctx.inputs.is_map() || !ctx.inputs.get(input).valid()) {
      std::vector<std::string> known;
      for (size_t i = 0; ctx.inputs.is_map() && i < ctx.inputs.size(); ++i) {
        known.emplace_back(ctx.inputs.key(i).scalar());
      }
      std::string msg = std::string(what) + ": get_input names unknown input \"" + input + "\"";
      std::string hint = base::closest_match(input, known);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      ctx.diags.error("T0050", name.location(), msg);
    }
    return;
  }
  if (fn == "get_property" || fn == "get_attribute") {
    if (!arg.is_seq() || arg.size() < 2) {
      ctx.diags.error("T0051", v.location(),
                      fn + " takes a list: [ <entity>, [<req or cap>,] <name>, ... ]");
    }
    return;
  }
  if (fn == "concat" || fn == "join") {
    if (!arg.is_seq()) {
      ctx.diags.error("T0051", v.location(), fn + " takes a list");
    }
    return;
  }
  if (fn == "token") {
    if (!arg.is_seq() || arg.size() != 3) {
      ctx.diags.error("T0051", v.location(), "token takes [ <string>, <separators>, <index> ]");
    }
  }
}

std::regex* cached_regex(const std::string& pattern, bool& bad) {
  static thread_local std::unordered_map<std::string, std::unique_ptr<std::regex>> cache;
  auto it = cache.find(pattern);
  if (it != cache.end()) {
    bad = it->second == nullptr;
    return it->second.get();
  }
  std::unique_ptr<std::regex> re;
  try {
    re = std::make_unique<std::regex>(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    re = nullptr;
  }
  bad = re == nullptr;
  return cache.emplace(pattern, std::move(re)).first->second.get();
}

void check_constraints(Node v, Node constraints, std::string_view what, ValueContext& ctx) {
  if (!constraints.valid() || constraints.is_null())
    return;
  if (!constraints.is_seq()) {
    ctx.diags.error("T0045", constraints.location(), "constraints must be a list");
    return;
  }
  for (size_t i = 0; i < constraints.size(); ++i) {
    Node c = constraints.item(i);
    if (!c.is_map() || c.size() != 1) {
      ctx.diags.error("T0045", c.location(), "a constraint is a single-key map, e.g. {equal: 1}");
      continue;
    }
    std::string op(c.key(0).scalar());
    Node arg = c.value(0);
    auto fail = [&](const std::string& expect) {
      ctx.diags.error(
          "T0043", v.location(),
          std::string(what) + ": " + describe(v) + " violates constraint " + op + " " + expect);
    };
    double x, y;
    bool vnum = v.is_scalar() && (parse_number(v.scalar(), x) || any_scalar_unit(v.scalar(), x));
    auto num_of = [](Node n, double& out) {
      return n.is_scalar() && (parse_number(n.scalar(), out) || any_scalar_unit(n.scalar(), out));
    };
    if (op == "equal") {
      if (!values_equal(v, arg))
        fail(brief_flow(arg));
    } else if (op == "greater_than" || op == "greater_or_equal" || op == "less_than" ||
               op == "less_or_equal") {
      if (!num_of(arg, y)) {
        ctx.diags.error("T0045", arg.location(), op + " needs a number or scalar-unit");
        continue;
      }
      if (!vnum)
        continue;  // a type error, reported by the type check
      bool ok = op == "greater_than"       ? x > y
                : op == "greater_or_equal" ? x >= y
                : op == "less_than"        ? x < y
                                           : x <= y;
      if (!ok)
        fail(std::string(arg.scalar()));
    } else if (op == "in_range") {
      if (!arg.is_seq() || arg.size() != 2) {
        ctx.diags.error("T0045", arg.location(), "in_range needs [ <min>, <max> ]");
        continue;
      }
      if (!vnum)
        continue;
      double lo = -HUGE_VAL, hi = HUGE_VAL;
      if (arg.item(0).scalar() != "UNBOUNDED" && !num_of(arg.item(0), lo)) {
        ctx.diags.error("T0045", arg.location(), "in_range bounds must be numbers");
        continue;
      }
      if (arg.item(1).scalar() != "UNBOUNDED" && !num_of(arg.item(1), hi)) {
        ctx.diags.error("T0045", arg.location(), "in_range bounds must be numbers");
        continue;
      }
      if (x < lo || x > hi)
        fail(brief_flow(arg));
    } else if (op == "valid_values") {
      if (!arg.is_seq()) {
        ctx.diags.error("T0045", arg.location(), "valid_values needs a list");
        continue;
      }
      bool found = false;
      if (ctx.sets != nullptr && arg.size() > 8) {
        found = in_value_set(v, value_set(arg, *ctx.sets));
      } else {
        for (size_t k = 0; k < arg.size() && !found; ++k)
          found = values_equal(v, arg.item(k));
      }
      if (!found)
        fail(brief_flow(arg));
    } else if (op == "length" || op == "min_length" || op == "max_length") {
      if (!num_of(arg, y)) {
        ctx.diags.error("T0045", arg.location(), op + " needs an integer");
        continue;
      }
      double len =
          v.is_scalar() ? static_cast<double>(v.scalar().size()) : static_cast<double>(v.size());
      bool ok = op == "length" ? len == y : op == "min_length" ? len >= y : len <= y;
      if (!ok)
        fail(std::string(arg.scalar()));
    } else if (op == "pattern") {
      if (!arg.is_scalar()) {
        ctx.diags.error("T0045", arg.location(), "pattern needs a regular expression");
        continue;
      }
      bool bad = false;
      std::regex* re = cached_regex(std::string(arg.scalar()), bad);
      if (bad) {
        ctx.diags.error("T0045", arg.location(), "invalid regular expression");
        continue;
      }
      if (v.is_scalar() && !std::regex_match(std::string(v.scalar()), *re)) {
        fail("\"" + std::string(arg.scalar()) + "\"");
      }
    } else if (op == "schema") {
      // Only meaningful for consumers that validate embedded documents.
    } else {
      ctx.diags.error("T0045", c.key(0).location(), "unknown constraint operator \"" + op + "\"");
    }
  }
}

void check_typed(Node v, std::string_view type, Node entry_schema, Node constraints,
                 std::string_view what, ValueContext& ctx, int depth);

void check_entry(Node v, Node entry_schema, std::string_view what, ValueContext& ctx, int depth) {
  if (!entry_schema.valid() || entry_schema.is_null())
    return;
  if (entry_schema.is_scalar()) {
    check_typed(v, entry_schema.scalar(), {}, {}, what, ctx, depth + 1);
  } else if (entry_schema.is_map()) {
    Node t = entry_schema.get("type");
    check_typed(v, t.scalar(), entry_schema.get("entry_schema"), entry_schema.get("constraints"),
                what, ctx, depth + 1);
  }
}

void check_typed(Node v, std::string_view type, Node entry_schema, Node constraints,
                 std::string_view what, ValueContext& ctx, int depth) {
  if (depth > 64 || !v.valid())
    return;
  if (v.is_map() && v.size() == 1 && is_function(v)) {
    check_function(v, what, ctx);
    return;
  }
  if (type.empty() || type == "any") {
    return;
  }
  bool typed_ok = true;
  if (type == "string") {
    if (!v.is_scalar()) {
      mismatch(v, "a string", what, ctx);
      typed_ok = false;
    }
  } else if (type == "integer") {
    if (!v.is_scalar() || (!v.quoted() && !is_int_text(v.scalar())) ||
        (v.quoted() && !is_int_text(v.scalar()))) {
      mismatch(v, "an integer", what, ctx);
      typed_ok = false;
    }
  } else if (type == "float") {
    double d;
    if (!v.is_scalar() || !parse_number(v.scalar(), d)) {
      mismatch(v, "a float", what, ctx);
      typed_ok = false;
    }
  } else if (type == "boolean") {
    if (!v.is_scalar() || v.quoted() || !is_bool_text(v.scalar())) {
      mismatch(v, "a boolean", what, ctx);
      typed_ok = false;
    }
  } else if (type == "timestamp") {
    if (!v.is_scalar()) {
      mismatch(v, "a timestamp", what, ctx);
      typed_ok = false;
    }
  } else if (type == "version") {
    if (!v.is_scalar() || !is_version_text(v.scalar())) {
      mismatch(v, "a version such as 1.0.2", what, ctx);
      typed_ok = false;
    }
  } else if (type == "null") {
    if (!v.is_null())
      mismatch(v, "null", what, ctx);
  } else if (type == "range") {
    double a, b;
    bool ok = v.is_seq() && v.size() == 2 && v.item(0).is_scalar() && v.item(1).is_scalar() &&
              parse_number(v.item(0).scalar(), a) &&
              (v.item(1).scalar() == "UNBOUNDED" || parse_number(v.item(1).scalar(), b));
    if (!ok) {
      mismatch(v, "a range [ <min>, <max> | UNBOUNDED ]", what, ctx);
      typed_ok = false;
    }
  } else if (const auto* units = units_for(type)) {
    double d;
    if (!v.is_scalar() || !parse_scalar_unit(v.scalar(), *units, d)) {
      mismatch(v,
               "a " + std::string(type) + " such as " +
                   (type == "scalar-unit.size"        ? "\"4 GiB\""
                    : type == "scalar-unit.time"      ? "\"30 s\""
                    : type == "scalar-unit.frequency" ? "\"2 GHz\""
                                                      : "\"10 Mbps\""),
               what, ctx);
      typed_ok = false;
    }
  } else if (type == "list") {
    if (!v.is_seq()) {
      mismatch(v, "a list", what, ctx);
      typed_ok = false;
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        check_entry(v.item(i), entry_schema, std::string(what) + "[" + std::to_string(i) + "]", ctx,
                    depth);
      }
    }
  } else if (type == "map") {
    if (!v.is_map()) {
      mismatch(v, "a map", what, ctx);
      typed_ok = false;
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        check_entry(v.value(i), entry_schema,
                    std::string(what) + "." + std::string(v.key(i).scalar()), ctx, depth);
      }
    }
  } else {
    const TypeDef* dt = ctx.types.find(TypeKind::kData, type);
    if (dt == nullptr) {
      return;  // reported where the definition names the type (T0030)
    }
    if (dt->name == "tosca.datatypes.json" || dt->name == "tosca.datatypes.xml") {
      if (!v.is_scalar())
        mismatch(v, "a string", what, ctx);
      return;
    }
    // Find a primitive at the root of the chain, if any.
    const TypeDef* root = dt;
    while (root->parent != nullptr)
      root = root->parent;
    Node root_df = root->def.get("derived_from");
    if (root_df.is_scalar() && is_primitive_type(root_df.scalar())) {
      check_typed(v, root_df.scalar(), {}, {}, what, ctx, depth + 1);
      for (const TypeDef* t = dt; t != nullptr; t = t->parent) {
        check_constraints(v, t->def.get("constraints"), what, ctx);
      }
    } else if (!v.is_map()) {
      mismatch(v, "a map of " + dt->name, what, ctx);
      typed_ok = false;
    } else {
      NamedNodes defs = ctx.types.merged(dt, "properties");
      check_properties(v, defs, v, what, true, ctx);
    }
  }
  if (typed_ok) {
    check_constraints(v, constraints, what, ctx);
  }
}

}  // namespace

bool is_function(Node n) {
  return n.is_map() && n.size() == 1 && n.key(0).is_scalar() &&
         function_names().count(n.key(0).scalar()) > 0;
}

bool numeric_value(Node n, double& out) {
  return n.is_scalar() && (parse_number(n.scalar(), out) || any_scalar_unit(n.scalar(), out));
}

void check_value(Node value, Node definition, std::string_view what, ValueContext& ctx) {
  if (!definition.is_map())
    return;
  Node type = definition.get("type");
  check_typed(value, type.scalar(), definition.get("entry_schema"), definition.get("constraints"),
              what, ctx, 0);
}

void check_properties(Node assigned, const NamedNodes& defs, Node owner, std::string_view what,
                      bool check_required, ValueContext& ctx, const char* missing_code,
                      base::Severity missing_severity) {
  if (assigned.valid() && !assigned.is_null() && !assigned.is_map()) {
    ctx.diags.error("T0021", assigned.location(), std::string(what) + ": properties must be a map");
    return;
  }
  for (size_t i = 0; assigned.is_map() && i < assigned.size(); ++i) {
    std::string name(assigned.key(i).scalar());
    const Node* def = nullptr;
    for (const auto& [n, d] : defs) {
      if (n == name) {
        def = &d;
        break;
      }
    }
    std::string sub = std::string(what) + "." + name;
    if (def == nullptr) {
      std::vector<std::string> known;
      for (const auto& [n, d] : defs)
        known.push_back(n);
      std::string msg = std::string(what) + ": unknown property \"" + name + "\"";
      std::string hint = base::closest_match(name, known);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      ctx.diags.error("T0040", assigned.key(i).location(), msg);
      continue;
    }
    check_value(assigned.value(i), *def, sub, ctx);
  }
  if (!check_required)
    return;
  for (const auto& [name, def] : defs) {
    if (assigned.is_map() && assigned.get(name).valid())
      continue;
    Node req = def.get("required");
    bool required = !(req.is_scalar() && (req.scalar() == "false" || req.scalar() == "False"));
    if (required && !def.get("default").valid()) {
      ctx.diags.add(
          base::Diagnostic{missing_severity,
                           missing_code,
                           owner.location(),
                           std::string(what) + ": required property \"" + name + "\" is missing",
                           {}});
    }
  }
}

}  // namespace tosca::internal
