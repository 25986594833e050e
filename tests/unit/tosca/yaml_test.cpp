// The YAML reader: locations, limits, and the catalog's binary form.
#include <string>

#include <catch2/catch.hpp>

#include "tosca/internal/document.h"

using tosca::internal::parse_yaml;
using tosca::internal::YamlLimits;

namespace {
std::string all(const base::Diagnostics& d) {
  std::string out;
  for (const auto& x : d.sorted())
    out += base::to_string(x) + "\n";
  return out;
}
}  // namespace

TEST_CASE("every value keeps its 1-based line and column", "[tosca][yaml]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("a:\n  b: [1, 'two']\n  c: null\n", "f.yaml", {}, diags);
  REQUIRE(doc);
  tosca::Node b = doc->root().get("a").get("b");
  REQUIRE(b.is_seq());
  CHECK(b.location().line == 2);
  CHECK(b.location().column == 6);
  CHECK(b.item(1).scalar() == "two");
  CHECK(b.item(1).quoted());
  CHECK_FALSE(b.item(0).quoted());
  CHECK(doc->root().get("a").get("c").is_null());
  CHECK(b.item(1).location().file == "f.yaml");
}

TEST_CASE("a byte of a multi-line scalar is located on its own line and column", "[tosca][yaml]") {
  const std::string text =
      "folded: >-\n"               // 1
      "  alpha beta\n"             // 2
      "    gamma\n"                // 3
      "  delta\n"                  // 4
      "literal: |\n"               // 5
      "  one\n"                    // 6
      "\n"                         // 7
      "    two three\n"            // 8
      "plain: first\n"             // 9
      "  second\n"                 // 10
      "quoted: 'it''s x'\n"        // 11
      "dq: \"a\\nb c\"\n"          // 12
      "crlf: >\r\n  x\r\n  y\r\n"  // 13-15
      "anchored: &a1 >-\n"         // 16
      "  p q\n"                    // 17
      "tagged: !!str r s\n";       // 18
  for (bool fast : {true, false}) {
    CAPTURE(fast);
    base::Diagnostics diags;
    auto doc = parse_yaml(text, "f.yaml", {}, diags, fast);
    REQUIRE(doc);
    auto at = [&](const char* key, std::string_view needle) {
      tosca::Node n = doc->root().get(key);
      size_t off = n.scalar().find(needle);
      REQUIRE(off != std::string_view::npos);
      base::SourceLocation l = n.location_at(static_cast<uint32_t>(off));
      return std::to_string(l.line) + ":" + std::to_string(l.column);
    };
    CHECK(doc->root().get("folded").scalar() == "alpha beta\n  gamma\ndelta");
    CHECK(at("folded", "alpha") == "2:3");
    CHECK(at("folded", "beta") == "2:9");
    CHECK(at("folded", "gamma") == "3:5");
    CHECK(at("folded", "delta") == "4:3");
    CHECK(at("literal", "one") == "6:3");
    CHECK(at("literal", "three") == "8:9");
    CHECK(at("plain", "first") == "9:8");
    CHECK(at("plain", "second") == "10:3");
    CHECK(at("quoted", "it") == "11:10");
    // After the '' escape the text no longer maps to columns: the scalar's own location.
    CHECK(at("quoted", "s x") == "11:9");
    CHECK(at("dq", "a") == "12:6");
    CHECK(at("dq", "c") == "12:5");
    CHECK(at("crlf", "y") == "15:3");
    CHECK(at("anchored", "q") == "17:5");
    CHECK(at("tagged", "s") == "18:17");
  }
}

TEST_CASE("duplicate keys are errors at the second key", "[tosca][yaml]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("x: 1\ny: 2\nx: 3\n", "f.yaml", {}, diags);
  REQUIRE(doc);
  CHECK(all(diags) ==
        "f.yaml:3:1: error: duplicate key \"x\" [T0005]\n  note: first defined at line 1\n");
}

TEST_CASE("syntax errors are located", "[tosca][yaml]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("a: [1, 2\nb: 3\n", "f.yaml", {}, diags);
  CHECK(doc == nullptr);
  REQUIRE(diags.size() == 1);
  CHECK(diags.items()[0].code == "T0001");
  CHECK(diags.items()[0].where.line >= 1);
}

TEST_CASE("an alias bomb stops at the expansion limit", "[tosca][yaml][hostile]") {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'j'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" +
            prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
            ", *" + prev + "]\n";
    prev = c;
  }
  base::Diagnostics diags;
  YamlLimits limits;
  limits.max_nodes = 100000;
  auto doc = parse_yaml(bomb, "bomb.yaml", limits, diags);
  CHECK(doc == nullptr);
  REQUIRE(diags.size() == 1);
  CHECK(diags.items()[0].code == "T0004");
}

TEST_CASE("aliases within the limit are shared, not copied", "[tosca][yaml]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("base: &b {x: 1}\nuse: *b\n", "f.yaml", {}, diags);
  REQUIRE(doc);
  CHECK(diags.empty());
  CHECK(doc->root().get("use") == doc->root().get("base"));
  CHECK(doc->root().get("use").get("x").scalar() == "1");
}

TEST_CASE("deep nesting is refused", "[tosca][yaml][hostile]") {
  std::string deep(500, '[');
  deep += std::string(500, ']');
  base::Diagnostics diags;
  auto doc = parse_yaml(deep, "deep.yaml", {}, diags);
  CHECK(doc == nullptr);
  REQUIRE(diags.size() == 1);
  CHECK(diags.items()[0].code == "T0003");
}

TEST_CASE("non-UTF-8 text is refused", "[tosca][yaml][hostile]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("a: \xff\xfe\n", "f.yaml", {}, diags);
  CHECK(doc == nullptr);
  REQUIRE(diags.size() == 1);
  CHECK(diags.items()[0].code == "C0020");
}

TEST_CASE("a second YAML document is an error", "[tosca][yaml]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("a: 1\n---\nb: 2\n", "f.yaml", {}, diags);
  REQUIRE(doc);
  CHECK(diags.has_errors());
}

TEST_CASE("the binary form round-trips exactly", "[tosca][yaml][catalog]") {
  base::Diagnostics diags;
  auto doc = parse_yaml("a:\n  - {b: 'c', d: [1, 2]}\n  - ~\n", "f.yaml", {}, diags);
  REQUIRE(doc);
  auto copy = tosca::internal::Document::deserialize(doc->serialize());
  REQUIRE(copy);
  copy->display = "f.yaml";
  CHECK(tosca::to_yaml_flow(copy->root()) == tosca::to_yaml_flow(doc->root()));
  CHECK(copy->root().get("a").item(0).get("d").location().line == 2);
  CHECK(tosca::internal::Document::deserialize("garbage") == nullptr);
}
