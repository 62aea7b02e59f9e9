// Variants of the official tokenizer.json files (GPT-2 and Cohere-style
// pre-tokenizers, Split behaviours, TemplateProcessing, added-token
// lstrip/rstrip/normalized): the same patch applied here as in
// tools/gen_tokenizer_fixtures.js, and the results compared with HF's.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using testing_util::fixture_dir;
using testing_util::read_all;

const nlohmann::json& base_json(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, nlohmann::json::parse(read_all(fixture_dir() + "/" + name + "/tokenizer.json"))).first;
  return it->second;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

TEST(TokenizerVariants, MatchHf) {
  const auto all = nlohmann::json::parse(read_all(fixture_dir() + "/goldens_variants.json"));
  int variants = 0, cases = 0;
  for (const auto& v : all["variants"]) {
    const std::string name = v["name"];
    SCOPED_TRACE("variant " + name);
    nlohmann::json j = base_json(v["base"]);
    for (auto it = v["patch"].begin(); it != v["patch"].end(); ++it) j[it.key()] = it.value();
    for (const auto& t : v["added_tokens"]) j["added_tokens"].push_back(t);
    auto tok = Tokenizer::from_json_text(j.dump(), name);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    for (const auto& c : v["cases"]) {
      const std::string text = c["text"];
      EXPECT_EQ(show(tok->encode(text, true)), show(c["ids"].get<std::vector<int32_t>>())) << "text: " << text;
      EXPECT_EQ(show(tok->encode(text, false)), show(c["ids_no_special"].get<std::vector<int32_t>>()))
          << "text: " << text;
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok->decode(ids, false), c["decode"].get<std::string>()) << "text: " << text;
      EXPECT_EQ(tok->decode(ids, true), c["decode_skip_special"].get<std::string>()) << "text: " << text;
      ++cases;
    }
    ++variants;
  }
  EXPECT_GE(variants, 12);
  std::printf("[variants] %d variants, %d cases\n", variants, cases);
}

}  // namespace
}  // namespace ms
