// Helpers shared by the tokenizer tests: where the fixtures are, file
// reading, and a tiny byte-level BPE tokenizer.json built in code.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

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

// The byte-level spelling of raw bytes (GPT-2 table).
inline std::string bl(std::string_view raw) {
  std::string out;
  for (unsigned char b : raw) unicode::append_utf8(out, unicode::byte_to_code_point()[b]);
  return out;
}

// A tiny byte-level BPE tokenizer.json: 256 byte tokens, then merges.
inline nlohmann::json tiny_json(const std::vector<std::pair<std::string, std::string>>& merges, bool array_merges = false) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    const std::string merged = bl(a + b);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    if (array_merges) m.push_back(json::array({bl(a), bl(b)}));
    else m.push_back(bl(a) + " " + bl(b));
  }
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({{{"id", next}, {"content", "<eos>"}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}};
  return j;
}

}  // namespace ms::testing_util
