// Hostile packages are refused with a clear diagnostic and nothing is written anywhere.
// The archives are built here, in a temporary folder, with libzip.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "tosca/tosca.h"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Entry {
  std::string name;
  std::string content;
  bool symlink = false;
};

std::string make_zip(const fs::path& file, const std::vector<Entry>& entries) {
  int err = 0;
  zip_t* za = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  REQUIRE(za != nullptr);
  std::vector<std::string> keep;  // libzip reads the buffers at close time
  keep.reserve(entries.size());
  for (const auto& e : entries) {
    keep.push_back(e.content);
    zip_source_t* src = zip_source_buffer(za, keep.back().data(), keep.back().size(), 0);
    REQUIRE(src != nullptr);
    zip_int64_t idx = zip_file_add(za, e.name.c_str(), src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    REQUIRE(idx >= 0);
    if (e.symlink) {
      REQUIRE(
          zip_file_set_external_attributes(za, static_cast<zip_uint64_t>(idx), 0, ZIP_OPSYS_UNIX,
                                           static_cast<zip_uint32_t>(S_IFLNK | 0777) << 16) == 0);
    }
  }
  REQUIRE(zip_close(za) == 0);
  return file.string();
}

const char* kMeta =
    "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: t\n"
    "Entry-Definitions: Definitions/top.yaml\n";
const char* kTop = "tosca_definitions_version: tosca_simple_yaml_1_2\n";

base::Diagnostics load(const std::string& path, tosca::LoadOptions opts = {}) {
  base::Diagnostics diags;
  (void)tosca::load_package(path, opts, diags);
  return diags;
}

bool has(const base::Diagnostics& d, const std::string& code) {
  for (const auto& x : d.items()) {
    if (x.code == code)
      return true;
  }
  return false;
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("zip entries with .. or absolute paths are refused", "[tosca][hostile]") {
  TempDir t;
  for (const std::string evil : {"../evil.yaml", "/etc/evil.yaml", "Definitions/../../x.yaml",
                                 "C:/win.yaml", "a\\..\\b.yaml"}) {
    auto zip = make_zip(
        t.path / "p.csar",
        {{"TOSCA-Metadata/TOSCA.meta", kMeta}, {"Definitions/top.yaml", kTop}, {evil, "x: 1\n"}});
    auto before = listing(t.path);
    auto d = load(zip);
    INFO(evil);
    CHECK(has(d, "C0003"));
    CHECK(listing(t.path) == before);  // nothing extracted, nothing written
  }
}

TEST_CASE("a symbolic link leaving the package is refused", "[tosca][hostile]") {
  TempDir t;
  auto zip = make_zip(t.path / "p.csar", {{"TOSCA-Metadata/TOSCA.meta", kMeta},
                                          {"Definitions/top.yaml", kTop},
                                          {"Definitions/link.yaml", "../../../etc/passwd", true}});
  CHECK(has(load(zip), "C0004"));
}

TEST_CASE("a symbolic link inside the package is followed", "[tosca][hostile]") {
  TempDir t;
  auto zip = make_zip(t.path / "p.csar",
                      {{"TOSCA-Metadata/TOSCA.meta",
                        "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: t\n"
                        "Entry-Definitions: Definitions/link.yaml\n"},
                       {"Definitions/top.yaml", kTop},
                       {"Definitions/link.yaml", "top.yaml", true}});
  auto d = load(zip);
  CHECK_FALSE(has(d, "C0004"));
  CHECK_FALSE(has(d, "C0012"));
}

TEST_CASE("a folder package's link leaving the package is refused", "[tosca][hostile]") {
  TempDir t;
  fs::create_directories(t.path / "pkg/TOSCA-Metadata");
  fs::create_directories(t.path / "pkg/Definitions");
  std::ofstream(t.path / "pkg/TOSCA-Metadata/TOSCA.meta") << kMeta;
  std::ofstream(t.path / "pkg/Definitions/top.yaml") << kTop;
  fs::create_symlink("/etc/hostname", t.path / "pkg/Definitions/outside.yaml");
  auto d = load((t.path / "pkg").string());
  CHECK(has(d, "C0004"));
}

TEST_CASE("a zip bomb is refused by its compression ratio", "[tosca][hostile]") {
  TempDir t;
  auto zip = make_zip(t.path / "p.csar", {{"TOSCA-Metadata/TOSCA.meta", kMeta},
                                          {"Definitions/top.yaml", kTop},
                                          {"Files/zeros.bin", std::string(8u << 20, '\0')}});
  REQUIRE(fs::file_size(zip) < (1u << 20));
  auto d = load(zip);
  CHECK(has(d, "C0007"));
}

TEST_CASE("archive size and entry count limits are configurable", "[tosca][hostile]") {
  TempDir t;
  std::vector<Entry> entries = {{"TOSCA-Metadata/TOSCA.meta", kMeta},
                                {"Definitions/top.yaml", kTop}};
  for (int i = 0; i < 20; ++i)
    entries.push_back({"Files/f" + std::to_string(i), "data"});
  auto zip = make_zip(t.path / "p.csar", entries);
  tosca::LoadOptions few;
  few.limits.max_entries = 10;
  CHECK(has(load(zip, few), "C0005"));
  tosca::LoadOptions small;
  small.limits.max_total_bytes = 64;
  CHECK(has(load(zip, small), "C0006"));
  auto defaults = load(zip);
  CHECK_FALSE(has(defaults, "C0005"));
  CHECK_FALSE(has(defaults, "C0006"));
}

TEST_CASE("corrupt or truncated archives are refused, never a crash", "[tosca][hostile]") {
  TempDir t;
  auto zip = make_zip(t.path / "p.csar",
                      {{"TOSCA-Metadata/TOSCA.meta", kMeta}, {"Definitions/top.yaml", kTop}});
  std::ifstream in(zip, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (size_t cut : {size_t{10}, bytes.size() / 2, bytes.size() - 5}) {
    std::ofstream(t.path / "cut.csar", std::ios::binary) << bytes.substr(0, cut);
    CHECK(has(load((t.path / "cut.csar").string()), "C0002"));
  }
  std::string flipped = bytes;
  flipped[40] = static_cast<char>(flipped[40] ^ 0x55);
  base::Diagnostics d;
  (void)tosca::load_package_from_zip_bytes("flipped.csar", flipped, {}, d);
  CHECK(d.has_errors());
}

TEST_CASE("a huge YAML file is refused before it is parsed", "[tosca][hostile]") {
  TempDir t;
  std::string big = "tosca_definitions_version: tosca_simple_yaml_1_2\ndescription: \"" +
                    std::string(3u << 20, 'x') + "\"\n";
  auto zip = make_zip(t.path / "p.csar",
                      {{"TOSCA-Metadata/TOSCA.meta", kMeta}, {"Definitions/top.yaml", big}});
  tosca::LoadOptions o;
  o.limits.max_text_bytes = 1u << 20;
  o.limits.max_compression_ratio = 1u << 30;  // this test is about the text limit only
  CHECK(has(load(zip, o), "C0008"));
}

TEST_CASE("a missing package is a clear error", "[tosca][hostile]") {
  auto d = load("/nonexistent/pkg.csar");
  CHECK(has(d, "C0001"));
}
