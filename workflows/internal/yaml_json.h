// YAML (tosca::Node) to JSON values, with YAML 1.2 core-schema resolution of plain
// scalars: null, booleans, integers and floats; quoted and block scalars stay strings.
#pragma once

#include <boost/json/value.hpp>

#include "tosca/tosca.h"

namespace workflows::internal {

boost::json::value yaml_to_json(tosca::Node n);

// The embedded files of workflows/builtin/ (generated table).
std::string_view embedded_file(std::string_view name);

}  // namespace workflows::internal
