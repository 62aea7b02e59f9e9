// Helpers shared by the tokenizer tests: where the fixtures are and file reading.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace ms::testing_util {

// $MEGASERVE_SOURCE_DIR when set (ctest sets it), else the configure-time path.
inline std::string fixture_dir() {
  const char* env = std::getenv("MEGASERVE_SOURCE_DIR");
  return std::string(env && *env ? env : MEGASERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer";
}

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace ms::testing_util
