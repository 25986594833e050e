// libFuzzer target: the SOL004 manifest (.mf, §4.3.2) on its own: the parser, then the
// loader's metadata phase with the bytes as the manifest TOSCA.meta names (listed files,
// digests, coverage of the package's files). Never a crash, a sanitizer report or a hang;
// every diagnostic is a C code.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tosca/internal/meta.h"

#include "tests/fuzz/package_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::parse_then_load("vnfd.mf", std::string_view(reinterpret_cast<const char*>(data), size),
                        tosca::internal::parse_manifest);
  return 0;
}
