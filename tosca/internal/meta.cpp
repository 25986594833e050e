#include "tosca/internal/meta.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

namespace tosca::internal {

namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r'))
    ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r'))
    --e;
  return std::string(s.substr(b, e - b));
}

struct Line {
  uint32_t number;
  std::string_view text;
};

std::vector<Line> split_lines(std::string_view text) {
  std::vector<Line> out;
  uint32_t n = 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string_view l = text.substr(start, end - start);
    if (!l.empty() && l.back() == '\r')
      l.remove_suffix(1);
    out.push_back({n++, l});
    if (end == text.size())
      break;
    start = end + 1;
  }
  return out;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

bool is_url(std::string_view s) {
  return s.find("://") != std::string_view::npos;
}

}  // namespace

ToscaMeta parse_tosca_meta(std::string_view text, const std::string& display,
                           base::Diagnostics& diags) {
  ToscaMeta meta;
  meta.present = true;
  struct KV {
    std::string key, value;
    uint32_t line, column;
  };
  std::vector<std::vector<KV>> blocks(1);
  uint32_t garbage = 0, first_garbage = 0;  // lines that are not "Key: value"
  for (const Line& l : split_lines(text)) {
    if (is_blank(l.text)) {
      if (!blocks.back().empty())
        blocks.emplace_back();
      continue;
    }
    if ((l.text.front() == ' ' || l.text.front() == '\t') && !blocks.back().empty()) {
      std::string& value = blocks.back().back().value;  // continuation line
      value += ' ';  // not `" " + trim(...)`: g++ 12's false -Wrestrict at -O3 (bug 105329)
      value += trim(l.text);
      continue;
    }
    auto colon = l.text.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      if (garbage++ == 0)
        first_garbage = l.number;
      std::string found = trim(l.text);
      if (found.size() > 60)
        found = found.substr(0, 57) + "...";
      diags.error("C0010", {display, l.number, 1},
                  "expected \"Key: value\", found \"" + found + "\"");
      continue;
    }
    blocks.back().push_back({trim(l.text.substr(0, colon)), trim(l.text.substr(colon + 1)),
                             l.number, static_cast<uint32_t>(colon + 2)});
  }
  if (blocks.back().empty())
    blocks.pop_back();
  if (blocks.empty()) {
    if (garbage == 0) {
      diags.error("C0010", {display, 1, 1}, "TOSCA.meta is empty");
    } else {
      diags.error("C0010", {display, first_garbage, 1},
                  "TOSCA.meta holds no \"Key: value\" line: " + std::to_string(garbage) +
                      (garbage == 1 ? " line of something else" : " lines of something else") +
                      ", the first at line " + std::to_string(first_garbage));
    }
    return meta;
  }
  // Block 0: the CSAR itself.
  bool have_version = false, have_csar = false, have_created = false, have_entry = false;
  for (const KV& kv : blocks[0]) {
    std::string k = base::ascii_lower(kv.key);
    base::SourceLocation where{display, kv.line, kv.column};
    if (k == "tosca-meta-file-version") {
      meta.meta_file_version = kv.value;
      have_version = true;
      if (kv.value != "1.0" && kv.value != "1.1") {
        diags.warning("C0011", where,
                      "TOSCA-Meta-File-Version \"" + kv.value + "\" is not 1.0 or 1.1");
      }
    } else if (k == "csar-version") {
      meta.csar_version = kv.value;
      have_csar = true;
      if (kv.value != "1.1" && kv.value != "2.0") {
        diags.warning("C0011", where, "CSAR-Version \"" + kv.value + "\" is not 1.1 or 2.0");
      }
    } else if (k == "created-by") {
      meta.created_by = kv.value;
      have_created = true;
    } else if (k == "entry-definitions") {
      meta.entry_definitions = kv.value;
      meta.entry_definitions_where = where;
      have_entry = !kv.value.empty();
    } else if (k == "etsi-entry-manifest") {
      meta.entry_manifest = kv.value;
    } else if (k == "etsi-entry-change-log") {
      meta.entry_change_log = kv.value;
    } else if (k == "etsi-entry-licenses") {
      meta.entry_licenses = kv.value;
    } else if (k == "etsi-entry-certificate") {
      meta.entry_certificate = kv.value;
    } else if (k == "etsi-entry-tests" || k == "other-definitions") {
      // Known SOL004 keys vnflow does not use yet.
    } else if (k == "name") {
      diags.error("C0010", where,
                  "file block \"Name: " + kv.value +
                      "\" inside the first block; separate it with a blank line");
    } else {
      diags.warning("C0011", where, "unknown TOSCA.meta key \"" + kv.key + "\"");
    }
  }
  base::SourceLocation top{display, blocks[0].front().line, 1};
  if (!have_version)
    diags.error("C0010", top, "missing TOSCA-Meta-File-Version");
  if (!have_csar)
    diags.error("C0010", top, "missing CSAR-Version");
  if (!have_created)
    diags.error("C0010", top, "missing Created-By");
  if (!have_entry)
    diags.error("C0010", top, "missing Entry-Definitions");
  if (!meta.entry_manifest.empty() && meta.entry_manifest.size() >= 3 &&
      base::ascii_lower(meta.entry_manifest.substr(meta.entry_manifest.size() - 3)) != ".mf") {
    diags.error("C0011", top,
                "ETSI-Entry-Manifest \"" + meta.entry_manifest + "\" does not name a .mf file");
  }
  // Later blocks: one file each.
  for (size_t b = 1; b < blocks.size(); ++b) {
    MetaFileEntry e;
    e.where = {display, blocks[b].front().line, 1};
    for (const KV& kv : blocks[b]) {
      std::string k = base::ascii_lower(kv.key);
      if (k == "name") {
        e.name = kv.value;
        e.where = {display, kv.line, kv.column};
      } else if (k == "content-type") {
        e.content_type = kv.value;
      } else if (k == "algorithm") {
        e.algorithm = kv.value;
      } else if (k == "hash") {
        e.hash = kv.value;
      } else {
        diags.warning("C0011", {display, kv.line, 1},
                      "unknown key \"" + kv.key + "\" in a file block");
      }
    }
    if (e.name.empty()) {
      diags.error("C0010", e.where, "file block without a Name");
      continue;
    }
    if (e.algorithm.empty() != e.hash.empty()) {
      diags.error("C0010", e.where,
                  "file block \"" + e.name + "\" has " +
                      (e.hash.empty() ? "an Algorithm but no Hash" : "a Hash but no Algorithm"));
    }
    meta.files.push_back(std::move(e));
  }
  return meta;
}

Manifest parse_manifest(std::string_view text, const std::string& display,
                        base::Diagnostics& diags) {
  Manifest m;
  enum class Section { kNone, kMetadata, kEntry, kNonMano, kSignature } section = Section::kNone;
  for (const Line& l : split_lines(text)) {
    if (section == Section::kSignature) {
      if (l.text.rfind("-----END", 0) == 0)
        section = Section::kNone;
      continue;
    }
    if (is_blank(l.text)) {
      if (section == Section::kEntry || section == Section::kMetadata)
        section = Section::kNone;
      continue;
    }
    if (l.text.rfind("-----BEGIN", 0) == 0) {
      // The signature block: checked by tosca::check_signatures (S codes).
      section = Section::kSignature;
      continue;
    }
    bool indented = l.text.front() == ' ' || l.text.front() == '\t';
    auto colon = l.text.find(':');
    if (colon == std::string_view::npos) {
      diags.error("C0014", {display, l.number, 1},
                  "expected \"key: value\", found \"" + trim(l.text) + "\"");
      continue;
    }
    std::string key = trim(l.text.substr(0, colon));
    std::string value = trim(l.text.substr(colon + 1));
    base::SourceLocation where{display, l.number, static_cast<uint32_t>(colon + 2)};
    if (indented) {
      if (section == Section::kMetadata) {
        m.metadata[key] = value;
      } else if (section != Section::kNonMano) {
        diags.error("C0014", where, "unexpected indented line \"" + trim(l.text) + "\"");
      }
      continue;
    }
    std::string k = base::ascii_lower(key);
    if (k == "metadata") {
      section = Section::kMetadata;
    } else if (k == "non_mano_artifact_sets") {
      section = Section::kNonMano;
    } else if (k == "source") {
      MetaFileEntry e;
      e.name = value;
      e.where = where;
      m.sources.push_back(std::move(e));
      section = Section::kEntry;
    } else if (section == Section::kEntry &&
               (k == "algorithm" || k == "hash" || k == "signature" || k == "certificate")) {
      if (k == "algorithm")
        m.sources.back().algorithm = value;
      if (k == "hash")
        m.sources.back().hash = value;
    } else {
      diags.error("C0014", where, "unexpected manifest key \"" + key + "\"");
    }
  }
  for (const char* required :
       {"vnf_provider_id", "vnf_product_name", "vnf_release_date_time", "vnf_package_version"}) {
    if (!m.metadata.count(required)) {
      diags.warning("C0014", {display, 1, 1},
                    std::string("manifest metadata lacks \"") + required + "\"");
    }
  }
  for (const auto& e : m.sources) {
    if (e.algorithm.empty() || e.hash.empty()) {
      diags.error("C0014", e.where, "manifest entry \"" + e.name + "\" needs Algorithm and Hash");
    }
  }
  return m;
}

void verify_listed_files(FileSource& src, const std::vector<MetaFileEntry>& entries,
                         std::string_view what, bool verify_digests, base::Diagnostics& diags) {
  std::unordered_map<std::string, const MetaFileEntry*> seen;  // path -> first listing
  for (const MetaFileEntry& e : entries) {
    if (is_url(e.name)) {
      diags.warning("C0018", e.where,
                    "\"" + e.name + "\" is a URL; its digest cannot be verified offline");
      continue;
    }
    std::string path;
    if (!join_package_path("", e.name, path)) {
      diags.error("C0003", e.where,
                  "\"" + e.name + "\" listed in " + std::string(what) + " leaves the package");
      continue;
    }
    auto [first, added] = seen.try_emplace(path, &e);
    if (!added) {
      // Hashed once: a listing that repeats one big file must not cost a read per line.
      base::Diagnostic d;
      d.code = what == "TOSCA.meta" ? "C0010" : "C0014";  // a malformed listing
      d.where = e.where;
      d.message = "\"" + e.name + "\" is listed in " + std::string(what) + " more than once";
      d.notes.push_back("first listed at line " + std::to_string(first->second->where.line));
      diags.add(std::move(d));
      continue;
    }
    if (!src.exists(path)) {
      diags.error("C0015", e.where,
                  "file \"" + e.name + "\" listed in " + std::string(what) + " is missing");
      continue;
    }
    if (e.algorithm.empty() || e.hash.empty()) {
      continue;
    }
    auto algo = base::parse_digest_algorithm(e.algorithm);
    if (!algo) {
      diags.error("C0017", e.where,
                  "unsupported digest algorithm \"" + e.algorithm + "\" for \"" + e.name +
                      "\" (expected SHA-224, SHA-256, SHA-384 or SHA-512)");
      continue;
    }
    std::string want = base::ascii_lower(e.hash);
    bool hex = want.size() == base::digest_hex_length(*algo) &&
               std::all_of(want.begin(), want.end(), [](char c) { return std::isxdigit(c); });
    if (!hex) {
      diags.error("C0016", e.where,
                  "hash \"" + e.hash + "\" of \"" + e.name + "\" is not a " +
                      std::string(base::to_string(*algo)) + " hex digest");
      continue;
    }
    if (!verify_digests) {
      continue;
    }
    auto got = src.digest_once(path, *algo);
    if (!got.ok()) {
      diags.error("C0002", e.where, "cannot read \"" + e.name + "\": " + got.status().message());
      continue;
    }
    if (got.value() != want) {
      base::Diagnostic d{base::Severity::kError,
                         "C0016",
                         e.where,
                         std::string(base::to_string(*algo)) + " of \"" + e.name +
                             "\" does not match " + std::string(what),
                         {}};
      d.notes.push_back("listed:   " + want);
      d.notes.push_back("computed: " + got.value());
      diags.add(std::move(d));
    }
  }
}

}  // namespace tosca::internal
