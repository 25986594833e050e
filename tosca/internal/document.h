// tosca::internal::Document: one parsed YAML file as a compact located tree.
// The only place that knows yaml-cpp is document.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "tosca/tosca.h"

namespace tosca::internal {

struct RawNode {
  Node::Kind kind = Node::Kind::kNull;
  uint8_t quoted = 0;
  uint8_t reserved[2] = {0, 0};  // explicit, so serialize() never copies indeterminate padding
  uint32_t line = 0;             // 1-based
  uint32_t column = 0;           // 1-based
  uint32_t text_off = 0;         // scalar text in Document::text
  uint32_t text_len = 0;
  uint32_t first = 0;  // first child in Document::kids (maps: key, value, key, value...)
  uint32_t count = 0;  // number of children (maps: 2 * entries)
};

class Document {
 public:
  std::string display;        // "pkg.csar!Definitions/vnfd.yaml", used in diagnostics
  std::string path;           // path inside the package ("Definitions/vnfd.yaml"), or catalog name
  std::string digest;         // SHA-256 of the source text, "" if the loader had no need of it
  bool from_catalog = false;  // served from vnflow's shipped catalog

  std::vector<RawNode> nodes;
  std::vector<uint32_t> kids;
  std::string text;
  // The file's text as read (after a byte order mark), so that a byte of a folded, literal
  // or multi-line scalar can be located (Node::location_at); "" for catalog trees.
  std::string source;
  uint32_t root_index = 0;
  bool has_root = false;
  uint64_t expanded_nodes = 0;  // nodes with every alias expanded (parse_yaml sets it)

  Node root() const { return has_root ? Node(this, root_index) : Node(); }
  base::SourceLocation at(uint32_t line, uint32_t column) const { return {display, line, column}; }
  base::SourceLocation start() const { return {display, 1, 1}; }

  // Compact binary form used by the build-time catalog (docs/persistence.md: "catalog").
  std::string serialize() const;
  static std::unique_ptr<Document> deserialize(std::string_view blob);
};

struct YamlLimits {
  uint32_t max_depth = 64;
  uint64_t max_nodes = 2'000'000;  // after alias expansion
  // Nodes the package's earlier files took from max_nodes: the budget is per package.
  uint64_t used_before = 0;
};

// A tree the caller already has for a text of this meaning (fast_yaml.h's MeaningDigest,
// hex), or nullptr: the loader's view of vnflow's shipped catalog.
using KnownTree = std::unique_ptr<Document> (*)(std::string_view meaning);

// Parses `text` (one YAML document, UTF-8). Problems go to `diags` located in `display`.
// Returns nullptr when the text is not usable YAML; a partial tree is never returned.
// Plain files go through a fast reader (fast_yaml.h) that yields the same tree; the rest,
// and everything when `use_fast_path` is false, through yaml-cpp. When the fast reader
// took the text and `known` has a tree of the same meaning, that tree is returned with
// this text's lines and columns and `display`, instead of building it again.
std::unique_ptr<Document> parse_yaml(std::string_view text, std::string display,
                                     const YamlLimits& limits, base::Diagnostics& diags,
                                     bool use_fast_path = true, KnownTree known = nullptr);

}  // namespace tosca::internal
