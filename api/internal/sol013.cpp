// SOL013 query behaviour: query strings, attribute filters, attribute selectors,
// ProblemDetails, the next-page link (sol013.h).
#include "api/internal/sol013.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <boost/json.hpp>

namespace api::internal {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// Text for a message: at most 60 bytes, controls escaped.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (++n > 60) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

base::Status bad(std::string m) {
  return base::Status::InvalidArgument(std::move(m));
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size())
        return std::nullopt;
      int h = hex_digit(s[i + 1]), l = hex_digit(s[i + 2]);
      if (h < 0 || l < 0)
        return std::nullopt;
      out += static_cast<char>(h * 16 + l);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string percent_encode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || u == '-' ||
        u == '.' || u == '_' || u == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

const std::optional<std::string>* Query::find(std::string_view name) const {
  for (const auto& [k, v] : params) {
    if (k == name)
      return &v;
  }
  return nullptr;
}

base::Result<Query> parse_query(std::string_view text) {
  if (text.size() > kMaxQueryBytes)
    return bad("the query string is " + std::to_string(text.size()) + " bytes; the limit is " +
               std::to_string(kMaxQueryBytes));
  Query q;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t amp = text.find('&', pos);
    std::string_view part = text.substr(pos, amp == std::string_view::npos ? amp : amp - pos);
    pos = amp == std::string_view::npos ? text.size() + 1 : amp + 1;
    if (part.empty())
      continue;
    if (q.params.size() == kMaxQueryParams)
      return bad("more than " + std::to_string(kMaxQueryParams) + " query parameters");
    size_t eq = part.find('=');
    auto name = percent_decode(part.substr(0, eq), true);
    if (!name)
      return bad("bad percent escape in the query parameter name " + quoted(part.substr(0, eq)));
    if (name->empty())
      return bad("a query parameter without a name");
    std::optional<std::string> value;
    if (eq != std::string_view::npos) {
      value = percent_decode(part.substr(eq + 1), true);
      if (!value)
        return bad("bad percent escape in the value of query parameter " + quoted(*name));
    }
    if (q.has(*name))
      return bad("query parameter " + quoted(*name) + " is given twice");
    q.params.emplace_back(std::move(*name), std::move(value));
  }
  return q;
}

// ---------------------------------------------------------------------------------------
// Filters

namespace {

struct FilterParser {
  std::string_view s;
  size_t i = 0;

  base::Status error(const std::string& what) const {
    return bad("malformed filter at character " + std::to_string(i + 1) + ": " + what);
  }
  bool at_end() const { return i >= s.size(); }

  // An attribute name segment up to '/', ',' or ')', with ~0 ~1 ~a ~b undone.
  base::Result<std::vector<std::string>> path() {
    std::vector<std::string> segs(1);
    while (!at_end() && s[i] != ',' && s[i] != ')') {
      char c = s[i];
      if (c == '/') {
        if (segs.back().empty())
          return error("empty attribute name segment");
        if (segs.size() == kMaxPathDepth)
          return error("attribute path deeper than " + std::to_string(kMaxPathDepth));
        segs.emplace_back();
        ++i;
        continue;
      }
      if (c == '(' || c == ';' || c == '\'')
        return error(std::string("unexpected '") + c + "' in an attribute name");
      if (c == '~') {
        if (i + 1 >= s.size())
          return error("'~' must be followed by 0, 1, a or b");
        char e = s[i + 1];
        segs.back() += e == '0' ? '~' : e == '1' ? '/' : e == 'a' ? ',' : e == 'b' ? '@' : '\0';
        if (segs.back().back() == '\0')
          return error("'~' must be followed by 0, 1, a or b");
        i += 2;
        continue;
      }
      segs.back() += c;
      ++i;
    }
    if (segs.back().empty())
      return error("empty attribute name");
    return segs;
  }

  // A plain value up to ',' or ')', or a quoted one ('' inside is a quote).
  base::Result<std::string> value() {
    std::string v;
    if (!at_end() && s[i] == '\'') {
      ++i;
      while (true) {
        if (at_end())
          return error("unterminated quoted value");
        if (s[i] == '\'') {
          if (i + 1 < s.size() && s[i + 1] == '\'') {
            v += '\'';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        v += s[i++];
      }
      return v;
    }
    while (!at_end() && s[i] != ',' && s[i] != ')') {
      if (s[i] == '\'')
        return error("a quote inside an unquoted value (quote the whole value)");
      v += s[i++];
    }
    if (v.empty())
      return error("empty value");
    return v;
  }

  base::Result<FilterTerm> term() {
    if (at_end() || s[i] != '(')
      return error("expected '('");
    ++i;
    size_t start = i;
    while (!at_end() && s[i] >= 'a' && s[i] <= 'z')
      ++i;
    std::string_view name = s.substr(start, i - start);
    static const std::pair<std::string_view, FilterOp> kOps[] = {
        {"eq", FilterOp::kEq},      {"neq", FilterOp::kNeq}, {"gt", FilterOp::kGt},
        {"gte", FilterOp::kGte},    {"lt", FilterOp::kLt},   {"lte", FilterOp::kLte},
        {"in", FilterOp::kIn},      {"nin", FilterOp::kNin}, {"cont", FilterOp::kCont},
        {"ncont", FilterOp::kNcont}};
    FilterTerm t;
    bool known = false;
    for (const auto& [n, op] : kOps) {
      if (n == name) {
        t.op = op;
        known = true;
      }
    }
    if (!known) {
      i = start;
      return error("unknown operator " + quoted(name) +
                   " (eq, neq, gt, gte, lt, lte, in, nin, cont, ncont)");
    }
    if (at_end() || s[i] != ',')
      return error("expected ',' after the operator");
    ++i;
    auto p = path();
    if (!p.ok())
      return p.status();
    t.path = std::move(p).value();
    while (!at_end() && s[i] == ',') {
      ++i;
      if (t.values.size() == kMaxValuesPerTerm)
        return error("more than " + std::to_string(kMaxValuesPerTerm) + " values in one term");
      auto v = value();
      if (!v.ok())
        return v.status();
      t.values.push_back(std::move(v).value());
    }
    if (at_end() || s[i] != ')')
      return error("expected ',' or ')'");
    ++i;
    bool one = t.op == FilterOp::kEq || t.op == FilterOp::kNeq || t.op == FilterOp::kGt ||
               t.op == FilterOp::kGte || t.op == FilterOp::kLt || t.op == FilterOp::kLte;
    if (t.values.empty())
      return error("operator " + std::string(name) + " needs a value");
    if (one && t.values.size() > 1)
      return error("operator " + std::string(name) + " takes one value, not " +
                   std::to_string(t.values.size()));
    return t;
  }
};

std::optional<double> as_number(std::string_view v) {
  double d = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(d))
    return std::nullopt;
  return d;
}

// -1, 0, 1, or nullopt when the node and the value do not compare (an object, a bool
// against anything but true/false, a number against a non-number).
std::optional<int> compare(const json::value& node, const std::string& v) {
  if (node.is_string()) {
    std::string_view s = node.get_string();
    int c = s.compare(v);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (node.is_bool()) {
    if (v != "true" && v != "false")
      return std::nullopt;
    bool b = v == "true";
    return node.get_bool() == b ? 0 : (node.get_bool() ? 1 : -1);
  }
  if (node.is_number()) {
    auto d = as_number(v);
    if (!d)
      return std::nullopt;
    double n = node.to_number<double>();
    return n < *d ? -1 : n > *d ? 1 : 0;
  }
  return std::nullopt;
}

bool contains(const json::value& node, const std::string& v) {
  return node.is_string() && std::string_view(node.get_string()).find(v) != std::string::npos;
}

// One leaf against the term, for the positive form of the operator.
bool leaf_matches(const FilterTerm& t, const json::value& node) {
  auto eq_any = [&] {
    for (const auto& v : t.values) {
      auto c = compare(node, v);
      if (c && *c == 0)
        return true;
    }
    return false;
  };
  switch (t.op) {
    case FilterOp::kEq:
    case FilterOp::kNeq:
    case FilterOp::kIn:
    case FilterOp::kNin:
      return eq_any();
    case FilterOp::kCont:
    case FilterOp::kNcont:
      for (const auto& v : t.values) {
        if (contains(node, v))
          return true;
      }
      return false;
    case FilterOp::kGt:
    case FilterOp::kGte:
    case FilterOp::kLt:
    case FilterOp::kLte: {
      auto c = compare(node, t.values[0]);
      if (!c)
        return false;
      return t.op == FilterOp::kGt    ? *c > 0
             : t.op == FilterOp::kGte ? *c >= 0
             : t.op == FilterOp::kLt  ? *c < 0
                                      : *c <= 0;
    }
  }
  return false;
}

// The leaves at `path` below `v`, arrays fanned out; false when the budget ran out.
bool collect(const json::value& v, const std::vector<std::string>& path, size_t depth,
             std::vector<const json::value*>& out, size_t& budget) {
  if (budget == 0)
    return false;
  --budget;
  if (v.is_array()) {
    for (const auto& e : v.get_array()) {
      if (!collect(e, path, depth, out, budget))
        return false;
    }
    return true;
  }
  if (depth == path.size()) {
    out.push_back(&v);
    return true;
  }
  if (!v.is_object())
    return true;
  const json::value* next = v.get_object().if_contains(path[depth]);
  if (next == nullptr)
    return true;
  return collect(*next, path, depth + 1, out, budget);
}

bool term_matches(const FilterTerm& t, const json::value& doc) {
  std::vector<const json::value*> leaves;
  size_t budget = kMaxVisitsPerTerm;
  collect(doc, t.path, 0, leaves, budget);
  if (leaves.empty())
    return false;
  bool negative = t.op == FilterOp::kNeq || t.op == FilterOp::kNin || t.op == FilterOp::kNcont;
  if (!negative)
    return std::any_of(leaves.begin(), leaves.end(),
                       [&](const json::value* l) { return leaf_matches(t, *l); });
  return std::none_of(leaves.begin(), leaves.end(),
                      [&](const json::value* l) { return leaf_matches(t, *l); });
}

}  // namespace

base::Result<Filter> parse_filter(std::string_view text) {
  if (text.size() > kMaxFilterBytes)
    return bad("the filter is " + std::to_string(text.size()) + " bytes; the limit is " +
               std::to_string(kMaxFilterBytes));
  if (text.empty())
    return bad("empty filter");
  FilterParser p{text};
  Filter f;
  while (true) {
    if (f.terms.size() == kMaxFilterTerms)
      return p.error("more than " + std::to_string(kMaxFilterTerms) + " terms");
    auto t = p.term();
    if (!t.ok())
      return t.status();
    f.terms.push_back(std::move(t).value());
    if (p.at_end())
      break;
    if (text[p.i] != ';')
      return p.error("expected ';' between terms");
    ++p.i;
  }
  return f;
}

bool matches(const Filter& f, const json::value& doc) {
  return std::all_of(f.terms.begin(), f.terms.end(),
                     [&](const FilterTerm& t) { return term_matches(t, doc); });
}

// ---------------------------------------------------------------------------------------
// Selectors

namespace {

base::Result<std::vector<std::vector<std::string>>> selector_paths(std::string_view name,
                                                                   const std::string& list) {
  std::vector<std::vector<std::string>> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string_view item = std::string_view(list).substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty())
      return bad(std::string(name) + ": empty attribute name in " + quoted(list));
    if (out.size() == kMaxSelectorPaths)
      return bad(std::string(name) + ": more than " + std::to_string(kMaxSelectorPaths) +
                 " attributes");
    std::vector<std::string> segs;
    size_t p = 0;
    while (p <= item.size()) {
      size_t slash = item.find('/', p);
      std::string_view seg =
          item.substr(p, slash == std::string_view::npos ? std::string_view::npos : slash - p);
      p = slash == std::string_view::npos ? item.size() + 1 : slash + 1;
      if (seg.empty())
        return bad(std::string(name) + ": empty attribute name segment in " + quoted(item));
      if (segs.size() == kMaxPathDepth)
        return bad(std::string(name) + ": attribute path deeper than " +
                   std::to_string(kMaxPathDepth));
      segs.emplace_back(seg);
    }
    out.push_back(std::move(segs));
  }
  return out;
}

void remove_path(json::value& v, const std::vector<std::string>& path, size_t depth) {
  if (v.is_array()) {
    for (auto& e : v.get_array())
      remove_path(e, path, depth);
    return;
  }
  if (!v.is_object())
    return;
  auto& o = v.get_object();
  if (depth + 1 == path.size()) {
    o.erase(path[depth]);
    return;
  }
  if (json::value* next = o.if_contains(path[depth]))
    remove_path(*next, path, depth + 1);
}

}  // namespace

base::Result<Selector> parse_selector(const Query& q) {
  Selector s;
  const auto* ef = q.find("exclude_fields");
  const auto* ef2 = q.find("exclude-fields");
  if (ef != nullptr && ef2 != nullptr)
    return bad("exclude_fields and exclude-fields are the same parameter; give one");
  if (ef == nullptr)
    ef = ef2;
  s.all_fields = q.has("all_fields");
  s.exclude_default = q.has("exclude_default");
  for (auto [name, p, to] : {std::tuple{"fields", q.find("fields"), &s.fields},
                             std::tuple{"exclude_fields", ef, &s.exclude_fields}}) {
    if (p == nullptr)
      continue;
    if (!p->has_value())
      return bad(std::string(name) + " needs a comma-separated list of attribute names");
    auto paths = selector_paths(name, **p);
    if (!paths.ok())
      return paths.status();
    *to = std::move(paths).value();
  }
  bool has_fields = q.has("fields"), has_excl = ef != nullptr;
  if (s.all_fields && (has_fields || has_excl || s.exclude_default))
    return bad("all_fields cannot be combined with fields, exclude_fields or exclude_default");
  if (has_fields && has_excl)
    return bad("fields and exclude_fields cannot be combined");
  if (has_excl && s.exclude_default)
    return bad("exclude_fields and exclude_default cannot be combined");
  return s;
}

json::object apply_selector(const Selector& s, const DefaultExclusion& d, json::object doc) {
  if (s.all_fields)
    return doc;
  json::value v = std::move(doc);
  if (!s.exclude_fields.empty()) {
    for (const auto& p : s.exclude_fields)
      remove_path(v, p, 0);
    return std::move(v.get_object());
  }
  if (s.exclude_default || !s.fields.empty() || d.when_none) {
    for (const auto& a : d.attributes) {
      bool wanted = std::any_of(s.fields.begin(), s.fields.end(),
                                [&](const std::vector<std::string>& f) { return f[0] == a; });
      if (!wanted)
        v.get_object().erase(a);
    }
  }
  return std::move(v.get_object());
}

std::string problem_json(const Problem& p) {
  json::object o{{"status", p.status}, {"detail", p.detail}};
  if (!p.title.empty())
    o["title"] = p.title;
  // The detail may quote what the client sent: bytes that are not UTF-8 would make the
  // document one a JSON reader refuses.
  return base::printable(json::serialize(o), base::PrintMode::kJson);
}

std::string next_link(std::string_view base, std::string_view path, const Query& q,
                      std::string_view marker) {
  std::string url = std::string(base) + std::string(path) + "?";
  for (const auto& [k, v] : q.params) {
    if (k == "nextpage_opaque_marker")
      continue;
    url += percent_encode(k) + "=" + (v ? percent_encode(*v) : std::string("1")) + "&";
  }
  url += "nextpage_opaque_marker=" + percent_encode(marker);
  return "<" + url + ">; rel=\"next\"";
}

}  // namespace api::internal
