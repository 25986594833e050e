// Golden tests:
//  - every csar-samples/<name> package loads without errors;
//  - every tests/golden/bad/<CODE>-<what>/ fixture produces exactly the diagnostic lines of
//    its expected.txt, and at least one of them carries <CODE>;
//  - every code in docs/diagnostics.md has a fixture, and every fixture's code is documented;
//  - every tests/golden/workflows/<CODE>-<what>.yaml, compiled on its own as the <op>_end hook
//    of its operation (a "# op: OP" line, else instantiate), yields exactly the diagnostic
//    lines of <CODE>-<what>.expected, one of them an error (a warning for a code whose
//    docs/diagnostics.md heading ends in "(warning)") with <CODE>; it compiles to a machine
//    exactly when it has no error; every tests/golden/workflows/good/*.yaml compiles with no
//    diagnostic; every documented W code (except W0040, W0044, W0050: they need a package) has a
//    fixture and every fixture's code is documented.
// A fixture is a folder package in pkg/, or an archive package.csar (hostile archives are
// made by tools/make-hostile-fixtures.py), with optional options.txt ("key=value" lines).
// UPDATE_GOLDEN=1 rewrites expected.txt and the workflow .expected files from the current
// output.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tosca/tosca.h"
#include "workflows/workflows.h"

namespace fs = std::filesystem;

namespace {

fs::path source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  REQUIRE(r != nullptr);
  return fs::path(r);
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

tosca::LoadOptions options_for(const fs::path& dir) {
  tosca::LoadOptions o;
  std::ifstream in(dir / "options.txt");
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos)
      continue;
    std::string k = line.substr(0, eq);
    uint64_t v = std::stoull(line.substr(eq + 1));
    if (k == "max_text_bytes")
      o.limits.max_text_bytes = v;
    if (k == "max_entries")
      o.limits.max_entries = v;
    if (k == "max_total_bytes")
      o.limits.max_total_bytes = v;
    if (k == "max_compression_ratio")
      o.limits.max_compression_ratio = v;
    if (k == "max_yaml_depth")
      o.limits.max_yaml_depth = static_cast<uint32_t>(v);
    if (k == "max_yaml_nodes")
      o.limits.max_yaml_nodes = v;
    if (k == "max_import_depth")
      o.limits.max_import_depth = static_cast<uint32_t>(v);
    if (k == "strict")
      o.quirk_artifact_path_from_root = v == 0;
  }
  return o;
}

// The codes of docs/diagnostics.md whose heading matches `heading` (group 1: the code).
std::set<std::string> documented_codes(const std::string& heading_re = R"(^### ([CT][0-9]{4}))") {
  std::set<std::string> codes;
  std::string doc = read(source_root() / "docs" / "diagnostics.md");
  std::regex heading(heading_re);
  std::istringstream in(doc);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, heading))
      codes.insert(m[1]);
  }
  return codes;
}

// Every documented code (but `exempt`) has a fixture; every fixture's code is documented.
void check_codes_match(const std::set<std::string>& documented,
                       const std::set<std::string>& fixture_codes,
                       const std::set<std::string>& exempt = {}) {
  for (const auto& c : documented) {
    if (exempt.count(c) == 1)
      continue;
    INFO("documented code without a fixture: " << c);
    CHECK(fixture_codes.count(c) == 1);
  }
  for (const auto& c : fixture_codes) {
    INFO("fixture for an undocumented code: " << c);
    CHECK(documented.count(c) == 1);
  }
}

// Sorted diagnostics, one base::to_string line each (what `vnflow workflow check` prints).
std::string lines_of(const base::Diagnostics& diags) {
  std::string text;
  for (const auto& d : diags.sorted())
    text += base::to_string(d) + "\n";
  return text;
}

struct WorkflowCheck {
  std::shared_ptr<const workflows::Machine> machine;
  base::Diagnostics diags;
};

// Compiles one workflow file as the <op>_end hook of its operation: the op of its
// "# op: OP" line, else instantiate. `rel` is relative to the source root and is the name
// the diagnostics carry.
WorkflowCheck check_workflow(const std::string& rel) {
  std::string text = read(source_root() / rel);
  std::smatch m;
  static const std::regex op_line(R"((?:^|\n)# op: *([a-z_]*))");
  std::string op =
      std::regex_search(text, m, op_line) && m[1].length() > 0 ? m[1].str() : "instantiate";
  const workflows::OperationInfo* info = workflows::find_operation(op);
  INFO(rel << ": operation " << op);
  REQUIRE(info != nullptr);
  WorkflowCheck c;
  // A call names a file relative to the fixture's folder.
  fs::path folder = (source_root() / rel).parent_path();
  c.machine =
      workflows::compile_file(rel, text, op, info->hook + "_end", c.diags,
                              [folder](const std::string& path) -> base::Result<std::string> {
                                if (!fs::is_regular_file(folder / path))
                                  return base::Status::NotFound("no file \"" + path + "\"");
                                return read(folder / path);
                              });
  return c;
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every bundled sample package loads without errors", "[golden][samples]") {
  fs::path samples = source_root() / "csar-samples";
  int count = 0;
  for (const auto& e : fs::directory_iterator(samples)) {
    if (!e.is_directory())
      continue;
    base::Diagnostics diags;
    auto pkg = tosca::load_package(e.path().string(), {}, diags);
    std::string text;
    for (const auto& d : diags.sorted())
      text += base::to_string(d) + "\n";
    INFO(e.path().filename().string() << "\n" << text);
    CHECK(pkg != nullptr);
    CHECK(diags.empty());
    ++count;
  }
  CHECK(count >= 2);
}

TEST_CASE("every bad fixture yields exactly its expected diagnostics", "[golden][bad]") {
  fs::path bad = source_root() / "tests" / "golden" / "bad";
  bool update = std::getenv("UPDATE_GOLDEN") != nullptr;
  std::set<std::string> fixture_codes;
  int count = 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(bad)) {
    if (e.is_directory())
      dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    std::string name = dir.filename().string();
    std::string code = name.substr(0, 5);
    fixture_codes.insert(code);
    fs::path target = fs::exists(dir / "package.csar") ? dir / "package.csar" : dir / "pkg";
    base::Diagnostics diags;
    (void)tosca::load_package(target.string(), options_for(dir), diags);
    std::string text;
    bool has_code = false;
    for (const auto& d : diags.sorted()) {
      text += base::to_string(d) + "\n";
      has_code = has_code || d.code == code;
    }
    // Paths relative to the fixture folder, so the expectations do not depend on where
    // the checkout lives.
    text = replace_all(text, dir.string() + "/", "");
    INFO("fixture " << name << "\n" << text);
    CHECK(has_code);
    if (update) {
      std::ofstream(dir / "expected.txt") << text;
    } else {
      CHECK(text == read(dir / "expected.txt"));
    }
    ++count;
  }
  CHECK(count > 0);
  check_codes_match(documented_codes(), fixture_codes);
}

TEST_CASE("every workflow fixture yields exactly its expected diagnostics", "[golden][workflows]") {
  const std::string rel_dir = "tests/golden/workflows";
  fs::path dir = source_root() / rel_dir;
  bool update = std::getenv("UPDATE_GOLDEN") != nullptr;
  std::set<std::string> warnings = documented_codes(R"(^### (W[0-9]{4})\b.*\(warning\)$)");
  REQUIRE(warnings.count("W0043") == 1);  // the heading pattern still finds the warnings
  std::set<std::string> fixture_codes;
  int count = 0;
  for (const fs::path& yaml : files_in(dir, ".yaml")) {
    std::string name = yaml.stem().string();
    if (!std::regex_match(name, std::regex(R"(W[0-9]{4}-.*)")))
      continue;
    std::string code = name.substr(0, 5);
    fixture_codes.insert(code);
    bool warning = warnings.count(code) == 1;
    WorkflowCheck c = check_workflow(rel_dir + "/" + name + ".yaml");
    std::string text = lines_of(c.diags);
    INFO("fixture " << name << "\n" << text);
    bool has_code = false;
    for (const auto& d : c.diags.sorted()) {
      has_code = has_code || (d.code == code && d.severity == (warning ? base::Severity::kWarning
                                                                       : base::Severity::kError));
    }
    CHECK(has_code);
    // An error leaves no machine (`workflow check` exits 1); a warning alone keeps it (exit 0).
    CHECK((c.machine != nullptr) == warning);
    CHECK(c.diags.has_errors() == !warning);
    fs::path expected = dir / (name + ".expected");
    if (update) {
      std::ofstream(expected) << text;
    } else {
      INFO(expected.string() << " (UPDATE_GOLDEN=1 writes it)");
      CHECK(fs::exists(expected));
      CHECK(text == read(expected));
    }
    ++count;
  }
  CHECK(count > 0);
  // An .expected file without its fixture is a leftover.
  for (const fs::path& expected : files_in(dir, ".expected")) {
    INFO("no workflow for " << expected.filename().string());
    CHECK(fs::exists(fs::path(expected).replace_extension(".yaml")));
  }
  std::set<std::string> documented = documented_codes(R"(^### (W[0-9]{4})\b)");
  CHECK(!documented.empty());
  // W0040, W0044 and W0050 need a package, not a single workflow file (W0044:
  // tests/cli/signature_test.sh).
  check_codes_match(documented, fixture_codes, {"W0040", "W0044", "W0050"});
}

TEST_CASE("every good workflow example compiles without a diagnostic", "[golden][workflows]") {
  int count = 0;
  for (const fs::path& yaml : files_in(source_root() / "tests/golden/workflows/good", ".yaml")) {
    WorkflowCheck c = check_workflow("tests/golden/workflows/good/" + yaml.filename().string());
    INFO(yaml.filename().string() << "\n" << lines_of(c.diags));
    CHECK(c.machine != nullptr);
    CHECK(c.diags.empty());
    ++count;
  }
  CHECK(count > 0);
}
