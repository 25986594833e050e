// The type files vnflow ships (TOSCA normative types, ETSI SOL001 type files), parsed at
// build time by tosca/catalog/gen_catalog.cpp into Document blobs embedded in the
// binary. A package's own copy of a known file is recognised by its SHA-256 (computed only
// for a file of a size some entry has), or else by the digest of its meaning (fast_yaml.h's
// MeaningDigest: the same events whatever the indentation, comments, line endings or quote
// style) confirmed event by event, and served from here instead of being parsed and checked
// again (docs/architecture.md, "Catalog").
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "tosca/internal/document.h"

namespace tosca::internal {

struct CatalogEntry {
  std::string_view name;     // file name, "etsi_nfv_sol001_vnfd_types.yaml"
  std::string_view version;  // "2.6.1"; "1.2" for the TOSCA normative types
  std::string_view url;      // published URL, "" if none
  std::string_view digest;   // SHA-256 of the source text
  size_t size;               // bytes of the source text
  std::string_view meaning;  // MeaningDigest of its events; "" if the fast reader steps aside
  bool canonical;            // served for imports by name or URL (not only by digest)
  std::string_view blob;     // Document::serialize() output
};

// The generated table (catalog_data.cpp).
extern const CatalogEntry kCatalogEntries[];
extern const size_t kCatalogEntryCount;

// Every entry (canonical files first, then known copies recognised by digest only).
const CatalogEntry* catalog_entries(size_t* count);
const CatalogEntry* catalog_by_digest(std::string_view sha256_hex);
// Whether some entry's source text has that many bytes: only then can a file be one by bytes.
bool catalog_has_size(size_t bytes);
const CatalogEntry* catalog_by_meaning(std::string_view meaning_hex);
// parse_yaml's KnownTree: the shipped tree of that meaning digest, marked from_catalog, or
// nullptr (parse_yaml confirms that it is the text's).
std::unique_ptr<Document> catalog_tree(std::string_view meaning_hex);
const CatalogEntry* catalog_by_url(std::string_view url);
// Canonical file of that name; `version` "" picks the default (the newest 2.x).
const CatalogEntry* catalog_by_name(std::string_view name, std::string_view version);
const CatalogEntry* catalog_normative();

}  // namespace tosca::internal
