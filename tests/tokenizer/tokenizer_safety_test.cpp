// Tokenizer checks of issue 14 item 8: text-only ranges (control-token text
// from clients stays text), broken added-token ids fail at load naming the
// file, and a tokenizer that does not fit the model's vocabulary is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using nlohmann::json;
using testing_util::bl;
using testing_util::tiny_json;

// 256 bytes + "ab" (256) + <eos> (257, special) + <x> (258, special) + <n> (259, not special).
json with_tokens() {
  json j = tiny_json({{"a", "b"}});
  j["added_tokens"].push_back({{"id", 258}, {"content", "<x>"}, {"special", true}, {"normalized", false}});
  j["added_tokens"].push_back({{"id", 259}, {"content", "<n>"}, {"special", false}, {"normalized", false}});
  return j;
}

Tokenizer load_text(const json& j, const std::string& name = "tokenizer.json") {
  auto r = Tokenizer::from_json_text(j.dump(), name);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

TEST(TokenizerTextRanges, SpecialsInsideRangesAreText) {
  Tokenizer tok = load_text(with_tokens());
  const std::string text = "<x>ab<eos><x><n>ab<eos>";
  // No ranges: the same as encode with parse_special.
  EXPECT_EQ(tok.encode_with_text_ranges(text, {}, false), tok.encode(text, false, true));
  // The middle <eos><x> is client text: plain bytes; <n> (not special) still matches.
  std::vector<TextRange> r = {{5, 13}};
  std::vector<int32_t> want = {258, 256};
  for (int32_t id : tok.encode("<eos><x>", false, false)) want.push_back(id);
  for (int32_t id : {259, 256, 257}) want.push_back(id);
  EXPECT_EQ(tok.encode_with_text_ranges(text, r, false), want);
  // A range that covers only part of a token's text still makes it text.
  r = {{0, 1}};
  EXPECT_EQ(tok.encode_with_text_ranges("<x>", r, false), tok.encode("<x>", false, false));
  r = {{2, 3}};
  EXPECT_EQ(tok.encode_with_text_ranges("<x>", r, false), tok.encode("<x>", false, false));
  r = {{3, 4}};
  EXPECT_EQ(tok.encode_with_text_ranges("<x>a", r, false), (std::vector<int32_t>{258, 'a'}));
}

TEST(TokenizerTextRanges, FindSpecialTextIsLeftmostLongestOverSpecialsOnly) {
  Tokenizer tok = load_text(with_tokens());
  auto m = tok.find_special_text("ab<n><x>", 0);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->begin, 5u);
  EXPECT_EQ(tok.added_tokens()[m->index].content, "<x>");
  EXPECT_FALSE(tok.find_special_text("ab<n><x>", 6));
  EXPECT_FALSE(tok.find_special_text("<n>", 0));
}

TEST(TokenizerLoad, NegativeOrNonIntegerAddedTokenIdFailsNamingTheFile) {
  for (const json& bad : {json(-5), json(1.5), json("7"), json(int64_t(1) << 40)}) {
    json j = with_tokens();
    j["added_tokens"][1]["id"] = bad;
    auto r = Tokenizer::from_json_text(j.dump(), "/m/tokenizer.json");
    ASSERT_FALSE(r.is_ok()) << bad.dump();
    EXPECT_NE(r.status().message().find("/m/tokenizer.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("added_tokens[1] (\"<x>\"): id " + bad.dump() + " is not a token id"),
              std::string::npos)
        << r.status().message();
  }
}

TEST(TokenizerLoad, BadAddedTokensDecoderKeyFailsNamingTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("ms_tok_bad_key_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json({{"a", "b"}}).dump();
  for (const std::string key : {"-3", "abc", "99999999999", ""}) {
    std::ofstream(dir / "tokenizer_config.json")
        << json{{"added_tokens_decoder", {{key, {{"content", "<q>"}, {"special", true}}}}}}.dump();
    auto r = Tokenizer::load(dir.string());
    ASSERT_FALSE(r.is_ok()) << key;
    EXPECT_NE(r.status().message().find("tokenizer_config.json: added_tokens_decoder key '" + key + "'"),
              std::string::npos)
        << r.status().message();
  }
  std::filesystem::remove_all(dir);
}

TEST(TokenizerLoad, IdsPastTheModelVocabularyAreRefused) {
  Tokenizer tok = load_text(with_tokens(), "/m/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_TRUE(tok.check_fits_vocab(260, "/m/config.json").is_ok());
  EXPECT_TRUE(tok.check_fits_vocab(262144, "/m/config.json").is_ok());  // padded embeddings are fine
  Status s = tok.check_fits_vocab(258, "/m/config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "/m/tokenizer.json: added token id 259 (\"<n>\") is outside the model's vocabulary of 258 tokens "
            "(/m/config.json vocab_size): the tokenizer does not belong to this model");
  // A plain vocab id past the model.
  s = load_text(tiny_json({{"a", "b"}}), "t.json").check_fits_vocab(200, "c.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("t.json: added token id 257 (\"<eos>\") is outside the model's vocabulary of 200"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace ms
