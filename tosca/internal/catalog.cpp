#include "tosca/internal/catalog.h"

namespace tosca::internal {

namespace {
constexpr std::string_view kDefaultSol001Version = "2.6.1";
}

const CatalogEntry* catalog_entries(size_t* count) {
  *count = kCatalogEntryCount;
  return kCatalogEntries;
}

const CatalogEntry* catalog_by_digest(std::string_view sha256_hex) {
  for (size_t i = 0; i < kCatalogEntryCount; ++i) {
    if (kCatalogEntries[i].digest == sha256_hex) {
      return &kCatalogEntries[i];
    }
  }
  return nullptr;
}

bool catalog_has_size(size_t bytes) {
  for (size_t i = 0; i < kCatalogEntryCount; ++i) {
    if (kCatalogEntries[i].size == bytes) {
      return true;
    }
  }
  return false;
}

const CatalogEntry* catalog_by_meaning(std::string_view meaning_hex) {
  if (meaning_hex.empty())
    return nullptr;
  for (size_t i = 0; i < kCatalogEntryCount; ++i) {
    if (kCatalogEntries[i].meaning == meaning_hex) {
      return &kCatalogEntries[i];
    }
  }
  return nullptr;
}

std::unique_ptr<Document> catalog_tree(std::string_view meaning_hex) {
  const CatalogEntry* e = catalog_by_meaning(meaning_hex);
  if (e == nullptr)
    return nullptr;
  auto doc = Document::deserialize(e->blob);
  BASE_CHECK(doc != nullptr);
  doc->from_catalog = true;
  return doc;
}

const CatalogEntry* catalog_by_url(std::string_view url) {
  for (size_t i = 0; i < kCatalogEntryCount; ++i) {
    if (kCatalogEntries[i].canonical && !kCatalogEntries[i].url.empty() &&
        kCatalogEntries[i].url == url) {
      return &kCatalogEntries[i];
    }
  }
  return nullptr;
}

const CatalogEntry* catalog_by_name(std::string_view name, std::string_view version) {
  if (version.empty()) {
    version = kDefaultSol001Version;
  }
  const CatalogEntry* any = nullptr;
  for (size_t i = 0; i < kCatalogEntryCount; ++i) {
    const CatalogEntry& e = kCatalogEntries[i];
    if (!e.canonical || e.name != name) {
      continue;
    }
    if (e.version == version) {
      return &e;
    }
    if (any == nullptr) {
      any = &e;
    }
  }
  return any;
}

const CatalogEntry* catalog_normative() {
  return catalog_by_name("tosca_simple_yaml_1_2", "1.2");
}

}  // namespace tosca::internal
