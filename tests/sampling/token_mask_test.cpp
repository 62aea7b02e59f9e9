// Token masks (sampling/token_mask.h) against brute force: along random
// constrained walks, the mask must equal "the matcher accepts this token" for
// every token of the vocabulary, at every step; the walks' outputs must parse
// and validate against the schema (an independent validator, schema_check.h).
// Vocabularies: a synthetic one built to hit the hard cases (tokens crossing
// string ends, closing several nested containers at once, partial UTF-8,
// escapes, whitespace runs), the demo model's 4K tokenizer, and a few steps
// on Qwen3's 151K tokenizer.
#include "sampling/token_mask.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "sampling/json_schema.h"
#include "sampling/vocab_from_tokenizer.h"
#include "schema_check.h"

namespace ms {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const TokenVocab> synthetic_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s :
       {"{\"", "\":", "\",", "\"}", "},", "}}", "]}", "\"]", ", \"", "\": \"", "true", "false", "null", " \"", "\n  ",
        "  ", "    ", "12", "3.", "e+", "\\u00", "\\n", "\\\"", "\xc3\xa9", "\xc3", "\xa9\"", "\"name", "age\":", "}]",
        "[{", "{{", "[[", "]]", "ab\"c", "\"x\":[", "\"}}", "\"}]}", "}}}", "\"},{\"", "[1,", "0]", "\":{\"", "\"a",
        "b\"", "\"\"", "red", "\"red\"", "green", "Paris", "Lon", "don\"", "\xe2\x82", "\xac", "\xf0\x9f\x98",
        "\x80", " {", "{\n", "\n}", ",\n", "\": [", "], \"", "1}", "-1", "99", "100", "9007", "199", "254740991"})
    t.push_back(s);
  std::vector<uint8_t> excluded(t.size(), 0);
  t.push_back("<|special|>");
  excluded.push_back(1);
  t.push_back("");  // an empty token: never offered
  excluded.push_back(0);
  return TokenVocab::create(std::move(t), std::move(excluded));
}

std::shared_ptr<const TokenVocab> tokenizer_vocab(const std::string& rel) {
  auto tok = Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/" + rel);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return vocab_from_tokenizer(*tok);
}

struct WalkStats {
  int steps = 0, complete = 0;
};

// Random walks under the mask; brute-force check every `check_every` steps.
void walk_and_check(const std::shared_ptr<const TokenVocab>& vocab, const std::string& schema_text, int walks,
                    int max_steps, int check_every, uint64_t seed, WalkStats* stats) {
  const Json schema = schema_text.empty() ? Json() : Json::parse(schema_text);
  auto g = schema_text.empty() ? compile_any_json_object() : compile_json_schema(schema);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto cg = CompiledGrammar::create(std::move(g).value(), vocab);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(vocab->words());
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(cg);
    std::string out;
    bool ended = false;
    for (int step = 0; step < max_steps; ++step) {
      if (m.terminated() || (m.can_end() && rng() % 4 == 0)) {
        ended = true;
        break;
      }
      m.fill_mask(mask);
      std::vector<int32_t> allowed, structural;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        const bool bit = token_bit(mask, t);
        if (step % check_every == 0) {
          ASSERT_EQ(bit, m.can_accept(t)) << "token " << t << " '" << vocab->bytes(t) << "' after '" << out << "'";
        }
        if (!bit) continue;
        allowed.push_back(t);
        const std::string_view b = vocab->bytes(t);
        if (b.find_first_of("\"}],") != std::string_view::npos) structural.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "no token allowed after '" << out << "'";
      // Favour tokens that close things, so that walks finish.
      const auto& pool = !structural.empty() && rng() % 3 != 0 ? structural : allowed;
      const int32_t t = pool[rng() % pool.size()];
      ASSERT_TRUE(m.accept_token(t));
      out += vocab->bytes(t);
      ++stats->steps;
    }
    if (!ended) continue;
    ++stats->complete;
    ASSERT_TRUE(grammar_accepts(cg->grammar(), out)) << out;
    Json v;
    ASSERT_NO_THROW(v = Json::parse(out)) << out;
    if (!schema_text.empty()) {
      EXPECT_TRUE(test::schema_valid(v, schema, schema)) << out;
    } else {
      EXPECT_TRUE(v.is_object()) << out;
    }
  }
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
      "required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"a":{"type":"string","maxLength":6},"b":{"type":"number"},
      "c":{"enum":["red","green",null]},"d":{"type":"array","items":{"type":"boolean"},"maxItems":3}},
      "required":["a"],"additionalProperties":false})",
    R"({"$defs":{"Node":{"type":"object","properties":{"name":{"type":"string","maxLength":3},
      "children":{"type":"array","items":{"$ref":"#/$defs/Node"},"maxItems":2}},"required":["name","children"],
      "additionalProperties":false}},"$ref":"#/$defs/Node"})",
    R"({"anyOf":[{"type":"integer","minimum":-1,"maximum":199},{"type":"string","minLength":2,"maxLength":3},
      {"type":"array","items":{"type":["string","null"]}}]})",
    R"({"type":"object","additionalProperties":{"type":"string"}})",
    R"({"type":"array","items":{"anyOf":[{"type":"string","format":"date-time"},{"type":"string","format":"uuid"},
      {"type":"string","format":"email"}]},"maxItems":2})",
    R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]{3}(-[a-z]{2})?$"},
      "e":{"type":"string","format":"email","maxLength":12},"any":{"type":"string","pattern":"[a-m]"}},
      "required":["zip","e","any"],"additionalProperties":false})",
    "",  // json_object
};

TEST(TokenMask, EqualsBruteForceOnSyntheticVocab) {
  auto vocab = synthetic_vocab();
  for (size_t i = 0; i < std::size(kSchemas); ++i) {
    WalkStats st;
    walk_and_check(vocab, kSchemas[i], 40, 300, 1, 1000 + i, &st);
    EXPECT_GT(st.complete, 5) << "schema " << i << ": walks rarely finished";
    std::printf("schema %zu: %d steps, %d walks complete\n", i, st.steps, st.complete);
  }
}

TEST(TokenMask, EqualsBruteForceOnDemoTokenizer) {
  auto vocab = tokenizer_vocab("models/north-mini-demo/tokenizer.json");
  for (size_t i = 0; i < std::size(kSchemas); ++i) {
    WalkStats st;
    walk_and_check(vocab, kSchemas[i], 12, 200, 1, 2000 + i, &st);
    EXPECT_GT(st.complete, 1) << "schema " << i;
  }
}

TEST(TokenMask, EqualsBruteForceOnQwen3Tokenizer) {
  auto vocab = tokenizer_vocab("tests/fixtures/tokenizer/qwen3/tokenizer.json");
  WalkStats st;
  walk_and_check(vocab, kSchemas[1], 2, 40, 7, 3000, &st);
  walk_and_check(vocab, kSchemas[2], 2, 40, 7, 3001, &st);
  walk_and_check(vocab, "", 2, 40, 7, 3002, &st);
  EXPECT_GT(st.steps, 30);
}

TEST(TokenMask, StopAndSpecialTokensNeverOffered) {
  auto vocab = synthetic_vocab();
  auto g = compile_json_schema(Json::parse(R"({"type":"string"})"));
  ASSERT_TRUE(g.is_ok());
  GrammarMatcher m(CompiledGrammar::create(std::move(g).value(), vocab));
  std::vector<uint32_t> mask(vocab->words());
  m.fill_mask(mask);
  EXPECT_FALSE(token_bit(mask, vocab->size() - 2));  // <|special|>
  EXPECT_FALSE(token_bit(mask, vocab->size() - 1));  // empty
  EXPECT_FALSE(m.accept_token(vocab->size() - 2));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_text("\"ok\""));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.terminated());
  m.fill_mask(mask);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);  // only a stop token may follow (the caller adds those)
}

TEST(TokenMask, DeepNestingStopsAtTheDepthLimit) {
  auto vocab = synthetic_vocab();
  auto g = compile_any_json_object();
  ASSERT_TRUE(g.is_ok());
  GrammarMatcher m(CompiledGrammar::create(std::move(g).value(), vocab, /*max_depth=*/24));
  ASSERT_TRUE(m.accept_text("{\"a\":"));
  std::vector<uint32_t> mask(vocab->words());
  int depth = 0;
  while (m.accept_text("[")) ++depth;
  EXPECT_EQ(depth, 24);
  m.fill_mask(mask);
  EXPECT_FALSE(token_bit(mask, '['));
  EXPECT_FALSE(token_bit(mask, '{'));
  EXPECT_TRUE(token_bit(mask, ']'));
  EXPECT_TRUE(token_bit(mask, '1'));
  for (int32_t t = 0; t < vocab->size(); ++t) ASSERT_EQ(token_bit(mask, t), m.can_accept(t)) << vocab->bytes(t);
}

}  // namespace
}  // namespace ms
