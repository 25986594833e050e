// libFuzzer target: arbitrary bytes as a CSAR archive, as the entry YAML of a
// meta-less in-memory package, and through both YAML readers, which must agree. Built with
// -Dfuzz=true (clang); CI runs a bounded smoke under ASan+UBSan. Any crash, leak, or sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tosca/internal/document.h"
#include "tosca/internal/loader.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

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
  }
  return 0;
}
