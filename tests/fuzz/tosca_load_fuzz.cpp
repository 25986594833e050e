// libFuzzer target: arbitrary bytes as a CSAR archive, as the entry YAML of a
// meta-less in-memory package, and through both YAML readers, which must agree. Built with
// -Dfuzz=true (clang); CI runs a bounded smoke under ASan+UBSan. Any crash, leak, or sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tosca/internal/document.h"
#include "tosca/internal/fast_yaml.h"
#include "tosca/internal/loader.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

namespace {

// The yaml-cpp tree of the current input, with every mark cleared: what a known tree of
// the same meaning looks like before parse_yaml gives it the text's marks.
std::string g_unmarked;

std::unique_ptr<tosca::internal::Document> known_unmarked(std::string_view) {
  return tosca::internal::Document::deserialize(g_unmarked);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  tosca::LoadOptions opts;
  opts.limits.max_yaml_nodes = 200000;
  opts.limits.max_total_bytes = 64u << 20;
  {
    base::Diagnostics diags;
    (void)tosca::load_package_from_zip_bytes("fuzz.csar", bytes, opts, diags);
  }
  {
    base::Diagnostics diags;
    std::map<std::string, std::string> files = {{"vnfd.yaml", bytes}};
    (void)tosca::internal::load_from_source(tosca::internal::open_memory("fuzz", files), opts,
                                            diags);
  }
  {
    // Differential: the fast YAML reader must agree with yaml-cpp on every input.
    base::Diagnostics fd, sd;
    auto fast = tosca::internal::parse_yaml(bytes, "f", {}, fd, true);
    auto slow = tosca::internal::parse_yaml(bytes, "f", {}, sd, false);
    if ((fast == nullptr) != (slow == nullptr) ||
        (fast && slow && fast->serialize() != slow->serialize()) || fd.size() != sd.size()) {
      std::fprintf(stderr, "fast/slow disagree: %d %d %zu %zu\n", fast != nullptr, slow != nullptr,
                   fd.size(), sd.size());
      __builtin_trap();
    }
    // A tree served by meaning (the catalog's way) must come back as the very tree the
    // text builds, marks included.
    if (fast && slow) {
      auto unmarked = tosca::internal::Document::deserialize(slow->serialize());
      for (auto& n : unmarked->nodes)
        n.line = n.column = 0;
      g_unmarked = unmarked->serialize();
      base::Diagnostics kd;
      auto served = tosca::internal::parse_yaml(bytes, "f", {}, kd, true, known_unmarked);
      bool fast_read = tosca::internal::FastYaml().read(bytes);
      if (fast_read && (served == nullptr || served->serialize() != slow->serialize())) {
        std::fprintf(stderr, "a tree served by meaning differs from the parsed one\n");
        __builtin_trap();
      }
    }
  }
  return 0;
}
