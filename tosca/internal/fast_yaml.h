// Fast path for the plain YAML subset of VNFDs (see fast_yaml.cpp).
#pragma once

#include <string_view>

#include <yaml-cpp/eventhandler.h>

namespace tosca::internal {

// Emits the events of `text` into `handler`, exactly as YAML::Parser would, and returns
// true; or returns false without emitting anything when the text uses YAML outside the
// subset, and the caller must parse it with yaml-cpp.
bool fast_parse_yaml(std::string_view text, YAML::EventHandler& handler);

}  // namespace tosca::internal
