#include "tosca/internal/loader.h"

#include <algorithm>
#include <filesystem>

#include "tosca/internal/fast_yaml.h"
#include "tosca/internal/meta.h"

namespace tosca {

Package::Package() : impl(std::make_unique<Impl>()) {}
Package::~Package() = default;

const Flavour* Package::flavour(std::string_view id) const {
  for (const auto& f : flavours) {
    if (f.id == id)
      return &f;
  }
  return nullptr;
}

base::Result<std::string> Package::read_file(std::string_view path, uint64_t max_bytes) const {
  std::lock_guard<std::mutex> lock(impl->source_mu);
  if (impl->source == nullptr || !impl->source->exists(path)) {
    return base::Status::NotFound("no file \"" + std::string(path) + "\" in " + display_name);
  }
  return impl->source->read(path, max_bytes);
}

std::string Package::display(std::string_view path) const {
  if (impl->source == nullptr)
    return display_name + "!" + std::string(path);
  return impl->source->display(path);
}

struct YamlFile::Impl {
  std::unique_ptr<internal::Document> doc;
};
YamlFile::YamlFile() : impl(std::make_unique<Impl>()) {}
YamlFile::~YamlFile() = default;
Node YamlFile::root() const {
  return impl->doc->root();
}
const std::string& YamlFile::display() const {
  return impl->doc->display;
}

std::shared_ptr<const YamlFile> parse_yaml_file(std::string display, std::string_view text,
                                                const Limits& limits, base::Diagnostics& diags) {
  if (text.size() > limits.max_text_bytes) {
    diags.error(
        "C0008", {display, 0, 0},
        "file is larger than the limit of " + std::to_string(limits.max_text_bytes) + " bytes");
    return nullptr;
  }
  internal::YamlLimits yl;
  yl.max_depth = limits.max_yaml_depth;
  yl.max_nodes = limits.max_yaml_nodes;
  auto doc = internal::parse_yaml(text, display, yl, diags);
  if (doc == nullptr || !doc->root())
    return nullptr;
  auto f = std::make_shared<YamlFile>();
  f->impl->doc = std::move(doc);
  return f;
}

base::Result<std::string> package_archive_bytes(const std::string& path, const Limits& limits) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return internal::pack_directory(path, limits);
  auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return base::Status::NotFound("cannot read \"" + path + "\": " + ec.message());
  if (size > limits.max_total_bytes)
    return base::Status::InvalidArgument("\"" + path + "\" is larger than the package limit");
  std::string bytes(size, '\0');
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return base::Status::NotFound("cannot open \"" + path + "\"");
  size_t n = std::fread(bytes.data(), 1, size, f);
  std::fclose(f);
  if (n != size)
    return base::Status::Internal("short read of \"" + path + "\"");
  return bytes;
}

const std::vector<std::string>& vnflcm_operation_names() {
  // ETSI GS NFV-SOL 001 v2.6.1 §6.7.1 tosca.interfaces.nfv.Vnflcm.
  static const std::vector<std::string> kOps = {"instantiate",
                                                "instantiate_start",
                                                "instantiate_end",
                                                "terminate",
                                                "terminate_start",
                                                "terminate_end",
                                                "modify_information",
                                                "modify_information_start",
                                                "modify_information_end",
                                                "change_flavour",
                                                "change_flavour_start",
                                                "change_flavour_end",
                                                "change_external_connectivity",
                                                "change_external_connectivity_start",
                                                "change_external_connectivity_end",
                                                "operate",
                                                "operate_start",
                                                "operate_end",
                                                "heal",
                                                "heal_start",
                                                "heal_end",
                                                "scale",
                                                "scale_start",
                                                "scale_end",
                                                "scale_to_level",
                                                "scale_to_level_start",
                                                "scale_to_level_end"};
  return kOps;
}

std::vector<std::pair<std::string, std::string>> catalog_files() {
  size_t n = 0;
  const internal::CatalogEntry* e = internal::catalog_entries(&n);
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < n; ++i) {
    if (e[i].canonical)
      out.emplace_back(std::string(e[i].name), std::string(e[i].version));
  }
  return out;
}

namespace internal {

namespace {

constexpr const char* kMetaPath = "TOSCA-Metadata/TOSCA.meta";

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size())
    return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) !=
        std::tolower(static_cast<unsigned char>(suffix[i]))) {
      return false;
    }
  }
  return true;
}

bool is_yaml_name(std::string_view s) {
  return ends_with_ci(s, ".yaml") || ends_with_ci(s, ".yml");
}

std::string strip_ext(std::string_view s) {
  auto dot = s.rfind('.');
  return std::string(dot == std::string_view::npos ? s : s.substr(0, dot));
}

std::vector<std::string> keys_of(Node map) {
  std::vector<std::string> out;
  for (size_t i = 0; map.is_map() && i < map.size(); ++i)
    out.emplace_back(map.key(i).scalar());
  return out;
}

void unknown_key(base::Diagnostics& diags, Node key, std::string_view where,
                 const std::vector<std::string>& allowed) {
  std::string msg = "unknown key \"" + std::string(key.scalar()) + "\" in " + std::string(where);
  std::string hint = base::closest_match(key.scalar(), allowed);
  if (!hint.empty())
    msg += "; did you mean \"" + hint + "\"?";
  diags.error("T0020", key.location(), msg);
}

void check_keys(base::Diagnostics& diags, Node map, std::string_view where,
                const std::vector<std::string>& allowed) {
  for (size_t i = 0; map.is_map() && i < map.size(); ++i) {
    Node k = map.key(i);
    if (std::find(allowed.begin(), allowed.end(), k.scalar()) == allowed.end()) {
      unknown_key(diags, k, where, allowed);
    }
  }
}

int64_t to_int(Node n, int64_t fallback) {
  if (!n.is_scalar())
    return fallback;
  try {
    return std::stoll(std::string(n.scalar()));
  } catch (...) {
    return fallback;
  }
}

std::string str(Node n) {
  return std::string(n.scalar());
}

const std::vector<std::string> kTopKeys = {"tosca_definitions_version",
                                           "namespace",
                                           "metadata",
                                           "description",
                                           "dsl_definitions",
                                           "repositories",
                                           "imports",
                                           "artifact_types",
                                           "data_types",
                                           "capability_types",
                                           "interface_types",
                                           "relationship_types",
                                           "node_types",
                                           "group_types",
                                           "policy_types",
                                           "topology_template",
                                           "template_name",
                                           "template_author",
                                           "template_version"};

const std::vector<std::string> kVersions = {"tosca_simple_yaml_1_0", "tosca_simple_yaml_1_1",
                                            "tosca_simple_yaml_1_2", "tosca_simple_yaml_1_3"};

}  // namespace

// ---------------------------------------------------------------------------------------
// metadata phase

bool Loader::read_metadata() {
  pkg_.files = src_.files();
  if (src_.exists(kMetaPath)) {
    auto text = src_.read(kMetaPath, opt_.limits.max_text_bytes);
    if (!text.ok()) {
      diags_.error("C0008", {src_.display(kMetaPath), 0, 0},
                   "cannot read TOSCA.meta: " + text.status().message());
      return false;
    }
    if (!base::is_valid_utf8(text.value())) {
      diags_.error("C0020", {src_.display(kMetaPath), 1, 1}, "TOSCA.meta is not valid UTF-8 text");
      return false;
    }
    pkg_.meta = parse_tosca_meta(text.value(), src_.display(kMetaPath), diags_);
    base::SourceLocation where{src_.display(kMetaPath), 1, 1};
    auto check_listed = [&](const std::string& value, const char* key) {
      if (value.empty())
        return;
      std::string p;
      if (!join_package_path("", value, p)) {
        diags_.error("C0003", where, std::string(key) + " \"" + value + "\" leaves the package");
      } else if (!src_.exists(p) && !src_.is_dir(p)) {
        diags_.error("C0015", where,
                     std::string(key) + " file \"" + value + "\" is missing from the package");
      }
    };
    check_listed(pkg_.meta.entry_change_log, "ETSI-Entry-Change-Log");
    check_listed(pkg_.meta.entry_licenses, "ETSI-Entry-Licenses");
    check_listed(pkg_.meta.entry_certificate, "ETSI-Entry-Certificate");
    if (!pkg_.meta.entry_definitions.empty()) {
      if (!join_package_path("", pkg_.meta.entry_definitions, entry_)) {
        diags_.error(
            "C0003", where,
            "Entry-Definitions \"" + pkg_.meta.entry_definitions + "\" leaves the package");
        return false;
      }
      if (!src_.exists(entry_)) {
        diags_.error(
            "C0012", pkg_.meta.entry_definitions_where,
            "Entry-Definitions file \"" + pkg_.meta.entry_definitions + "\" is not in the package");
        return false;
      }
    }
    if (!pkg_.meta.entry_manifest.empty()) {
      std::string mf;
      if (!join_package_path("", pkg_.meta.entry_manifest, mf) || !src_.exists(mf)) {
        diags_.error("C0015", where,
                     "ETSI-Entry-Manifest file \"" + pkg_.meta.entry_manifest +
                         "\" is missing from the package");
      } else {
        pkg_.manifest.path = mf;
      }
    }
    verify_listed_files(src_, pkg_.meta.files, "TOSCA.meta", opt_.verify_digests, diags_);
  } else if (src_.exists("TOSCA-Metadata")) {
    // A file where the folder should be: typically a symbolic link that was stored as a
    // text file holding its target (git without symlink support, a zip tool that does
    // not keep links).
    auto text = src_.read("TOSCA-Metadata", 4096);
    std::string content = text.ok() ? text.value() : std::string();
    while (!content.empty() && (content.back() == '\n' || content.back() == '\r'))
      content.pop_back();
    // Set field by field: the brace-initialised form trips g++ 12's false
    // -Wmaybe-uninitialized at -O3 (here and for C0013 below).
    base::Diagnostic d;
    d.code = "C0021";
    d.where = {src_.display("TOSCA-Metadata"), 1, 1};
    d.message = "TOSCA-Metadata is a file, not a folder";
    if (!content.empty() && content.size() < 256 && content.find('\n') == std::string::npos) {
      d.notes.push_back("it holds \"" + content +
                        "\": a symbolic link stored as text? links leaving the package are "
                        "never followed");
    }
    diags_.add(std::move(d));
    return false;
  } else {
    // TOSCA-Simple-Profile-YAML-v1.2 §3.10.4 / SOL004 §4.3.1: no TOSCA-Metadata, exactly
    // one YAML file at the root, and a manifest of the same base name.
    std::vector<std::string> roots;
    for (const auto& f : src_.files()) {
      if (f.find('/') == std::string::npos && is_yaml_name(f))
        roots.push_back(f);
    }
    if (roots.size() != 1) {
      std::string msg = roots.empty()
                            ? "no TOSCA-Metadata/TOSCA.meta and no YAML file at the package root"
                            : "no TOSCA-Metadata/TOSCA.meta and " + std::to_string(roots.size()) +
                                  " YAML files at the package root (exactly one is allowed)";
      base::Diagnostic d;
      d.code = "C0013";
      d.where = {src_.display_name(), 0, 0};
      d.message = msg;
      // A common packaging slip: zipping the package folder instead of its contents.
      std::set<std::string> tops;
      for (const auto& f : src_.files())
        tops.insert(f.substr(0, f.find('/')));
      if (tops.size() == 1 && src_.exists(*tops.begin() + "/" + kMetaPath)) {
        d.notes.push_back("every file is under \"" + *tops.begin() +
                          "/\": archive the folder's contents, not the folder itself");
      }
      diags_.add(std::move(d));
      return false;
    }
    entry_ = roots[0];
    for (const auto& f : src_.files()) {
      if (f.find('/') == std::string::npos && ends_with_ci(f, ".mf")) {
        if (strip_ext(f) == strip_ext(entry_)) {
          pkg_.manifest.path = f;
        } else {
          diags_.error("C0019", {src_.display(f), 0, 0},
                       "manifest \"" + f + "\" must have the base name of \"" + entry_ + "\"");
        }
      }
    }
  }
  pkg_.entry_definitions = entry_;
  if (!pkg_.manifest.path.empty()) {
    auto text = src_.read(pkg_.manifest.path, opt_.limits.max_text_bytes);
    if (!text.ok()) {
      diags_.error("C0008", {src_.display(pkg_.manifest.path), 0, 0},
                   "cannot read manifest: " + text.status().message());
    } else if (!base::is_valid_utf8(text.value())) {
      diags_.error("C0020", {src_.display(pkg_.manifest.path), 1, 1},
                   "manifest is not valid UTF-8 text");
    } else {
      std::string path = pkg_.manifest.path;
      pkg_.manifest = parse_manifest(text.value(), src_.display(path), diags_);
      pkg_.manifest.path = path;
      verify_listed_files(src_, pkg_.manifest.sources, "the manifest", opt_.verify_digests, diags_);
      check_manifest_coverage();
    }
  }
  return !entry_.empty();
}

void Loader::check_manifest_coverage() {
  // SOL004 §4.3.2: the manifest lists every file of the package but itself, TOSCA.meta
  // and the signature files.
  std::set<std::string> listed;
  for (const auto& e : pkg_.manifest.sources) {
    std::string p;
    if (join_package_path("", e.name, p))
      listed.insert(p);
  }
  for (const auto& f : src_.files()) {
    if (f == pkg_.manifest.path || f.rfind("TOSCA-Metadata/", 0) == 0 || listed.count(f) ||
        ends_with_ci(f, ".cert") || ends_with_ci(f, ".sig.cms") || ends_with_ci(f, ".cms")) {
      continue;
    }
    diags_.warning("C0024", {src_.display(f), 0, 0}, "file is not listed in the manifest");
  }
}

// ---------------------------------------------------------------------------------------
// parse phase

Document* Loader::load_package_file(const std::string& path, const base::SourceLocation& from) {
  auto it = by_key_.find("pkg:" + path);
  if (it != by_key_.end())
    return it->second;
  // Bytes and nodes are budgets of the whole package: twenty files just under a per-file
  // limit would cost twenty times what one may.
  uint64_t room = opt_.limits.max_text_bytes - std::min(text_bytes_, opt_.limits.max_text_bytes);
  auto text = src_.read(path, room);
  if (!text.ok()) {
    std::string why = text.status().message();
    if (room < opt_.limits.max_text_bytes &&
        text.status().code() == base::StatusCode::kFailedPrecondition) {
      why = "the package's YAML files hold more than " +
            std::to_string(opt_.limits.max_text_bytes) + " bytes in all (" +
            std::to_string(text_bytes_) + " in the files loaded before it)";
    }
    diags_.error("C0008", from, "cannot load \"" + path + "\": " + why);
    by_key_["pkg:" + path] = nullptr;
    return nullptr;
  }
  text_bytes_ += text.value().size();
  const std::string& bytes = text.value();
  // A file with the same bytes as one loaded before is that document: found by size and a
  // quick hash, confirmed by comparing the bytes (read again: a rare case). One file per
  // key, so files made to collide cost one more read each, never a search.
  std::pair<size_t, uint64_t> quick{bytes.size(), quick_hash(bytes)};
  if (auto b = by_bytes_.find(quick); b != by_bytes_.end()) {
    auto earlier = src_.read(b->second->path, opt_.limits.max_text_bytes);
    if (earlier.ok() && earlier.value() == bytes) {
      by_key_["pkg:" + path] = b->second;
      return b->second;
    }
  }
  // The SHA-256 only where the catalog has a file of this size (a re-serialised copy never
  // matches by bytes, and a package's own files seldom do).
  std::string digest;
  const CatalogEntry* e = nullptr;
  if (catalog_has_size(bytes.size())) {
    digest = base::digest_hex(base::DigestAlgorithm::kSha256, bytes);
    auto same = by_digest_.find(digest);
    if (same != by_digest_.end()) {
      by_key_["pkg:" + path] = same->second;
      return same->second;
    }
    e = catalog_by_digest(digest);
  }
  std::unique_ptr<Document> doc;
  if (e != nullptr) {
    doc = Document::deserialize(e->blob);
    BASE_CHECK(doc != nullptr);
    doc->from_catalog = true;
    doc->display = src_.display(path);
  } else {
    YamlLimits yl{opt_.limits.max_yaml_depth, opt_.limits.max_yaml_nodes, yaml_nodes_};
    // A copy of a shipped file in another layout comes back from the catalog by its meaning.
    doc = parse_yaml(bytes, src_.display(path), yl, diags_, true, catalog_tree);
    if (!doc) {
      by_key_["pkg:" + path] = nullptr;
      return nullptr;
    }
    if (!doc->from_catalog)
      yaml_nodes_ += doc->expanded_nodes;
  }
  doc->path = path;
  doc->digest = digest;
  Document* raw = doc.get();
  pkg_.impl->docs.push_back(std::move(doc));
  by_key_["pkg:" + path] = raw;
  by_bytes_.emplace(quick, raw);
  if (!digest.empty())
    by_digest_[digest] = raw;
  return raw;
}

Document* Loader::load_catalog(const CatalogEntry* e) {
  std::string key = "cat:" + std::string(e->name) + "@" + std::string(e->version);
  auto it = by_key_.find(key);
  if (it != by_key_.end())
    return it->second;
  auto same = by_digest_.find(std::string(e->digest));
  if (same != by_digest_.end()) {
    by_key_[key] = same->second;
    return same->second;
  }
  auto doc = Document::deserialize(e->blob);
  BASE_CHECK(doc != nullptr);
  doc->from_catalog = true;
  doc->display = "vnflow-catalog:" + std::string(e->name) + "@" + std::string(e->version);
  doc->path = "";
  doc->digest = std::string(e->digest);
  Document* raw = doc.get();
  pkg_.impl->docs.push_back(std::move(doc));
  by_key_[key] = raw;
  by_digest_[std::string(e->digest)] = raw;
  order_.push_back(raw);
  load_imports(raw, 1);
  return raw;
}

Document* Loader::resolve_import(Document* from, Node ref, const std::string& file, int depth) {
  (void)depth;
  if (file.find("://") != std::string::npos) {
    if (const CatalogEntry* e = catalog_by_url(file))
      return load_catalog(e);
    diags_.error("T0014", ref.location(),
                 "remote import \"" + file +
                     "\" is not in vnflow's catalog and is never fetched; ship the file in the "
                     "package");
    return nullptr;
  }
  if (!from->path.empty() || !from->from_catalog) {
    std::string path;
    if (!join_package_path(dir_of(from->path), file, path)) {
      diags_.error("T0012", ref.location(), "import \"" + file + "\" leaves the package root");
      return nullptr;
    }
    if (src_.exists(path)) {
      Document* d = load_package_file(path, ref.location());
      if (d != nullptr && std::find(order_.begin(), order_.end(), d) == order_.end()) {
        order_.push_back(d);
        load_imports(d, depth);
      }
      return d;
    }
  }
  // Not in the package: a type file vnflow ships, by its name.
  std::string name = file.substr(file.rfind('/') == std::string::npos ? 0 : file.rfind('/') + 1);
  std::string version;
  if (from->from_catalog) {
    Node ver = from->root().get("metadata").get("template_version");
    version = str(ver);
  }
  if (const CatalogEntry* e = catalog_by_name(name, version))
    return load_catalog(e);
  std::string msg = "import \"" + file + "\" not found in the package";
  std::vector<std::string> candidates;
  for (const auto& f : src_.files()) {
    if (is_yaml_name(f))
      candidates.push_back(f.substr(f.rfind('/') == std::string::npos ? 0 : f.rfind('/') + 1));
  }
  std::string hint = base::closest_match(name, candidates);
  if (!hint.empty())
    msg += "; did you mean \"" + hint + "\"?";
  diags_.error("T0011", ref.location(), msg);
  return nullptr;
}

void Loader::load_imports(Document* doc, int depth) {
  Node root = doc->root();
  if (!root.is_map())
    return;
  Node imports = root.get("imports");
  if (!imports.valid() || imports.is_null())
    return;
  if (depth > static_cast<int>(opt_.limits.max_import_depth)) {
    diags_.error(
        "T0013", imports.location(),
        "imports nested deeper than " + std::to_string(opt_.limits.max_import_depth) + " levels");
    return;
  }
  if (!imports.is_seq()) {
    diags_.error("T0021", imports.location(), "imports must be a list");
    return;
  }
  for (size_t i = 0; i < imports.size(); ++i) {
    Node item = imports.item(i);
    std::string file;
    Node at = item;
    // TOSCA 1.2 §3.5.7: "file", {file: ..., repository, namespace_prefix}, or the 1.0
    // form {name: file | {file: ...}}.
    if (item.is_scalar()) {
      file = str(item);
    } else if (item.is_map() && item.get("file").valid()) {
      at = item.get("file");
      file = str(at);
      if (item.get("repository").valid()) {
        diags_.error("T0014", item.get("repository").location(),
                     "imports from repositories are never fetched; ship the file in the package");
        continue;
      }
    } else if (item.is_map() && item.size() == 1) {
      Node v = item.value(0);
      at = v.is_map() ? v.get("file") : v;
      file = str(at);
    }
    if (file.empty()) {
      diags_.error("T0021", item.location(), "an import names a file");
      continue;
    }
    resolve_import(doc, at, file, depth + 1);
  }
}

void Loader::check_document_keys(Document* doc) {
  Node root = doc->root();
  if (!root.is_map()) {
    diags_.error("T0021", root.valid() ? root.location() : doc->start(),
                 "a TOSCA file must be a map with tosca_definitions_version");
    return;
  }
  Node ver = root.get("tosca_definitions_version");
  if (!ver.valid()) {
    diags_.error("T0010", doc->start(), "missing tosca_definitions_version");
  } else if (std::find(kVersions.begin(), kVersions.end(), ver.scalar()) == kVersions.end()) {
    std::string msg = "unsupported tosca_definitions_version \"" + str(ver) +
                      "\" (vnflow reads tosca_simple_yaml_1_0 to 1_3)";
    diags_.error("T0010", ver.location(), msg);
  }
  check_keys(diags_, root, "a service template", kTopKeys);
}

// ---------------------------------------------------------------------------------------
// types phase

void Loader::collect_types() {
  for (const Document* doc : order_) {
    Node root = doc->root();
    if (!root.is_map())
      continue;
    bool normative = doc->from_catalog && doc->path.empty() &&
                     doc->display.find("tosca_simple_yaml") != std::string::npos;
    for (size_t k = 0; k < kTypeKindCount; ++k) {
      auto kind = static_cast<TypeKind>(k);
      types_.add_section(kind, root.get(section_name(kind)), doc, normative, diags_);
    }
  }
  types_.relocate_misplaced(diags_);
  types_.resolve(diags_);
}

void Loader::check_type_ref(Node type_node, std::string_view what) {
  if (!type_node.valid())
    return;
  std::string t = str(type_node);
  if (is_primitive_type(t) || types_.find(TypeKind::kData, t) != nullptr)
    return;
  std::vector<std::string> known = types_.names(TypeKind::kData);
  for (const auto& p : {"string", "integer", "float", "boolean", "timestamp", "version", "range",
                        "list", "map", "scalar-unit.size", "scalar-unit.time"}) {
    known.emplace_back(p);
  }
  std::string msg = std::string(what) + ": unknown data type \"" + t + "\"";
  std::string hint = base::closest_match(t, known);
  if (!hint.empty())
    msg += "; did you mean \"" + hint + "\"?";
  diags_.error("T0030", type_node.location(), msg);
}

void Loader::check_type_definitions(const Document* doc) {
  Node root = doc->root();
  for (size_t k = 0; k < kTypeKindCount; ++k) {
    auto kind = static_cast<TypeKind>(k);
    Node section = root.get(section_name(kind));
    for (size_t i = 0; section.is_map() && i < section.size(); ++i) {
      std::string name = str(section.key(i));
      Node def = section.value(i);
      for (const char* group : {"properties", "attributes"}) {
        Node props = def.get(group);
        for (size_t p = 0; props.is_map() && p < props.size(); ++p) {
          Node pd = props.value(p);
          std::string what =
              std::string(to_string(kind)) + " \"" + name + "\" " + group + "." + str(props.key(p));
          if (!pd.is_map()) {
            diags_.error("T0021", pd.location(), what + ": a property definition is a map");
            continue;
          }
          check_type_ref(pd.get("type"), what);
          Node es = pd.get("entry_schema");
          check_type_ref(es.is_map() ? es.get("type") : es, what + ".entry_schema");
          if (pd.get("default").valid() && pd.get("type").valid()) {
            ValueContext ctx{types_, diags_, {}, &value_sets_};
            check_value(pd.get("default"), pd, what + ".default", ctx);
          }
        }
      }
      if (kind == TypeKind::kNode) {
        Node ifaces = def.get("interfaces");
        for (size_t j = 0; ifaces.is_map() && j < ifaces.size(); ++j) {
          Node t = ifaces.value(j).get("type");
          if (t.valid() && types_.find(TypeKind::kInterface, t.scalar()) == nullptr) {
            diags_.error("T0030", t.location(),
                         "node type \"" + name + "\": unknown interface type \"" + str(t) + "\"");
          }
        }
        Node caps = def.get("capabilities");
        for (size_t j = 0; caps.is_map() && j < caps.size(); ++j) {
          Node c = caps.value(j);
          Node t = c.is_map() ? c.get("type") : c;
          if (t.is_scalar() && types_.find(TypeKind::kCapability, t.scalar()) == nullptr) {
            diags_.error("T0030", t.location(),
                         "node type \"" + name + "\": unknown capability type \"" + str(t) + "\"");
          }
        }
        for (const auto& [rname, rdef] : types_.requirements(types_.find(kind, name))) {
          Node cap = rdef.is_map() ? rdef.get("capability") : rdef;
          if (cap.is_scalar() && rdef.document() == doc &&
              types_.find(TypeKind::kCapability, cap.scalar()) == nullptr) {
            diags_.error("T0030", cap.location(),
                         "node type \"" + name + "\" requirement \"" + rname +
                             "\": unknown capability type \"" + str(cap) + "\"");
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// templates phase

const TypeDef* Loader::node_type_of(Node tmpl) const {
  return types_.find(TypeKind::kNode, tmpl.get("type").scalar());
}

Node Loader::find_vnf_node(Node topology, std::string* name) const {
  Node nts = topology.get("node_templates");
  for (size_t i = 0; nts.is_map() && i < nts.size(); ++i) {
    const TypeDef* t = node_type_of(nts.value(i));
    if (t != nullptr && Types::derives(t, "tosca.nodes.nfv.VNF")) {
      if (name)
        *name = str(nts.key(i));
      return nts.value(i);
    }
  }
  return {};
}

std::optional<Artifact> Loader::resolve_artifact(const Document* doc, const std::string& name,
                                                 Node def, bool report) {
  Artifact a;
  a.name = name;
  a.where = def.location();
  Node file = def.is_map() ? def.get("file") : def;
  if (def.is_map()) {
    Node t = def.get("type");
    a.type = str(t);
    if (!t.valid()) {
      if (report)
        diags_.error("T0066", def.location(), "artifact \"" + name + "\" has no type");
    } else if (types_.find(TypeKind::kArtifact, t.scalar()) == nullptr) {
      if (report) {
        std::string msg = "artifact \"" + name + "\": unknown artifact type \"" + a.type + "\"";
        std::string hint = base::closest_match(a.type, types_.names(TypeKind::kArtifact));
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("T0066", t.location(), msg);
      }
    }
  }
  if (!file.is_scalar()) {
    if (report)
      diags_.error("T0065", def.location(), "artifact \"" + name + "\" has no file");
    return a;
  }
  a.file = str(file);
  a.where = file.location();
  if (a.file.find("://") != std::string::npos) {
    return a;  // fetched at run time by whoever uses it
  }
  std::string path;
  if (!join_package_path(dir_of(doc->path), a.file, path)) {
    // Never read: an artifact outside the package is a file the package does not ship.
    if (report) {
      diags_.error("T0065", file.location(),
                   "artifact \"" + name + "\" file \"" + a.file +
                       "\" is outside the package; vnflow uses only files the package ships");
    }
    return a;
  }
  if (!src_.exists(path) && opt_.quirk_artifact_path_from_root) {
    std::string from_root;
    if (join_package_path("", a.file, from_root) && src_.exists(from_root))
      path = from_root;
  }
  a.path = path;
  a.present = src_.exists(path);
  referenced_files_.insert(path);
  if (!a.present && report) {
    diags_.error("T0065", file.location(),
                 "artifact \"" + name + "\" file \"" + a.file + "\" is missing from the package");
  }
  return a;
}

void Loader::check_node_template(const Document* doc, Node topology, const std::string& name,
                                 Node tmpl, bool substitute_vnf) {
  static const std::vector<std::string> kKeys = {
      "type",         "description",  "metadata",   "directives", "properties",  "attributes",
      "requirements", "capabilities", "interfaces", "artifacts",  "node_filter", "copy"};
  std::string what = "node \"" + name + "\"";
  if (!tmpl.is_map()) {
    diags_.error("T0021", tmpl.location(), what + " must be a map");
    return;
  }
  check_keys(diags_, tmpl, what, kKeys);
  Node type = tmpl.get("type");
  if (!type.is_scalar()) {
    diags_.error("T0021", tmpl.location(), what + " has no type");
    return;
  }
  const TypeDef* t = types_.find(TypeKind::kNode, type.scalar());
  if (t == nullptr) {
    std::string msg = what + ": unknown node type \"" + str(type) + "\"";
    for (size_t k = 0; k < kTypeKindCount; ++k) {
      if (types_.find(static_cast<TypeKind>(k), type.scalar())) {
        msg = what + ": \"" + str(type) + "\" is a " +
              std::string(to_string(static_cast<TypeKind>(k))) + ", not a node type";
        diags_.error("T0033", type.location(), msg);
        return;
      }
    }
    std::string hint = base::closest_match(type.scalar(), types_.names(TypeKind::kNode));
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    diags_.error("T0030", type.location(), msg);
    return;
  }
  ValueContext ctx{types_, diags_, topology.get("inputs"), &value_sets_};
  // properties (a flavour's VNF node is completed from the top-level VNF node, so its
  // required properties are checked after the merge, in the vnfd phase)
  check_properties(tmpl.get("properties"), types_.merged(t, "properties"), tmpl, what,
                   !substitute_vnf, ctx);
  // requirements
  Node reqs = tmpl.get("requirements");
  NamedNodes req_defs = types_.requirements(t);
  Node nts = topology.get("node_templates");
  if (reqs.valid() && !reqs.is_null() && !reqs.is_seq()) {
    diags_.error("T0021", reqs.location(), what + ": requirements must be a list");
  }
  for (size_t i = 0; reqs.is_seq() && i < reqs.size(); ++i) {
    Node r = reqs.item(i);
    if (!r.is_map() || r.size() != 1) {
      diags_.error("T0021", r.location(), what + ": a requirement is a single-key map");
      continue;
    }
    std::string rname = str(r.key(0));
    bool known = std::any_of(req_defs.begin(), req_defs.end(),
                             [&](const auto& p) { return p.first == rname; });
    if (!known) {
      std::vector<std::string> names;
      for (const auto& [n, d] : req_defs)
        names.push_back(n);
      std::string msg =
          what + ": node type \"" + t->name + "\" has no requirement \"" + rname + "\"";
      std::string hint = base::closest_match(rname, names);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      diags_.error("T0060", r.key(0).location(), msg);
      continue;
    }
    Node target = r.value(0);
    Node node = target.is_map() ? target.get("node") : target;
    if (node.is_scalar()) {
      std::string n = str(node);
      if (!(nts.is_map() && nts.get(n).valid()) && types_.find(TypeKind::kNode, n) == nullptr) {
        std::string msg = what + " requirement \"" + rname + "\": no node template \"" + n + "\"";
        std::string hint = base::closest_match(n, keys_of(nts));
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("T0061", node.location(), msg);
      }
    }
  }
  // capabilities
  Node caps = tmpl.get("capabilities");
  NamedNodes cap_defs = types_.merged(t, "capabilities");
  for (size_t i = 0; caps.is_map() && i < caps.size(); ++i) {
    std::string cname = str(caps.key(i));
    const Node* def = nullptr;
    for (const auto& [n, d] : cap_defs) {
      if (n == cname)
        def = &d;
    }
    if (def == nullptr) {
      std::vector<std::string> names;
      for (const auto& [n, d] : cap_defs)
        names.push_back(n);
      std::string msg =
          what + ": node type \"" + t->name + "\" has no capability \"" + cname + "\"";
      std::string hint = base::closest_match(cname, names);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      diags_.error("T0062", caps.key(i).location(), msg);
      continue;
    }
    Node ctype = def->is_map() ? def->get("type") : *def;
    const TypeDef* ct = types_.find(TypeKind::kCapability, ctype.scalar());
    if (ct == nullptr)
      continue;
    NamedNodes cprops = types_.merged(ct, "properties");
    // Property definitions refined inside the node type's capability definition win.
    if (def->is_map() && def->get("properties").is_map()) {
      Node refined = def->get("properties");
      for (size_t k = 0; k < refined.size(); ++k) {
        std::string pn = str(refined.key(k));
        auto it =
            std::find_if(cprops.begin(), cprops.end(), [&](auto& p) { return p.first == pn; });
        if (it != cprops.end())
          it->second = refined.value(k);
        else
          cprops.emplace_back(pn, refined.value(k));
      }
    }
    check_properties(caps.value(i).get("properties"), cprops, caps.value(i),
                     what + " capability \"" + cname + "\"", true, ctx);
  }
  // artifacts
  Node arts = tmpl.get("artifacts");
  if (arts.valid() && !arts.is_null() && !arts.is_map()) {
    diags_.error("T0021", arts.location(), what + ": artifacts must be a map");
  }
  for (size_t i = 0; arts.is_map() && i < arts.size(); ++i) {
    resolve_artifact(doc, str(arts.key(i)), arts.value(i), true);
  }
  // interfaces
  Node ifaces = tmpl.get("interfaces");
  NamedNodes iface_defs = types_.merged(t, "interfaces");
  NamedNodes type_arts = types_.merged(t, "artifacts");
  for (size_t i = 0; ifaces.is_map() && i < ifaces.size(); ++i) {
    std::string iname = str(ifaces.key(i));
    const Node* def = nullptr;
    for (const auto& [n, d] : iface_defs) {
      if (n == iname)
        def = &d;
    }
    if (def == nullptr) {
      std::vector<std::string> names;
      for (const auto& [n, d] : iface_defs)
        names.push_back(n);
      std::string msg = what + ": node type \"" + t->name + "\" has no interface \"" + iname + "\"";
      std::string hint = base::closest_match(iname, names);
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      diags_.error("T0063", ifaces.key(i).location(), msg);
      continue;
    }
    const TypeDef* it = types_.find(TypeKind::kInterface, def->get("type").scalar());
    std::vector<std::string> ops;
    for (const TypeDef* x = it; x != nullptr; x = x->parent) {
      for (size_t k = 0; x->def.is_map() && k < x->def.size(); ++k) {
        std::string key = str(x->def.key(k));
        if (key == "operations" || key == "notifications") {
          for (const auto& o : keys_of(x->def.value(k)))
            ops.push_back(o);
        } else if (key != "derived_from" && key != "description" && key != "inputs" &&
                   key != "version" && key != "metadata") {
          ops.push_back(key);
        }
      }
    }
    for (size_t k = 0; def->is_map() && k < def->size(); ++k) {
      std::string key = str(def->key(k));
      if (key != "type" && key != "inputs" && key != "description")
        ops.push_back(key);
    }
    Node body = ifaces.value(i);
    Node op_map = body.get("operations").is_map() ? body.get("operations") : body;
    for (size_t k = 0; op_map.is_map() && k < op_map.size(); ++k) {
      std::string op = str(op_map.key(k));
      if (op_map == body && (op == "type" || op == "inputs" || op == "description" ||
                             op == "operations" || op == "notifications")) {
        continue;
      }
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
        std::string msg = what + ": interface \"" + iname + "\" has no operation \"" + op + "\"";
        std::string hint = base::closest_match(op, ops);
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("T0063", op_map.key(k).location(), msg);
        continue;
      }
      Node opdef = op_map.value(k);
      Node impl = opdef.is_map() ? opdef.get("implementation") : opdef;
      std::vector<Node> refs;
      if (impl.is_scalar()) {
        refs.push_back(impl);
      } else if (impl.is_map()) {
        if (impl.get("primary").is_scalar())
          refs.push_back(impl.get("primary"));
        Node deps = impl.get("dependencies");
        for (size_t d = 0; deps.is_seq() && d < deps.size(); ++d)
          refs.push_back(deps.item(d));
      }
      for (Node ref : refs) {
        std::string r = str(ref);
        bool is_artifact = (arts.is_map() && arts.get(r).valid()) ||
                           std::any_of(type_arts.begin(), type_arts.end(),
                                       [&](const auto& p) { return p.first == r; });
        if (is_artifact || r.find("://") != std::string::npos)
          continue;
        auto a = resolve_artifact(doc, r, ref, false);
        if (!a || !a->present) {
          diags_.error("T0064", ref.location(),
                       what + " operation \"" + iname + "." + op + "\": implementation \"" + r +
                           "\" is neither an artifact of the node nor a file in the package");
        }
      }
    }
  }
}

void Loader::check_policies(const Document* doc, Node topology) {
  (void)doc;
  Node pols = topology.get("policies");
  if (!pols.valid() || pols.is_null())
    return;
  std::vector<std::pair<std::string, Node>> items;
  if (pols.is_seq()) {
    for (size_t i = 0; i < pols.size(); ++i) {
      Node p = pols.item(i);
      if (!p.is_map() || p.size() != 1) {
        diags_.error("T0021", p.location(), "a policy is a single-key map {name: {type: ...}}");
        continue;
      }
      items.emplace_back(str(p.key(0)), p.value(0));
    }
  } else if (pols.is_map()) {
    for (size_t i = 0; i < pols.size(); ++i)
      items.emplace_back(str(pols.key(i)), pols.value(i));
  } else {
    diags_.error("T0021", pols.location(), "policies must be a list");
    return;
  }
  Node nts = topology.get("node_templates");
  Node groups = topology.get("groups");
  ValueContext ctx{types_, diags_, topology.get("inputs"), &value_sets_};
  for (const auto& [name, p] : items) {
    std::string what = "policy \"" + name + "\"";
    if (!p.is_map()) {
      diags_.error("T0021", p.location(), what + " must be a map with a type");
      continue;
    }
    check_keys(diags_, p, what,
               {"type", "description", "metadata", "properties", "targets", "triggers"});
    Node type = p.get("type");
    const TypeDef* t = types_.find(TypeKind::kPolicy, type.scalar());
    if (t == nullptr) {
      std::string msg = what + ": unknown policy type \"" + str(type) + "\"";
      std::string hint = base::closest_match(type.scalar(), types_.names(TypeKind::kPolicy));
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      diags_.error("T0030", type.valid() ? type.location() : p.location(), msg);
      continue;
    }
    check_properties(p.get("properties"), types_.merged(t, "properties"), p, what, true, ctx);
    Node targets = p.get("targets");
    for (size_t i = 0; targets.is_seq() && i < targets.size(); ++i) {
      std::string n = str(targets.item(i));
      if (!(nts.is_map() && nts.get(n).valid()) && !(groups.is_map() && groups.get(n).valid())) {
        std::string msg = what + ": target \"" + n + "\" is not a node template or group";
        std::string hint = base::closest_match(n, keys_of(nts));
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("T0070", targets.item(i).location(), msg);
      }
    }
  }
}

void Loader::check_groups(const Document* doc, Node topology) {
  (void)doc;
  Node groups = topology.get("groups");
  Node nts = topology.get("node_templates");
  ValueContext ctx{types_, diags_, topology.get("inputs"), &value_sets_};
  for (size_t i = 0; groups.is_map() && i < groups.size(); ++i) {
    std::string what = "group \"" + str(groups.key(i)) + "\"";
    Node g = groups.value(i);
    if (!g.is_map()) {
      diags_.error("T0021", g.location(), what + " must be a map with a type");
      continue;
    }
    Node type = g.get("type");
    const TypeDef* t = types_.find(TypeKind::kGroup, type.scalar());
    if (t == nullptr) {
      diags_.error("T0030", type.valid() ? type.location() : g.location(),
                   what + ": unknown group type \"" + str(type) + "\"");
      continue;
    }
    // Group properties are descriptive and nothing at run time reads them; tosca-parser
    // and Tacker accept groups without their required ones, so vnflow warns (T0091).
    check_properties(g.get("properties"), types_.merged(t, "properties"), g, what, true, ctx,
                     "T0091", base::Severity::kWarning);
    Node members = g.get("members");
    for (size_t k = 0; members.is_seq() && k < members.size(); ++k) {
      std::string n = str(members.item(k));
      if (!(nts.is_map() && nts.get(n).valid())) {
        diags_.error("T0090", members.item(k).location(),
                     what + ": member \"" + n + "\" is not a node template");
      }
    }
  }
}

void Loader::check_substitution(const Document* doc, Node topology) {
  (void)doc;
  Node sm = topology.get("substitution_mappings");
  if (!sm.valid() || sm.is_null())
    return;
  if (!sm.is_map()) {
    diags_.error("T0083", sm.location(), "substitution_mappings must be a map");
    return;
  }
  check_keys(diags_, sm, "substitution_mappings",
             {"node_type", "properties", "requirements", "capabilities", "interfaces", "attributes",
              "substitution_filter", "node"});
  Node nt = sm.get("node_type");
  if (!nt.is_scalar() || types_.find(TypeKind::kNode, nt.scalar()) == nullptr) {
    diags_.error("T0083", nt.valid() ? nt.location() : sm.location(),
                 "substitution_mappings: node_type \"" + str(nt) + "\" is not a node type");
  }
  Node nts = topology.get("node_templates");
  Node reqs = sm.get("requirements");
  for (size_t i = 0; reqs.is_map() && i < reqs.size(); ++i) {
    Node m = reqs.value(i);
    if (m.is_seq() && m.size() == 0) {
      continue;  // "[]": the requirement is deliberately left unmapped
    }
    if (!m.is_seq() || m.size() != 2) {
      diags_.error("T0083", m.location(),
                   "substitution requirement \"" + str(reqs.key(i)) +
                       "\" maps to [ <node template>, <requirement> ]");
      continue;
    }
    std::string n = str(m.item(0));
    if (!(nts.is_map() && nts.get(n).valid())) {
      // Tacker drops substitution requirements before use and tosca-parser does not check
      // them, so real packages ship stale ones: a warning, not an error.
      std::string msg = "substitution requirement \"" + str(reqs.key(i)) +
                        "\" maps to unknown node template \"" + n + "\"";
      std::string hint = base::closest_match(n, keys_of(nts));
      if (!hint.empty())
        msg += "; did you mean \"" + hint + "\"?";
      diags_.warning("T0084", m.item(0).location(), msg);
    }
  }
}

void Loader::check_topology(const Document* doc) {
  Node tt = doc->root().get("topology_template");
  if (!tt.valid() || tt.is_null())
    return;
  if (!tt.is_map()) {
    diags_.error("T0021", tt.location(), "topology_template must be a map");
    return;
  }
  check_keys(diags_, tt, "topology_template",
             {"description", "inputs", "node_templates", "relationship_templates", "groups",
              "policies", "outputs", "substitution_mappings", "workflows"});
  Node inputs = tt.get("inputs");
  ValueContext ctx{types_, diags_, inputs, &value_sets_};
  for (size_t i = 0; inputs.is_map() && i < inputs.size(); ++i) {
    Node def = inputs.value(i);
    std::string what = "input \"" + str(inputs.key(i)) + "\"";
    if (!def.is_map()) {
      diags_.error("T0021", def.location(), what + " must be a map");
      continue;
    }
    check_type_ref(def.get("type"), what);
    if (def.get("default").valid())
      check_value(def.get("default"), def, what + ".default", ctx);
  }
  Node nts = tt.get("node_templates");
  if (nts.valid() && !nts.is_null() && !nts.is_map()) {
    diags_.error("T0021", nts.location(), "node_templates must be a map of node templates");
  }
  bool is_flavour = tt.get("substitution_mappings").is_map();
  for (size_t i = 0; nts.is_map() && i < nts.size(); ++i) {
    const TypeDef* t = node_type_of(nts.value(i));
    bool substitute_vnf = is_flavour && t != nullptr && Types::derives(t, "tosca.nodes.nfv.VNF");
    check_node_template(doc, tt, str(nts.key(i)), nts.value(i), substitute_vnf);
  }
  check_groups(doc, tt);
  check_policies(doc, tt);
  check_substitution(doc, tt);
}

// ---------------------------------------------------------------------------------------
// vnfd phase

namespace {

struct PolicyView {
  std::string name;
  const TypeDef* type;
  Node body;
};

std::vector<PolicyView> policy_views(const Types& types, Node topology) {
  std::vector<PolicyView> out;
  Node pols = topology.get("policies");
  auto add = [&](Node k, Node v) {
    const TypeDef* t = types.find(TypeKind::kPolicy, v.get("type").scalar());
    if (t != nullptr)
      out.push_back({str(k), t, v});
  };
  for (size_t i = 0; pols.is_seq() && i < pols.size(); ++i) {
    Node p = pols.item(i);
    if (p.is_map() && p.size() == 1)
      add(p.key(0), p.value(0));
  }
  for (size_t i = 0; pols.is_map() && i < pols.size(); ++i)
    add(pols.key(i), pols.value(i));
  return out;
}

// The value of a merged property, with get_input resolved against the inputs' defaults.
Node resolve_input(Node v, Node inputs) {
  if (is_function(v) && v.key(0).scalar() == "get_input") {
    Node arg = v.value(0);
    Node name = arg.is_seq() && arg.size() > 0 ? arg.item(0) : arg;
    Node def = inputs.get(name.scalar());
    if (def.is_map() && def.get("default").valid())
      return def.get("default");
  }
  return v;
}

}  // namespace

void Loader::sol001_policy_checks(const Document* doc, Node topology, Flavour& f) {
  (void)doc;
  std::vector<PolicyView> pols = policy_views(types_, topology);
  std::set<std::string> aspect_ids;
  std::map<std::string, std::set<std::string>> aspect_deltas;
  std::vector<std::pair<std::string, Node>> step_nodes;   // (aspect, step_deltas item)
  std::set<std::pair<std::string, std::string>> defined;  // (aspect, delta) of some policy
  bool misnamed_aspect = false;  // a deltas policy meant some aspect; which, nobody knows
  // ETSI GS NFV-SOL 001 v2.6.1 §6.10.6 ScalingAspects
  for (const auto& p : pols) {
    if (!Types::derives(p.type, "tosca.policies.nfv.ScalingAspects"))
      continue;
    Node aspects = p.body.get("properties").get("aspects");
    for (size_t i = 0; aspects.is_map() && i < aspects.size(); ++i) {
      ScalingAspect a;
      a.id = str(aspects.key(i));
      Node v = aspects.value(i);
      a.name = str(v.get("name"));
      a.description = str(v.get("description"));
      a.max_scale_level = to_int(v.get("max_scale_level"), 0);
      Node sd = v.get("step_deltas");
      for (size_t k = 0; sd.is_seq() && k < sd.size(); ++k) {
        a.step_deltas.push_back(str(sd.item(k)));
        step_nodes.emplace_back(a.id, sd.item(k));
      }
      aspect_ids.insert(a.id);
      aspect_deltas[a.id].insert(a.step_deltas.begin(), a.step_deltas.end());
      f.aspects.push_back(std::move(a));
    }
  }
  // §6.10.7 VduScalingAspectDeltas
  for (const auto& p : pols) {
    if (!Types::derives(p.type, "tosca.policies.nfv.VduScalingAspectDeltas"))
      continue;
    Node props = p.body.get("properties");
    Node aspect = props.get("aspect");
    std::string id = str(aspect);
    if (!aspect_ids.count(id)) {
      diags_.error("T0071", aspect.valid() ? aspect.location() : p.body.location(),
                   "policy \"" + p.name + "\": aspect \"" + id +
                       "\" is not declared by a ScalingAspects policy");
      misnamed_aspect = true;
      continue;
    }
    Node deltas = props.get("deltas");
    Node targets = p.body.get("targets");
    for (size_t i = 0; deltas.is_map() && i < deltas.size(); ++i) {
      std::string did = str(deltas.key(i));
      defined.emplace(id, did);
      if (!aspect_deltas[id].count(did)) {
        diags_.error("T0071", deltas.key(i).location(),
                     "policy \"" + p.name + "\": delta \"" + did +
                         "\" is not a step delta of aspect \"" + id + "\"");
      }
      for (size_t t = 0; targets.is_seq() && t < targets.size(); ++t) {
        for (auto& a : f.aspects) {
          if (a.id == id) {
            a.vdu_deltas[str(targets.item(t))][did] =
                to_int(deltas.value(i).get("number_of_instances"), 0);
          }
        }
      }
    }
  }
  // A step delta no VduScalingAspectDeltas defines scales nothing. Tacker never checks it,
  // so it is a warning unless the undeclared-step-delta quirk is off (--strict).
  for (const auto& [aspect, item] : step_nodes) {
    if (misnamed_aspect || defined.count({aspect, str(item)}))
      continue;
    base::Diagnostic d;
    d.severity =
        opt_.quirk_undeclared_step_delta ? base::Severity::kWarning : base::Severity::kError;
    d.code = "T0071";
    d.where = item.location();
    d.message = "aspect \"" + aspect + "\": step delta \"" + str(item) +
                "\" is defined by no VduScalingAspectDeltas policy";
    diags_.add(std::move(d));
  }
  // §6.10.8 InstantiationLevels, §6.10.9 VduInstantiationLevels
  std::set<std::string> level_ids;
  bool have_levels_policy = false;
  for (const auto& p : pols) {
    if (!Types::derives(p.type, "tosca.policies.nfv.InstantiationLevels"))
      continue;
    have_levels_policy = true;
    Node props = p.body.get("properties");
    Node levels = props.get("levels");
    for (size_t i = 0; levels.is_map() && i < levels.size(); ++i) {
      InstantiationLevel l;
      l.id = str(levels.key(i));
      l.description = str(levels.value(i).get("description"));
      Node si = levels.value(i).get("scale_info");
      for (size_t k = 0; si.is_map() && k < si.size(); ++k) {
        std::string aid = str(si.key(k));
        if (!aspect_ids.count(aid)) {
          diags_.error("T0071", si.key(k).location(),
                       "level \"" + l.id + "\": scale_info names unknown aspect \"" + aid + "\"");
        }
        l.scale_info[aid] = to_int(si.value(k).get("scale_level"), 0);
      }
      level_ids.insert(l.id);
      f.levels.push_back(std::move(l));
    }
    Node dl = props.get("default_level");
    if (dl.valid()) {
      f.default_level = str(dl);
      if (!level_ids.count(f.default_level)) {
        diags_.error("T0071", dl.location(),
                     "default_level \"" + f.default_level + "\" is not one of the levels");
      }
    }
  }
  for (const auto& p : pols) {
    bool vdu = Types::derives(p.type, "tosca.policies.nfv.VduInstantiationLevels");
    bool vl = Types::derives(p.type, "tosca.policies.nfv.VirtualLinkInstantiationLevels");
    if (!vdu && !vl)
      continue;
    Node levels = p.body.get("properties").get("levels");
    if (!have_levels_policy) {
      diags_.error("T0071", p.body.location(),
                   "policy \"" + p.name + "\" needs an InstantiationLevels policy");
      continue;
    }
    Node targets = p.body.get("targets");
    for (size_t i = 0; levels.is_map() && i < levels.size(); ++i) {
      std::string lid = str(levels.key(i));
      if (!level_ids.count(lid)) {
        diags_.error("T0071", levels.key(i).location(),
                     "policy \"" + p.name + "\": level \"" + lid +
                         "\" is not declared by the "
                         "InstantiationLevels policy");
        continue;
      }
      if (!vdu)
        continue;
      for (auto& l : f.levels) {
        if (l.id != lid)
          continue;
        for (size_t t = 0; targets.is_seq() && t < targets.size(); ++t) {
          l.vdu_instances[str(targets.item(t))] =
              to_int(levels.value(i).get("number_of_instances"), 0);
        }
      }
    }
  }
}

void Loader::build_flavour(const Document* doc, Node tt, Flavour& f) {
  Node nts = tt.get("node_templates");
  Node sm = tt.get("substitution_mappings");
  f.file = doc->path;
  for (size_t i = 0; nts.is_map() && i < nts.size(); ++i) {
    std::string name = str(nts.key(i));
    Node tmpl = nts.value(i);
    const TypeDef* t = node_type_of(tmpl);
    if (t == nullptr)
      continue;
    Node props = tmpl.get("properties");
    Node reqs = tmpl.get("requirements");
    auto req_target = [&](std::string_view rn) {
      for (size_t k = 0; reqs.is_seq() && k < reqs.size(); ++k) {
        Node r = reqs.item(k);
        if (r.is_map() && r.size() == 1 && r.key(0).scalar() == rn) {
          Node v = r.value(0);
          return str(v.is_map() ? v.get("node") : v);
        }
      }
      return std::string();
    };
    if (Types::derives(t, "tosca.nodes.nfv.Vdu.Compute") ||
        Types::derives(t, "tosca.nodes.nfv.Vdu.OsContainerDeployableUnit")) {
      Vdu v;
      v.name = name;
      v.type = t->name;
      v.vdu_name = str(props.get("name"));
      v.where = tmpl.location();
      Node profile = props.get("vdu_profile");
      v.min_instances = to_int(profile.get("min_number_of_instances"), 1);
      v.max_instances = to_int(profile.get("max_number_of_instances"), 1);
      v.sw_image_name = str(props.get("sw_image_data").get("name"));
      Node arts = tmpl.get("artifacts");
      Node first_image;  // the key of the VDU's SwImage artifact
      for (size_t k = 0; arts.is_map() && k < arts.size(); ++k) {
        Node a = arts.value(k);
        const TypeDef* at = types_.find(TypeKind::kArtifact, a.get("type").scalar());
        if (at == nullptr || !Types::derives(at, "tosca.artifacts.nfv.SwImage"))
          continue;
        // SOL001 Vdu.Compute: one image per VDU, described by its sw_image_data (Tacker
        // refuses either slip as an invalid CSAR).
        if (first_image.valid()) {
          base::Diagnostic d;
          d.code = "T0021";
          d.where = arts.key(k).location();
          d.message = "VDU \"" + name + "\" has a second SwImage artifact \"" + str(arts.key(k)) +
                      "\"; a VDU boots one image";
          d.notes.push_back("the first is \"" + str(first_image) + "\" at line " +
                            std::to_string(first_image.location().line));
          diags_.add(std::move(d));
          continue;
        }
        if (!props.get("sw_image_data").valid()) {
          diags_.error("T0041", arts.key(k).location(),
                       "VDU \"" + name + "\": SwImage artifact \"" + str(arts.key(k)) +
                           "\" needs properties.sw_image_data, which describes the image "
                           "(name, version, checksum, formats, sizes)");
        }
        first_image = arts.key(k);
        v.sw_image = resolve_artifact(doc, str(arts.key(k)), a, false);
      }
      for (size_t k = 0; reqs.is_seq() && k < reqs.size(); ++k) {
        Node r = reqs.item(k);
        if (r.is_map() && r.size() == 1 && r.key(0).scalar() == "virtual_storage") {
          v.storages.push_back(str(r.value(0).is_map() ? r.value(0).get("node") : r.value(0)));
        }
      }
      f.vdus.push_back(std::move(v));
    } else if (Types::derives(t, "tosca.nodes.nfv.VduCp")) {
      ConnectionPoint cp;
      cp.name = name;
      cp.type = t->name;
      cp.virtual_binding = req_target("virtual_binding");
      cp.virtual_link = req_target("virtual_link");
      cp.where = tmpl.location();
      f.cps.push_back(std::move(cp));
    } else if (Types::derives(t, "tosca.nodes.nfv.VnfVirtualLink")) {
      VirtualLink vl;
      vl.name = name;
      vl.type = t->name;
      vl.where = tmpl.location();
      Node lp = props.get("connectivity_type").get("layer_protocols");
      for (size_t k = 0; lp.is_seq() && k < lp.size(); ++k)
        vl.layer_protocols.push_back(str(lp.item(k)));
      f.vls.push_back(std::move(vl));
    } else if (Types::derives(t, "tosca.nodes.nfv.Vdu.VirtualBlockStorage") ||
               Types::derives(t, "tosca.nodes.nfv.Vdu.VirtualObjectStorage") ||
               Types::derives(t, "tosca.nodes.nfv.Vdu.VirtualFileStorage")) {
      Storage s;
      s.name = name;
      s.type = t->name;
      s.where = tmpl.location();
      Node data = props.get("virtual_block_storage_data");
      if (!data.valid())
        data = props.get("virtual_object_storage_data");
      if (!data.valid())
        data = props;
      s.size = str(data.get("size_of_storage"));
      f.storages.push_back(std::move(s));
    }
  }
  Node reqs = sm.get("requirements");
  for (size_t i = 0; reqs.is_map() && i < reqs.size(); ++i) {
    Node m = reqs.value(i);
    if (!m.is_seq() || m.size() != 2)
      continue;
    std::string ext = str(reqs.key(i));
    f.external_links.emplace_back(ext, str(m.item(0)) + "." + str(m.item(1)));
    for (auto& cp : f.cps) {
      if (cp.name == str(m.item(0)) && m.item(1).scalar() == "virtual_link")
        cp.external_link = ext;
    }
  }
  sol001_policy_checks(doc, tt, f);
}

void Loader::build_vnfd() {
  Node top_tt = entry_doc_->root().get("topology_template");
  std::string top_vnf_name;
  Node top_vnf = find_vnf_node(top_tt, &top_vnf_name);
  // Flavours: every template of the package whose substitution_mappings carries a
  // flavour_id (SOL001 §6.8: one service template per deployment flavour).
  struct Candidate {
    const Document* doc;
    Node tt;
    Node fid;
  };
  std::vector<Candidate> flavours;
  for (const Document* doc : order_) {
    if (doc->from_catalog && doc->path.empty())
      continue;
    Node tt = doc->root().get("topology_template");
    Node sm = tt.get("substitution_mappings");
    if (!sm.is_map())
      continue;
    Node fid = sm.get("properties").get("flavour_id");
    if (!fid.valid())
      continue;
    if (!fid.is_scalar()) {
      diags_.error("T0083", fid.location(), "flavour_id must be a string");
      continue;
    }
    flavours.push_back({doc, tt, fid});
  }
  if (!top_vnf.valid() && flavours.empty()) {
    diags_.error("T0080", entry_doc_->start(),
                 "no VNF: no node template derives from tosca.nodes.nfv.VNF and no "
                 "deployment flavour is defined");
    return;
  }
  if (flavours.empty()) {
    diags_.error("T0081", top_vnf.location(),
                 "no deployment flavour: no template has substitution_mappings with "
                 "properties.flavour_id");
  }
  // VNF-level data from the top-level VNF node (Tacker: first VNF node of the main
  // template; a parameterised descriptor_id falls back to the type's default).
  Node vnf_for_info = top_vnf;
  Node inputs_for_info = top_tt.get("inputs");
  if (!vnf_for_info.valid() && !flavours.empty()) {
    vnf_for_info = find_vnf_node(flavours[0].tt, nullptr);
    inputs_for_info = flavours[0].tt.get("inputs");
  }
  const TypeDef* vnf_type = node_type_of(vnf_for_info);
  NamedNodes vnf_defs = vnf_type ? types_.merged(vnf_type, "properties") : NamedNodes{};
  auto info_prop = [&](const std::string& name) -> Node {
    Node v = resolve_input(vnf_for_info.get("properties").get(name), inputs_for_info);
    if (v.valid() && !is_function(v))
      return v;
    for (const auto& [n, d] : vnf_defs) {
      if (n == name && d.get("default").valid())
        return d.get("default");
    }
    return {};
  };
  pkg_.vnf.node_type = vnf_type ? vnf_type->name : "";
  pkg_.vnf.descriptor_id = str(info_prop("descriptor_id"));
  pkg_.vnf.descriptor_version = str(info_prop("descriptor_version"));
  pkg_.vnf.provider = str(info_prop("provider"));
  pkg_.vnf.product_name = str(info_prop("product_name"));
  pkg_.vnf.software_version = str(info_prop("software_version"));
  Node vi = info_prop("vnfm_info");
  for (size_t i = 0; vi.is_seq() && i < vi.size(); ++i)
    pkg_.vnf.vnfm_info.push_back(str(vi.item(i)));

  std::set<std::string> seen;
  for (const auto& c : flavours) {
    Flavour f;
    f.id = str(c.fid);
    if (!seen.insert(f.id).second) {
      diags_.error("T0082", c.fid.location(),
                   "deployment flavour \"" + f.id + "\" is defined twice");
      continue;
    }
    std::string vnf_name;
    Node vnf = find_vnf_node(c.tt, &vnf_name);
    Node sm_type = c.tt.get("substitution_mappings").get("node_type");
    const TypeDef* t =
        vnf.valid() ? node_type_of(vnf) : types_.find(TypeKind::kNode, sm_type.scalar());
    if (!vnf.valid()) {
      vnf = top_vnf;
      vnf_name = top_vnf_name;
    }
    f.vnf_node = vnf_name;
    f.vnf_type = t ? t->name : "";
    // Merge (SOL001 §6.8): type defaults < top-level VNF node < flavour VNF node, and the
    // flavour_id of the substitution mapping.
    NamedNodes defs = t ? types_.merged(t, "properties") : NamedNodes{};
    std::map<std::string, Node> merged;
    for (const auto& [n, d] : defs) {
      if (d.get("default").valid())
        merged[n] = d.get("default");
    }
    Node tprops = top_vnf.get("properties");
    for (size_t i = 0; tprops.is_map() && i < tprops.size(); ++i) {
      Node v = resolve_input(tprops.value(i), top_tt.get("inputs"));
      // An unresolved function (flavour_id: {get_input: selected_flavour}) is set, but
      // only at run time: it does not replace a default.
      if (is_function(v) && merged.count(str(tprops.key(i))))
        continue;
      merged[str(tprops.key(i))] = v;
    }
    Node fprops = vnf.get("properties");
    if (vnf != top_vnf) {
      for (size_t i = 0; fprops.is_map() && i < fprops.size(); ++i) {
        merged[str(fprops.key(i))] = fprops.value(i);
      }
    }
    merged["flavour_id"] = c.fid;
    for (const auto& [n, d] : defs) {
      Node req = d.get("required");
      bool required = !(req.is_scalar() && (req.scalar() == "false" || req.scalar() == "False"));
      if (required && !merged.count(n)) {
        diags_.error("T0041", vnf.valid() ? vnf.location() : c.fid.location(),
                     "flavour \"" + f.id + "\": VNF property \"" + n +
                         "\" is required but neither the flavour nor the top-level VNF node "
                         "sets it");
      }
    }
    for (auto& [n, v] : merged)
      f.vnf_properties.emplace_back(n, v);
    if (merged.count("flavour_description"))
      f.description = str(merged["flavour_description"]);
    // Artifacts and Vnflcm operations of the flavour's VNF node.
    Node arts = vnf.get("artifacts");
    for (size_t i = 0; arts.is_map() && i < arts.size(); ++i) {
      auto a = resolve_artifact(c.doc, str(arts.key(i)), arts.value(i), false);
      if (a)
        f.artifacts.push_back(*a);
    }
    Node ifaces = vnf.get("interfaces");
    NamedNodes iface_defs = t ? types_.merged(t, "interfaces") : NamedNodes{};
    for (size_t i = 0; ifaces.is_map() && i < ifaces.size(); ++i) {
      std::string iname = str(ifaces.key(i));
      bool lcm = false;
      for (const auto& [n, d] : iface_defs) {
        if (n == iname) {
          const TypeDef* it = types_.find(TypeKind::kInterface, d.get("type").scalar());
          lcm = it != nullptr && Types::derives(it, "tosca.interfaces.nfv.Vnflcm");
        }
      }
      if (!lcm)
        continue;
      Node body = ifaces.value(i);
      Node ops = body.get("operations").is_map() ? body.get("operations") : body;
      for (size_t k = 0; ops.is_map() && k < ops.size(); ++k) {
        std::string op = str(ops.key(k));
        if (op == "type" || op == "inputs" || op == "description" || op == "operations")
          continue;
        LcmOperation lo;
        lo.name = op;
        lo.where = ops.key(k).location();
        Node od = ops.value(k);
        Node impl = od.is_map() ? od.get("implementation") : od;
        Implementation im;
        if (impl.is_scalar()) {
          im.primary = str(impl);
        } else if (impl.is_map()) {
          im.primary = str(impl.get("primary"));
          Node deps = impl.get("dependencies");
          for (size_t d = 0; deps.is_seq() && d < deps.size(); ++d)
            im.dependencies.push_back(str(deps.item(d)));
        }
        if (!im.primary.empty()) {
          for (const auto& a : f.artifacts) {
            if (a.name == im.primary)
              im.primary_artifact = a;
          }
          lo.implementation = std::move(im);
        }
        Node in = od.is_map() ? od.get("inputs") : Node();
        for (size_t d = 0; in.is_map() && d < in.size(); ++d)
          lo.inputs.emplace_back(str(in.key(d)), in.value(d));
        f.lcm_operations.push_back(std::move(lo));
      }
    }
    build_flavour(c.doc, c.tt, f);
    pkg_.flavours.push_back(std::move(f));
  }
}

// ---------------------------------------------------------------------------------------

void Loader::run() {
  if (!read_metadata())
    return;
  if (auto d = src_.package_digest(); d.ok())
    pkg_.digest = d.value();
  // The TOSCA normative types are implicitly imported by every template.
  load_catalog(catalog_normative());
  entry_doc_ =
      load_package_file(entry_, {src_.display(pkg_.meta.present ? kMetaPath : entry_), 0, 0});
  if (entry_doc_ == nullptr)
    return;
  order_.push_back(entry_doc_);
  load_imports(entry_doc_, 1);
  for (Document* d : order_) {
    if (!d->from_catalog)
      check_document_keys(d);
  }
  pkg_.tosca_version = str(entry_doc_->root().get("tosca_definitions_version"));
  Node md = entry_doc_->root().get("metadata");
  for (size_t i = 0; md.is_map() && i < md.size(); ++i) {
    pkg_.template_metadata.emplace_back(str(md.key(i)), to_yaml_flow(md.value(i)));
  }
  collect_types();
  for (const Document* d : order_) {
    if (!d->from_catalog)
      check_type_definitions(d);
  }
  for (const Document* d : order_) {
    if (!d->from_catalog)
      check_topology(d);
  }
  build_vnfd();
}

}  // namespace internal

namespace {

std::shared_ptr<const Package> load_source(std::unique_ptr<internal::FileSource> src,
                                           const LoadOptions& options, base::Diagnostics& diags) {
  if (!src)
    return nullptr;
  auto pkg = std::shared_ptr<Package>(new Package());
  pkg->display_name = src->display_name();
  pkg->impl->source = std::move(src);
  internal::Loader loader(*pkg, options, diags);
  loader.run();
  return pkg;
}

// Opens the source and loads it, with the findings of both capped together (into `diags`
// itself when the caller caps it already: the signature checks' and the loader's findings
// share one cap then).
template <typename Open>
std::shared_ptr<const Package> open_and_load(Open open, const LoadOptions& options,
                                             base::Diagnostics& diags) {
  if (diags.capped()) {
    std::unique_ptr<internal::FileSource> src = open(diags);
    return load_source(std::move(src), options, diags);
  }
  base::Diagnostics found;
  found.cap_per_kind(kMaxFindingsPerKind);
  std::unique_ptr<internal::FileSource> src = open(found);
  auto pkg = load_source(std::move(src), options, found);
  diags.merge(found);
  return pkg;
}

}  // namespace

std::shared_ptr<const Package> internal::load_from_source(std::unique_ptr<FileSource> src,
                                                          const LoadOptions& options,
                                                          base::Diagnostics& diags) {
  return open_and_load([&](base::Diagnostics&) { return std::move(src); }, options, diags);
}

std::shared_ptr<const Package> load_package(const std::string& path, const LoadOptions& options,
                                            base::Diagnostics& diags) {
  return open_and_load(
      [&](base::Diagnostics& found) {
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec))
          return internal::open_directory(path, options.limits, found);
        return internal::open_zip_file(path, options.limits, found);
      },
      options, diags);
}

std::shared_ptr<const Package> load_package_from_zip_bytes(std::string display_name,
                                                           std::string bytes,
                                                           const LoadOptions& options,
                                                           base::Diagnostics& diags) {
  return open_and_load(
      [&](base::Diagnostics& found) {
        return internal::open_zip_bytes(std::move(display_name), std::move(bytes), options.limits,
                                        found);
      },
      options, diags);
}

}  // namespace tosca
