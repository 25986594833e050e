// Golden tests:
//  - every csar-samples/<name> package loads without errors;
//  - every tests/golden/bad/<CODE>-<what>/ fixture produces exactly the diagnostic lines of
//    its expected.txt, and at least one of them carries <CODE>;
//  - every code in docs/diagnostics.md has a fixture, and every fixture's code is documented.
// A fixture is a folder package in pkg/, or an archive package.csar (hostile archives are
// made by tools/make-hostile-fixtures.py), with optional options.txt ("key=value" lines).
// UPDATE_GOLDEN=1 rewrites expected.txt from the current output.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "tosca/tosca.h"

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

std::set<std::string> documented_codes() {
  std::set<std::string> codes;
  std::string doc = read(source_root() / "docs" / "diagnostics.md");
  std::regex heading(R"(^### ([CT][0-9]{4}))");
  std::istringstream in(doc);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, heading))
      codes.insert(m[1]);
  }
  return codes;
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
  std::set<std::string> documented = documented_codes();
  for (const auto& c : documented) {
    INFO("documented code without a fixture: " << c);
    CHECK(fixture_codes.count(c) == 1);
  }
  for (const auto& c : fixture_codes) {
    INFO("fixture for an undocumented code: " << c);
    CHECK(documented.count(c) == 1);
  }
}
