#include "engine/internal/libpq.h"

#include <dlfcn.h>

namespace engine::internal {

namespace {

struct Loaded {
  PqApi api;
  std::string error;
};

Loaded load() {
  Loaded l;
  void* h = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    l.error = std::string("PostgreSQL needs libpq (Debian: libpq5): ") +
              (e != nullptr ? e : "libpq.so.5 cannot be loaded");
    return l;
  }
#define VNFLOW_PQ_RESOLVE(f)                                                      \
  if (l.error.empty()) {                                                          \
    l.api.f = reinterpret_cast<decltype(&::f)>(::dlsym(h, #f));                   \
    if (l.api.f == nullptr)                                                       \
      l.error = "PostgreSQL needs libpq (Debian: libpq5): libpq.so.5 has no " #f; \
  }
  VNFLOW_PQ_FUNCTIONS(VNFLOW_PQ_RESOLVE)
#undef VNFLOW_PQ_RESOLVE
  return l;  // the library stays loaded for the process's life
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const std::string& load_libpq() {
  return loaded().error;
}

const PqApi& pq() {
  return loaded().api;
}

}  // namespace engine::internal
