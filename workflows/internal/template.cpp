#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/workflows.h"

namespace workflows {

struct Template::Part {
  enum class Kind : uint8_t { kLiteral, kExpr, kInterp, kList, kMap };
  Kind kind = Kind::kLiteral;
  json::value literal;                                                      // kLiteral
  std::shared_ptr<const Expr> expr;                                         // kExpr
  std::vector<std::pair<std::string, std::shared_ptr<const Expr>>> pieces;  // kInterp
  std::vector<Part> items;                                                  // kList
  std::vector<std::string> names;                                           // kMap: keys, in order
  std::vector<Part> values;  // kMap: values, same order
};

namespace {

bool has_expr(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      return std::string_view(v.get_string()).find("${") != std::string_view::npos;
    case json::kind::array:
      for (const auto& i : v.get_array()) {
        if (has_expr(i))
          return true;
      }
      return false;
    case json::kind::object:
      for (const auto& kv : v.get_object()) {
        if (has_expr(kv.value()))
          return true;
      }
      return false;
    default:
      return false;
  }
}

base::Status build(const json::value& v, Template::Part& out) {
  using K = Template::Part::Kind;
  if (!has_expr(v)) {
    out.kind = K::kLiteral;
    out.literal = v;
    return base::Status::Ok();
  }
  if (v.is_array()) {
    out.kind = K::kList;
    for (const auto& item : v.get_array()) {
      out.items.emplace_back();
      base::Status s = build(item, out.items.back());
      if (!s.ok())
        return s;
    }
    return base::Status::Ok();
  }
  if (v.is_object()) {
    out.kind = K::kMap;
    for (const auto& kv : v.get_object()) {
      out.names.emplace_back(kv.key());
      out.values.emplace_back();
      base::Status s = build(kv.value(), out.values.back());
      if (!s.ok())
        return s;
    }
    return base::Status::Ok();
  }
  std::string_view s = v.get_string();
  std::vector<StringPart> parts;
  std::string err;
  uint32_t off = 0;
  if (!split_template_string(s, parts, &err, &off))
    return base::Status::InvalidArgument(err + " in \"" + std::string(s) + "\"");
  for (const auto& p : parts) {
    std::shared_ptr<const Expr> e;
    if (p.is_expr) {
      e = Expr::parse(p.text, &err, &off);
      if (!e)
        return base::Status::InvalidArgument(err + " in \"${" + p.text + "}\"");
    }
    out.pieces.emplace_back(p.is_expr ? std::string() : p.text, e);
  }
  if (out.pieces.size() == 1 && out.pieces[0].second) {
    out.kind = K::kExpr;
    out.expr = out.pieces[0].second;
    out.pieces.clear();
  } else {
    out.kind = K::kInterp;
  }
  return base::Status::Ok();
}

base::Result<json::value> eval(const Template::Part& p, const Scope& scope) {
  using K = Template::Part::Kind;
  switch (p.kind) {
    case K::kLiteral:
      return p.literal;
    case K::kExpr:
      return p.expr->evaluate(scope);
    case K::kInterp: {
      std::string out;
      for (const auto& [text, expr] : p.pieces) {
        if (!expr) {
          out += text;
          continue;
        }
        auto v = expr->evaluate(scope);
        if (!v.ok())
          return v;
        std::string piece = interpolate(v.value());
        if (!EvalBudget::charge(piece.size()))
          return base::Status::InvalidArgument("the values this template builds exceed " +
                                               std::to_string(EvalBudget::kMaxEvalBytes >> 20) +
                                               " MiB");
        out += piece;
      }
      return json::value(out);
    }
    case K::kList: {
      json::array a;
      for (const auto& item : p.items) {
        auto v = eval(item, scope);
        if (!v.ok())
          return v;
        a.push_back(std::move(v).value());
      }
      return json::value(std::move(a));
    }
    case K::kMap: {
      json::object o;
      for (size_t i = 0; i < p.names.size(); ++i) {
        auto v = eval(p.values[i], scope);
        if (!v.ok())
          return v;
        o[p.names[i]] = std::move(v).value();
      }
      return json::value(std::move(o));
    }
  }
  return base::Status::Internal("bad template");
}

}  // namespace

base::Result<Template> Template::parse(json::value source) {
  Template t;
  auto root = std::make_shared<Part>();
  base::Status s = build(source, *root);
  if (!s.ok())
    return s;
  t.source_ = std::move(source);
  t.root_ = std::move(root);
  return t;
}

base::Result<json::value> Template::evaluate(const Scope& scope) const {
  if (root_ == nullptr)
    return json::value();
  EvalBudget budget;  // one budget for the whole template (a `with:` map of expressions)
  return eval(*root_, scope);
}

}  // namespace workflows
