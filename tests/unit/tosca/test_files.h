// Small helpers the tosca unit tests share.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tosca_test {

// The whole file, bytes as they are; "" if it cannot be read.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tosca_test
