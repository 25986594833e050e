// The fast YAML reader must build exactly the tree yaml-cpp builds (same nodes, text,
// kinds, quoting and marks) and report the same diagnostics, on every YAML file we have:
// the catalog, the samples, the golden fixtures and, when present, Tacker's corpus.
#include "tosca/internal/fast_yaml.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <yaml-cpp/eventhandler.h>

#include "tosca/internal/document.h"

#include "tests/unit/tosca/test_files.h"

namespace fs = std::filesystem;
using tosca::internal::parse_yaml;

namespace {

std::string diag_text(const base::Diagnostics& d) {
  std::string out;
  for (const auto& x : d.sorted())
    out += base::to_string(x) + "\n";
  return out;
}

struct Null : YAML::EventHandler {
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Returns true when the fast reader took the text.
bool same_tree(const std::string& text, const std::string& name) {
  base::Diagnostics fast_diags, slow_diags;
  auto fast = parse_yaml(text, name, {}, fast_diags, true);
  auto slow = parse_yaml(text, name, {}, slow_diags, false);
  INFO(name);
  CHECK((fast == nullptr) == (slow == nullptr));
  if (fast && slow) {
    CHECK(fast->serialize() == slow->serialize());
  }
  CHECK(diag_text(fast_diags) == diag_text(slow_diags));
  Null null;
  return tosca::internal::fast_parse_yaml(text, null);
}

}  // namespace

TEST_CASE("fast reader and yaml-cpp agree on hand-written edge cases", "[tosca][yaml][fast]") {
  const char* cases[] = {
      "a: 1\nb: two\n",
      "a:\nb:\n  - x\n  -\n  - y: 1\n    z:\nc: [ 1, 'q', {k: v} ]\nd: { }\ne: -1\nf:\n- g\n",
      "h: \"x\\ty\"\ni: 'it''s'\n",
      "# comment\nk: v # trailing\nl: 'a # not a comment'\n",
      "- - a\n  - b\n- c\n",
      "m: [a, [b, c], {d: e}]\nn: {a: [1, 2], b: {c: d}}\n",
      "o: x: y\n",
      "p: [a,\n  b]\n",
      "q: |\n  block\n",
      "r: &anchor 1\ns: *anchor\n",
      "t: plain\n  continued\n",
      "u: !!str 1\n",
      "v:\n\tw: 1\n",
      "x: 1\nx: 2\n",
      "---\ny: 1\n",
      "key with spaces: value with spaces\n\"quoted key\": 1\n",
      "z: [a, ]\n",
      "aa: ~\nbb: null\ncc: true\n",
      "dd: \"\\u00e9\"\n",
      "ee: 'unterminated\n",
      "ff:\n  - a\n gg: 1\n",
      "hh: [a]]\n",
      "",
      "   \n# only a comment\n",
      "scalar only\n",
      "[1, 2]\n",
      "ii:\n  jj:\n    kk:\n",
      "ll:\n  - mm\nnn: 1\n",
      "oo:\n  pp:\n   ",
      "qq:\n  rr:",
      "ss:\n  tt:\n  # c\n\n",
      "uu: vv\r\nww: xx\r\n",
      "yy: zz\r",
      "a: b\rc: d\n",
      ("tosca_definitions_version: tosca_simple_yaml_1_2\nimports: [a.yaml]\n"
       "topology_template: {node_templates: {x: {type: tosca.nodes.Compute}}}\n"),
  };
  for (const char* c : cases)
    same_tree(c, "case.yaml");
}

TEST_CASE("fast reader and yaml-cpp agree on every YAML file of the tree and corpus",
          "[tosca][yaml][fast]") {
  std::vector<fs::path> roots;
  const char* src = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  roots.push_back(fs::path(src) / "tosca" / "catalog");
  roots.push_back(fs::path(src) / "csar-samples");
  roots.push_back(fs::path(src) / "tests" / "golden" / "bad");
  fs::path corpus = fs::path(src) / ".." / "shared" / "corpus" / "tacker-samples";
  if (fs::is_directory(corpus))
    roots.push_back(corpus);
  int files = 0, fast = 0;
  for (const auto& root : roots) {
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".yaml" && ext != ".yml"))
        continue;
      ++files;
      if (same_tree(tosca_test::read_file(e.path()), e.path().string()))
        ++fast;
    }
  }
  INFO(fast << " of " << files << " files took the fast path");
  CHECK(files > 100);
  CHECK(fast * 2 > files);  // most real files are in the subset, or the fast path is moot
}

TEST_CASE("byte order marks: both readers build the same tree", "[tosca][yaml][fast]") {
  // The fuzzer's finding: two marks and nothing else were a scalar "\uFEFF" to the fast
  // reader and an empty stream to yaml-cpp. YAML 1.2.2 rule [211]: a stream may open with
  // several document prefixes, each with a mark; here there is no document at all.
  const std::string bom = "\xEF\xBB\xBF";
  for (const std::string& text : {bom + bom, bom + bom + bom, bom + bom + "a: 1\n"}) {
    INFO(text.size());
    same_tree(text, "bom.yaml");
    base::Diagnostics d;
    auto doc = parse_yaml(text, "bom.yaml", {}, d, true);
    REQUIRE(doc != nullptr);
    CHECK(d.empty());
    if (text.size() == bom.size() * 2 + 5) {
      REQUIRE(doc->has_root);
      CHECK(doc->root().get("a").scalar() == "1");
    } else {
      CHECK_FALSE(doc->has_root);
    }
  }
  // A mark anywhere else is yaml-cpp's to judge: the fast reader steps aside.
  for (const std::string& text : {"a: " + bom + "b\n", "a: \"" + bom + "\"\n",
                                  "a: 1\n" + bom + "b: 2\n", "- " + bom + "\n"}) {
    INFO(text);
    CHECK_FALSE(same_tree(text, "bom.yaml"));
  }
}

TEST_CASE("the fuzzer's double byte order mark is a loader seed", "[tosca][yaml][fast]") {
  const char* src = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  std::string text = tosca_test::read_file(fs::path(src) / "tests" / "fuzz" / "tosca_load-corpus" /
                                           "tosca-double-bom.yaml");
  CHECK(text == "\xEF\xBB\xBF\xEF\xBB\xBF");
  same_tree(text, "tosca-double-bom.yaml");
}

TEST_CASE("characters YAML does not call printable are yaml-cpp's to judge",
          "[tosca][yaml][fast]") {
  // The fuzzer's finding: 0x04 inside a literal block scalar was text to the fast reader and
  // an error to yaml-cpp. C0 controls (but tab, LF, CR), DEL and the C1 controls anywhere:
  // the fast reader steps aside, and both agree.
  for (const std::string& text :
       {std::string("a: |\n  x\x04y\n"), std::string("a: >\n  x\x01\n"),
        std::string("a: b # c\x04\n"), std::string("a: b\x7f\n"), std::string("# \x1b[2J\na: 1\n"),
        std::string("a: \"x\xc2\x85\"\n"), std::string("a: x\xc2\x9by\n"),
        std::string("- |\n  \0\n", 8)}) {
    INFO(text);
    CHECK_FALSE(same_tree(text, "control.yaml"));
  }
  // At every offset of the eight-byte words the reader checks at once: each such character
  // makes it step aside; tab, LF and CR (a comment's, a CRLF) and UTF-8 text do not.
  Null null;
  const std::string head = "key: value\n# ";
  for (const std::string& bad :
       {std::string("\x01"), std::string("\x1f"), std::string("\x7f"), std::string("\xc2\x80"),
        std::string("\xc2\x9f"), std::string(1, '\0')}) {
    for (size_t at = 0; at < 17; ++at) {
      std::string text = head + std::string(at, 'c') + bad + "cccccccc\nz: 1\n";
      INFO(at << " " << static_cast<int>(static_cast<unsigned char>(bad[0])));
      CHECK_FALSE(tosca::internal::fast_parse_yaml(text, null));
    }
  }
  for (size_t at = 0; at < 17; ++at) {
    std::string text = head + std::string(at, 'c') + "\t\xc3\xa9\xe2\x9c\x93 c\r\nz: 1\n";
    INFO(at);
    CHECK(tosca::internal::fast_parse_yaml(text, null));
  }
  const char* src = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  std::string seed = tosca_test::read_file(fs::path(src) / "tests" / "fuzz" / "tosca_load-corpus" /
                                           "tosca-control-char-in-block-scalar.yaml");
  REQUIRE(seed.find('\x04') != std::string::npos);
  CHECK_FALSE(same_tree(seed, "tosca-control-char-in-block-scalar.yaml"));
}

TEST_CASE("the widened forms are read fast and agree with yaml-cpp", "[tosca][yaml][fast]") {
  // Each is inside the subset: the fast reader must take it, and build yaml-cpp's tree.
  const char* fast_cases[] = {
      // Block-context plain scalars with quotes, brackets and other indicators inside.
      "d: the value \"ipv6\" and 'v4'\n",
      "p: (^etsivnfm:v[0-9]?[0-9]\\.[0-9]$)|(^[0-9]+:[a-zA-Z0-9.-]+$)\n",
      "k: a*b&c!d%e@f`g?h|i>j{k}l\\m\n",
      "a \"q\" key: 1\nplain \"key\": 2\n",
      "- item with \"quotes\" # and a comment\n- a [b] c\n",
      // Flow collections over several lines, comments and a continuation at column 0.
      "v: [ a, b,\n  c ]\nw: 1\n",
      "v: [ a, b,\nc, d ]\n",
      "v: {a: 1, # first\n    b: [x,\n        y]}\n",
      "- [a,\n\n   b]\n- {k:\n    v}\n",
      "c:\n  - valid_values: [ 1,\n      2 ]\n",
      // Block scalars: literal, folded, chomping, empty lines, comment-like content.
      "a: |\n  line 1\n  line 2\nb: 1\n",
      "a: >\n  folded\n  text\n\n  new paragraph\nb: 1\n",
      "a: >-\n  strip\n  me\n",
      "a: |+\n  keep\n\n\nb: 1\n",
      "a: |-\n  x\n\n",
      "a: | # a comment\n    # not a comment\n    x\n",
      "a: |\n\n  after an empty line\n",
      "a: |\n  one\n    more indented\n  back\n",
      "- |\n  in a sequence\n- >\n  folded\n  item\n",
      "a:\n  b: >\n    deep\n    text\n  c: 2\n",
      "description: >\n  A description\n  over lines.\nx: |\n  #!/bin/sh\n  echo \"hi\"\n",
      // Plain scalars over several lines, folded into one.
      ("description: VNF deployment flavour selected by the consumer. It is provided\n"
       "  in the API\nb: 1\n"),
      "- an item\n  that goes on\n     and on\n- next\n",
      "a:\n  b: one \"two\"\n    three (x|y)\n  c: d\n",
      // An empty value at the end of a text without a final newline (Tacker's samples
      // end so): the null is marked at column 0 of the last line.
      "a:\n  b:",
      "a:\n  b:  ",
      "a:\n  b: # c",
      "a:\n  b:\n  # c",
      "a:\n  b:\n    # c",
      "a:\n  b:\n#c",
      "a:\n  b:\n\n  # c\n  # d",
      "a:\n  - \n  # c",
      "- x\n-",
      "a:\r\n  b:",
      "a:\r\n  b:\r\n  # c",
      "a:\n  b:\n  # \xC3\xBC",
      "a:\n  b:\n  #- x # y",
  };
  for (const char* c : fast_cases) {
    INFO(c);
    CHECK(same_tree(c, "new.yaml"));
  }
  // Close to them but left to yaml-cpp: the trees must still be the same.
  const char* slow_cases[] = {
      "v: [a\n  b]\n",          // a plain scalar over a line break inside flow
      "v: ['a\n  b']\n",        // a quoted one
      "v: [a, b\n",             // unterminated
      "a: |2\n   x\n",          // explicit indentation
      "a: >\n  x\n    more\n",  // more-indented folded line
      "a: |\n  x\n   \n",       // white line with more spaces than the indent
      "a: |\n  x",              // ends the text without a newline
      "a: |\n\tx\n",            // tab
      "a: |x\n",                // bad header
      "a: |\nb: 1\n",           // empty
      "k: a\tb\n",              // tab inside a plain scalar
      "v: [a\"b]\n",            // quote inside a flow plain scalar
      "a: x\n\n  y\n",          // an empty line inside a plain scalar
      "a: x # c\n  y\n",        // a comment, then more
      "a: x\n  # c\n  y\n",     // a comment line inside
      "a: x\n  - y\n",          // an indicator starting the next line
      "a: x\n  y: z\n",         // a key on the next line
      "- x\n  y #c\n",          // a comment at the end
      // Blanks after the last newline, and an empty value at the end: yaml-cpp marks it
      // by the indents it unwinds (the fuzzer found "a:\n  b:\n " marked at column 1).
      "a:\n  b:\n ",
      "x:\n  a:\n    b:\n   ",
      "a:\n  - \n ",
      "a:\n  b:\n\n ",
      "a:\n  b:\n \t",
      "a:\n  b:\n  # c\n  ",
  };
  for (const char* c : slow_cases) {
    INFO(c);
    same_tree(c, "edge.yaml");
  }
}

TEST_CASE("the fuzzer's seeds of the widened forms are read fast", "[tosca][yaml][fast]") {
  const char* src = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  for (const char* seed : {"yaml-block-scalars.yaml", "yaml-multiline-flow.yaml"}) {
    INFO(seed);
    CHECK(same_tree(
        tosca_test::read_file(fs::path(src) / "tests" / "fuzz" / "tosca_load-corpus" / seed),
        seed));
  }
}
