// The loader's phases over one package (see tosca.h for the list).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/base.h"
#include "tosca/internal/catalog.h"
#include "tosca/internal/document.h"
#include "tosca/internal/source.h"
#include "tosca/internal/types.h"
#include "tosca/tosca.h"

namespace tosca {

struct Package::Impl {
  std::mutex source_mu;  // FileSource (libzip) is not thread-safe
  std::unique_ptr<internal::FileSource> source;
  std::vector<std::unique_ptr<internal::Document>> docs;
  internal::Types types;
};

namespace internal {

class Loader {
 public:
  Loader(Package& pkg, const LoadOptions& options, base::Diagnostics& diags)
      : pkg_(pkg), src_(*pkg.impl->source), opt_(options), diags_(diags), types_(pkg.impl->types) {}

  void run();

 private:
  // metadata phase
  bool read_metadata();
  void check_manifest_coverage();
  // parse phase
  Document* load_package_file(const std::string& path, const base::SourceLocation& from);
  Document* load_catalog(const CatalogEntry* e);
  void load_imports(Document* doc, int depth);
  Document* resolve_import(Document* from, Node ref, const std::string& file, int depth);
  void check_document_keys(Document* doc);
  // types phase
  void collect_types();
  void check_type_definitions(const Document* doc);
  void check_type_ref(Node type_node, std::string_view what);
  // templates phase
  void check_topology(const Document* doc);
  void check_node_template(const Document* doc, Node topology, const std::string& name, Node tmpl,
                           bool substitute_vnf);
  void check_policies(const Document* doc, Node topology);
  void check_groups(const Document* doc, Node topology);
  void check_substitution(const Document* doc, Node topology);
  std::optional<Artifact> resolve_artifact(const Document* doc, const std::string& name, Node def,
                                           bool report);
  // vnfd phase
  void build_vnfd();
  void build_flavour(const Document* doc, Node topology, Flavour& f);
  void sol001_policy_checks(const Document* doc, Node topology, Flavour& f);

  const TypeDef* node_type_of(Node tmpl) const;
  Node find_vnf_node(Node topology, std::string* name) const;

  Package& pkg_;
  FileSource& src_;
  const LoadOptions& opt_;
  base::Diagnostics& diags_;
  Types& types_;
  std::string entry_;
  Document* entry_doc_ = nullptr;
  std::map<std::string, Document*> by_key_;  // "pkg:<path>" or "cat:<name>@<version>"
  // Identical files are one document: package files by size and quick hash (loader.cpp
  // confirms by the bytes); by SHA-256 the catalog's and the package files that have one.
  std::map<std::pair<size_t, uint64_t>, Document*> by_bytes_;
  std::map<std::string, Document*> by_digest_;
  std::vector<Document*> order_;
  std::set<std::string> referenced_files_;  // artifact and implementation files
  ValueSets value_sets_;                    // valid_values lists, parsed once per load
  uint64_t text_bytes_ = 0;                 // YAML bytes read so far (Limits::max_text_bytes)
  uint64_t yaml_nodes_ = 0;                 // YAML nodes parsed so far (Limits::max_yaml_nodes)
};

// Runs every phase over an already opened source (unit tests use open_memory()).
std::shared_ptr<const Package> load_from_source(std::unique_ptr<FileSource> source,
                                                const LoadOptions& options,
                                                base::Diagnostics& diags);

}  // namespace internal
}  // namespace tosca
