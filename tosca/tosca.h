// tosca: loads an ETSI SOL004 CSAR holding an ETSI SOL001 VNFD and turns it into a
// checked, located model of the VNF.
//
// Phases (each a named function in tosca/internal/, gated on "no errors so far" only
// where a later phase would be meaningless):
//   read      the package as a zip or a folder; hostile archives refused (limits below)
//   metadata  TOSCA-Metadata/TOSCA.meta block by block, or the meta-less layout; the
//             manifest (.mf) and every listed digest verified
//   parse     YAML -> a located tree (aliases shared, never expanded; depth, size and
//             expansion bounded); imports resolved inside the package or from the
//             shipped catalog (TOSCA normative types, ETSI SOL001 type files)
//   types     every type kind with its derived_from chain
//   templates node templates, requirements, capabilities, interfaces, artifacts,
//             policies, groups, substitution mappings, get_input; values checked
//             against property definitions, data types and constraints
//   vnfd      the VNF node, its deployment flavours, the merged VNF properties, the
//             Vnflcm operations and the inspectable resources (VDUs, CPs, VLs, ...)
// Every problem is a base::Diagnostic with a stable code (docs/diagnostics.md); all
// problems of one run are reported, not the first.
//
// Not here: running anything, workflows (workflows/), persistence (engine/).
// Threading: load_package() is reentrant; a Package is immutable once returned and may
// be shared between threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"

namespace tosca {

namespace internal {
class Document;
}

// ---------------------------------------------------------------------------------------
// Located YAML values

// A read-only view of one YAML value inside a loaded document. Cheap to copy; valid as
// long as the Package (or Document) that produced it lives. Aliases are shared nodes.
class Node {
 public:
  enum class Kind : uint8_t { kNone, kNull, kScalar, kSequence, kMap };

  Node() = default;
  Node(const internal::Document* doc, uint32_t index) : doc_(doc), index_(index) {}

  Kind kind() const;
  bool valid() const { return doc_ != nullptr; }
  explicit operator bool() const { return valid(); }
  bool is_null() const { return kind() == Kind::kNull; }
  bool is_scalar() const { return kind() == Kind::kScalar; }
  bool is_seq() const { return kind() == Kind::kSequence; }
  bool is_map() const { return kind() == Kind::kMap; }

  // Scalar text ("" for anything else). quoted() is true for quoted or block scalars,
  // which YAML never resolves to numbers or booleans.
  std::string_view scalar() const;
  bool quoted() const;

  // Sequence items or map entries.
  size_t size() const;
  Node item(size_t i) const;             // REQUIRES: is_seq()
  Node key(size_t i) const;              // REQUIRES: is_map()
  Node value(size_t i) const;            // REQUIRES: is_map()
  Node get(std::string_view key) const;  // map lookup; invalid Node when absent

  base::SourceLocation location() const;
  // The location of byte `offset` of the scalar's text: exact for plain, quoted (without
  // escapes), literal (|) and folded (>) scalars, over as many lines as they span; the
  // scalar's own location when the text cannot be matched to its source (escapes).
  base::SourceLocation location_at(uint32_t offset) const;
  const internal::Document* document() const { return doc_; }
  uint32_t index() const { return index_; }
  bool operator==(const Node& o) const { return doc_ == o.doc_ && index_ == o.index_; }
  bool operator!=(const Node& o) const { return !(*this == o); }

 private:
  const internal::Document* doc_ = nullptr;
  uint32_t index_ = 0;
};

// Renders a value as compact flow-style YAML (for inspect output and messages).
std::string to_yaml_flow(Node n);

// ---------------------------------------------------------------------------------------
// Options

// Bounds that make hostile input fail fast with a clear diagnostic. Budgets hold for the
// whole package, not per file.
struct Limits {
  uint64_t max_entries = 10000;           // files in a package
  uint64_t max_total_bytes = 8ull << 30;  // uncompressed size of the whole package
  uint64_t max_compression_ratio = 200;   // per zip entry, for entries over 1 MiB
  uint64_t max_text_bytes = 16ull << 20;  // one meta/manifest file; all YAML files together
  uint32_t max_yaml_depth = 64;           // nesting of YAML collections
  uint64_t max_yaml_nodes = 2'000'000;    // nodes after alias expansion, all YAML files
  uint32_t max_import_depth = 32;
};

// Findings of one kind shown for a package; the rest are only counted ("… and N more"), so
// a manifest of 100,000 absent files prints 51 lines, not 100,001, and keeps 51 in memory.
// Every way in (load_package, load_signed_package, ...) caps the findings of its whole load;
// onboarding caps the hook checks' findings the same way.
constexpr uint32_t kMaxFindingsPerKind = 50;

struct LoadOptions {
  Limits limits;
  // Named quirks (docs/diagnostics.md, "Quirks"): leniencies for real-world packages.
  // artifact-path-from-root: an artifact or implementation file that is not found
  // relative to its template is looked up relative to the package root, as Tacker's
  // v1 drivers write them ("Scripts/x.py" inside Definitions/*.yaml).
  bool quirk_artifact_path_from_root = true;
  // undeclared-step-delta: a ScalingAspects step_deltas entry that no
  // VduScalingAspectDeltas policy defines is a warning (Tacker never checks it), not an
  // error.
  bool quirk_undeclared_step_delta = true;
  // Verify manifest / TOSCA.meta digests (reads every listed file).
  bool verify_digests = true;
};

// ---------------------------------------------------------------------------------------
// The model

struct MetaFileEntry {  // a per-file block of TOSCA.meta or an entry of the manifest
  std::string name;     // path inside the package, or a URL
  std::string content_type;
  std::string algorithm;
  std::string hash;
  base::SourceLocation where;
};

struct ToscaMeta {
  bool present = false;  // false for a CSAR without TOSCA-Metadata
  std::string meta_file_version, csar_version, created_by, entry_definitions;
  std::string entry_manifest, entry_change_log, entry_licenses, entry_certificate;
  base::SourceLocation entry_definitions_where;  // the Entry-Definitions value
  std::vector<MetaFileEntry> files;
};

struct Manifest {
  std::string path;                             // "" when the package has none
  std::map<std::string, std::string> metadata;  // vnf_provider_id, vnf_product_name, ...
  std::vector<MetaFileEntry> sources;
};

struct Artifact {
  std::string name;
  std::string type;      // artifact type name
  std::string file;      // as written
  std::string path;      // resolved path inside the package ("" for URLs)
  bool present = false;  // the file exists in the package
  base::SourceLocation where;
};

struct Implementation {
  std::string primary;  // artifact name or file path
  std::vector<std::string> dependencies;
  std::optional<Artifact> primary_artifact;  // when `primary` names an artifact
};

struct LcmOperation {
  std::string name;                              // "instantiate_end", ...
  std::optional<Implementation> implementation;  // none for `op: []` placeholders
  std::vector<std::pair<std::string, Node>> inputs;
  base::SourceLocation where;
};

struct Vdu {
  std::string name, type;
  std::string vdu_name;  // properties.name
  int64_t min_instances = 1, max_instances = 1;
  std::optional<Artifact> sw_image;   // a tosca.artifacts.nfv.SwImage artifact, if any
  std::string sw_image_name;          // properties.sw_image_data.name
  std::vector<std::string> storages;  // virtual_storage requirement targets
  base::SourceLocation where;
};

struct ConnectionPoint {
  std::string name, type;
  std::string virtual_binding;  // VDU node name
  std::string virtual_link;     // VL node name, or "" when mapped externally
  std::string external_link;    // substitution requirement name when mapped externally
  base::SourceLocation where;
};

struct VirtualLink {
  std::string name, type;
  std::vector<std::string> layer_protocols;
  base::SourceLocation where;
};

struct Storage {
  std::string name, type;
  std::string size;  // virtual_block_storage_data.size_of_storage
  base::SourceLocation where;
};

struct ScalingAspect {
  std::string id, name, description;
  int64_t max_scale_level = 0;
  std::vector<std::string> step_deltas;
  // VDU name -> (delta id -> number_of_instances), from VduScalingAspectDeltas
  std::map<std::string, std::map<std::string, int64_t>> vdu_deltas;
};

struct InstantiationLevel {
  std::string id, description;
  std::map<std::string, int64_t> scale_info;     // aspect id -> scale level
  std::map<std::string, int64_t> vdu_instances;  // VDU name -> instances
};

struct Flavour {
  std::string id, description;
  std::string file;  // package path of the flavour's template
  std::string vnf_node;
  std::string vnf_type;
  // The VNF node's properties merged as SOL001 §6.8 describes: type defaults, the
  // top-level VNF node, then the flavour's own VNF node and its flavour_id.
  std::vector<std::pair<std::string, Node>> vnf_properties;
  std::vector<LcmOperation> lcm_operations;  // every Vnflcm op the flavour implements
  std::vector<Artifact> artifacts;           // the VNF node's artifacts
  std::vector<Vdu> vdus;
  std::vector<ConnectionPoint> cps;
  std::vector<VirtualLink> vls;
  std::vector<Storage> storages;
  std::vector<ScalingAspect> aspects;
  std::vector<InstantiationLevel> levels;
  std::string default_level;
  std::vector<std::pair<std::string, std::string>> external_links;  // req -> "CP.req"
};

struct VnfInfo {
  std::string descriptor_id, descriptor_version, provider, product_name, software_version;
  std::vector<std::string> vnfm_info;
  std::string node_type;
};

// A loaded package. Owns every document; Nodes and strings in it stay valid while it
// lives.
class Package {
 public:
  ~Package();
  Package(const Package&) = delete;
  Package& operator=(const Package&) = delete;

  std::string display_name;   // "vnf.csar" or the folder name
  std::string digest;         // SHA-256 over the package's files (names and bytes)
  std::string tosca_version;  // tosca_definitions_version of the entry template
  std::string entry_definitions;
  // The entry template's `metadata:` (template_name, template_author, ...); for a CSAR
  // without TOSCA-Metadata this is the package's metadata.
  std::vector<std::pair<std::string, std::string>> template_metadata;
  ToscaMeta meta;
  Manifest manifest;
  VnfInfo vnf;
  std::vector<Flavour> flavours;
  std::vector<std::string> files;  // every file path in the package, sorted

  const Flavour* flavour(std::string_view id) const;

  // Reads a file of the package (at most `max_bytes`). Thread-safe.
  base::Result<std::string> read_file(std::string_view path, uint64_t max_bytes = 16u << 20) const;
  // "pkg.csar!Scripts/x.yaml": how diagnostics name a file of this package.
  std::string display(std::string_view path) const;

  struct Impl;
  std::unique_ptr<Impl> impl;  // documents, sources; opaque to callers

  Package();
};

// Loads and checks the package at `path` (a .csar/.zip file or a folder). Every problem
// goes to `diags`. Returns the package whenever it could be read far enough to build a
// model (possibly with errors in `diags`), nullptr when it could not be read at all.
std::shared_ptr<const Package> load_package(const std::string& path, const LoadOptions& options,
                                            base::Diagnostics& diags);

// Same, from bytes already in memory (a zip archive); `display_name` names it in
// diagnostics. Used by the daemon for uploads and by the fuzzer.
std::shared_ptr<const Package> load_package_from_zip_bytes(std::string display_name,
                                                           std::string bytes,
                                                           const LoadOptions& options,
                                                           base::Diagnostics& diags);

// The bytes to store for a package: a zip file as it is, or a folder packed into a zip
// (regular files only, the same limits and path checks as loading).
base::Result<std::string> package_archive_bytes(const std::string& path, const Limits& limits);

// ---------------------------------------------------------------------------------------
// SOL004 package security (ETSI GS NFV-SOL 004 §5; docs/security.md, "Package signatures")

struct SignatureOptions {
  // Trusted CA certificates (PEM text, read_certificates_pem). Empty: no signature is
  // checked, and a signed package gets a note saying so.
  std::string trust_pem;
  // The signing certificate(s), when the package does not carry them (PEM); optional.
  std::string signer_pem;
  // An unsigned package is an error (needs trust_pem).
  bool required = false;
  // When the certificates must be valid, seconds since the epoch; 0 is now.
  int64_t at_time = 0;
};

// Reads a PEM file of certificates (at most 1 MiB); an error when it holds none.
base::Result<std::string> read_certificates_pem(const std::string& path);

// load_package with the package's signatures checked against `signatures`: the manifest's
// CMS signature (option 1) with the certificate from the signature, TOSCA.meta's
// ETSI-Entry-Certificate or the operator; per-artifact signatures (the manifest's
// Signature / Certificate keys); a zip holding the CSAR, its .cms and .cert (option 2),
// whose CSAR is then loaded. Every problem is a located S diagnostic in `diags`.
std::shared_ptr<const Package> load_signed_package(const std::string& path,
                                                   const LoadOptions& options,
                                                   const SignatureOptions& signatures,
                                                   base::Diagnostics& diags);
// Same, from zip bytes in memory. For option 2, `bytes` becomes the inner CSAR's (what to
// store); otherwise it is left as it is.
std::shared_ptr<const Package> load_signed_package_from_zip_bytes(
    std::string display_name, std::string& bytes, const LoadOptions& options,
    const SignatureOptions& signatures, base::Diagnostics& diags);

// A YAML file that is not a TOSCA template (e.g. a vnflow workflow), parsed into the same
// located tree, with the same limits (aliases, depth, size). Keeps its text alive.
class YamlFile {
 public:
  ~YamlFile();
  YamlFile(const YamlFile&) = delete;
  YamlFile& operator=(const YamlFile&) = delete;
  Node root() const;
  const std::string& display() const;

  struct Impl;
  std::unique_ptr<Impl> impl;
  YamlFile();
};

// nullptr when the text is not usable YAML (the reason is in `diags`).
std::shared_ptr<const YamlFile> parse_yaml_file(std::string display, std::string_view text,
                                                const Limits& limits, base::Diagnostics& diags);

// The SOL001 Vnflcm operation names (v2.6.1 and later), in the order of the standard.
const std::vector<std::string>& vnflcm_operation_names();

// Names of the type files vnflow ships, with the version they carry, e.g.
// ("etsi_nfv_sol001_vnfd_types.yaml", "2.6.1").
std::vector<std::pair<std::string, std::string>> catalog_files();

}  // namespace tosca
