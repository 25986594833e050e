// A package's copy of a shipped type file is known by its meaning, not its bytes: copies
// re-serialised with other indentation, comments, line endings and quotes are served from
// the catalog with their own lines and columns, exactly the tree a full parse builds; a
// copy with one value changed is not, and is parsed and checked like any file.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tosca/internal/catalog.h"
#include "tosca/internal/document.h"
#include "tosca/internal/fast_yaml.h"
#include "tosca/internal/loader.h"
#include "tosca/internal/source.h"

#include "tests/unit/tosca/test_files.h"

namespace fs = std::filesystem;
using tosca::Node;
using tosca::internal::catalog_tree;
using tosca::internal::parse_yaml;

namespace {

fs::path source_root() {
  const char* src = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  return src;
}

// The shipped type files: path under tosca/catalog -> entry name.
std::vector<std::pair<std::string, std::string>> shipped_files() {
  std::ifstream list(source_root() / "tosca" / "catalog" / "catalog.list");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream ls(line);
    std::string rel, name;
    ls >> rel >> name;
    out.emplace_back(rel, name);
  }
  REQUIRE(out.size() >= 5);
  return out;
}

// How a variant is written: block style throughout, `indent` spaces a level, a comment
// line before every entry and after every scalar when `comments`, CRLF when `crlf`, and
// quoted scalars in `quote` (' or ", whatever they were quoted with).
struct Style {
  int indent = 4;
  bool comments = true;
  bool crlf = false;
  char quote = '"';
};

class Writer {
 public:
  explicit Writer(Style s) : s_(s) {}

  std::string write(Node root) {
    node_block(root, 0);
    return out_;
  }

 private:
  void nl() { out_ += s_.crlf ? "\r\n" : "\n"; }
  void pad(int n) { out_.append(static_cast<size_t>(n), ' '); }

  void scalar(Node n) {
    std::string_view v = n.scalar();
    if (!n.quoted()) {
      // A plain scalar stays plain: its text was a valid plain scalar where it was read,
      // and it folds to one line.
      REQUIRE(v.find('\n') == std::string_view::npos);
      out_ += v;
      return;
    }
    bool simple = v.find_first_of("\n\t\r\\") == std::string_view::npos;
    if (s_.quote == '\'' && simple) {
      out_ += '\'';
      for (char c : v)
        out_ += c == '\'' ? std::string("''") : std::string(1, c);
      out_ += '\'';
      return;
    }
    out_ += '"';
    for (char c : v) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          out_ += c;
      }
    }
    out_ += '"';
  }

  // The part after "key:" or "-": an inline leaf, or a block on the following lines.
  void value(Node v, int indent) {
    switch (v.kind()) {
      case Node::Kind::kScalar:
        out_ += ' ';
        scalar(v);
        if (s_.comments)
          out_ += " # note";
        nl();
        return;
      case Node::Kind::kMap:
      case Node::Kind::kSequence:
        if (v.size() == 0) {
          out_ += v.is_map() ? " {}" : " []";
          nl();
          return;
        }
        nl();
        node_block(v, indent + s_.indent);
        return;
      default:
        nl();  // null: "key:" alone
        return;
    }
  }

  void node_block(Node n, int indent) {
    if (n.is_map()) {
      for (size_t i = 0; i < n.size(); ++i) {
        if (s_.comments) {
          pad(indent);
          out_ += "# entry " + std::to_string(i);
          nl();
        }
        pad(indent);
        REQUIRE(n.key(i).is_scalar());
        scalar(n.key(i));
        out_ += ':';
        value(n.value(i), indent);
      }
    } else if (n.is_seq()) {
      for (size_t i = 0; i < n.size(); ++i) {
        pad(indent);
        out_ += '-';
        value(n.item(i), indent);
      }
    } else {
      FAIL("a type file's root is a map");
    }
  }

  Style s_;
  std::string out_;
};

// The first description's value, changed: the same layout, one value different.
std::string change_one_value(std::string text) {
  size_t at = text.find("description: ");
  REQUIRE(at != std::string::npos);
  at += std::string_view("description: ").size();
  return text.insert(at, "Changed ");
}

struct Parsed {
  std::unique_ptr<tosca::internal::Document> doc;
  std::string diags;
};

Parsed parse(const std::string& text, bool fast, tosca::internal::KnownTree known) {
  base::Diagnostics d;
  Parsed p;
  p.doc = parse_yaml(text, "copy.yaml", {}, d, fast, known);
  for (const auto& x : d.sorted())
    p.diags += base::to_string(x) + "\n";
  return p;
}

const Style kStyles[] = {
    {4, true, false, '"'},
    {3, false, true, '\''},
    {1, true, true, '"'},
};

}  // namespace

TEST_CASE("every shipped type file has the digest of its meaning", "[tosca][catalog]") {
  size_t count = 0;
  const auto* entries = tosca::internal::catalog_entries(&count);
  for (size_t i = 0; i < count; ++i) {
    INFO(entries[i].name << " " << entries[i].version);
    CHECK(entries[i].meaning.size() == 16);
  }
}

TEST_CASE("a re-indented, re-commented, CRLF or re-quoted copy of each shipped file is known",
          "[tosca][catalog]") {
  for (const auto& [rel, name] : shipped_files()) {
    std::string original = tosca_test::read_file(source_root() / "tosca" / "catalog" / rel);
    Parsed base = parse(original, false, nullptr);
    REQUIRE(base.doc != nullptr);
    for (const Style& style : kStyles) {
      INFO(rel << ", indent " << style.indent << (style.crlf ? ", CRLF" : "")
               << (style.comments ? ", comments" : "") << ", quote " << style.quote);
      std::string copy = Writer(style).write(base.doc->root());
      REQUIRE(copy != original);
      // Not known by its bytes.
      CHECK(tosca::internal::catalog_by_digest(
                base::digest_hex(base::DigestAlgorithm::kSha256, copy)) == nullptr);
      tosca::internal::FastYaml fast;
      INFO((fast.read(copy) ? "" : fast.why()));
      REQUIRE(fast.read(copy));
      const auto* entry = tosca::internal::catalog_by_meaning(fast.meaning());
      REQUIRE(entry != nullptr);
      CHECK(entry->name == name);
      // Served from the catalog, and the very tree yaml-cpp builds from the copy, its marks
      // included.
      Parsed served = parse(copy, true, catalog_tree);
      Parsed slow = parse(copy, false, nullptr);
      REQUIRE(served.doc != nullptr);
      REQUIRE(slow.doc != nullptr);
      CHECK(served.doc->from_catalog);
      CHECK_FALSE(slow.doc->from_catalog);
      CHECK(served.doc->serialize() == slow.doc->serialize());
      CHECK(served.doc->display == "copy.yaml");
      CHECK(served.diags.empty());
      CHECK(slow.diags.empty());
    }
  }
}

TEST_CASE("a copy with one value changed is not known and is parsed in full", "[tosca][catalog]") {
  for (const auto& [rel, name] : shipped_files()) {
    if (name.rfind("etsi_nfv_sol001", 0) != 0)
      continue;
    INFO(rel);
    std::string original = tosca_test::read_file(source_root() / "tosca" / "catalog" / rel);
    for (const std::string& changed :
         {change_one_value(original),
          change_one_value(
              Writer(kStyles[0]).write(parse(original, false, nullptr).doc->root()))}) {
      tosca::internal::FastYaml fast;
      REQUIRE(fast.read(changed));
      CHECK(tosca::internal::catalog_by_meaning(fast.meaning()) == nullptr);
      Parsed p = parse(changed, true, catalog_tree);
      Parsed slow = parse(changed, false, nullptr);
      REQUIRE(p.doc != nullptr);
      CHECK_FALSE(p.doc->from_catalog);
      CHECK(p.doc->serialize() == slow.doc->serialize());
      CHECK(p.diags == slow.diags);
    }
  }
}

TEST_CASE("the meaning digest ignores layout, comments, line ends and quote style only",
          "[tosca][catalog]") {
  auto meaning = [](const std::string& text) {
    tosca::internal::FastYaml fast;
    INFO(text);
    REQUIRE(fast.read(text));
    return fast.meaning();
  };
  std::string a = meaning("a: 'x'\nb:\n  - 1\n  - null\nc: {d: e}\n");
  CHECK(a == meaning("# c\na:   \"x\"   # c\r\nb:\r\n- 1\r\n-\r\nc:\r\n    d: e\r\n"));
  CHECK(a == meaning("a: \"x\"\nb: [1, ~]\nc:\n d: e\n"));
  // A plain scalar is not the same as a quoted one: "1" is a string, 1 a number.
  CHECK(a != meaning("a: x\nb:\n  - 1\n  - null\nc: {d: e}\n"));
  CHECK(a != meaning("a: 'x'\nb:\n  - '1'\n  - null\nc: {d: e}\n"));
  CHECK(a != meaning("a: 'x'\nb:\n  - 1\n  - 'null'\nc: {d: e}\n"));
  // Keys in order, structure and values all count.
  CHECK(a != meaning("b:\n  - 1\n  - null\na: 'x'\nc: {d: e}\n"));
  CHECK(a != meaning("a: 'x'\nb:\n  - 1\nc: {d: e}\n"));
  CHECK(a != meaning("a: 'x'\nb:\n  - 1\n  - null\nc: [d, e]\n"));
  CHECK(a != meaning("a: 'x '\nb:\n  - 1\n  - null\nc: {d: e}\n"));
  // Length-prefixed: moving text between neighbours changes the digest.
  CHECK(meaning("- ab\n- c\n") != meaning("- a\n- bc\n"));
}

// A digest that collides: whatever the meaning asked for, the tree of this text. Stands for
// two texts whose meaning digests are equal while their events are not.
namespace {
std::string g_collider;
std::unique_ptr<tosca::internal::Document> colliding_tree(std::string_view) {
  base::Diagnostics d;
  auto doc = parse_yaml(g_collider, "collider.yaml", {}, d, false, nullptr);
  REQUIRE(doc != nullptr);
  REQUIRE(d.empty());
  doc->from_catalog = true;
  return doc;
}
}  // namespace

TEST_CASE("a known tree found by a colliding digest is not served: the text is parsed",
          "[tosca][catalog]") {
  const std::string text = "a: 'x'\nb:\n  - [1, 2]\n  - null\nc: {d: e}\n";
  // Each differs from `text` in one way the events show: a value, quoting, a null's
  // quoting, where a collection ends, a kind, a node more or fewer.
  const char* others[] = {
      "a: 'y'\nb:\n  - [1, 2]\n  - null\nc: {d: e}\n",
      "a: x\nb:\n  - [1, 2]\n  - null\nc: {d: e}\n",
      "a: 'x'\nb:\n  - [1, 2]\n  - 'null'\nc: {d: e}\n",
      "a: 'x'\nb:\n  - [1, 2, null]\nc: {d: e}\n",
      "a: 'x'\nb:\n  - [1]\n  - 2\n  - null\nc: {d: e}\n",
      "a: 'x'\nb:\n  - {1: 2}\n  - null\nc: {d: e}\n",
      "a: 'x'\nb:\n  - [1, 2]\n  - null\nc: {d: e}\nf: g\n",
      "a: 'x'\nb:\n  - [1, 2]\n  - null\nc: {d: e, f: g}\n",
      "a: 'x'\nb:\n  - [1, 2]\n  - null\nc: {}\n",
  };
  Parsed slow = parse(text, false, nullptr);
  REQUIRE(slow.doc != nullptr);
  for (const char* other : others) {
    INFO(other);
    g_collider = other;
    Parsed p = parse(text, true, colliding_tree);
    REQUIRE(p.doc != nullptr);
    CHECK_FALSE(p.doc->from_catalog);
    CHECK(p.doc->display == "copy.yaml");
    CHECK(p.doc->serialize() == slow.doc->serialize());
    CHECK(p.diags == slow.diags);
  }
  // The same events in another layout: served, with this text's marks.
  g_collider = "a: \"x\"\nb: [[1, 2], ~]\nc:\n  d: e\n";
  Parsed served = parse(text, true, colliding_tree);
  REQUIRE(served.doc != nullptr);
  CHECK(served.doc->from_catalog);
  CHECK(served.doc->serialize() == slow.doc->serialize());
}

TEST_CASE("a package whose type files are re-serialised copies loads as with the originals",
          "[tosca][catalog]") {
  fs::path sol = source_root() / "tosca" / "catalog" / "sol001" / "2.6.1";
  std::string common = tosca_test::read_file(sol / "etsi_nfv_sol001_common_types.yaml");
  std::string vnfd = tosca_test::read_file(sol / "etsi_nfv_sol001_vnfd_types.yaml");
  auto variant = [](const std::string& text) {
    return Writer(kStyles[1]).write(parse(text, false, nullptr).doc->root());
  };
  const std::string top =
      "tosca_definitions_version: tosca_simple_yaml_1_2\n"
      "imports:\n"
      "  - etsi_nfv_sol001_common_types.yaml\n"
      "  - etsi_nfv_sol001_vnfd_types.yaml\n"
      "node_types:\n"
      "  my.VNF:\n"
      "    derived_from: tosca.nodes.nfv.VNF\n"
      "topology_template:\n"
      "  node_templates:\n"
      "    VDU1:\n"
      "      type: tosca.nodes.nfv.Vdu.Compute\n"
      "      properties:\n"
      "        name: vdu1\n"
      "        description: a VDU\n"
      "        vdu_profile: {min_number_of_instances: 1, max_number_of_instances: 2}\n"
      "        bogus: 1\n";
  struct Run {
    std::string diags;
    std::map<std::string, bool> from_catalog;  // package path -> served from the catalog
  };
  auto run = [&](const std::string& c, const std::string& v) {
    std::map<std::string, std::string> files = {
        {"TOSCA-Metadata/TOSCA.meta",
         "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: vnflow tests\n"
         "Entry-Definitions: Definitions/top.yaml\n"},
        {"Definitions/top.yaml", top},
        {"Definitions/etsi_nfv_sol001_common_types.yaml", c},
        {"Definitions/etsi_nfv_sol001_vnfd_types.yaml", v}};
    base::Diagnostics d;
    auto pkg = tosca::internal::load_from_source(tosca::internal::open_memory("t.csar", files),
                                                 tosca::LoadOptions{}, d);
    Run r;
    for (const auto& x : d.sorted())
      r.diags += base::to_string(x) + "\n";
    REQUIRE(pkg != nullptr);
    for (const auto& doc : pkg->impl->docs)
      r.from_catalog[doc->path] = doc->from_catalog;
    return r;
  };
  Run original = run(common, vnfd);
  Run copies = run(variant(common), variant(vnfd));
  INFO(original.diags);
  // The package's own mistake is found either way, and nothing else.
  CHECK(original.diags.find("bogus") != std::string::npos);
  CHECK(copies.diags == original.diags);
  CHECK(copies.from_catalog["Definitions/etsi_nfv_sol001_common_types.yaml"]);
  CHECK(copies.from_catalog["Definitions/etsi_nfv_sol001_vnfd_types.yaml"]);
  CHECK_FALSE(copies.from_catalog["Definitions/top.yaml"]);
  // One value changed: parsed and checked in full, and the change is what the tree holds.
  Run changed = run(common, change_one_value(variant(vnfd)));
  CHECK_FALSE(changed.from_catalog["Definitions/etsi_nfv_sol001_vnfd_types.yaml"]);
  CHECK(changed.from_catalog["Definitions/etsi_nfv_sol001_common_types.yaml"]);
  CHECK(changed.diags == original.diags);
}

// Not a check: what makes the fast reader step aside on the corpus and the catalog, or on
// the folders VNFLOW_YAML_DIRS names (':'-separated; e.g. unzipped packages of the bench's
// variant set), and whether files there are known to the catalog by their meaning.
// Run with: tosca_test "[.instrument]"
TEST_CASE("fast reader step-aside reasons", "[.instrument]") {
  std::vector<fs::path> roots = {source_root() / ".." / "shared" / "corpus" / "tacker-samples",
                                 source_root() / "tosca" / "catalog"};
  if (const char* dirs = std::getenv("VNFLOW_YAML_DIRS")) {
    roots.clear();
    std::stringstream ss(dirs);
    for (std::string d; std::getline(ss, d, ':');)
      roots.emplace_back(d);
  }
  std::map<std::string, int> reasons;
  int files = 0, fast_files = 0, known = 0;
  for (const fs::path& root : roots) {
    if (!fs::is_directory(root))
      continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".yaml" && ext != ".yml"))
        continue;
      ++files;
      tosca::internal::FastYaml fast;
      if (fast.read(tosca_test::read_file(e.path()))) {
        ++fast_files;
        if (tosca::internal::catalog_by_meaning(fast.meaning()) != nullptr) {
          ++known;
          std::cout << "  known by its meaning: " << e.path().string() << "\n";
        }
      } else {
        ++reasons[fast.why()];
        std::cout << "  " << fast.why() << ": " << e.path().string() << "\n";
      }
    }
  }
  std::cout << fast_files << " of " << files << " files read fast, " << known
            << " known to the catalog by their meaning\n";
  for (const auto& [why, n] : reasons)
    std::cout << n << "\t" << why << "\n";
}
