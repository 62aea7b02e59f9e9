// The CPU sampler with an allowed-token mask (sampler.h step 0) and the
// per-sequence GrammarConstraint (grammar_constraint.h): masked tokens are
// never chosen, logprobs are those of the constrained distribution, stop
// tokens are allowed exactly where the grammar may end, and whole decodes
// from random logits through the demo model's vocabulary always give output
// that parses and validates (or is cut short only by max_tokens).
#include "sampling/grammar_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sampling/json_schema.h"
#include "sampling/sampler.h"
#include "sampling/vocab_from_tokenizer.h"
#include "schema_check.h"

namespace ms {
namespace {

using Json = nlohmann::ordered_json;

std::vector<uint32_t> mask_of(int vocab, std::initializer_list<int> allowed) {
  std::vector<uint32_t> m((vocab + 31) / 32, 0u);
  for (int t : allowed) set_token_bit(m, t);
  return m;
}

TEST(GrammarSampler, MaskedTokensAreNeverChosen) {
  const std::vector<float> logits = {5.f, 1.f, 4.f, 3.f, 0.5f, 4.5f};
  std::vector<uint32_t> m = mask_of(6, {1, 3, 4});
  SamplingParams p;
  p.temperature = 0;
  SamplerContext ctx;
  ctx.allowed = m;
  EXPECT_EQ(sample_token(logits, p, ctx).token, 3);  // best allowed, not the argmax 0
  p.temperature = 1.5f;
  p.top_k = 2;
  std::vector<int32_t> out;
  for (int i = 0; i < 300; ++i) {
    out.assign(i, 0);
    ctx.output = out;
    const int32_t t = sample_token(logits, p, ctx).token;
    EXPECT_TRUE(t == 1 || t == 3 || t == 4) << t;
    EXPECT_NE(t, 4) << "top-k 2 over the allowed tokens keeps 3 and 1";
  }
}

TEST(GrammarSampler, LogprobsAreOfTheConstrainedDistribution) {
  const std::vector<float> logits = {5.f, 1.f, 4.f, 3.f};
  std::vector<uint32_t> m = mask_of(4, {1, 3});
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 4;
  SamplerContext ctx;
  ctx.allowed = m;
  SampleResult r = sample_token(logits, p, ctx);
  EXPECT_EQ(r.token, 3);
  const double lse = std::log(std::exp(1.0) + std::exp(3.0));
  EXPECT_NEAR(r.logprob, 3.0 - lse, 1e-5);
  ASSERT_EQ(r.top.size(), 4u);  // masked tokens come last, at -inf
  EXPECT_EQ(r.top[0].token, 3);
  EXPECT_EQ(r.top[1].token, 1);
  EXPECT_NEAR(r.top[1].logprob, 1.0 - lse, 1e-5);
  EXPECT_TRUE(std::isinf(r.top[2].logprob) && r.top[2].logprob < 0);
}

std::shared_ptr<const TokenVocab> demo_vocab() {
  static std::shared_ptr<const TokenVocab> v = [] {
    auto tok = Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
    EXPECT_TRUE(tok.is_ok());
    return vocab_from_tokenizer(*tok);
  }();
  return v;
}

TEST(GrammarSampler, StopTokensOnlyWhereTheGrammarMayEnd) {
  auto vocab = demo_vocab();
  auto g = compile_json_schema(Json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  ASSERT_TRUE(g.is_ok());
  const int32_t eos = 4;  // <|END_OF_TURN_TOKEN|>, a special token: excluded from the grammar's vocabulary
  GrammarConstraint gc(CompiledGrammar::create(std::move(g).value(), vocab), {eos}, vocab->size() + 40);
  EXPECT_EQ(gc.mask().size(), size_t((vocab->size() + 40 + 31) / 32));  // covers the model's padded vocabulary
  ASSERT_TRUE(gc.compute_mask());
  EXPECT_FALSE(token_bit(gc.mask(), eos));
  EXPECT_FALSE(gc.accept(eos));
  auto tok = Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
  for (int32_t t : tok->encode("[1,", false)) ASSERT_TRUE(gc.accept(t));
  ASSERT_TRUE(gc.compute_mask());
  EXPECT_FALSE(token_bit(gc.mask(), eos));
  for (int32_t t : tok->encode("2]", false)) ASSERT_TRUE(gc.accept(t));
  EXPECT_TRUE(gc.complete());
  ASSERT_TRUE(gc.compute_mask());
  EXPECT_TRUE(token_bit(gc.mask(), eos));  // complete: only the stop token
  int bits = 0;
  for (uint32_t w : gc.mask()) bits += __builtin_popcount(w);
  EXPECT_EQ(bits, 1);
  EXPECT_TRUE(gc.accept(eos));
}

// Decodes from random logits (a stand-in for a model that knows no JSON) under
// the constraint with the CPU sampler, as the engine does.
struct Decoded {
  std::string text;
  bool complete = false;
};
Decoded decode(const std::shared_ptr<CompiledGrammar>& cg, const SamplingParams& p, uint64_t seed, int max_tokens) {
  const TokenVocab& v = cg->vocab();
  const int32_t eos = 2;
  GrammarConstraint gc(cg, {eos}, v.size());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> logits(v.size());
  std::vector<int32_t> output;
  Decoded d;
  for (int i = 0; i < max_tokens && !gc.complete(); ++i) {
    for (float& x : logits) x = nd(rng);
    EXPECT_TRUE(gc.compute_mask());
    SamplerContext ctx;
    ctx.output = output;
    ctx.seed = seed;
    ctx.allowed = gc.mask();
    const int32_t t = sample_token(logits, p, ctx).token;
    EXPECT_TRUE(token_bit(gc.mask(), t));
    EXPECT_TRUE(gc.accept(t));
    if (t == eos) {
      d.complete = true;
      return d;
    }
    output.push_back(t);
    d.text += v.bytes(t);
  }
  d.complete = gc.complete();
  return d;
}

TEST(GrammarSampler, DecodesFromRandomLogitsAlwaysValidate) {
  const char* schema_text = R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
    "age":{"type":"integer","minimum":0,"maximum":130},"tags":{"type":"array","items":{"enum":["a","b",null]},
    "maxItems":3},"nested":{"anyOf":[{"type":"null"},{"type":"object","properties":{"ok":{"type":"boolean"}},
    "required":["ok"],"additionalProperties":false}]}},"required":["name","age","tags","nested"],
    "additionalProperties":false})";
  const Json schema = Json::parse(schema_text);
  auto g = compile_json_schema(schema);
  ASSERT_TRUE(g.is_ok());
  auto cg = CompiledGrammar::create(std::move(g).value(), demo_vocab());
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams hot;
  hot.temperature = 1.3f;
  hot.top_p = 0.95f;
  int complete = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    Decoded d = decode(cg, seed % 3 == 0 ? greedy : hot, seed, 400);
    if (!d.complete) continue;
    ++complete;
    Json v;
    ASSERT_NO_THROW(v = Json::parse(d.text)) << d.text;
    EXPECT_TRUE(test::schema_valid(v, schema, schema)) << d.text;
  }
  EXPECT_EQ(complete, 24) << "every output of this bounded schema must finish within 400 tokens";
  // Cut short by max_tokens: a prefix of a valid output (what finish_reason "length" returns).
  Decoded cut = decode(cg, hot, 99, 6);
  EXPECT_FALSE(cut.complete);
  GrammarMatcher prefix(cg);
  EXPECT_TRUE(prefix.accept_text(cut.text)) << cut.text;
  EXPECT_FALSE(prefix.can_end()) << cut.text;
}

}  // namespace
}  // namespace ms
