#include "workflows/internal/expr.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>

#include <boost/json.hpp>

namespace workflows {

namespace {

// ---------------------------------------------------------------------------------------
// Lexer

// The keys one map literal may have (a map is a request body's object, not a data set).
constexpr size_t kMaxMapKeys = 1000;

enum class Tok { kEnd, kNumber, kString, kIdent, kPunct, kError };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, punctuation, decoded string
  json::value number;
  uint32_t offset = 0;
};

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Token next() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n'))
      ++pos_;
    Token t;
    t.offset = static_cast<uint32_t>(pos_);
    if (pos_ >= s_.size())
      return t;
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = pos_;
      bool is_float = false;
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                  s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
        if (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')
          is_float = true;
        ++pos_;
      }
      std::string num(s_.substr(b, pos_ - b));
      t.kind = Tok::kNumber;
      char* end = nullptr;
      if (is_float) {
        t.number = std::strtod(num.c_str(), &end);
      } else {
        errno = 0;
        long long v = std::strtoll(num.c_str(), &end, 10);
        if (errno != 0) {
          t.kind = Tok::kError;
          t.text = "number out of range";
          return t;
        }
        t.number = static_cast<int64_t>(v);
      }
      if (end == nullptr || *end != '\0') {
        t.kind = Tok::kError;
        t.text = "malformed number \"" + num + "\"";
      }
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      t.kind = Tok::kIdent;
      t.text = std::string(s_.substr(b, pos_ - b));
      return t;
    }
    if (c == '\'' || c == '"') {
      char q = c;
      ++pos_;
      std::string out;
      while (pos_ < s_.size() && s_[pos_] != q) {
        if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) {
          char e = s_[pos_ + 1];
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
          pos_ += 2;
          continue;
        }
        out += s_[pos_++];
      }
      if (pos_ >= s_.size()) {
        t.kind = Tok::kError;
        t.text = "unterminated string";
        return t;
      }
      ++pos_;
      t.kind = Tok::kString;
      t.text = std::move(out);
      return t;
    }
    static const char* kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    for (const char* two : kTwo) {
      if (s_.substr(pos_, 2) == two) {
        pos_ += 2;
        t.kind = Tok::kPunct;
        t.text = two;
        return t;
      }
    }
    if (std::string_view("+-*/%<>!()[]{}.,:").find(c) != std::string_view::npos) {
      ++pos_;
      t.kind = Tok::kPunct;
      t.text = std::string(1, c);
      return t;
    }
    t.kind = Tok::kError;
    t.text = std::string("unexpected character '") + c + "'";
    return t;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------
// Parser (precedence climbing)

using ExprPtr = std::shared_ptr<const Expr>;

class Parser {
 public:
  explicit Parser(std::string_view s) : lex_(s) { advance(); }

  ExprPtr parse_all() {
    ExprPtr e = parse_or();
    if (e && tok_.kind != Tok::kEnd)
      fail("unexpected \"" + describe(tok_) + "\"");
    return error_.empty() ? e : nullptr;
  }
  std::string error_;
  uint32_t error_offset_ = 0;
  const char* code_ = Expr::kSyntaxErrorCode;

 private:
  // Counts the parser's own recursion (brackets, calls, indexes, unary operators), which
  // comes before any node is built: "((((1))))" is a tree of one level.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) { ++p_.nesting_; }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    bool too_deep() const { return p_.nesting_ > Expr::kMaxDepth; }

   private:
    Parser& p_;
  };
  // Fails at `offset` (the current token by default).
  ExprPtr too_deep(std::optional<uint32_t> offset = std::nullopt) {
    if (!error_.empty())
      return nullptr;
    code_ = Expr::kTooDeepCode;
    fail("expression nested deeper than " + std::to_string(Expr::kMaxDepth) +
         " levels (brackets, calls, operators); split it into steps");
    error_offset_ = offset.value_or(error_offset_);
    return nullptr;
  }
  // Sets e's depth from its kids; a tree deeper than the budget fails at e's operator.
  ExprPtr sealed(std::shared_ptr<Expr> e) {
    uint32_t d = 0;
    for (const auto& k : e->kids)
      d = std::max(d, k->depth);
    e->depth = d + 1;
    if (e->depth > Expr::kMaxDepth)
      return too_deep(e->offset);
    return e;
  }

  static std::string describe(const Token& t) {
    return t.kind == Tok::kEnd ? "end of expression" : t.kind == Tok::kNumber ? "number" : t.text;
  }
  void advance() {
    tok_ = lex_.next();
    if (tok_.kind == Tok::kError)
      fail(tok_.text);
  }
  ExprPtr fail(std::string m) {
    if (error_.empty()) {
      error_ = std::move(m);
      error_offset_ = tok_.offset;
    }
    return nullptr;
  }
  bool is(const char* p) const { return tok_.kind == Tok::kPunct && tok_.text == p; }
  bool expect(const char* p) {
    if (!is(p)) {
      fail(std::string("expected \"") + p + "\", found \"" + describe(tok_) + "\"");
      return false;
    }
    advance();
    return true;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, uint32_t off) {
    auto e = std::make_shared<Expr>();
    e->op = Expr::Op::kBinary;
    e->name = std::move(op);
    e->kids = {std::move(a), std::move(b)};
    e->offset = off;
    return sealed(std::move(e));
  }
  ExprPtr parse_or() {
    Nest nest(*this);
    if (nest.too_deep())
      return too_deep();
    ExprPtr a = parse_and();
    while (a && is("||")) {
      uint32_t off = tok_.offset;
      advance();
      ExprPtr b = parse_and();
      if (!b)
        return nullptr;
      a = binary("||", a, b, off);
    }
    return a;
  }
  ExprPtr parse_and() {
    ExprPtr a = parse_cmp();
    while (a && is("&&")) {
      uint32_t off = tok_.offset;
      advance();
      ExprPtr b = parse_cmp();
      if (!b)
        return nullptr;
      a = binary("&&", a, b, off);
    }
    return a;
  }
  ExprPtr parse_cmp() {
    ExprPtr a = parse_add();
    if (a && tok_.kind == Tok::kPunct &&
        (tok_.text == "==" || tok_.text == "!=" || tok_.text == "<" || tok_.text == "<=" ||
         tok_.text == ">" || tok_.text == ">=")) {
      std::string op = tok_.text;
      uint32_t off = tok_.offset;
      advance();
      ExprPtr b = parse_add();
      if (!b)
        return nullptr;
      return binary(op, a, b, off);
    }
    return a;
  }
  ExprPtr parse_add() {
    ExprPtr a = parse_mul();
    while (a && (is("+") || is("-"))) {
      std::string op = tok_.text;
      uint32_t off = tok_.offset;
      advance();
      ExprPtr b = parse_mul();
      if (!b)
        return nullptr;
      a = binary(op, a, b, off);
    }
    return a;
  }
  ExprPtr parse_mul() {
    ExprPtr a = parse_unary();
    while (a && (is("*") || is("/") || is("%"))) {
      std::string op = tok_.text;
      uint32_t off = tok_.offset;
      advance();
      ExprPtr b = parse_unary();
      if (!b)
        return nullptr;
      a = binary(op, a, b, off);
    }
    return a;
  }
  ExprPtr parse_unary() {
    if (is("!") || is("-")) {
      Nest nest(*this);
      if (nest.too_deep())
        return too_deep();
      auto e = std::make_shared<Expr>();
      e->op = is("!") ? Expr::Op::kNot : Expr::Op::kNeg;
      e->offset = tok_.offset;
      advance();
      ExprPtr k = parse_unary();
      if (!k)
        return nullptr;
      e->kids = {k};
      return sealed(std::move(e));
    }
    return parse_postfix();
  }
  ExprPtr parse_postfix() {
    ExprPtr a = parse_primary();
    while (a) {
      if (is(".")) {
        advance();
        if (tok_.kind != Tok::kIdent)
          return fail("expected a field name after \".\"");
        auto e = std::make_shared<Expr>();
        e->op = Expr::Op::kField;
        e->name = tok_.text;
        e->offset = tok_.offset;
        e->kids = {a};
        advance();
        a = sealed(std::move(e));
      } else if (is("[")) {
        uint32_t off = tok_.offset;
        advance();
        ExprPtr idx = parse_or();
        if (!idx || !expect("]"))
          return nullptr;
        auto e = std::make_shared<Expr>();
        e->op = Expr::Op::kIndex;
        e->offset = off;
        e->kids = {a, idx};
        a = sealed(std::move(e));
      } else {
        break;
      }
    }
    return a;
  }
  ExprPtr parse_primary() {
    auto e = std::make_shared<Expr>();
    e->offset = tok_.offset;
    switch (tok_.kind) {
      case Tok::kNumber:
        e->op = Expr::Op::kLiteral;
        e->value = tok_.number;
        advance();
        return e;
      case Tok::kString:
        e->op = Expr::Op::kLiteral;
        e->value = json::string(tok_.text);
        advance();
        return e;
      case Tok::kIdent: {
        std::string id = tok_.text;
        advance();
        if (id == "true" || id == "false") {
          e->op = Expr::Op::kLiteral;
          e->value = id == "true";
          return e;
        }
        if (id == "null") {
          e->op = Expr::Op::kLiteral;
          return e;
        }
        if (is("(")) {
          advance();
          e->op = Expr::Op::kCall;
          e->name = id;
          if (!is(")")) {
            for (;;) {
              ExprPtr arg = parse_or();
              if (!arg)
                return nullptr;
              e->kids.push_back(arg);
              if (is(","))
                advance();
              else
                break;
            }
          }
          if (!expect(")"))
            return nullptr;
          return sealed(std::move(e));
        }
        e->op = Expr::Op::kRoot;
        e->name = id;
        return e;
      }
      case Tok::kPunct:
        if (is("(")) {
          advance();
          ExprPtr inner = parse_or();
          if (!inner || !expect(")"))
            return nullptr;
          return inner;
        }
        if (is("[")) {
          advance();
          e->op = Expr::Op::kList;
          if (!is("]")) {
            for (;;) {
              ExprPtr item = parse_or();
              if (!item)
                return nullptr;
              e->kids.push_back(item);
              if (is(","))
                advance();
              else
                break;
            }
          }
          if (!expect("]"))
            return nullptr;
          return sealed(std::move(e));
        }
        if (is("{")) {
          // {key: value, 'other key': value}: kids are key (a string literal), value, ...
          advance();
          e->op = Expr::Op::kMap;
          std::set<std::string> keys;
          if (!is("}")) {
            for (;;) {
              if (tok_.kind != Tok::kIdent && tok_.kind != Tok::kString)
                return fail("a map's key is a name or a quoted string, not \"" + tok_.text + "\"");
              auto key = std::make_shared<Expr>();
              key->op = Expr::Op::kLiteral;
              key->value = tok_.text;
              key->offset = tok_.offset;
              if (!keys.insert(tok_.text).second)
                return fail("the map has the key \"" + tok_.text + "\" twice");
              if (keys.size() > kMaxMapKeys)
                return fail("a map literal has at most " + std::to_string(kMaxMapKeys) + " keys");
              advance();
              if (!expect(":"))
                return nullptr;
              ExprPtr value = parse_or();
              if (!value)
                return nullptr;
              e->kids.push_back(key);
              e->kids.push_back(value);
              if (is(","))
                advance();
              else
                break;
            }
          }
          if (!expect("}"))
            return nullptr;
          return sealed(std::move(e));
        }
        return fail("unexpected \"" + tok_.text + "\"");
      case Tok::kEnd:
        return fail("expression ends too early");
      case Tok::kError:
        return nullptr;
    }
    return nullptr;
  }

  Lexer lex_;
  Token tok_;
  uint32_t nesting_ = 0;
};

// ---------------------------------------------------------------------------------------
// Functions: names and arities, for the type checker and the evaluator

struct Sig {
  const char* name;
  size_t min, max;
  bool takes(size_t n) const { return n >= min && n <= max; }
  std::string arity_error(size_t n) const {
    return std::string(name) + "() takes " + std::to_string(min) +
           (max == min       ? std::string()
            : max == min + 1 ? " or " + std::to_string(max)
                             : " to " + std::to_string(max)) +
           " arguments, not " + std::to_string(n);
  }
};
constexpr Sig kSigs[] = {
    {"default", 2, 2}, {"len", 1, 1},        {"contains", 2, 3}, {"merge", 2, 2},  {"string", 1, 1},
    {"int", 1, 1},     {"json", 1, 1},       {"join", 2, 2},     {"keys", 1, 1},   {"trim", 1, 1},
    {"find", 3, 3},    {"shellquote", 1, 1}, {"pathsafe", 1, 1}, {"range", 1, 2},  {"slice", 2, 3},
    {"concat", 2, 8},  {"distinct", 1, 1},   {"sort", 1, 1},     {"first", 1, 1},  {"last", 1, 1},
    {"map", 3, 3},     {"filter", 3, 3},     {"if", 3, 3},       {"flatten", 1, 1}};

// The most elements range() and concat() make: a list is a fan-out's items or a
// command's arguments, not a data set.
constexpr int64_t kMaxListItems = 10000;
const Sig* find_sig(std::string_view name) {
  for (const auto& s : kSigs) {
    if (name == s.name)
      return &s;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Evaluation

std::string path_of(const Expr& e) {
  switch (e.op) {
    case Expr::Op::kRoot:
      return e.name;
    case Expr::Op::kField:
      return path_of(*e.kids[0]) + "." + e.name;
    case Expr::Op::kIndex:
      return path_of(*e.kids[0]) + "[...]";
    case Expr::Op::kCall:
      return e.name + "(...)";
    default:
      return "value";
  }
}

base::Status missing(const Expr& e) {
  return base::Status::NotFound(path_of(e) + " is not set");
}

std::string kind_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "a list";
    case json::kind::object:
      return "a map";
  }
  return "a value";
}

bool is_number(const json::value& v) {
  return v.is_int64() || v.is_uint64() || v.is_double();
}
double as_double(const json::value& v) {
  return v.is_int64()    ? static_cast<double>(v.get_int64())
         : v.is_uint64() ? static_cast<double>(v.get_uint64())
                         : v.get_double();
}
bool is_int(const json::value& v) {
  return v.is_int64() || v.is_uint64();
}
// An integer as_int() reads exactly: not a uint64 above INT64_MAX (a request may hold one).
bool is_int64(const json::value& v) {
  return v.is_int64() || (v.is_uint64() && v.get_uint64() <= INT64_MAX);
}
int64_t as_int(const json::value& v) {
  return v.is_int64() ? v.get_int64() : static_cast<int64_t>(v.get_uint64());
}

bool values_equal(const json::value& a, const json::value& b) {
  if (is_number(a) && is_number(b))
    return as_double(a) == as_double(b);
  return a == b;
}

using R = base::Result<json::value>;

R type_error(const Expr& e, std::string what) {
  return base::Status::InvalidArgument(path_of(e) + ": " + what);
}

R eval(const Expr& e, const Scope& s);

// How many map()/filter() bodies the evaluation on this thread is in.
thread_local int t_loop_depth = 0;

R over_budget(const Expr& e) {
  return type_error(
      e, "the values it builds exceed " + std::to_string(EvalBudget::kMaxEvalBytes >> 20) + " MiB");
}

// A value for a message: in double quotes, `"` and `\\` escaped, bytes outside printable
// ASCII as \\xNN, cut at 80 bytes.
std::string quoted_for_message(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += s.size() > 80 ? "\"..." : "\"";
  return out;
}

R eval_call_body(const Expr& e, const Scope& s);

// A call's result counts against the evaluation's budget (EvalBudget), but for the calls
// that return (a part of) a value they were given (default, find, first, last) and map
// and filter (which counted their items as they made them).
R eval_call(const Expr& e, const Scope& s) {
  R r = eval_call_body(e, s);
  const std::string& f = e.name;
  if (r.ok() && f != "default" && f != "find" && f != "first" && f != "last" && f != "map" &&
      f != "filter" && f != "if" && !EvalBudget::charge(EvalBudget::size_of(r.value())))
    return over_budget(e);
  return r;
}

R eval_call_body(const Expr& e, const Scope& s) {
  const std::string& f = e.name;
  // The type checker refused these at compile time; a machine read back from JSON is
  // parsed again, never checked, so the evaluator does not take them on trust.
  const Sig* sig = find_sig(f);
  if (sig == nullptr)
    return base::Status::InvalidArgument("unknown function \"" + f + "\"");
  if (!sig->takes(e.kids.size()))
    return base::Status::InvalidArgument(sig->arity_error(e.kids.size()));
  if (f == "default") {
    R a = eval(*e.kids[0], s);
    if (a.ok() && !a.value().is_null())
      return a;
    if (!a.ok() && a.status().code() != base::StatusCode::kNotFound)
      return a;
    R b = eval(*e.kids[1], s);
    if (!b.ok() && b.status().code() == base::StatusCode::kNotFound)
      return json::value();
    return b;
  }
  if (f == "if") {
    // if(CONDITION, A, B): only the branch taken is evaluated (the other may name a state
    // that did not run).
    R c = eval(*e.kids[0], s);
    if (!c.ok())
      return c;
    if (!c.value().is_bool())
      return type_error(e, "if() needs a boolean condition, not " + kind_name(c.value()));
    return eval(*e.kids[c.value().get_bool() ? 1 : 2], s);
  }
  if (f == "map" || f == "filter") {
    // map(LIST, NAME, EXPR), filter(LIST, NAME, CONDITION): EXPR or CONDITION evaluated
    // once per element, with NAME bound to it. Each element visited costs the evaluation's
    // budget, so nested calls over long lists stop instead of running on.
    const Expr& name = *e.kids[1];
    bool taken = name.op != Expr::Op::kRoot || is_scope_name(name.name) ||
                 (!s.item_name.empty() && name.name == s.item_name);
    for (const Binding* b = s.bound; b != nullptr && !taken; b = b->outer)
      taken = b->name == name.name;
    if (taken)
      return type_error(e, f + "()'s second argument must be a new name for the element");
    R list = eval(*e.kids[0], s);
    if (!list.ok())
      return list;
    if (!list.value().is_array())
      return type_error(e, f + "() of " + kind_name(list.value()));
    Binding b{name.name, nullptr, s.bound};
    Scope inner = s;
    inner.bound = &b;
    json::array out;
    // Every item visited, every value a read in the body copies (eval, kRoot) and every
    // value the result takes counts against the budget as it happens.
    struct InLoop {
      InLoop() { ++t_loop_depth; }
      ~InLoop() { --t_loop_depth; }
    } in_loop;
    for (const auto& v : list.value().get_array()) {
      if (!EvalBudget::charge(16))
        return over_budget(e);
      b.value = &v;
      R r = eval(*e.kids[2], inner);
      if (!r.ok())
        return r;
      if (f == "map") {
        if (!EvalBudget::charge(EvalBudget::size_of(r.value())))
          return over_budget(e);
        out.push_back(std::move(r).value());
      } else if (!r.value().is_bool()) {
        return type_error(e,
                          "filter()'s condition gave " + kind_name(r.value()) + ", not a boolean");
      } else if (r.value().get_bool()) {
        if (!EvalBudget::charge(EvalBudget::size_of(v)))
          return over_budget(e);
        out.push_back(v);
      }
    }
    return json::value(std::move(out));
  }
  std::vector<json::value> args;
  for (const auto& k : e.kids) {
    R v = eval(*k, s);
    if (!v.ok())
      return v;
    args.push_back(std::move(v).value());
  }
  if (f == "len") {
    const auto& v = args[0];
    if (v.is_array())
      return json::value(static_cast<int64_t>(v.get_array().size()));
    if (v.is_object())
      return json::value(static_cast<int64_t>(v.get_object().size()));
    if (v.is_string())
      return json::value(static_cast<int64_t>(v.get_string().size()));
    return type_error(e, "len() of " + kind_name(v));
  }
  if (f == "contains") {
    const auto& c = args[0];
    if (c.is_string() && args.size() == 2 && args[1].is_string())
      return json::value(std::string_view(c.get_string()).find(args[1].get_string()) !=
                         std::string_view::npos);
    if (c.is_object() && args.size() == 2 && args[1].is_string())
      return json::value(c.get_object().contains(args[1].get_string()));
    if (!c.is_array())
      return type_error(e, "contains() of " + kind_name(c));
    for (const auto& item : c.get_array()) {
      if (args.size() == 2 && values_equal(item, args[1]))
        return json::value(true);
      if (args.size() == 3 && item.is_object() && args[1].is_string()) {
        const json::value* fv = item.get_object().if_contains(args[1].get_string());
        if (fv != nullptr && values_equal(*fv, args[2]))
          return json::value(true);
      }
    }
    return json::value(false);
  }
  if (f == "find") {
    if (!args[0].is_array() || !args[1].is_string())
      return type_error(e, "find() needs a list and a field name");
    for (const auto& item : args[0].get_array()) {
      if (!item.is_object())
        continue;
      const json::value* fv = item.get_object().if_contains(args[1].get_string());
      if (fv != nullptr && values_equal(*fv, args[2]))
        return item;
    }
    return json::value(nullptr);
  }
  if (f == "merge") {
    if (!args[0].is_object() || !args[1].is_object())
      return type_error(e, "merge() needs two maps");
    json::object out = args[0].get_object();
    for (const auto& kv : args[1].get_object())
      out[kv.key()] = kv.value();
    return json::value(std::move(out));
  }
  if (f == "string")
    return json::value(interpolate(args[0]));
  if (f == "int") {
    if (is_int(args[0]))
      return args[0];
    if (args[0].is_double()) {
      // 2^63 is exactly a double; every double in [-2^63, 2^63) converts, NaN never.
      double d = args[0].get_double();
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return type_error(e, "int() of " + json::serialize(args[0]) + ": out of range");
      return json::value(static_cast<int64_t>(d));
    }
    if (args[0].is_string()) {
      std::string t(args[0].get_string());
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && errno == 0 && end != nullptr && *end == '\0')
        return json::value(static_cast<int64_t>(v));
    }
    return type_error(e, "int() of " + kind_name(args[0]) + " that is not an integer");
  }
  if (f == "json")
    return json::value(json::serialize(args[0]));
  if (f == "trim") {
    std::string t = interpolate(args[0]);
    size_t b = t.find_first_not_of(" \t\r\n");
    size_t en = t.find_last_not_of(" \t\r\n");
    return json::value(b == std::string::npos ? std::string() : t.substr(b, en - b + 1));
  }
  if (f == "join") {
    if (!args[0].is_array() || !args[1].is_string())
      return type_error(e, "join() needs a list and a string");
    std::string out;
    bool first = true;
    for (const auto& item : args[0].get_array()) {
      if (!first)
        out += args[1].get_string();
      first = false;
      out += interpolate(item);
      if (out.size() > EvalBudget::kMaxEvalBytes)
        return over_budget(e);
    }
    return json::value(out);
  }
  if (f == "shellquote")
    return json::value(base::shell_quote(interpolate(args[0])));
  if (f == "pathsafe") {
    if (!args[0].is_string() && !is_int(args[0]))
      return type_error(e, "pathsafe() of " + kind_name(args[0]));
    std::string t = interpolate(args[0]);
    if (!is_safe_path_component(t))
      return base::Status::InvalidArgument(
          "pathsafe(): " + quoted_for_message(t) +
          " is not a safe file name (1 to 255 of A-Z a-z 0-9 . _ -, not \".\" or \"..\", "
          "not starting with \"-\")");
    return json::value(t);
  }
  if (f == "range") {
    for (size_t i = 0; i < args.size(); ++i) {
      if (!is_int64(args[i]))
        return type_error(e, "range() needs integers, not " + kind_name(args[i]) +
                                 (is_int(args[i]) ? " out of range" : ""));
    }
    int64_t from = args.size() == 2 ? as_int(args[0]) : 0;
    int64_t to = as_int(args.back());
    if (to > from && static_cast<uint64_t>(to) - static_cast<uint64_t>(from) >
                         static_cast<uint64_t>(kMaxListItems))
      return type_error(e, "range() of more than " + std::to_string(kMaxListItems) + " numbers");
    json::array out;
    for (int64_t i = from; i < to; ++i)
      out.push_back(i);
    return json::value(std::move(out));
  }
  if (f == "slice") {
    if (!args[0].is_array() || !is_int64(args[1]) || (args.size() == 3 && !is_int64(args[2])))
      return type_error(e, "slice() needs a list and integer positions");
    const json::array& a = args[0].get_array();
    auto n = static_cast<int64_t>(a.size());
    // Python's rules: a negative position counts from the end; out of range is clamped.
    auto pos = [n](int64_t p) { return std::clamp(p < 0 ? p + n : p, int64_t{0}, n); };
    int64_t from = pos(as_int(args[1])), to = args.size() == 3 ? pos(as_int(args[2])) : n;
    json::array out;
    for (int64_t i = from; i < to; ++i)
      out.push_back(a[static_cast<size_t>(i)]);
    return json::value(std::move(out));
  }
  if (f == "flatten" || f == "concat") {
    // concat(l1, l2, ...): the lists one after the other; flatten(list): the lists in one
    // list (one level: flatten(map(sets, s, map(range(s.count), ...)))).
    if (f == "flatten" && !args[0].is_array())
      return type_error(e, "flatten() needs a list of lists, not " + kind_name(args[0]));
    const json::array& lists =
        f == "flatten" ? args[0].get_array() : json::array(args.begin(), args.end());
    json::array out;
    for (const auto& a : lists) {
      if (!a.is_array())
        return type_error(e, f == "flatten"
                                 ? "flatten() needs a list of lists; an item is " + kind_name(a)
                                 : "concat() needs lists, not " + kind_name(a));
      if (static_cast<int64_t>(out.size() + a.get_array().size()) > kMaxListItems)
        return type_error(e, f + "() of more than " + std::to_string(kMaxListItems) + " items");
      out.insert(out.end(), a.get_array().begin(), a.get_array().end());
    }
    return json::value(std::move(out));
  }
  if (f == "distinct" || f == "sort" || f == "first" || f == "last") {
    if (!args[0].is_array())
      return type_error(e, f + "() of " + kind_name(args[0]));
    const json::array& a = args[0].get_array();
    if (f == "first" || f == "last") {
      if (a.empty())  // not set: default(first(list), x) gives x
        return missing(e);
      return f == "first" ? a.front() : a.back();
    }
    if (f == "distinct") {
      // The first of equal items, in order; equal as values_equal says for numbers (1 and
      // 1.0), by their JSON otherwise. O(n log n): a request's list may be long.
      std::set<std::string> seen;
      json::array out;
      for (const auto& v : a) {
        std::string key;
        if (is_int64(v))
          key = "i" + std::to_string(as_int(v));
        else if (is_number(v) && std::nearbyint(as_double(v)) == as_double(v) &&
                 std::fabs(as_double(v)) < 9.2e18)
          key = "i" + std::to_string(static_cast<int64_t>(as_double(v)));
        else
          key = "j" + json::serialize(v);
        if (seen.insert(std::move(key)).second)
          out.push_back(v);
      }
      return json::value(std::move(out));
    }
    bool numbers = std::all_of(a.begin(), a.end(), [](const json::value& v) {
      return is_number(v) && std::isfinite(as_double(v));
    });
    bool strings =
        std::all_of(a.begin(), a.end(), [](const json::value& v) { return v.is_string(); });
    if (!numbers && !strings)
      return type_error(e, "sort() needs a list of (finite) numbers or of strings");
    json::array out = a;
    std::stable_sort(out.begin(), out.end(), [numbers](const json::value& x, const json::value& y) {
      if (!numbers)
        return x.get_string() < y.get_string();
      if (x.is_int64() && y.is_int64())  // exact beyond 2^53
        return x.get_int64() < y.get_int64();
      return as_double(x) < as_double(y);
    });
    return json::value(std::move(out));
  }
  if (f == "keys") {
    if (!args[0].is_object())
      return type_error(e, "keys() of " + kind_name(args[0]));
    json::array out;
    for (const auto& kv : args[0].get_object())
      out.push_back(json::string(kv.key()));
    return json::value(std::move(out));
  }
  return base::Status::Internal("function \"" + f + "\" has a signature but no body");
}

R eval_binary(const Expr& e, const Scope& s) {
  const std::string& op = e.name;
  if (op == "&&" || op == "||") {
    R a = eval(*e.kids[0], s);
    if (!a.ok())
      return a;
    if (!a.value().is_bool())
      return type_error(*e.kids[0], "expected a boolean, found " + kind_name(a.value()));
    bool av = a.value().get_bool();
    if ((op == "&&" && !av) || (op == "||" && av))
      return json::value(av);
    R b = eval(*e.kids[1], s);
    if (!b.ok())
      return b;
    if (!b.value().is_bool())
      return type_error(*e.kids[1], "expected a boolean, found " + kind_name(b.value()));
    return b;
  }
  R ar = eval(*e.kids[0], s);
  if (!ar.ok())
    return ar;
  R br = eval(*e.kids[1], s);
  if (!br.ok())
    return br;
  const json::value& a = ar.value();
  const json::value& b = br.value();
  if (op == "==")
    return json::value(values_equal(a, b));
  if (op == "!=")
    return json::value(!values_equal(a, b));
  if (op == "+" && (a.is_string() || b.is_string())) {
    std::string x = interpolate(a), y = interpolate(b);
    if (!EvalBudget::charge(x.size() + y.size()))
      return over_budget(e);
    return json::value(x + y);
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int c;
    if (is_number(a) && is_number(b)) {
      double x = as_double(a), y = as_double(b);
      c = x < y ? -1 : x > y ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      c = std::string_view(a.get_string()).compare(std::string_view(b.get_string()));
    } else {
      return type_error(e, "cannot compare " + kind_name(a) + " with " + kind_name(b));
    }
    bool r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    return json::value(r);
  }
  if (!is_number(a) || !is_number(b))
    return type_error(
        e, "\"" + op + "\" needs numbers, found " + kind_name(a) + " and " + kind_name(b));
  if (is_int(a) && is_int(b)) {
    int64_t x = as_int(a), y = as_int(b);
    if ((op == "/" || op == "%") && y == 0)
      return type_error(e, "division by zero");
    int64_t r = 0;
    bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                    : op == "-" ? __builtin_sub_overflow(x, y, &r)
                    : op == "*" ? __builtin_mul_overflow(x, y, &r)
                                : x == INT64_MIN && y == -1;  // the one / and % that overflow
    if (overflow)
      return type_error(
          e, "integer overflow in " + std::to_string(x) + " " + op + " " + std::to_string(y));
    if (op == "/")
      r = x / y;
    else if (op == "%")
      r = x % y;
    return json::value(r);
  }
  double x = as_double(a), y = as_double(b);
  if (op == "%")
    return json::value(std::fmod(x, y));
  double r = op == "+" ? x + y : op == "-" ? x - y : op == "*" ? x * y : x / y;
  return json::value(r);
}

// Reads a path (a name, then .field or [index] steps) in place: a pointer into the scope's
// values, or into `holder` when the path starts at a computed value. eval() copies only the
// value the path ends at, not the document it reads from (request.additionalParams.x used
// to copy the whole request at every read). Each part is evaluated once.
base::Result<const json::value*> resolve(const Expr& e, const Scope& s, json::value& holder) {
  switch (e.op) {
    case Expr::Op::kRoot: {
      for (const Binding* b = s.bound; b != nullptr; b = b->outer)
        if (b->name == e.name)
          return b->value;
      const json::value* v = nullptr;
      if (e.name == "request")
        v = s.request;
      else if (e.name == "instance")
        v = s.instance;
      else if (e.name == "vnfd")
        v = s.vnfd;
      else if (e.name == "op")
        v = s.op;
      else if (e.name == "self")
        v = s.self;
      else if (e.name == "inputs")
        v = s.inputs;
      else if (!s.item_name.empty() && e.name == s.item_name)
        v = s.item;
      else if (!s.item_name.empty() && e.name == "index")
        return &(holder = json::value(s.item_index));
      if (v == nullptr)
        return missing(e);
      return v;
    }
    case Expr::Op::kField: {
      const Expr& base = *e.kids[0];
      if (base.op == Expr::Op::kRoot && base.name == "states") {
        if (s.outputs == nullptr)
          return missing(e);
        std::string key = std::string(s.segment) + "." + e.name;
        const json::value* v = s.outputs->if_contains(key);
        if (v == nullptr)
          return base::Status::NotFound("state \"" + e.name + "\" has no outputs (it did not run)");
        return v;
      }
      base::Result<const json::value*> b = resolve(base, s, holder);
      if (!b.ok())
        return b;
      if (!b.value()->is_object())
        return type_error(e, "expected a map, found " + kind_name(*b.value())).status();
      const json::value* v = b.value()->get_object().if_contains(e.name);
      if (v == nullptr)
        return missing(e);
      return v;
    }
    case Expr::Op::kIndex: {
      base::Result<const json::value*> b = resolve(*e.kids[0], s, holder);
      if (!b.ok())
        return b;
      R i = eval(*e.kids[1], s);
      if (!i.ok())
        return i.status();
      if (b.value()->is_array()) {
        if (!is_int(i.value()))
          return type_error(e, "a list index must be an integer").status();
        int64_t n = as_int(i.value());
        const auto& arr = b.value()->get_array();
        if (n < 0)
          n += static_cast<int64_t>(arr.size());
        if (n < 0 || n >= static_cast<int64_t>(arr.size()))
          return base::Status::NotFound(path_of(e) + ": index " + std::to_string(n) +
                                        " is out of range");
        return &arr[static_cast<size_t>(n)];
      }
      if (b.value()->is_object()) {
        if (!i.value().is_string())
          return type_error(e, "a map key must be a string").status();
        const json::value* v = b.value()->get_object().if_contains(i.value().get_string());
        if (v == nullptr)
          return base::Status::NotFound(path_of(*e.kids[0]) + "[\"" +
                                        std::string(i.value().get_string()) + "\"] is not set");
        return v;
      }
      return type_error(e, "cannot index " + kind_name(*b.value())).status();
    }
    default: {
      R v = eval(e, s);
      if (!v.ok())
        return v.status();
      holder = std::move(v).value();
      return &holder;
    }
  }
}

R eval(const Expr& e, const Scope& s) {
  switch (e.op) {
    case Expr::Op::kLiteral:
      return e.value;
    case Expr::Op::kList: {
      json::array out;
      for (const auto& k : e.kids) {
        R v = eval(*k, s);
        if (!v.ok())
          return v;
        out.push_back(std::move(v).value());
      }
      return json::value(std::move(out));
    }
    case Expr::Op::kMap: {
      // What a literal holds counts against the budget: {a: states.big, b: states.big, ...}
      // copies the value once per key.
      json::object out;
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        R v = eval(*e.kids[k + 1], s);
        if (!v.ok())
          return v;
        if (!EvalBudget::charge(EvalBudget::size_of(v.value())))
          return over_budget(e);
        out[e.kids[k]->value.get_string()] = std::move(v).value();
      }
      return json::value(std::move(out));
    }
    case Expr::Op::kRoot:
    case Expr::Op::kField:
    case Expr::Op::kIndex: {
      json::value holder;
      base::Result<const json::value*> v = resolve(e, s, holder);
      if (!v.ok())
        return v.status();
      // Inside map() and filter() a read is repeated per item: what it copies counts.
      if (t_loop_depth > 0 && !EvalBudget::charge(EvalBudget::size_of(*v.value())))
        return over_budget(e);
      return *v.value();
    }
    case Expr::Op::kCall:
      return eval_call(e, s);
    case Expr::Op::kNot: {
      R v = eval(*e.kids[0], s);
      if (!v.ok())
        return v;
      if (!v.value().is_bool())
        return type_error(e, "\"!\" needs a boolean, found " + kind_name(v.value()));
      return json::value(!v.value().get_bool());
    }
    case Expr::Op::kNeg: {
      R v = eval(*e.kids[0], s);
      if (!v.ok())
        return v;
      if (is_int(v.value())) {
        int64_t n = as_int(v.value());
        if (n == INT64_MIN)
          return type_error(e, "integer overflow in -(" + std::to_string(n) + ")");
        return json::value(-n);
      }
      if (v.value().is_double())
        return json::value(-v.value().get_double());
      return type_error(e, "\"-\" needs a number, found " + kind_name(v.value()));
    }
    case Expr::Op::kBinary:
      return eval_binary(e, s);
  }
  return base::Status::Internal("bad expression");
}

// ---------------------------------------------------------------------------------------
// Type checking

using K = Type::Kind;

TypeRef prim(K k) {
  static const TypeRef kTypes[] = {
      std::make_shared<Type>(Type{K::kAny, nullptr, {}, ""}),
      std::make_shared<Type>(Type{K::kNull, nullptr, {}, ""}),
      std::make_shared<Type>(Type{K::kBool, nullptr, {}, ""}),
      std::make_shared<Type>(Type{K::kInt, nullptr, {}, ""}),
      std::make_shared<Type>(Type{K::kNumber, nullptr, {}, ""}),
      std::make_shared<Type>(Type{K::kString, nullptr, {}, ""}),
  };
  return kTypes[static_cast<int>(k)];
}

bool is_num_type(const Type& t) {
  return t.kind == K::kInt || t.kind == K::kNumber;
}

class Checker {
 public:
  Checker(const TypeScope& s, std::vector<TypeError>& errors) : s_(s), errors_(errors) {}

  TypeRef check(const Expr& e) {
    switch (e.op) {
      case Expr::Op::kLiteral:
        return type_of_literal(e.value);
      case Expr::Op::kList: {
        TypeRef elem;
        for (const auto& k : e.kids) {
          TypeRef t = check(*k);
          elem = elem == nullptr ? t : join(elem, t);
        }
        return make_type(K::kList, elem ? elem : prim(K::kAny));
      }
      case Expr::Op::kMap: {
        if (e.kids.empty())
          return make_type(K::kMap, prim(K::kAny));
        // A literal's keys are known: an object type, so a misspelt field read from it is
        // W0021 and a field's type flows on.
        auto t = std::make_shared<Type>();
        t->kind = K::kObject;
        for (size_t k = 0; k + 1 < e.kids.size(); k += 2)
          t->fields.emplace_back(std::string(e.kids[k]->value.get_string()), check(*e.kids[k + 1]),
                                 true);
        return t;
      }
      case Expr::Op::kRoot:
        return root(e);
      case Expr::Op::kField:
        return field(e);
      case Expr::Op::kIndex: {
        TypeRef b = check(*e.kids[0]);
        TypeRef i = check(*e.kids[1]);
        if (b->kind == K::kList) {
          if (i->kind != K::kInt && i->kind != K::kAny)
            error(*e.kids[1], "W0013", "a list index must be an integer, not " + to_string(*i));
          return b->elem;
        }
        if (b->kind == K::kMap) {
          if (i->kind != K::kString && i->kind != K::kAny)
            error(*e.kids[1], "W0013", "a map key must be a string, not " + to_string(*i));
          return b->elem;
        }
        if (b->kind == K::kObject) {
          if (e.kids[1]->op == Expr::Op::kLiteral && e.kids[1]->value.is_string()) {
            const Field* f = b->field(e.kids[1]->value.get_string());
            if (f != nullptr)
              return f->type;
          }
          return prim(K::kAny);
        }
        if (b->kind != K::kAny)
          error(e, "W0013", "cannot index " + to_string(*b));
        return prim(K::kAny);
      }
      case Expr::Op::kCall:
        return call(e);
      case Expr::Op::kNot: {
        TypeRef t = check(*e.kids[0]);
        expect(*e.kids[0], *t, *prim(K::kBool), "\"!\"");
        return prim(K::kBool);
      }
      case Expr::Op::kNeg: {
        TypeRef t = check(*e.kids[0]);
        if (!is_num_type(*t) && t->kind != K::kAny)
          error(e, "W0013", "\"-\" needs a number, not " + to_string(*t));
        return t->kind == K::kAny ? prim(K::kNumber) : t;
      }
      case Expr::Op::kBinary:
        return binary(e);
    }
    return prim(K::kAny);
  }

 private:
  void error(const Expr& e, std::string code, std::string msg) {
    errors_.push_back({std::move(msg), e.offset, std::move(code)});
  }
  void expect(const Expr& e, const Type& got, const Type& want, const std::string& what) {
    if (!assignable(got, want))
      error(e, "W0013", what + " needs " + to_string(want) + ", not " + to_string(got));
  }
  static TypeRef join(const TypeRef& a, const TypeRef& b) {
    if (a->kind == K::kNull)
      return b;
    if (b->kind == K::kNull)
      return a;
    if (assignable(*a, *b))
      return b;
    if (assignable(*b, *a))
      return a;
    return prim(K::kAny);
  }

  TypeRef root(const Expr& e) {
    const std::string& n = e.name;
    if (const TypeScope::Bound* b = s_.find_bound(n))
      return b->type;
    if (n == "request" && s_.request)
      return s_.request;
    if (n == "instance" && s_.instance)
      return s_.instance;
    if (n == "vnfd" && s_.vnfd)
      return s_.vnfd;
    if (n == "op" && s_.op)
      return s_.op;
    if (n == "self" && s_.self)
      return s_.self;
    if (n == "inputs" && s_.inputs)
      return s_.inputs;
    if (!s_.item_name.empty() && n == s_.item_name)
      return s_.item ? s_.item : prim(K::kAny);
    if (!s_.item_name.empty() && n == "index")
      return prim(K::kInt);
    if (n == "states") {
      error(e, "W0021", "\"states\" needs a state name: states.NAME.OUTPUT");
      return prim(K::kAny);
    }
    std::vector<std::string> names = {"request", "instance", "vnfd", "op", "states"};
    for (const auto& b : s_.bound)
      names.push_back(b.name);
    if (s_.self)
      names.push_back("self");
    if (s_.inputs)
      names.push_back("inputs");
    if (!s_.item_name.empty()) {
      names.push_back(s_.item_name);
      names.push_back("index");
    }
    std::string msg = "unknown name \"" + n + "\"";
    if (n == "index")
      msg = "\"index\" is only defined in a for_each state (the item's position)";
    if (n == "self")
      msg = "\"self\" is only defined in a compensation";
    if (n == "inputs")
      msg = "\"inputs\" is only defined in a workflow that a state calls (its declared inputs)";
    std::string hint = base::closest_match(n, names);
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    error(e, "W0021", msg);
    return prim(K::kAny);
  }

  TypeRef field(const Expr& e) {
    const Expr& b = *e.kids[0];
    if (b.op == Expr::Op::kRoot && b.name == "states") {
      if (!s_.states_note.empty()) {
        error(e, "W0021", s_.states_note);
        return prim(K::kAny);
      }
      auto before = [&](const TypeScope::StateOutput& o) {
        return o.index != s_.self_index && s_.ran_before && s_.ran_before(o.index);
      };
      if (s_.states != nullptr) {
        auto it = s_.states->find(e.name);
        if (it != s_.states->end() && it->second.index != s_.self_index) {
          if (before(it->second))
            return it->second.type;
          error(e, "W0021",
                "state \"" + e.name +
                    "\" may not have run (or succeeded) before this one; its outputs " +
                    "can only be read by states that always come after it");
          return prim(K::kAny);
        }
      }
      std::vector<std::string> names;
      if (s_.states != nullptr)
        for (const auto& kv : *s_.states)
          if (before(kv.second))
            names.push_back(kv.first);
      std::string msg = "no state \"" + e.name + "\" before this one";
      std::string hint = base::closest_match(e.name, names);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      error(e, "W0021", msg);
      return prim(K::kAny);
    }
    TypeRef t = check(b);
    switch (t->kind) {
      case K::kAny:
        return prim(K::kAny);
      case K::kMap:
        return t->elem;
      case K::kObject: {
        const Field* f = t->field(e.name);
        if (f != nullptr)
          return f->type;
        std::vector<std::string> names;
        for (const auto& fl : t->fields)
          names.push_back(fl.name);
        std::string msg = path_of(b) + " has no field \"" + e.name + "\"";
        std::string hint = base::closest_match(e.name, names);
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        error(e, "W0021", msg);
        return prim(K::kAny);
      }
      default:
        error(e, "W0013", path_of(b) + " is " + to_string(*t) + ", which has no fields");
        return prim(K::kAny);
    }
  }

  // map(LIST, NAME, EXPR) and filter(LIST, NAME, CONDITION): EXPR checked with NAME bound
  // to LIST's element type.
  TypeRef map_or_filter(const Expr& e) {
    const std::string& f = e.name;
    TypeRef list = check(*e.kids[0]);
    if (list->kind != K::kAny && list->kind != K::kList)
      error(*e.kids[0], "W0013", f + "() needs a list, not " + to_string(*list));
    const Expr& name = *e.kids[1];
    TypeScope inner = s_;
    if (name.op != Expr::Op::kRoot) {
      error(name, "W0013",
            f + "()'s second argument names the element: a name such as x, not an expression");
      return prim(K::kAny);
    }
    if (is_scope_name(name.name) || name.name == s_.item_name || s_.find_bound(name.name)) {
      error(
          name, "W0013",
          f + "(): \"" + name.name + "\" already means something here; name the element otherwise");
      return prim(K::kAny);
    }
    TypeRef elem = list->kind == K::kList && list->elem ? list->elem : prim(K::kAny);
    // (Whether the item carries request text is carries_request_text's own business: asking
    // here would type-check the list again at every level of a nesting, 2^depth times.)
    inner.bound.push_back({name.name, elem, false});
    TypeRef body = Checker(inner, errors_).check(*e.kids[2]);
    if (f == "filter") {
      if (body->kind != K::kAny && body->kind != K::kBool)
        error(*e.kids[2], "W0013",
              "filter()'s condition must be a boolean, not " + to_string(*body));
      return list->kind == K::kList ? list : make_type(K::kList, prim(K::kAny));
    }
    return make_type(K::kList, body);
  }

  TypeRef call(const Expr& e) {
    if (e.name == "map" || e.name == "filter") {
      if (e.kids.size() == 3)
        return map_or_filter(e);
      error(e, "W0013", find_sig(e.name)->arity_error(e.kids.size()));
      return prim(K::kAny);
    }
    const Sig* sig = find_sig(e.name);
    std::vector<TypeRef> args;
    for (const auto& k : e.kids)
      args.push_back(check(*k));
    if (sig == nullptr) {
      std::vector<std::string> names;
      for (const auto& s : kSigs)
        names.push_back(s.name);
      std::string msg = "unknown function \"" + e.name + "\"";
      std::string hint = base::closest_match(e.name, names);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      error(e, "W0021", msg);
      return prim(K::kAny);
    }
    if (!sig->takes(args.size())) {
      error(e, "W0013", sig->arity_error(args.size()));
      return prim(K::kAny);
    }
    const std::string& f = e.name;
    auto coll = [](const Type& t) {
      return t.kind == K::kAny || t.kind == K::kList || t.kind == K::kMap || t.kind == K::kObject ||
             t.kind == K::kString;
    };
    if (f == "default")
      return join(args[0], args[1]);
    if (f == "if") {
      if (args[0]->kind != K::kAny && args[0]->kind != K::kBool)
        error(*e.kids[0], "W0013", "if() needs a boolean condition, not " + to_string(*args[0]));
      return join(args[1], args[2]);
    }
    if (f == "len") {
      if (!coll(*args[0]))
        error(*e.kids[0], "W0013", "len() needs a list, map or string, not " + to_string(*args[0]));
      return prim(K::kInt);
    }
    if (f == "contains") {
      if (!coll(*args[0]))
        error(*e.kids[0], "W0013",
              "contains() needs a list, map or string, not " + to_string(*args[0]));
      return prim(K::kBool);
    }
    if (f == "merge") {
      for (size_t i = 0; i < 2; ++i) {
        if (args[i]->kind != K::kAny && args[i]->kind != K::kMap && args[i]->kind != K::kObject)
          error(*e.kids[i], "W0013", "merge() needs maps, not " + to_string(*args[i]));
      }
      return args[0]->kind == K::kMap ? args[0] : make_type(K::kMap, prim(K::kAny));
    }
    if (f == "string" || f == "json" || f == "trim" || f == "shellquote")
      return prim(K::kString);
    if (f == "pathsafe") {
      if (args[0]->kind != K::kAny && args[0]->kind != K::kString && args[0]->kind != K::kInt)
        error(*e.kids[0], "W0013",
              "pathsafe() needs a string or an integer, not " + to_string(*args[0]));
      return prim(K::kString);
    }
    if (f == "int")
      return prim(K::kInt);
    auto list_arg = [&](size_t i) {
      if (args[i]->kind != K::kAny && args[i]->kind != K::kList)
        error(*e.kids[i], "W0013", f + "() needs a list, not " + to_string(*args[i]));
    };
    if (f == "join") {
      list_arg(0);
      expect(*e.kids[1], *args[1], *prim(K::kString), "join()");
      return prim(K::kString);
    }
    if (f == "keys")
      return make_type(K::kList, prim(K::kString));
    if (f == "range") {
      for (size_t i = 0; i < args.size(); ++i)
        expect(*e.kids[i], *args[i], *prim(K::kInt), "range()");
      return make_type(K::kList, prim(K::kInt));
    }
    if (f == "slice" || f == "distinct" || f == "sort") {
      list_arg(0);
      for (size_t i = 1; i < args.size(); ++i)
        expect(*e.kids[i], *args[i], *prim(K::kInt), "slice()");
      return args[0]->kind == K::kList ? args[0] : make_type(K::kList, prim(K::kAny));
    }
    if (f == "concat") {
      TypeRef elem;
      for (size_t i = 0; i < args.size(); ++i) {
        list_arg(i);
        TypeRef el = args[i]->kind == K::kList && args[i]->elem ? args[i]->elem : prim(K::kAny);
        elem = elem ? join(elem, el) : el;
      }
      return make_type(K::kList, elem);
    }
    if (f == "first" || f == "last") {
      list_arg(0);
      return args[0]->kind == K::kList && args[0]->elem ? args[0]->elem : prim(K::kAny);
    }
    if (f == "flatten") {
      list_arg(0);
      if (args[0]->kind == K::kList && args[0]->elem) {
        const Type& inner = *args[0]->elem;
        if (inner.kind == K::kList)
          return make_type(K::kList, inner.elem ? inner.elem : prim(K::kAny));
        if (inner.kind != K::kAny)
          error(*e.kids[0], "W0013", "flatten() needs a list of lists, not " + to_string(*args[0]));
      }
      return make_type(K::kList, prim(K::kAny));
    }
    if (f == "find") {
      list_arg(0);
      expect(*e.kids[1], *args[1], *prim(K::kString), "find()");
      if (args[0]->kind == K::kList && args[0]->elem)
        return args[0]->elem;
      return prim(K::kAny);
    }
    return prim(K::kAny);
  }

  TypeRef binary(const Expr& e) {
    TypeRef a = check(*e.kids[0]);
    TypeRef b = check(*e.kids[1]);
    const std::string& op = e.name;
    if (op == "&&" || op == "||") {
      expect(*e.kids[0], *a, *prim(K::kBool), "\"" + op + "\"");
      expect(*e.kids[1], *b, *prim(K::kBool), "\"" + op + "\"");
      return prim(K::kBool);
    }
    if (op == "==" || op == "!=")
      return prim(K::kBool);
    bool any = a->kind == K::kAny || b->kind == K::kAny;
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      bool ok = any || (is_num_type(*a) && is_num_type(*b)) ||
                (a->kind == K::kString && b->kind == K::kString);
      if (!ok)
        error(e, "W0013", "cannot compare " + to_string(*a) + " with " + to_string(*b));
      return prim(K::kBool);
    }
    if (op == "+" && (a->kind == K::kString || b->kind == K::kString))
      return prim(K::kString);
    if (!any && !(is_num_type(*a) && is_num_type(*b))) {
      error(e, "W0013",
            "\"" + op + "\" needs numbers, not " + to_string(*a) + " and " + to_string(*b));
      return prim(K::kNumber);
    }
    if (a->kind == K::kInt && b->kind == K::kInt)
      return prim(K::kInt);
    if (any)
      return (a->kind == K::kInt || b->kind == K::kInt) ? prim(K::kInt) : prim(K::kNumber);
    return prim(K::kNumber);
  }

  const TypeScope& s_;
  std::vector<TypeError>& errors_;
};

}  // namespace

std::shared_ptr<const Expr> Expr::parse(std::string_view text, std::string* error,
                                        uint32_t* error_offset, std::string* code) {
  Parser p(text);
  auto e = p.parse_all();
  if (!e) {
    *error = p.error_.empty() ? "malformed expression" : p.error_;
    *error_offset = p.error_offset_;
    if (code != nullptr)
      *code = p.code_;
  }
  return e;
}

namespace {
thread_local size_t t_budget_used = 0;
thread_local int t_budget_depth = 0;
}  // namespace

EvalBudget::EvalBudget() {
  if (t_budget_depth++ == 0)
    t_budget_used = 0;
}

EvalBudget::~EvalBudget() {
  --t_budget_depth;
}

bool EvalBudget::charge(size_t bytes) {
  t_budget_used += std::min(bytes, kMaxEvalBytes + 1);
  return t_budget_used <= kMaxEvalBytes;
}

size_t EvalBudget::size_of(const json::value& v, size_t cap) {
  size_t n = 16;
  if (v.is_string()) {
    n += v.get_string().size();
  } else if (v.is_array()) {
    for (const auto& x : v.get_array()) {
      if (n > cap)
        break;
      n += size_of(x, cap - n);
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (n > cap)
        break;
      n += kv.key().size() + size_of(kv.value(), cap - n);
    }
  }
  return n;
}

base::Result<json::value> Expr::evaluate(const Scope& scope) const {
  EvalBudget budget;
  return eval(*this, scope);
}

base::Result<json::value> evaluate(const Expr& e, const Scope& scope) {
  EvalBudget budget;
  return eval(e, scope);
}

bool is_scope_name(std::string_view n) {
  return n == "request" || n == "instance" || n == "vnfd" || n == "op" || n == "states" ||
         n == "self" || n == "index" || n == "inputs";
}

TypeRef check_expr(const Expr& e, const TypeScope& scope, std::vector<TypeError>& errors) {
  return Checker(scope, errors).check(e);
}

bool carries_request_text(const Expr& e, const TypeScope& scope) {
  // A field declared a number or a boolean cannot carry text into a command line (the
  // request is checked against its SOL003 type before it is queued). Only a path's declared
  // type counts: a call's or an operator's static type may come from joining `any` with a
  // literal (concat(request.additionalParams.ports, [22]) is list(integer) to the checker
  // and any text at run time), and so may a fan-out item over such a list.
  if (e.op == Expr::Op::kRoot || e.op == Expr::Op::kField || e.op == Expr::Op::kIndex) {
    const Expr* root = &e;
    while (root->op == Expr::Op::kField || root->op == Expr::Op::kIndex)
      root = root->kids[0].get();
    bool declared = root->op == Expr::Op::kRoot &&
                    !(!scope.item_name.empty() && root->name == scope.item_name &&
                      scope.item_from_request);  // a path from a name, not from a call
    std::vector<TypeError> ignored;
    TypeRef t = check_expr(e, scope, ignored);
    if (declared &&
        (t->kind == K::kInt || t->kind == K::kNumber || t->kind == K::kBool || t->kind == K::kNull))
      return false;
  }
  auto any_kid = [&] {
    return std::any_of(e.kids.begin(), e.kids.end(),
                       [&](const auto& k) { return carries_request_text(*k, scope); });
  };
  switch (e.op) {
    case Expr::Op::kLiteral:
    case Expr::Op::kNot:
    case Expr::Op::kNeg:
      return false;
    case Expr::Op::kRoot:
      if (const TypeScope::Bound* b = scope.find_bound(e.name))
        return b->from_request;
      // A called workflow's inputs may be anything its caller passed, request text included.
      return e.name == "request" || e.name == "inputs" ||
             (!scope.item_name.empty() && e.name == scope.item_name && scope.item_from_request);
    case Expr::Op::kField:
      if (e.kids[0]->op == Expr::Op::kRoot && e.kids[0]->name == "states")
        return false;
      return carries_request_text(*e.kids[0], scope);
    case Expr::Op::kIndex:
      // The value comes from the indexed collection; the index only selects.
      return carries_request_text(*e.kids[0], scope);
    case Expr::Op::kCall:
      if (e.name == "shellquote" || e.name == "pathsafe" || e.name == "int" || e.name == "len" ||
          e.name == "contains" || e.name == "range")
        return false;
      if ((e.name == "map" || e.name == "filter") && e.kids.size() == 3 &&
          e.kids[1]->op == Expr::Op::kRoot) {
        // filter() keeps elements of its list; map() makes its expression's values, in a
        // scope where the element carries what the list carries.
        bool list = carries_request_text(*e.kids[0], scope);
        if (e.name == "filter")
          return list;
        TypeScope inner = scope;
        inner.bound.push_back({e.kids[1]->name, prim(K::kAny), list});
        return carries_request_text(*e.kids[2], inner);
      }
      return any_kid();
    case Expr::Op::kList:
    case Expr::Op::kMap:  // the keys are literals; the values may be request text
      return any_kid();
    case Expr::Op::kBinary:
      if (e.name != "+" && e.name != "-" && e.name != "*" && e.name != "/" && e.name != "%")
        return false;  // comparisons, && and ||: booleans
      return any_kid();
  }
  return true;
}

bool split_template_string(std::string_view s, std::vector<StringPart>& parts, std::string* error,
                           uint32_t* error_offset) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t open = s.find("${", pos);
    if (open == std::string_view::npos) {
      parts.push_back({false, std::string(s.substr(pos)), static_cast<uint32_t>(pos)});
      break;
    }
    if (open > pos && s[open - 1] == '$') {
      // "$${" is a literal "${" (a shell's ${VAR:-x}): the text up to it, one '$' dropped.
      parts.push_back(
          {false, std::string(s.substr(pos, open - pos - 1)) + "${", static_cast<uint32_t>(pos)});
      pos = open + 2;
      continue;
    }
    if (open > pos)
      parts.push_back({false, std::string(s.substr(pos, open - pos)), static_cast<uint32_t>(pos)});
    // Find the matching '}' outside quoted strings.
    size_t i = open + 2;
    char quote = 0;
    int depth = 0;
    for (; i < s.size(); ++i) {
      char c = s[i];
      if (quote != 0) {
        if (c == '\\')
          ++i;
        else if (c == quote)
          quote = 0;
        continue;
      }
      if (c == '\'' || c == '"')
        quote = c;
      else if (c == '{')
        ++depth;
      else if (c == '}') {
        if (depth == 0)
          break;
        --depth;
      }
    }
    if (i >= s.size()) {
      *error = "\"${\" without a closing \"}\"";
      *error_offset = static_cast<uint32_t>(open);
      return false;
    }
    parts.push_back(
        {true, std::string(s.substr(open + 2, i - open - 2)), static_cast<uint32_t>(open + 2)});
    pos = i + 1;
  }
  return true;
}

bool is_safe_path_component(std::string_view s) {
  if (s.empty() || s.size() > 255 || s == "." || s == ".." || s[0] == '-')
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string interpolate(const json::value& v) {
  if (v.is_string())
    return std::string(v.get_string());
  if (v.is_null())
    return "";
  return json::serialize(v);
}

TypeRef make_type(Type::Kind k, TypeRef elem) {
  if (elem == nullptr && k != K::kList && k != K::kMap && k != K::kObject)
    return prim(k);
  auto t = std::make_shared<Type>();
  t->kind = k;
  t->elem = elem ? std::move(elem) : prim(K::kAny);
  return t;
}

TypeRef any_type() {
  return prim(K::kAny);
}

TypeRef parse_type_name(std::string_view s,
                        const std::function<TypeRef(std::string_view)>& lookup) {
  // A package's own type names (a called workflow's inputs) nest at most this deep.
  constexpr int kMaxDepth = 16;
  int depth = 0;
  for (std::string_view rest = s; depth <= kMaxDepth;) {
    size_t open = rest.find('(');
    if (open == std::string_view::npos)
      break;
    ++depth;
    rest.remove_prefix(open + 1);
  }
  if (depth > kMaxDepth)
    return nullptr;
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ')
    s.remove_suffix(1);
  if (s == "any")
    return prim(K::kAny);
  if (s == "string")
    return prim(K::kString);
  if (s == "integer")
    return prim(K::kInt);
  if (s == "number")
    return prim(K::kNumber);
  if (s == "boolean")
    return prim(K::kBool);
  for (auto [prefix, kind] : {std::pair{"list(", K::kList}, std::pair{"map(", K::kMap}}) {
    std::string_view p(prefix);
    if (s.substr(0, p.size()) == p && s.back() == ')') {
      TypeRef elem = parse_type_name(s.substr(p.size(), s.size() - p.size() - 1), lookup);
      if (elem == nullptr)
        return nullptr;
      return make_type(kind, elem);
    }
  }
  return lookup(s);
}

TypeRef type_of_literal(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return prim(K::kNull);
    case json::kind::bool_:
      return prim(K::kBool);
    case json::kind::int64:
    case json::kind::uint64:
      return prim(K::kInt);
    case json::kind::double_:
      return prim(K::kNumber);
    case json::kind::string:
      return prim(K::kString);
    case json::kind::array: {
      TypeRef elem;
      for (const auto& item : v.get_array()) {
        TypeRef t = type_of_literal(item);
        if (elem == nullptr || elem->kind == K::kNull)
          elem = t;
        else if (!assignable(*t, *elem))
          elem = assignable(*elem, *t) ? t : prim(K::kAny);
      }
      return make_type(K::kList, elem ? elem : prim(K::kAny));
    }
    case json::kind::object:
      return make_type(K::kMap, prim(K::kAny));
  }
  return prim(K::kAny);
}

// ---------------------------------------------------------------------------------------
// Type basics (public)

const Field* Type::field(std::string_view n) const {
  for (const auto& f : fields) {
    if (f.name == n)
      return &f;
  }
  return nullptr;
}

std::string to_string(const Type& t) {
  switch (t.kind) {
    case K::kAny:
      return "any";
    case K::kNull:
      return "null";
    case K::kBool:
      return "boolean";
    case K::kInt:
      return "integer";
    case K::kNumber:
      return "number";
    case K::kString:
      return "string";
    case K::kList:
      return "list(" + to_string(*t.elem) + ")";
    case K::kMap:
      return "map(" + to_string(*t.elem) + ")";
    case K::kObject:
      return t.name.empty() ? "object" : t.name;
  }
  return "?";
}

bool assignable(const Type& from, const Type& to) {
  if (from.kind == K::kAny || to.kind == K::kAny || from.kind == K::kNull)
    return true;
  if (from.kind == K::kInt && to.kind == K::kNumber)
    return true;
  if (from.kind != to.kind) {
    // A map literal ({...} written in YAML) may stand for an object; its fields are
    // checked one by one where it is written.
    if (from.kind == K::kMap && to.kind == K::kObject)
      return from.elem->kind == K::kAny;
    if (from.kind == K::kObject && to.kind == K::kMap) {
      for (const auto& f : from.fields) {
        if (!assignable(*f.type, *to.elem))
          return false;
      }
      return true;
    }
    return false;
  }
  switch (from.kind) {
    case K::kList:
    case K::kMap:
      return assignable(*from.elem, *to.elem);
    case K::kObject:
      if (from.name == to.name && !from.name.empty())
        return true;
      // Structural: every field of `from` exists in `to` with an assignable type.
      for (const auto& f : from.fields) {
        const Field* g = to.field(f.name);
        if (g == nullptr || !assignable(*f.type, *g->type))
          return false;
      }
      return true;
    default:
      return true;
  }
}

}  // namespace workflows
