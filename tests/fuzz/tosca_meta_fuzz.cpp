// libFuzzer target: TOSCA-Metadata/TOSCA.meta on its own (TOSCA 1.2 §3.10.4, SOL004 §4.2):
// the block parser, then the loader's metadata phase with the bytes as the package's
// TOSCA.meta. Never a crash, a sanitizer report or a hang; every diagnostic is a C code.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tosca/internal/meta.h"

#include "tests/fuzz/package_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::parse_then_load("TOSCA-Metadata/TOSCA.meta",
                        std::string_view(reinterpret_cast<const char*>(data), size),
                        tosca::internal::parse_tosca_meta);
  return 0;
}
