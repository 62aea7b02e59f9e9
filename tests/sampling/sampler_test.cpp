// The CPU sampler: each parameter's effect, seed determinism, logprobs
// against a direct computation.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace ms {
namespace {

SamplerContext ctx(uint64_t seed = 1) {
  SamplerContext c;
  c.seed = seed;
  return c;
}

// Distribution of tokens over many draws (output index varied).
std::map<int32_t, int> histogram(const std::vector<float>& logits, const SamplingParams& p, int draws,
                                 uint64_t seed = 7) {
  std::map<int32_t, int> h;
  std::vector<int32_t> fake_output;
  for (int i = 0; i < draws; ++i) {
    // Output indices vary the draw; penalties are off so content is irrelevant.
    fake_output.assign(i, 0);
    SamplerContext c;
    c.seed = seed;
    c.output = fake_output;
    ++h[sample_token(logits, p, c).token];
  }
  return h;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f, -1.0f};

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 1);
  std::vector<float> tie = {0.f, 5.f, 5.f};
  EXPECT_EQ(sample_token(tie, p, ctx()).token, 1);
}

TEST(Sampler, RepetitionPenaltyOverPromptAndOutput) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::vector<int32_t> prompt = {1}, output = {1, 1};
  SamplerContext c = ctx();
  c.prompt = prompt;
  c.output = output;
  // 3 / 2 = 1.5 < 2.9: token 4 wins; applied once despite repeats.
  EXPECT_EQ(sample_token(kLogits, p, c).token, 4);
  // Negative logits are multiplied: -1 * 2 = -2 still last.
  std::vector<float> neg = {-1.f, -1.5f};
  std::vector<int32_t> seen = {0};
  c.prompt = seen;
  c.output = {};
  EXPECT_EQ(sample_token(neg, p, c).token, 1);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOutputOnly) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.05f;
  std::vector<int32_t> prompt = {1, 1, 1}, output = {1};
  SamplerContext c = ctx();
  c.prompt = prompt;
  EXPECT_EQ(sample_token(kLogits, p, c).token, 1);  // prompt does not count
  c.output = output;
  EXPECT_EQ(sample_token(kLogits, p, c).token, 1);  // 3 - 0.05 = 2.95 > 2.9
  p.presence_penalty = 0.2f;
  EXPECT_EQ(sample_token(kLogits, p, c).token, 4);
  p.presence_penalty = 0;
  p.frequency_penalty = 0.06f;
  std::vector<int32_t> twice = {1, 1};
  c.output = twice;  // 3 - 2 * 0.06 = 2.88 < 2.9
  EXPECT_EQ(sample_token(kLogits, p, c).token, 4);
}

TEST(Sampler, LogitBiasShiftsAfterPenaltiesGreedyAndSampled) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{1, -100.f}};  // ban the argmax: the runner-up wins
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 4);
  p.logit_bias = {{5, 100.f}};  // force the least likely token
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 5);
  p.logit_bias = {{0, 1.5f}, {4, 0.05f}};  // 2.9 + 0.05 < 3: token 1 still wins
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 1);
  p.logit_bias = {{4, 0.2f}};
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 4);
  // Applied after the penalties: penalised token 1 (3 - 2 = 1) plus 1.95 is 2.95 > 2.9.
  p.presence_penalty = 2.f;
  p.logit_bias = {{1, 1.95f}};
  std::vector<int32_t> output = {1};
  SamplerContext c = ctx();
  c.output = output;
  EXPECT_EQ(sample_token(kLogits, p, c).token, 1);
  // Sampling: a banned token never comes up; logprobs stay the raw ones.
  SamplingParams s;
  s.logit_bias = {{1, -100.f}, {4, -100.f}};
  s.logprobs = 1;
  auto h = histogram(kLogits, s, 2000);
  EXPECT_EQ(h.count(1), 0u);
  EXPECT_EQ(h.count(4), 0u);
  SampleResult r = sample_token(kLogits, s, ctx());
  EXPECT_EQ(r.top[0].token, 1);
  // Out-of-vocabulary ids are ignored by the sampler (the server rejects them).
  p = SamplingParams();
  p.temperature = 0;
  p.logit_bias = {{100000, 100.f}};
  EXPECT_EQ(sample_token(kLogits, p, ctx()).token, 1);
}

TEST(Sampler, TopKTopPMinPRestrictTheSupport) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  auto h = histogram(kLogits, p, 400);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(4));
  p.top_k = 0;
  p.top_p = 0.5f;  // softmax: p1 ~ 0.38, p4 ~ 0.34: both needed to reach 0.5
  h = histogram(kLogits, p, 400);
  EXPECT_EQ(h.size(), 2u);
  p.top_p = 0.3f;
  h = histogram(kLogits, p, 100);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 1);
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keeps p >= 0.3 * p_max: tokens 1, 4, 2 (e^-1 = 0.37)
  h = histogram(kLogits, p, 600);
  EXPECT_EQ((std::set<int32_t>{1, 2, 4}), [&] {
    std::set<int32_t> s;
    for (auto& [t, n] : h) s.insert(t);
    return s;
  }());
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  SamplingParams p;
  p.temperature = 0.05f;
  auto h = histogram(kLogits, p, 300);
  EXPECT_GT(h[1], 250);
  p.temperature = 100.f;
  h = histogram(kLogits, p, 3000);
  EXPECT_EQ(h.size(), kLogits.size());
  for (auto& [t, n] : h) EXPECT_GT(n, 300) << t;  // near uniform (500 each)
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  SamplingParams p;
  const int draws = 20000;
  auto h = histogram(kLogits, p, draws, 99);
  std::vector<float> lp = log_softmax(kLogits);
  for (size_t t = 0; t < kLogits.size(); ++t) {
    double want = std::exp(lp[t]);
    double got = double(h[static_cast<int32_t>(t)]) / draws;
    EXPECT_NEAR(got, want, 4 * std::sqrt(want * (1 - want) / draws) + 1e-3) << t;
  }
}

TEST(Sampler, SeedDeterminism) {
  SamplingParams p;
  p.top_k = 5;
  std::vector<int32_t> out;
  std::vector<int32_t> a, b, c;
  for (int i = 0; i < 50; ++i) {
    SamplerContext x;
    x.seed = 1234;
    x.output = a;
    a.push_back(sample_token(kLogits, p, x).token);
    x.output = b;
    b.push_back(sample_token(kLogits, p, x).token);
    x.seed = 4321;
    x.output = c;
    c.push_back(sample_token(kLogits, p, x).token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The draw depends only on (seed, index).
  EXPECT_EQ(sampler_uniform(5, 3), sampler_uniform(5, 3));
  EXPECT_NE(sampler_uniform(5, 3), sampler_uniform(5, 4));
  double u = sampler_uniform(0, 0);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.repetition_penalty = 1.5f;  // penalties do not change reported logprobs
  std::vector<int32_t> prompt = {1};
  SamplerContext c = ctx();
  c.prompt = prompt;
  SampleResult r = sample_token(kLogits, p, c);
  double mx = 3.0, sum = 0;
  for (float v : kLogits) sum += std::exp(v - mx);
  double lse = mx + std::log(sum);
  EXPECT_EQ(r.token, 4);  // penalised 1 -> 2
  EXPECT_NEAR(r.logprob, 2.9 - lse, 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 4);
  EXPECT_EQ(r.top[2].token, 2);
  EXPECT_NEAR(r.top[0].logprob, 3.0 - lse, 1e-5);
  EXPECT_NEAR(r.top[2].logprob, 2.0 - lse, 1e-5);
  std::vector<float> lp = log_softmax(kLogits);
  double total = 0;
  for (float v : lp) total += std::exp(v);
  EXPECT_NEAR(total, 1.0, 1e-6);
  p.logprobs = 0;
  r = sample_token(kLogits, p, c);
  EXPECT_TRUE(r.top.empty());
  EXPECT_NEAR(r.logprob, 2.9 - lse, 1e-5);
}

TEST(Sampler, ValidateRejectsOutOfRange) {
  SamplingParams p;
  EXPECT_TRUE(validate_sampling_params(p).is_ok());
  p.temperature = -1;
  EXPECT_EQ(validate_sampling_params(p).code(), StatusCode::kInvalidArgument);
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(validate_sampling_params(p).is_ok());
  p = {};
  p.logprobs = 21;
  EXPECT_FALSE(validate_sampling_params(p).is_ok());
  p = {};
  p.repetition_penalty = 0;
  EXPECT_FALSE(validate_sampling_params(p).is_ok());
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_NE(validate_sampling_params(p).message().find("presence_penalty"), std::string::npos);
  p = SamplingParams();
  p.logit_bias = {{3, 101.f}};
  EXPECT_NE(validate_sampling_params(p).message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{3, 1.f}, {2, 1.f}};
  EXPECT_NE(validate_sampling_params(p).message().find("sorted"), std::string::npos);
  p.logit_bias = {{-1, 1.f}};
  EXPECT_FALSE(validate_sampling_params(p).is_ok());
  p.logit_bias = {{2, -100.f}, {3, 100.f}};
  EXPECT_TRUE(validate_sampling_params(p).is_ok());
}

}  // namespace
}  // namespace ms
