// A small in-memory package for the TOSCA.meta and manifest targets: the fuzzed file takes
// its place among real files, so the loader's metadata phase (entry definitions, listed
// files, digests, manifest coverage) runs on it, not only the line parser.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "tosca/internal/loader.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

namespace fuzz {

// Files/a.txt is "hello\n"; its SHA-256 (in the dictionaries) lets a digest check pass.
inline std::map<std::string, std::string> package_files() {
  return {
      {"Definitions/vnfd.yaml",
       "tosca_definitions_version: tosca_simple_yaml_1_2\n"
       "description: fuzz\n"
       "topology_template:\n"
       "  node_templates:\n"
       "    vnf:\n"
       "      type: tosca.nodes.nfv.VNF\n"},
      {"Files/a.txt", "hello\n"},
      {"vnfd.mf",
       "metadata:\n"
       "  vnf_provider_id: fuzz\n"
       "  vnf_product_name: fuzz\n"
       "  vnf_release_date_time: 2026-11-23T00:00:00+00:00\n"
       "  vnf_package_version: '1.0'\n"
       "\n"
       "Source: Files/a.txt\n"
       "Algorithm: SHA-256\n"
       "Hash: 5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\n"},
      {"TOSCA-Metadata/TOSCA.meta",
       "TOSCA-Meta-File-Version: 1.0\n"
       "CSAR-Version: 1.1\n"
       "Created-By: fuzz\n"
       "Entry-Definitions: Definitions/vnfd.yaml\n"
       "ETSI-Entry-Manifest: vnfd.mf\n"},
  };
}

// Runs `parse(text, display, diags)` (a metadata parser) and traps unless every diagnostic
// is a C code within the text; then loads the package with `path` replaced by `text`.
template <typename Parse>
void parse_then_load(const std::string& path, std::string_view text, Parse parse) {
  base::Diagnostics parsed;
  (void)parse(text, path, parsed);
  for (const auto& d : parsed.items()) {
    if (d.code.size() != 5 || d.code[0] != 'C' || d.where.line > text.size() + 1)
      __builtin_trap();
  }
  auto files = package_files();
  files[path] = std::string(text);
  tosca::LoadOptions opts;
  opts.limits.max_yaml_nodes = 200000;
  base::Diagnostics diags;
  (void)tosca::internal::load_from_source(tosca::internal::open_memory("fuzz", std::move(files)),
                                          opts, diags);
}

}  // namespace fuzz
