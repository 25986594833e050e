// libFuzzer target: arbitrary bytes as a CSAR archive, and as the entry YAML of a
// meta-less in-memory package. Built with -Dfuzz=true (clang); CI runs a bounded smoke
// under ASan+UBSan. Any crash, leak, or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

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
  return 0;
}
