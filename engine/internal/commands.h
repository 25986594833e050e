// What the command files of the engine share (engine-internal).
#pragma once

#include <cstddef>
#include <string>

#include "base/base.h"

namespace engine {

constexpr size_t kMaxNameBytes = 255;

// Names and descriptions are shown on terminals and in lists: bounded, UTF-8, and free of
// control characters (an ANSI escape in a name would rewrite an operator's screen).
base::Status check_text(const char* what, const std::string& s, size_t max);

}  // namespace engine
